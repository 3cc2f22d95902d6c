/**
 * The files generated from another source of truth, checked in and held to it
 * by `src/__tests__/generated.spec.ts` (so CI fails when one drifts):
 *
 * - `src/generated/openapi.ts`: the REST types, from the OpenAPI document
 *   `jupyter_costguard/web/openapi.yaml` (openapi-typescript);
 * - the chart-scale block of the hub page (`jupyter_costguard/hub/page.html`,
 *   between the `chartscale` markers): `src/chartscale.ts` as plain JS, since
 *   the page is one file the hub service serves and has no build.
 *
 * `npm run gen` writes both; `npm run gen:types` only the types,
 * `npm run gen:hub` only the hub page's block. `node scripts/generate.js
 * --check [types|hub]` writes nothing and exits 1, naming the command to run,
 * when a checked-in file differs from what it would write (the jest check runs
 * it in a child process: openapi-typescript is an ES module, which jest's
 * CommonJS runtime cannot load).
 */
'use strict';
const fs = require('fs');
const path = require('path');
const { pathToFileURL } = require('url');

const ROOT = path.resolve(__dirname, '..', '..');
const OPENAPI_YAML = path.join(ROOT, 'jupyter_costguard', 'web', 'openapi.yaml');
const OPENAPI_TS = path.join(ROOT, 'labextension', 'src', 'generated', 'openapi.ts');
const CHARTSCALE_TS = path.join(ROOT, 'labextension', 'src', 'chartscale.ts');
const HUB_PAGE = path.join(ROOT, 'jupyter_costguard', 'hub', 'page.html');

const BLOCK_START = '  // <chartscale> generated from labextension/src/chartscale.ts: npm run gen';
const BLOCK_END = '  // </chartscale>';

/** The text of `src/generated/openapi.ts` for the YAML as it is now. */
async function openapiTypes() {
  const { default: openapiTS, astToString, COMMENT_HEADER } = await import('openapi-typescript');
  const ast = await openapiTS(pathToFileURL(OPENAPI_YAML), {
    // `type: object` without properties (details, args, spec): any fields
    emptyObjectsUnknown: true
  });
  return (
    COMMENT_HEADER.replace(
      ' */',
      ' * From jupyter_costguard/web/openapi.yaml: `cd labextension && npm run gen`.\n */'
    ) + astToString(ast)
  );
}

/** `src/chartscale.ts` as the plain JS block the hub page holds (no exports, indented). */
function chartscaleBlock() {
  const ts = require('typescript');
  const source = fs.readFileSync(CHARTSCALE_TS, 'utf8');
  const js = ts.transpileModule(source, {
    compilerOptions: {
      target: ts.ScriptTarget.ES2018,
      module: ts.ModuleKind.ESNext,
      removeComments: false
    }
  }).outputText;
  const body = js
    .replace(/^export /gm, '')
    .replace(/\n*$/, '')
    .split('\n')
    // the page's indent: two spaces a level (TypeScript writes four), one level in
    .map(line => line.replace(/^( {4})+/, lead => ' '.repeat(lead.length / 2)))
    .map(line => (line ? `  ${line}` : line))
    .join('\n');
  return `${BLOCK_START}\n${body}\n${BLOCK_END}`;
}

/** The hub page's text with its chart-scale block as `chartscaleBlock()` makes it. */
function hubPage(text = fs.readFileSync(HUB_PAGE, 'utf8')) {
  const start = text.indexOf(BLOCK_START);
  const end = text.indexOf(BLOCK_END);
  if (start < 0 || end < start) {
    throw new Error(`${HUB_PAGE}: no chartscale block (${BLOCK_START.trim()} ... ${BLOCK_END.trim()})`);
  }
  return text.slice(0, start) + chartscaleBlock() + text.slice(end + BLOCK_END.length);
}

/** What `main` can write, by name: the file, how to make it, what it comes from. */
const TARGETS = {
  types: [OPENAPI_TS, openapiTypes, OPENAPI_YAML],
  hub: [HUB_PAGE, async () => hubPage(), CHARTSCALE_TS]
};

/** The first line where `actual` and `expected` differ, in words. */
function firstDifference(actual, expected) {
  const a = actual.split('\n');
  const b = expected.split('\n');
  for (let i = 0; i < Math.max(a.length, b.length); i++) {
    if (a[i] !== b[i]) {
      return `line ${i + 1}: checked in ${JSON.stringify(a[i] ?? null)}, generated ${JSON.stringify(b[i] ?? null)}`;
    }
  }
  return 'none';
}

/**
 * Write the generated files named (all without names), or with `check` only
 * compare them. Returns a line per file that changed (or differs).
 */
async function main(names, check = false) {
  const lines = [];
  for (const name of names.length ? names : Object.keys(TARGETS)) {
    if (!TARGETS[name]) {
      throw new Error(`unknown target ${name}: one of ${Object.keys(TARGETS).join(', ')}`);
    }
    const [file, make, source] = TARGETS[name];
    const text = await make();
    const old = fs.existsSync(file) ? fs.readFileSync(file, 'utf8') : '';
    if (old === text) {
      continue;
    }
    const where = path.relative(ROOT, file);
    if (check) {
      lines.push(
        `${where} is out of date with ${path.relative(ROOT, source)}: run ` +
          `\`npm run gen:${name}\` in labextension/ and commit it ` +
          `(first difference at ${firstDifference(old, text)})`
      );
    } else {
      fs.mkdirSync(path.dirname(file), { recursive: true });
      fs.writeFileSync(file, text);
      lines.push(`wrote ${where}`);
    }
  }
  return lines;
}

module.exports = { chartscaleBlock, hubPage, main, openapiTypes };

if (require.main === module) {
  const args = process.argv.slice(2);
  const check = args.includes('--check');
  main(args.filter(a => a !== '--check'), check).then(
    lines => {
      console.log(lines.length ? lines.join('\n') : 'up to date');
      process.exitCode = check && lines.length ? 1 : 0;
    },
    error => {
      console.error(error);
      process.exitCode = 2;
    }
  );
}

/**
 * The files generated from another source of truth, checked in and held to it
 * by `src/__tests__/generated.spec.ts` (so CI fails when one drifts):
 *
 * - `src/generated/openapi.ts`: the server extension's REST types, from the
 *   OpenAPI document `jupyter_costguard/web/openapi.yaml` (openapi-typescript);
 * - `src/generated/hubapi.ts`: the hub service's REST types, the same way from
 *   `jupyter_costguard/hub/openapi.yaml` (what the hub pages, `src/hub/`, read).
 *
 * `npm run gen` writes both; `npm run gen:types` only the first,
 * `npm run gen:hub` only the hub's. `node scripts/generate.js --check
 * [types|hub]` writes nothing and exits 1, naming the command to run, when a
 * checked-in file differs from what it would write (the jest check runs it in
 * a child process: openapi-typescript is an ES module, which jest's CommonJS
 * runtime cannot load).
 */
'use strict';
const fs = require('fs');
const path = require('path');
const { pathToFileURL } = require('url');

const ROOT = path.resolve(__dirname, '..', '..');
const OPENAPI_YAML = path.join(ROOT, 'jupyter_costguard', 'web', 'openapi.yaml');
const OPENAPI_TS = path.join(ROOT, 'labextension', 'src', 'generated', 'openapi.ts');
const HUB_YAML = path.join(ROOT, 'jupyter_costguard', 'hub', 'openapi.yaml');
const HUB_TS = path.join(ROOT, 'labextension', 'src', 'generated', 'hubapi.ts');

/** The TypeScript types of the OpenAPI document `yaml`, as openapi-typescript writes them. */
async function openapiTypes(yaml = OPENAPI_YAML) {
  const { default: openapiTS, astToString, COMMENT_HEADER } = await import('openapi-typescript');
  const ast = await openapiTS(pathToFileURL(yaml), {
    // `type: object` without properties (details, args, spec): any fields
    emptyObjectsUnknown: true
  });
  const from = path.relative(ROOT, yaml).split(path.sep).join('/');
  return (
    COMMENT_HEADER.replace(' */', ` * From ${from}: \`cd labextension && npm run gen\`.\n */`) +
    astToString(ast)
  );
}

/** What `main` can write, by name: the file, how to make it, what it comes from. */
const TARGETS = {
  types: [OPENAPI_TS, () => openapiTypes(OPENAPI_YAML), OPENAPI_YAML],
  hub: [HUB_TS, () => openapiTypes(HUB_YAML), HUB_YAML]
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

module.exports = { main, openapiTypes };

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

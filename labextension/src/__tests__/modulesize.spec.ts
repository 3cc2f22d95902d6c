/**
 * No module in `src/` (sub-folders included) is over 600 lines: a longer one
 * holds more than one job and is split, by what it holds, before it lands.
 * Not counted: `src/generated/` (written by `npm run gen:types` from the
 * OpenAPI document) and the tests in `src/__tests__/` (a spec may hold many
 * cases of one behaviour). The Python package is held to the same limit by
 * `tests/test_module_size.py`.
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';

const MAX_LINES = 600;
const SRC = path.resolve(__dirname, '..');
const NOT_COUNTED = new Set(['generated', '__tests__']);

/** Every `.ts` module under `dir`, skipping the folders not counted. */
function modules(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap(entry => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      return NOT_COUNTED.has(entry.name) ? [] : modules(full);
    }
    return entry.name.endsWith('.ts') ? [full] : [];
  });
}

/** The modules of `dir` over `limit` lines, as 'path (n lines)'. */
function longModules(dir: string, limit = MAX_LINES): string[] {
  return modules(dir).flatMap(file => {
    const text = fs.readFileSync(file, 'utf8');
    const lines = text.split('\n').length - (text.endsWith('\n') ? 1 : 0);
    return lines > limit ? [`${path.relative(dir, file)} (${lines} lines)`] : [];
  });
}

describe('module size', () => {
  it(`keeps every module in src/ to ${MAX_LINES} lines`, () => {
    expect(modules(SRC).length).toBeGreaterThan(10);
    expect(longModules(SRC)).toEqual([]);
  });

  it('names a module over the limit, and skips generated code and tests', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'modulesize-'));
    try {
      for (const sub of ['hub', 'generated', '__tests__']) {
        fs.mkdirSync(path.join(dir, sub));
      }
      fs.writeFileSync(path.join(dir, 'short.ts'), 'let x;\n'.repeat(MAX_LINES));
      fs.writeFileSync(path.join(dir, 'hub', 'long.ts'), 'let x;\n'.repeat(MAX_LINES + 1));
      fs.writeFileSync(path.join(dir, 'generated', 'api.ts'), 'let x;\n'.repeat(MAX_LINES + 1));
      fs.writeFileSync(path.join(dir, '__tests__', 'a.spec.ts'), 'let x;\n'.repeat(MAX_LINES + 1));
      expect(longModules(dir)).toEqual([`hub/long.ts (${MAX_LINES + 1} lines)`]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

/**
 * No import circle among the modules of `src/` (sub-folders included, the
 * specs in `src/__tests__/` not): a module that imports, through any chain,
 * a module that imports it cannot be read, tested or loaded on its own, and
 * its order of evaluation decides what is still undefined. `import type`
 * counts too: a circle of types is the same knot in the design. Shared
 * pieces live in a module that imports neither side (e.g. the cost panel's
 * section base, `costpanelsection.ts`, imports no panel).
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as ts from 'typescript';

const SRC = path.resolve(__dirname, '..');

/** Every `.ts` module under `dir` but the specs. */
function modules(dir: string): string[] {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap(entry => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      return entry.name === '__tests__' ? [] : modules(full);
    }
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.d.ts') ? [full] : [];
  });
}

/** The modules of `known` that `file` imports or re-exports by a relative path. */
function importsOf(file: string, known: ReadonlySet<string>): string[] {
  const info = ts.preProcessFile(fs.readFileSync(file, 'utf8'), true, true);
  return info.importedFiles
    .map(ref => ref.fileName)
    .filter(name => name.startsWith('.'))
    .flatMap(name => {
      const base = path.resolve(path.dirname(file), name);
      const found = [`${base}.ts`, path.join(base, 'index.ts'), base].find(f => known.has(f));
      return found ? [found] : [];
    });
}

/** The import circles among the modules of `dir`: each strongly connected set, sorted. */
function importCircles(dir: string): string[][] {
  const files = modules(dir);
  const known = new Set(files);
  const edges = new Map(files.map(f => [f, importsOf(f, known)]));
  // Tarjan's strongly connected components
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const circles: string[][] = [];
  const visit = (v: string): void => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    onStack.add(v);
    for (const w of edges.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (onStack.has(w)) {
        low.set(v, Math.min(low.get(v)!, index.get(w)!));
      }
    }
    if (low.get(v) === index.get(v)) {
      const part: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        onStack.delete(w);
        part.push(path.relative(dir, w));
      } while (w !== v);
      if (part.length > 1 || (edges.get(v) ?? []).includes(v)) {
        circles.push(part.sort());
      }
    }
  };
  files.forEach(f => index.has(f) || visit(f));
  return circles.sort();
}

describe('import circles', () => {
  it('has none among the modules of src/', () => {
    expect(modules(SRC).length).toBeGreaterThan(10);
    expect(importCircles(SRC)).toEqual([]);
  });

  it('finds a circle through a type import, a re-export and a sub-folder', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'importcycles-'));
    try {
      fs.mkdirSync(path.join(dir, 'hub'));
      const write = (name: string, text: string): void =>
        fs.writeFileSync(path.join(dir, name), text);
      write('a.ts', "import { b } from './b';\nexport const a = b;\n");
      write('b.ts', "export { c as b } from './hub/c';\n");
      write('hub/c.ts', "import type { A } from '../a';\nexport const c = 1;\n");
      write('d.ts', "import { a } from './a';\nimport * as fs from 'fs';\n");
      expect(importCircles(dir)).toEqual([['a.ts', 'b.ts', path.join('hub', 'c.ts')]]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

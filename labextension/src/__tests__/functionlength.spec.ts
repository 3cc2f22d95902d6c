/**
 * No function in `src/` or `src/hub/` (a declaration, method, arrow function or
 * constructor, counted from its first line to its last, nested functions
 * included) is over 100 lines: a longer one is split before it lands.
 */
import * as fs from 'fs';
import * as path from 'path';
import * as ts from 'typescript';

const MAX_LINES = 100;
const SRC = path.resolve(__dirname, '..');

function longFunctions(file: string): string[] {
  const text = fs.readFileSync(file, 'utf8');
  const source = ts.createSourceFile(file, text, ts.ScriptTarget.Latest, true);
  const found: string[] = [];
  const visit = (node: ts.Node): void => {
    if (ts.isFunctionLike(node) && (node as ts.FunctionLikeDeclaration).body) {
      const first = source.getLineAndCharacterOfPosition(node.getStart()).line;
      const last = source.getLineAndCharacterOfPosition(node.getEnd()).line;
      if (last - first + 1 > MAX_LINES) {
        const name = (node as ts.FunctionLikeDeclaration).name?.getText() ?? ts.SyntaxKind[node.kind];
        found.push(`${path.basename(file)}:${first + 1} ${name} (${last - first + 1} lines)`);
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(source);
  return found;
}

describe('function length', () => {
  it(`keeps every function in src/ to ${MAX_LINES} lines`, () => {
    const files = [SRC, path.join(SRC, 'hub')].flatMap(dir =>
      fs
        .readdirSync(dir)
        .filter(name => name.endsWith('.ts'))
        .map(name => path.join(dir, name))
    );
    expect(files.length).toBeGreaterThan(10);
    expect(files.flatMap(longFunctions)).toEqual([]);
  });
});

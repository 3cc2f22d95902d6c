/**
 * The REST types the OpenAPI document generates (`src/generated/openapi.ts`)
 * are the only copy: no interface or object type written in `src/` (the
 * specs not counted) declares exactly the fields of a generated object of
 * three fields or more. Such a copy drifts when the document changes; derive
 * it instead (`Schemas['Job']['estimate']`, `Pick`, `Lenient`, ...).
 */
import * as fs from 'fs';
import * as os from 'os';
import * as path from 'path';
import * as ts from 'typescript';

const SRC = path.resolve(__dirname, '..');
const GENERATED = path.join(SRC, 'generated');
const MIN_FIELDS = 3;

function parse(file: string): ts.SourceFile {
  return ts.createSourceFile(file, fs.readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
}

/** The field names of an object type, sorted and joined (methods and index signatures not). */
function fieldsOf(members: ts.NodeArray<ts.TypeElement>): string | null {
  const names = members
    .filter(ts.isPropertySignature)
    .map(m => m.name.getText().replace(/^["']|["']$/g, ''));
  return names.length >= MIN_FIELDS ? [...new Set(names)].sort().join(',') : null;
}

/** Every generated object type's fields -> where it is (for the message). */
function generatedShapes(dir: string): Map<string, string> {
  const shapes = new Map<string, string>();
  for (const name of fs.readdirSync(dir).filter(n => n.endsWith('.ts'))) {
    const source = parse(path.join(dir, name));
    const visit = (node: ts.Node): void => {
      if (ts.isTypeLiteralNode(node)) {
        const fields = fieldsOf(node.members);
        const line = source.getLineAndCharacterOfPosition(node.getStart()).line + 1;
        if (fields && !shapes.has(fields)) {
          shapes.set(fields, `${name}:${line}`);
        }
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return shapes;
}

/** The hand-written types of `dir`'s modules that copy one of `shapes`. */
function copies(dir: string, shapes: Map<string, string>): string[] {
  const found: string[] = [];
  const files = fs
    .readdirSync(dir, { withFileTypes: true })
    .flatMap(e =>
      e.isDirectory()
        ? ['generated', '__tests__'].includes(e.name)
          ? []
          : fs.readdirSync(path.join(dir, e.name)).map(n => path.join(e.name, n))
        : [e.name]
    )
    .filter(name => name.endsWith('.ts'));
  for (const name of files) {
    const source = parse(path.join(dir, name));
    const visit = (node: ts.Node): void => {
      let fields: string | null = null;
      if (ts.isInterfaceDeclaration(node) && !node.heritageClauses) {
        fields = fieldsOf(node.members);
      } else if (ts.isTypeLiteralNode(node)) {
        fields = fieldsOf(node.members);
      }
      const generated = fields ? shapes.get(fields) : undefined;
      if (generated) {
        const line = source.getLineAndCharacterOfPosition(node.getStart()).line + 1;
        found.push(`${name}:${line} copies ${generated}`);
      }
      ts.forEachChild(node, visit);
    };
    visit(source);
  }
  return found;
}

describe('generated types', () => {
  it('have no hand-written copy in src/', () => {
    const shapes = generatedShapes(GENERATED);
    expect(shapes.size).toBeGreaterThan(20);
    expect(copies(SRC, shapes)).toEqual([]);
  });

  it('names a copy, and lets a derived type or a smaller object be', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'generatedcopies-'));
    try {
      fs.mkdirSync(path.join(dir, 'generated'));
      fs.writeFileSync(
        path.join(dir, 'generated', 'openapi.ts'),
        'export interface components { schemas: { Est: { priced: boolean; max_cost: number | null; currency: string } } }\n'
      );
      fs.writeFileSync(
        path.join(dir, 'copy.ts'),
        [
          'export interface IKept {\n  currency: string;\n  priced: boolean;\n  max_cost: number;\n}',
          "export type IDerived = components['schemas']['Est'];",
          'export interface IPart {\n  priced: boolean;\n  currency: string;\n}',
          'export interface IMore extends IPart {\n  max_cost: number;\n}',
          ''
        ].join('\n')
      );
      const shapes = generatedShapes(path.join(dir, 'generated'));
      expect(copies(dir, shapes)).toEqual(['copy.ts:1 copies openapi.ts:1']);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });
});

/**
 * The checked-in generated files match their sources (`scripts/generate.js`):
 * `src/generated/openapi.ts` matches the OpenAPI document, and the hub page's
 * chart-scale block matches `src/chartscale.ts`. A failure names the command
 * that regenerates the file. The generator runs in a child process
 * (openapi-typescript is an ES module, which jest's runtime cannot load).
 */
import { spawnSync } from 'child_process';
import * as path from 'path';

const SCRIPT = path.resolve(__dirname, '..', '..', 'scripts', 'generate.js');

function check(target: string): void {
  const run = spawnSync(process.execPath, [SCRIPT, '--check', target], {
    encoding: 'utf8',
    timeout: 60000
  });
  if (run.status !== 0) {
    throw new Error(`${run.stdout}${run.stderr}`.trim() || `generate.js exited ${run.status}`);
  }
}

describe('generated files', () => {
  it('src/generated/openapi.ts matches jupyter_costguard/web/openapi.yaml', () => {
    check('types');
  }, 60000);

  it("the hub page's chart-scale block matches src/chartscale.ts", () => {
    check('hub');
  }, 60000);
});

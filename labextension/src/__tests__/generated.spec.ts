/**
 * The checked-in generated files match their sources (`scripts/generate.js`):
 * `src/generated/openapi.ts` matches the server extension's OpenAPI document,
 * and `src/generated/hubapi.ts` the hub service's. A failure names the command
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

  it('src/generated/hubapi.ts matches jupyter_costguard/hub/openapi.yaml', () => {
    check('hub');
  }, 60000);
});

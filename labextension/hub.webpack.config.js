/**
 * The hub service's pages (`src/hub/`, compiled by `tsc` into `lib/hub/`) as
 * one script in the Python package, `jupyter_costguard/hub/static/`, which the
 * service serves beside the page's shell. Bundled (with the webpack the
 * JupyterLab build already runs) because the lab modules the pages share
 * (`chartscale.ts`, `format.ts` and what it imports) use extensionless imports
 * a browser cannot resolve, and so the page loads one file, named with its hash
 * in the shell's URL and cached for good.
 */
const path = require('path');

module.exports = {
  mode: 'production',
  entry: { 'costguard-hub': path.resolve(__dirname, 'lib', 'hub', 'main.js') },
  output: {
    path: path.resolve(__dirname, '..', 'jupyter_costguard', 'hub', 'static'),
    filename: '[name].js',
    clean: true
  },
  devtool: 'source-map',
  target: ['web', 'es2018'],
  performance: { hints: false }
};

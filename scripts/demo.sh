#!/usr/bin/env bash
# Install jupyter-costguard into .venv and open JupyterLab on a copy of examples/ (README
# quick start). Only what the demo runs is installed: the package and JupyterLab; the test
# dependencies stay with scripts/test.sh.
#
# The demo works in its own folder ($COSTGUARD_DEMO_DIR, default .demo/): a copy of examples/
# made on the first run (later runs add examples that are new and keep the user's edits), so
# the ledger, the jobs and the notebooks the demo saves never touch examples/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
demo=${COSTGUARD_DEMO_DIR:-$PWD/.demo}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q . "jupyterlab>=4,<5"
mkdir -p "$demo"
cp -R -n examples/. "$demo/"
args=(--config="$demo/jupyter_server_config.py")
[ "$(id -u)" = 0 ] && args+=(--allow-root)
exec .venv/bin/jupyter lab "${args[@]}" "$@"

#!/usr/bin/env bash
# Run every check: lint, types, frontend unit tests and the whole pytest suite
# (real kernels, a real Jupyter server, real Prometheus, the NVML stand-in).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
# Loopback only: nothing the checks start asks a cloud's metadata service (tests that test
# the lookups point them at loopback stand-ins)
export COSTGUARD_CLOUD_METADATA=off AWS_EC2_METADATA_DISABLED=true

# System packages the tests start for real; installed when we may (root), else say so.
need=()
command -v prometheus >/dev/null || need+=(prometheus)
command -v prometheus-pushgateway >/dev/null || need+=(prometheus-pushgateway)
command -v gcc >/dev/null || need+=(gcc)
command -v chromium >/dev/null || need+=(chromium)
# a single-node Slurm on localhost (tests/support/slurm_cluster.py); the daemons live in /usr/sbin
{ command -v sbatch && [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/slurmd ] && [ -x /usr/sbin/munged ]; } \
  >/dev/null || need+=(slurmctld slurmd slurm-client munge)
# SkyPilot's Slurm infra reaches the cluster over SSH on loopback (tests/support/skypilot_infra.py)
{ [ -x /usr/sbin/sshd ] && command -v rsync; } >/dev/null || need+=(openssh-server rsync)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "note: missing ${need[*]}; the tests that need them will be skipped" >&2
  fi
fi

[ -x .venv/bin/python ] || "$PY" -m venv .venv
ext=.venv/share/jupyter/labextensions/jupyter-costguard
# an earlier run linked $ext to the build; unlink it first, or pip's install of the shared data
# would write install.json through the link into the build, and the next build would fail
[ -L "$ext" ] && rm "$ext"
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[test]"
# the hub tests' real proxy (npm configurable-http-proxy), kept inside the venv
chp=.venv/node/node_modules/.bin/configurable-http-proxy
[ -x "$chp" ] || (mkdir -p .venv/node && cd .venv/node \
  && npm install --silent --no-audit --no-fund configurable-http-proxy@5 >/dev/null)
# link the built labextension into the env, so a rebuild is what the browser tests load
rm -rf "$ext" && ln -s "$PWD/jupyter_costguard/labextension" "$ext"

# SkyPilot's client venv and its remote runtime's wheels (cached; ~4 min the first time) build
# in the background while the checks and the first tests run; its tests wait for them. Started
# from a subshell that exits at once, so that it is not a child of the pytest this script
# becomes: its end would leave a zombie there (test_hardening_slurm counts pytest's children)
mkdir -p .venv/logs
( .venv/bin/python tests/support/skypilot_infra.py >.venv/logs/skypilot-build.log 2>&1 & )

.venv/bin/ruff check .
.venv/bin/lint-imports --no-cache  # the layering (pyproject.toml [tool.importlinter])
# mypy and the frontend's jest tests run beside pytest rather than before it: its workers mostly
# wait on real servers, and jest alone takes 30-70 s on a 2-core machine (mypy, cold, ~10 s).
# Their output is printed once pytest ends, and either failing fails the run
checks=.venv/logs/checks
rm -rf "$checks" && mkdir -p "$checks"
.venv/bin/mypy >"$checks/mypy.log" 2>&1 &
mypy_pid=$!
(cd labextension && npm test --silent) >"$checks/jest.log" 2>&1 &
jest_pid=$!
# two pytest-xdist workers by default (COSTGUARD_TEST_WORKERS=0: one process): each test file
# on one worker, the files that run a JupyterHub or a browser together on one, the longest
# units first (tests/conftest.py). Most tests wait on real servers, so two workers on two
# cores roughly halve the run
set +e
.venv/bin/pytest -n "${COSTGUARD_TEST_WORKERS:-2}" --dist loadscope --durations=25 "$@"
rc=$?
wait "$mypy_pid"; mypy_rc=$?
wait "$jest_pid"; jest_rc=$?
set -e
echo "--- mypy (exit $mypy_rc)"; cat "$checks/mypy.log"
echo "--- jest (exit $jest_rc)"; cat "$checks/jest.log"
[ "$mypy_rc" = 0 ] && [ "$jest_rc" = 0 ] || { echo "mypy or jest failed (above)" >&2; [ "$rc" != 0 ] || rc=1; }
exit "$rc"

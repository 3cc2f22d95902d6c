"""Shared fixtures: a real Jupyter server (pytest-jupyter) with costguard loaded."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.cloud import metadata
from jupyter_costguard.cloud.container import ENV_CONTAINER_SHARE
from tests.support.costguard_config import server_sections
from tests.support.processes import kill_runners_under
from tests.support.traces import write_trace
from tests.support.units import GiB

pytest_plugins = ["pytest_jupyter.jupyter_server"]

#: Loopback only: these machines have no cloud, and traffic to the link-local metadata
#: address is flagged. Every server a test starts, in this process or as a child (which
#: inherits the environment), has lookups off and, should one be turned on, every endpoint
#: on a closed loopback port. This machine is a container; the container share is off too
#: (pricing tests that want one ask for it). Tests of the lookups point them at stand-ins.
NO_CLOUD = {
    metadata.ENV_OFF: "off",
    metadata.ENV_AWS_DISABLED: "true",
    metadata.ENV_AWS_ENDPOINT: "http://127.0.0.1:9",
    metadata.ENV_GCE_HOST: "127.0.0.1:9",
    metadata.ENV_AZURE_ENDPOINT: "http://127.0.0.1:9",
    ENV_CONTAINER_SHARE: "off",
    "GPUHUNT_CATALOG_URL": "http://127.0.0.1:9/gpuhunt",
}
os.environ.update(NO_CLOUD)


@pytest.fixture
def trace_file(tmp_path: Path) -> Path:
    """Kernel 0 holds 4 GiB on GPU 0 at 2% utilisation; GPU 1 sits unused."""
    frame = {"t": 0, "gpus": [
        {"utilization_percent": 2, "power_watts": 60,
         "processes": [{"kernel": 0, "used_memory_bytes": 4 * GiB}]},
        {"utilization_percent": 0, "power_watts": 50, "processes": []},
    ]}
    return write_trace(tmp_path / "trace.json", [frame])


@pytest.fixture
def costguard_config(tmp_path: Path, trace_file: Path) -> dict[str, Any]:
    return {
        "db_path": str(tmp_path / "ledger.sqlite"),
        "sample_interval": 0.25,
        "hourly_rate": 36.0,
        "gpu_share": 0.9,
        "replay_trace": str(trace_file),
        "replay_mode": "always",
        "LocalBackend.warm_kernels": 0,  # tests that want one ask for it
        "catalog_refresh_hours": 0,  # likewise the background catalog refresh
        "Hibernate.on_stop_seconds": 0,  # and hibernating GPU kernels when the server stops
    }


@pytest.fixture
def jp_server_config(costguard_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "ServerApp": {
            "jpserver_extensions": {"jupyter_costguard": True},
            "allow_unauthenticated_access": False,
        },
        **server_sections(costguard_config),
    }


@pytest.fixture
def no_leftover_jobs(tmp_path: Path) -> Iterator[None]:
    """Jobs outlive their server by design; a test's must not outlive the test (modules that
    start jobs use it through `pytest.mark.usefixtures`)."""
    yield
    kill_runners_under(tmp_path)


def _utf8(text: str) -> str:
    """`text` with lone surrogates written as escapes (valid UTF-8 holds none)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Tests that feed lone surrogates to the code (file names that are not UTF-8) leave them
    in the captured log; pytest-xdist's workers send reports as UTF-8 and stop at one, so the
    captured sections are escaped before any other hook reads them."""
    report.sections = [(title, _utf8(body)) for title, body in report.sections]


#: test files that run a real JupyterHub (single-user servers, the proxy, the service) or a
#: real browser: they share one pytest-xdist worker, one file after another
_HEAVY = ("tests/browser/", "tests/test_hub.py", "tests/test_hub_abuse.py",
          "tests/test_hub_budgethold.py", "tests/test_hub_example.py",
          "tests/test_hub_meter_hostile.py", "tests/test_hub_nodegpu_cull.py",
          "tests/test_hub_policy.py")


#: the units that take longest (minutes each on CI's 2-core machine: ~16, ~8.5, ~3.7), handed
#: out first; every other file follows in xdist's order. The SkyPilot file comes after the
#: schemathesis one on its worker: on a fresh machine its environment is still being built in
#: the background (scripts/test.sh) when the tests start
_LONGEST = ("heavy", "tests/test_fuzz_api.py", "tests/test_skypilot_e2e.py")


def _rank(scope: str) -> int:
    return _LONGEST.index(scope) if scope in _LONGEST else len(_LONGEST)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With `--dist loadscope` (what scripts/test.sh asks for): every test file is one unit of
    work (its module fixtures start once), and the hub and browser files are one unit between
    them, so they never compete with each other for the CPU. A scheduler of our own, because
    `--dist loadgroup` with `xdist_group` marks does nothing under pytest 9 (xdist 3.8 renames
    `item._nodeid`, which pytest 9 no longer reads)."""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByFile(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "heavy" if path.startswith(_HEAVY) else path

        def _assign_work_unit(self, node: Any) -> None:
            # the longest units first (xdist's own order is by number of tests): one of them
            # started last would leave the other worker idle while it runs
            first = min(self.workqueue, key=_rank)
            self.workqueue.move_to_end(first, last=False)
            super()._assign_work_unit(node)

    return ByFile(config, log)

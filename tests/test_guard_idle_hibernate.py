"""The idle-GPU rule's hibernation (`hibernate_idle_after_seconds`, on by default at 30 minutes
since issue 44, None: off; issue 37 item 4):
in simulated time through the real GuardEngine and alert store, then on a real server whose real,
idle kernel holds the replayed GPU and is hibernated by the server itself."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.app import CostGuard
from jupyter_costguard.guard import Act, Outcome
from jupyter_costguard.guard.config import Guard, GuardConfig
from jupyter_costguard.guard.idle import (
    HIBERNATE_RETRY_SECONDS,
    HIBERNATED_KIND,
    IdleKernelRule,
    clock_time,
)
from jupyter_costguard.hibernate.settings import Hibernate
from tests.support.guard_harness import T0, K, SpendHarness
from tests.support.openapi_check import validate
from tests.support.rest import get_json, start_session
from tests.test_hibernate_api import api, new_kernel, run, service

KIND = "idle-gpu-kernel"
FIRST_RETRY = HIBERNATE_RETRY_SECONDS[0]


def harness(tmp_path: Path, **config: Any) -> SpendHarness:
    settings = {"idle_kernel_seconds": 900, "hibernate_idle_after_seconds": 1800, **config}
    return SpendHarness(tmp_path, lambda c: [IdleKernelRule(c)], **settings)


def hibernations(acts: list[Act]) -> list[str | None]:
    return [a.kernel_id for a in acts if a.action == "hibernate-kernel"]


def snapshot(kernel_id: str = "k1", notebook: str = "train.ipynb") -> dict[str, Any]:
    return {"id": "f" * 32, "notebook": notebook, "bytes": 3 * 2**30, "gpus_freed": 1,
            "saved": [f"v{i}" for i in range(42)],
            "skipped": [{"name": "gen", "reason": "a generator"}], "kernel_id": kernel_id}


# --- the rule, in simulated time -----------------------------------------------------------


def test_on_by_default_after_30_minutes_warned_before(tmp_path: Path):
    assert GuardConfig().hibernate_idle_after_seconds == 1800
    assert Guard(parent=CostGuard()).hibernate_idle_after_seconds == 1800  # as configured
    h = SpendHarness(tmp_path, lambda c: [IdleKernelRule(c)])  # nothing set: the defaults
    k = K("k1", "train.ipynb", last_activity=T0)
    assert hibernations(h.run(T0 + 899, 1, [k])) == []
    assert h.alert(KIND, "k1") is None  # not yet idle_kernel_seconds (15 minutes)
    assert hibernations(h.run(T0 + 1790, 10, [k])) == []
    a = h.alert(KIND, "k1")  # warned from 15 minutes idle: it says when
    assert a is not None and f"It will be hibernated at {clock_time(T0 + 1800)} unless used" \
        in a.message, a.message
    assert a.details["hibernate"]["enabled"] is True
    assert hibernations(h.step(10, [k])) == ["k1"]


def test_none_turns_it_off_and_every_alert_offers_hibernate_first(tmp_path: Path):
    h = harness(tmp_path, hibernate_idle_after_seconds=None)
    k = K("k1", "train.ipynb", last_activity=T0)
    assert hibernations(h.run(T0 + 5 * 3600, 60, [k])) == []
    a = h.alert(KIND, "k1")
    assert a is not None and "hibernated" not in a.message
    assert a.actions[0] == {"id": "hibernate", "label": "Hibernate: free 1 GPU, keep your "
                            "variables", "args": {"kernel_id": "k1"}}
    # its words name its buttons, the first one first ("Shut it down or restart it to free
    # the GPU" before, beside a first button that hibernates)
    assert a.message.endswith(" Hibernate it to free the GPU and keep its variables, or shut "
                              "it down or restart it."), a.message
    assert a.details["hibernate"]["enabled"] is False


def test_asked_once_when_due_and_announced_before(tmp_path: Path):
    h = harness(tmp_path)
    k = K("k1", "train.ipynb", last_activity=T0)
    assert hibernations(h.run(T0 + 1790, 10, [k])) == []
    a = h.alert(KIND, "k1")  # the idle warning (at 900 s) says when
    assert a is not None and f"will be hibernated at {clock_time(T0 + 1800)} unless used" \
        in a.message
    assert hibernations(h.step(10, [k])) == ["k1"]
    a = h.alert(KIND, "k1")
    assert a is not None and "being hibernated" in a.message
    assert a.details["hibernate"]["asked_at"] == T0 + 1800
    assert hibernations(h.run(h.now + 600, 10, [k])) == []  # not again while under way


def test_never_a_busy_kernel_a_mig_kernel_nor_one_without_a_notebook(tmp_path: Path):
    h = harness(tmp_path, hibernate_idle_after_seconds=60)
    busy = K("busy", "a.ipynb", state="busy", last_activity=T0)
    loose = K("loose", None, last_activity=T0, gpu={"GPU-b": 2**30})
    assert hibernations(h.run(T0 + 3600, 30, [busy, loose])) == []
    a = h.alert(KIND, "loose")
    assert a is not None and a.actions[0]["id"] == "shutdown-kernel"
    mig = harness(tmp_path / "mig", hibernate_idle_after_seconds=60)
    mig.gpu_util = None  # GPUs that report no utilisation: not judged idle at all
    assert hibernations(mig.run(T0 + 3600, 30, [K("m", "m.ipynb", last_activity=T0)])) == []


def test_a_failure_keeps_it_running_says_why_and_backs_off(tmp_path: Path):
    h = harness(tmp_path)
    k = K("k1", "train.ipynb", last_activity=T0)
    (act,) = [a for a in h.run(T0 + 1800, 10, [k]) if a.action == "hibernate-kernel"]
    # the save ran in the kernel (busy a moment, then a new last activity), and failed
    h.guard.heard(Outcome(act=act, time=h.now + 3, error="the namespace is 120 GB, over "
                          "the 100 GB cap (c.Hibernate.max_bytes): items"))
    k.last_activity = h.now + 4
    h.step(10, [k])
    a = h.alert(KIND, "k1")  # said at once, not after another idle_kernel_seconds
    assert a is not None and "Hibernating it failed, so it keeps running: the namespace " \
        "is 120 GB" in a.message and "tried 1 time" in a.message
    assert a.details["hibernate"]["failures"] == 1
    failed_at = h.now - 7
    # not asked again at every tick: only after the back-off (and the idle time) has passed
    acts = h.run(failed_at + 1800 - 10, 10, [k])
    assert hibernations(acts) == []
    retry_at = max(k.last_activity + 1800, failed_at + FIRST_RETRY)
    waiting = h.alert(KIND, "k1")
    assert waiting is not None and f"next try at {clock_time(retry_at)}" in waiting.message
    (again,) = [x for x in h.run(failed_at + 1800 + 20, 10, [k])
                if x.action == "hibernate-kernel"]
    # a second failure waits twice as long
    h.guard.heard(Outcome(act=again, time=h.now, error="still too big"))
    h.step(10, [k])
    second = h.now - 10
    assert hibernations(h.run(second + 2 * FIRST_RETRY - 20, 10, [k])) == []
    assert hibernations(h.run(second + 2 * FIRST_RETRY + 20, 10, [k])) == ["k1"]


def test_done_raises_a_notice_that_outlives_the_kernel(tmp_path: Path):
    h = harness(tmp_path)
    k = K("k1", "train.ipynb", last_activity=T0)
    (act,) = [a for a in h.run(T0 + 1800, 10, [k]) if a.action == "hibernate-kernel"]
    h.guard.heard(Outcome(act=act, time=h.now, result=snapshot()))
    h.step(10, [])  # the kernel is gone
    assert h.alert(KIND, "k1") is None
    notice = h.alert(HIBERNATED_KIND, "f" * 32)
    assert notice is not None and notice.severity == "info"
    assert notice.message.startswith("Hibernated train.ipynb: freed 1 GPU, kept 42 "
                                     "variables (3.0 GiB); not saved: gen.")
    assert notice.message.endswith("Running a cell in the notebook brings the variables "
                                   "back first (or Restore from its banner).")
    assert notice.notebook == "train.ipynb" and notice.details["snapshot_id"] == "f" * 32
    h.run(h.now + 600, 10, [])
    assert h.alert(HIBERNATED_KIND, "f" * 32) is not None  # until the user dismisses it


def test_no_cull_while_a_hibernation_is_under_way(tmp_path: Path):
    h = harness(tmp_path, hibernate_idle_after_seconds=600, cull_idle_kernels=True,
                cull_after_seconds=900, cull_warning_seconds=120)
    k = K("k1", "train.ipynb", last_activity=T0)
    acts = h.run(T0 + 3600, 10, [k])
    assert [a.action for a in acts] == ["hibernate-kernel"]


# --- a real server, a real kernel ----------------------------------------------------------


@pytest.fixture
def costguard_config(costguard_config: dict[str, Any]) -> dict[str, Any]:
    return {**costguard_config, "Guard.idle_kernel_seconds": 0.5,
            "Guard.hibernate_idle_after_seconds": 1.0}


async def _alerts(jp_fetch: Any, kind: str) -> list[dict[str, Any]]:
    doc = await get_json(jp_fetch, "costguard", "api", "alerts", params={"include": "all"})
    validate("/alerts", 200, doc)
    return [a for a in doc["alerts"] if a["kind"] == kind]


async def _failed_alert(jp_fetch: Any, kernel_id: str) -> dict[str, Any] | None:
    """The kernel's open idle alert once a hibernation of it has failed (None before)."""
    for a in await _alerts(jp_fetch, KIND):
        if a["key"] == kernel_id and a["resolved"] is None \
                and a["details"]["hibernate"]["failures"]:
            return a
    return None


async def _until(what: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = await what()
        if found:
            return found
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.1)


@pytest.mark.timeout(120)
async def test_the_server_hibernates_an_idle_gpu_kernel(jp_fetch, jp_root_dir, jp_serverapp):
    kernel_id = await new_kernel(jp_fetch, jp_root_dir, "idle.ipynb")
    out = await run(jp_serverapp, kernel_id, "weights = [1.5, 2.5]\nsteps = list(range(10))")
    assert "Error" not in out, out

    async def notice() -> list[dict[str, Any]]:
        return [a for a in await _alerts(jp_fetch, HIBERNATED_KIND)
                if a["kernel_id"] == kernel_id]

    (shown,) = await _until(notice)
    assert shown["message"].startswith("Hibernated idle.ipynb: freed 1 GPU, kept 2 variables")
    assert "banner" in shown["message"] and shown["severity"] == "info"
    kernels = {k["id"] for k in await get_json(jp_fetch, "api", "kernels")}
    assert kernel_id not in kernels
    listed = await get_json(jp_fetch, "costguard", "api", "snapshots",
                            params={"notebook": "idle.ipynb"})
    (snap,) = listed["snapshots"]
    assert snap["id"] == shown["key"] and {"weights", "steps"} <= set(snap["saved"])
    assert snap["gpus_held"] == 1
    assert shown["resolved"] is None

    # the snapshot gone (discarded; a restore tells the same), its notice has nothing left to
    # offer: it is resolved, not left for the user to dismiss
    await api(jp_fetch, "snapshots", snap["id"], method="DELETE", expect=204)

    async def resolved() -> list[dict[str, Any]]:
        return [a for a in await notice() if a["resolved"] is not None]

    (ended,) = await _until(resolved, timeout=30)
    assert ended["id"] == shown["id"]


@pytest.mark.timeout(120)
async def test_a_failed_save_keeps_the_kernel_and_the_alert_says_why(jp_fetch, jp_serverapp):
    svc = service(jp_serverapp)
    svc.settings = Hibernate(timeout_seconds=60, max_bytes=100).service_settings(90)
    kernel_id = (await start_session(jp_fetch, "big.ipynb"))["kernel"]["id"]
    assert "Error" not in await run(jp_serverapp, kernel_id, "items = list(range(10000))")

    def failed() -> Any:
        return _failed_alert(jp_fetch, kernel_id)

    alert = await _until(failed)
    assert "Hibernating it failed, so it keeps running" in alert["message"], alert
    assert alert["actions"][0]["id"] == "hibernate"
    await asyncio.sleep(2.0)  # many ticks (0.25 s) later: still the one try
    alert = await _until(failed)
    assert alert["details"]["hibernate"]["failures"] == 1, alert
    assert kernel_id in {k["id"] for k in await get_json(jp_fetch, "api", "kernels")}
    assert "10000" in await run(jp_serverapp, kernel_id, "print(len(items))")


@pytest.mark.timeout(120)
async def test_an_idle_kernel_with_an_unsaveable_value_keeps_running_and_the_alert_names_it(
        jp_fetch, jp_serverapp):
    """Issue 44: an automatic hibernation shuts a kernel down only when every variable was
    saved. A generator (which cannot live outside the process) blocks it: the kernel keeps
    running, nothing is kept on disk, and the alert names the variable and why."""
    kernel_id = (await start_session(jp_fetch, "gen.ipynb"))["kernel"]["id"]
    assert "Error" not in await run(jp_serverapp, kernel_id,
                                    "items = list(range(10))\nbatches = (i for i in items)")

    def failed() -> Any:
        return _failed_alert(jp_fetch, kernel_id)

    alert = await _until(failed)
    assert "Hibernating it failed, so it keeps running" in alert["message"], alert
    assert "batches (a generator" in alert["message"], alert["message"]
    assert kernel_id in {k["id"] for k in await get_json(jp_fetch, "api", "kernels")}
    assert "10" in await run(jp_serverapp, kernel_id, "print(len(items))")
    listed = await get_json(jp_fetch, "costguard", "api", "snapshots")
    assert listed["snapshots"] == []

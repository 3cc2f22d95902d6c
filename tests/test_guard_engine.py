"""The guard engine (rules → alerts and acts) and the actor that carries acts out."""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, cast

import pytest

from jupyter_costguard.alerts.store import AlertStore
from jupyter_costguard.cost.published import Published
from jupyter_costguard.guard import (
    Act,
    Finding,
    GuardConfig,
    GuardContext,
    GuardEngine,
    Outcome,
    RuleResult,
)
from jupyter_costguard.guard.actions import Actor
from tests.support.guard_harness import GuardHarness, host_sample, publish, sample
from tests.support.processes import alive

# --- the engine -------------------------------------------------------------------------


def published(t: float) -> Published:
    return publish(sample(t, 1.0, host=host_sample(total=1 << 34), status="no-gpu"))


class Scripted:
    """A rule that says what the test tells it to."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.keys: list[str] = []
        self.acts: list[Act] = []
        self.fail = False
        self.seen: list[GuardContext] = []
        self.states: list[dict[str, str | None]] = []  # what alert_state said, per key

    def evaluate(self, ctx: GuardContext) -> RuleResult:
        self.seen.append(ctx)
        self.states.append({k: ctx.alert_state(self.kind, k) for k in self.keys})
        if self.fail:
            raise RuntimeError("rule is broken")
        acts, self.acts = self.acts, []
        return RuleResult(
            findings=[Finding(self.kind, k, "warning", f"{self.kind} {k}", "msg")
                      for k in self.keys],
            acts=acts)


def make_guard(*rules: Scripted) -> tuple[GuardEngine, AlertStore, list[Act]]:
    """A guard running `rules` whose alert clock stays at 1000."""
    h = GuardHarness(lambda _: rules, now=1000.0)
    return h.guard, h.alerts, h.acts


def test_findings_become_alerts_and_disappearing_ones_are_resolved():
    rule = Scripted("test")
    guard, alerts, _ = make_guard(rule)
    rule.keys = ["a", "b"]
    guard.evaluate(published(1.0))
    a, b = alerts.find("test", "a"), alerts.find("test", "b")
    assert a is not None and b is not None
    guard.evaluate(published(2.0))
    assert alerts.find("test", "a").id == a.id, "a re-raise refreshes the same alert"
    rule.keys = ["b"]
    guard.evaluate(published(3.0))
    assert alerts.find("test", "a") is None
    assert alerts.get(a.id).resolved is not None
    assert alerts.find("test", "b").id == b.id
    rule.keys = ["a"]
    guard.evaluate(published(4.0))
    assert alerts.find("test", "a").id != a.id, "after resolution a raise is a new alert"
    assert alerts.find("test", "b") is None


def test_alerts_left_by_an_earlier_run_are_resolved_once_their_rule_had_time_to_judge():
    alerts = AlertStore(None, clock=lambda: 1000.0)
    for kind, key in (("quick", "gone"), ("quick", "still"), ("slow", "gone"),
                      ("slow", "still"), ("other", "x")):
        alerts.raise_alert(kind, key, "warning", "t", "m")
    alerts.raise_alert("quick", "mine", "info", "t", "m", source="api")
    quick, slow = Scripted("quick"), Scripted("slow")
    quick.keys, slow.keys = ["still"], []
    slow.settle_seconds = 30.0  # it says nothing until it has seen 30 s
    guard = GuardEngine(GuardConfig(), [quick, slow], alerts, cast(Any, None), cast(Any, None))

    def open_keys() -> set[tuple[str, str]]:
        return {(a.kind, a.key) for a in alerts.active()}

    guard.evaluate(published(0.0))
    # the quick rule has judged: what it did not find again is over; api alerts are not ours
    assert open_keys() == {("quick", "still"), ("quick", "mine"), ("slow", "gone"),
                           ("slow", "still"), ("other", "x")}
    guard.evaluate(published(20.0))
    slow.keys = ["still"]
    guard.evaluate(published(29.0))
    assert ("slow", "gone") in open_keys()
    guard.evaluate(published(30.0))
    assert open_keys() == {("quick", "still"), ("quick", "mine"), ("slow", "still"),
                           ("other", "x")}  # "other": no rule of that kind runs here
    slow.keys = []
    guard.evaluate(published(31.0))
    assert ("slow", "still") not in open_keys()  # followed like its own from then on


def test_a_failing_rule_is_isolated_and_keeps_its_alerts(caplog):
    broken, fine = Scripted("broken"), Scripted("fine")
    guard, alerts, dispatched = make_guard(broken, fine)
    broken.keys, fine.keys = ["x"], ["y"]
    guard.evaluate(published(1.0))
    broken.fail = True
    fine.keys = ["y", "z"]
    fine.acts = [Act("stop-server", "because")]
    with caplog.at_level(logging.ERROR, logger="jupyter_costguard"):
        acts = guard.evaluate(published(2.0))
    assert "guard rule broken failed" in caplog.text
    assert alerts.find("broken", "x") is not None, "a failing rule's alerts are not resolved"
    assert alerts.find("fine", "z") is not None, "the other rules still run"
    assert acts == dispatched == [Act("stop-server", "because")]
    broken.fail, broken.keys = False, []
    guard.evaluate(published(3.0))
    assert alerts.find("broken", "x") is None, "resolved once the rule works and says so"


def test_acts_are_dispatched_once_and_the_context_is_filled_in():
    rule = Scripted("test")
    guard, _, dispatched = make_guard(rule)
    guard.running_jobs = lambda: 2
    rule.acts = [Act("run-command", "r", command=("true",)), Act("shutdown-kernel", "k", "kid")]
    assert guard.evaluate(published(1.0)) == dispatched
    assert [a.action for a in dispatched] == ["run-command", "shutdown-kernel"]
    assert guard.evaluate(published(2.0)) == []
    assert len(dispatched) == 2
    ctx = rule.seen[-1]
    assert ctx.running_jobs == 2 and ctx.now == 2.0


def test_alert_state_lets_a_rule_see_a_dismissal():
    rule = Scripted("test")
    guard, alerts, _ = make_guard(rule)
    rule.keys = ["a"]
    guard.evaluate(published(1.0))
    guard.evaluate(published(2.0))
    alerts.dismiss(alerts.find("test", "a").id)
    guard.evaluate(published(3.0))
    assert [s["a"] for s in rule.states] == [None, "active", "dismissed"]


def test_no_sample_no_rules():
    rule = Scripted("test")
    guard, _, _ = make_guard(rule)
    empty = Published(sample=None, cost=None, pricing=cast(Any, None), views=cast(Any, None))
    assert guard.evaluate(empty) == []
    assert rule.seen == []


# --- the actor --------------------------------------------------------------------------


class FakeKernels:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    async def interrupt_kernel(self, kid: str) -> None:
        self.calls.append(("interrupt", kid))

    def restart_kernel(self, kid: str) -> None:  # sync managers exist too
        self.calls.append(("restart", kid))

    async def shutdown_kernel(self, kid: str) -> None:
        raise KeyError(kid)  # already gone


def run_acts(*acts: Act, timeout: float = 5.0,
             stop_server: Any = None) -> tuple[Actor, list[bool], FakeKernels]:
    kernels = FakeKernels()

    async def main() -> tuple[Actor, list[bool]]:
        actor = Actor(kernels, stop_server or (lambda: None), asyncio.get_running_loop(),
                      command_timeout=timeout)
        return actor, [await actor.run(a) for a in acts]

    actor, results = asyncio.run(main())
    return actor, results, kernels


def test_kernel_actions_and_their_failures(caplog):
    with caplog.at_level(logging.ERROR, logger="jupyter_costguard"):
        actor, results, kernels = run_acts(
            Act("interrupt-kernel", "r", "k1"), Act("restart-kernel", "r", "k2"),
            Act("shutdown-kernel", "r", "k3"), Act("explode", "r"))
    assert results == [True, True, False, False]
    assert kernels.calls == [("interrupt", "k1"), ("restart", "k2")]
    assert [a.action for a in actor.failed] == ["shutdown-kernel", "explode"]
    assert "guard action shutdown-kernel failed" in caplog.text
    assert "unknown or incomplete guard action" in caplog.text


def test_every_outcome_is_told_and_a_hibernation_carries_its_snapshot(caplog):
    """Listeners hear each act's outcome; a refused hibernation is a warning with its reason
    (expected: a kernel too big to save), not a traceback."""

    async def hibernate(kernel_id: str) -> dict[str, Any]:
        if kernel_id == "big":
            raise RuntimeError("the namespace is over the cap")
        return {"id": "s1", "notebook": "a.ipynb"}

    async def main() -> tuple[Actor, list[Outcome], list[bool]]:
        heard: list[Outcome] = []
        actor = Actor(FakeKernels(), lambda: None, asyncio.get_running_loop(),
                      hibernate=hibernate)
        actor.listeners.append(heard.append)
        bare = Actor(FakeKernels(), lambda: None, asyncio.get_running_loop())
        bare.listeners.append(heard.append)
        acts = [Act("hibernate-kernel", "r", "k1"), Act("hibernate-kernel", "r", "big"),
                Act("interrupt-kernel", "r", "k2")]
        results = [await actor.run(a) for a in acts]
        results.append(await bare.run(Act("hibernate-kernel", "r", "k3")))
        return actor, heard, results

    with caplog.at_level(logging.WARNING, logger="jupyter_costguard"):
        actor, heard, results = asyncio.run(main())
    assert results == [True, False, True, False]
    assert [a.kernel_id for a in actor.failed] == ["big"]
    assert [(o.act.kernel_id, o.error) for o in heard] == [
        ("k1", None), ("big", "the namespace is over the cap"), ("k2", None),
        ("k3", "hibernate is not available on this server")]
    assert heard[0].result == {"id": "s1", "notebook": "a.ipynb"}
    assert "kernel big was not hibernated: the namespace is over the cap" in caplog.text
    assert "Traceback" not in caplog.text


def test_stop_server_sync_or_async():
    stopped: list[str] = []

    async def stop() -> None:
        stopped.append("async")

    _, results, _ = run_acts(Act("stop-server", "r"), stop_server=stop)
    _, results2, _ = run_acts(Act("stop-server", "r"), stop_server=lambda: stopped.append("s"))
    assert results == results2 == [True]
    assert stopped == ["async", "s"]


def test_run_command_success_logs_its_output(tmp_path: Path, caplog):
    marker = tmp_path / "marker"
    cmd = (sys.executable, "-c",
           f"open({str(marker)!r}, 'w').write('stopped'); print('bye from the command')")
    with caplog.at_level(logging.WARNING, logger="jupyter_costguard"):
        actor, results, _ = run_acts(Act("run-command", "r", command=cmd))
    assert results == [True]
    assert marker.read_text() == "stopped"
    assert "exit status 0" in caplog.text and "bye from the command" in caplog.text
    assert actor.done == [Act("run-command", "r", command=cmd)]


def test_run_command_that_fails_is_logged_with_its_output(caplog):
    cmd = (sys.executable, "-c", "import sys; print('no permission to shut down'); sys.exit(3)")
    with caplog.at_level(logging.ERROR, logger="jupyter_costguard"):
        actor, results, _ = run_acts(Act("run-command", "r", command=cmd))
    assert results == [False]
    assert "exit status 3" in caplog.text
    assert "no permission to shut down" in caplog.text
    assert actor.done == [] and len(actor.failed) == 1


def test_missing_shutdown_command_is_logged(tmp_path: Path, caplog):
    missing = str(tmp_path / "no-such-shutdown")
    not_executable = tmp_path / "plain.txt"
    not_executable.write_text("echo hi\n")
    with caplog.at_level(logging.ERROR, logger="jupyter_costguard"):
        actor, results, _ = run_acts(Act("run-command", "r", command=(missing,)),
                                     Act("run-command", "r", command=(str(not_executable),)))
    assert results == [False, False]
    assert caplog.text.count("could not be started") == 2
    assert "no-such-shutdown" in caplog.text
    assert len(actor.failed) == 2


def test_hanging_command_is_killed_after_the_timeout(tmp_path: Path, caplog):
    pidfile = tmp_path / "child.pid"
    # the command starts a child that would outlive it, then hangs
    script = ("import subprocess, sys, time\n"
              "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              f"open({str(pidfile)!r}, 'w').write(str(p.pid))\n"
              "print('waiting for ever', flush=True)\n"
              "time.sleep(60)\n")
    start = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="jupyter_costguard"):
        hang = Act("run-command", "r", command=(sys.executable, "-c", script))
        _, results, _ = run_acts(hang, timeout=1.5)
    elapsed = time.monotonic() - start
    assert results == [False]
    assert elapsed < 15
    assert "did not finish within 1.5 s and was killed" in caplog.text
    assert "waiting for ever" in caplog.text
    if os.name == "posix":
        child = int(pidfile.read_text())
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and alive(child):
            time.sleep(0.05)
        assert not alive(child), "what the command started is killed with it"


def test_dispatch_from_another_thread_runs_on_the_loop(tmp_path: Path):
    marker = tmp_path / "m"
    cmd = (sys.executable, "-c", f"open({str(marker)!r}, 'a').write('x')")

    async def main() -> Actor:
        loop = asyncio.get_running_loop()
        actor = Actor(FakeKernels(), lambda: None, loop)
        t = threading.Thread(target=actor.dispatch, args=(Act("run-command", "r", command=cmd),))
        t.start()
        t.join()
        deadline = time.monotonic() + 10
        while not actor.done and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return actor

    actor = asyncio.run(main())
    assert len(actor.done) == 1
    assert marker.read_text() == "x"


def test_dispatch_after_the_loop_closed_does_not_raise(caplog):
    loop = asyncio.new_event_loop()
    loop.close()
    actor = Actor(FakeKernels(), lambda: None, loop)
    with caplog.at_level(logging.ERROR, logger="jupyter_costguard"):
        actor.dispatch(Act("stop-server", "r"))
    assert "event loop has stopped" in caplog.text
    assert actor.failed == [Act("stop-server", "r")]


@pytest.mark.parametrize("command", [(), ("",)])
def test_empty_command(command, caplog):
    with caplog.at_level(logging.ERROR, logger="jupyter_costguard"):
        _, results, _ = run_acts(Act("run-command", "r", command=command))
    assert results == [False]

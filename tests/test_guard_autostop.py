"""Auto-stop: a cancellable countdown after a quiet spell, then one act.

Unit tests drive the rule through the real `GuardEngine` and `AlertStore` with synthetic samples and
injected times; the server tests run a real `jupyter server` that stops (or runs the
shutdown command) by itself.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.guard import Act
from jupyter_costguard.guard.autostop import AutoStopRule, terminal_activity
from jupyter_costguard.guard.wording import duration as span
from tests.support.guard_harness import ActivityHarness
from tests.support.server_proc import ServerProcess
from tests.support.traces import write_trace

KIND, KEY = "auto-stop", "server"

# --- unit: synthetic samples through the Guard -----------------------------------------


def auto_stop(server_activity: Any = None, **config: Any) -> ActivityHarness:
    """A guard with only the auto-stop rule."""
    return ActivityHarness(lambda c: [AutoStopRule(c, server_activity=server_activity)],
                           **config)


def test_off_by_default():
    box = auto_stop()
    box.tick()
    assert box.run(7 * 86400, dt=600) == []
    assert box.alert(KIND, KEY) is None and box.acts == []


def test_no_countdown_before_the_idle_time_then_countdown_then_one_act():
    box = auto_stop(auto_stop_idle_seconds=600, auto_stop_countdown_seconds=300)
    box.touch()
    assert box.run(590) == []
    assert box.alert(KIND, KEY) is None, "no countdown before the idle time"
    box.tick()  # 600 s idle
    a = box.shown(KIND, KEY)
    assert a is not None
    assert a.severity == "critical"
    assert a.title == "Stopping this Jupyter server in 5 min: nothing has run for 10 min"
    assert {"id": "dismiss", "label": "Cancel auto-stop"} in a.actions
    assert any(x["id"] == "open-panel" for x in a.actions)
    assert a.details["phase"] == "countdown" and a.details["action"] == "stop-server"
    assert a.details["deadline"] == pytest.approx(box.now + 300)
    first_id = a.id

    assert box.run(120) == []
    a = box.shown(KIND, KEY)
    assert a is not None and a.id == first_id, "refreshed, not a new alert"
    assert a.title == "Stopping this Jupyter server in 3 min: nothing has run for 12 min"
    assert box.run(150) == []
    a = box.shown(KIND, KEY)
    assert a is not None
    assert a.title.startswith("Stopping this Jupyter server in 30 s:")

    acts = box.run(30)  # the countdown ends
    assert [x.action for x in acts] == ["stop-server"]
    assert "nothing has run for 15 min" in acts[0].reason
    assert box.alert(KIND, KEY) is None, "the countdown alert is resolved once it acted"
    # never again, whatever happens next
    box.touch()
    box.run(3600)
    assert box.acts == acts


def test_shutdown_command_is_run_instead_of_stopping_the_server():
    cmd = ("sudo", "shutdown", "-h", "now")
    box = auto_stop(auto_stop_idle_seconds=60, auto_stop_countdown_seconds=60, shutdown_command=cmd)
    box.run(60)
    a = box.shown(KIND, KEY)
    assert a is not None and a.title.startswith("Stopping the instance in 60 s:")
    assert a.details["action"] == "run-command"
    assert "sudo" not in json.dumps(a.details) + a.message, "the command is not shown to users"
    box.run(60)
    assert box.acts == [Act("run-command", box.acts[0].reason, command=cmd)]
    box.run(3600)
    assert len(box.acts) == 1


def test_cancelled_by_dismissing_the_alert():
    box = auto_stop(auto_stop_idle_seconds=60, auto_stop_countdown_seconds=120)
    box.run(60)
    a = box.shown(KIND, KEY)
    assert a is not None
    box.alerts.dismiss(a.id)  # "Cancel auto-stop"
    assert box.run(3 * 3600) == [], "no act after a cancellation, however long it stays idle"
    held = box.alert(KIND, KEY)
    assert held is not None and held.id == a.id and held.state == "dismissed"
    assert box.shown(KIND, KEY) is None
    assert held.title == "Auto-stop cancelled" and held.details["phase"] == "cancelled"

    # new activity re-arms it (and retires the cancelled alert) ...
    box.touch()
    box.tick()
    assert box.alert(KIND, KEY) is None
    assert box.alerts.get(a.id).resolved is not None
    # ... and another whole idle period starts a new countdown, which acts
    box.run(50)
    assert box.alert(KIND, KEY) is None
    box.run(10)
    b = box.shown(KIND, KEY)
    assert b is not None and b.id != a.id and b.severity == "critical"
    box.run(120)
    assert [x.action for x in box.acts] == ["stop-server"]


def test_snoozing_cancels_too():
    box = auto_stop(auto_stop_idle_seconds=60, auto_stop_countdown_seconds=120)
    box.run(60)
    a = box.shown(KIND, KEY)
    assert a is not None
    box.alerts.snooze(a.id, 60)
    assert box.run(600) == [], "a snoozed countdown never acts unseen"


@pytest.mark.parametrize("busy", ["kernel", "job", "gpu", "starting"])
def test_never_while_something_runs(busy: str):
    box = auto_stop(auto_stop_idle_seconds=60, auto_stop_countdown_seconds=60)
    box.touch()
    box.kernels["k1"] = ("idle", box.now - 3600)  # its last activity long ago
    if busy == "kernel":
        box.kernels["k1"] = ("busy", box.now - 3600)  # a long cell prints nothing
    elif busy == "starting":
        box.kernels["k1"] = ("starting", box.now - 3600)
    elif busy == "job":
        box.jobs = 1
    else:
        box.gpu_util = 85.0  # e.g. a training script started from a terminal
    box.tick()
    assert box.run(4 * 3600) == []
    assert box.alert(KIND, KEY) is None
    # once it finishes, the idle period starts from then
    box.kernels["k1"], box.jobs, box.gpu_util = ("idle", box.now - 3600), 0, 1.0
    box.run(50)
    assert box.alert(KIND, KEY) is None
    box.run(20)
    assert box.shown(KIND, KEY) is not None
    box.run(60)
    assert len(box.acts) == 1


def test_a_held_gpu_of_unknown_activity_may_be_working_and_blocks_auto_stop():
    """A process on a MIG instance (no utilisation reported) may be training: auto-stop
    waits; once nothing holds it, the idle period starts from then."""
    box = auto_stop(auto_stop_idle_seconds=60, auto_stop_countdown_seconds=60)
    box.kernels["k1"] = ("idle", box.now - 3600)
    box.gpu_held_unknown = True
    box.tick()
    assert box.run(4 * 3600) == []
    assert box.alert(KIND, KEY) is None
    assert "activity unknown" in box.rules[0].last_reason
    box.gpu_held_unknown = False
    box.run(50)
    assert box.alert(KIND, KEY) is None
    box.run(20)
    assert box.shown(KIND, KEY) is not None
    box.run(60)
    assert len(box.acts) == 1


@pytest.mark.parametrize("what", ["activity", "busy", "job", "kernel-started",
                                  "kernel-stopped", "gpu", "terminal"])
def test_activity_during_the_countdown_cancels_it(what: str):
    terminal: list[float | None] = [None]
    box = auto_stop(server_activity=lambda: terminal[0],
                   auto_stop_idle_seconds=60, auto_stop_countdown_seconds=120)
    box.kernels["k1"] = ("idle", box.now)
    box.run(60)
    a = box.shown(KIND, KEY)
    assert a is not None
    box.run(30)
    if what == "activity":
        box.touch()  # e.g. a cell ran and finished between two samples
    elif what == "busy":
        box.kernels["k1"] = ("busy", box.kernels["k1"][1])
    elif what == "job":
        box.jobs = 1
    elif what == "kernel-started":
        box.kernels["k2"] = ("idle", box.now - 100)
    elif what == "kernel-stopped":
        del box.kernels["k1"]
    elif what == "gpu":
        box.gpu_util = 40.0
    else:
        terminal[0] = box.now
    box.tick()
    assert box.alert(KIND, KEY) is None, "the countdown is cancelled and its alert resolved"
    assert box.alerts.get(a.id).resolved is not None
    box.kernels = {k: ("idle", v[1]) for k, v in box.kernels.items()}
    box.jobs, box.gpu_util = 0, None
    assert box.run(40) == []
    assert box.alert(KIND, KEY) is None, "no new countdown before another whole idle period"
    box.run(3600)
    assert len(box.acts) == 1


def test_an_old_dismissed_alert_from_an_earlier_run_does_not_cancel(tmp_path: Path):
    """Alerts persist: a countdown dismissed before a restart must not cancel this run's."""
    box = auto_stop(auto_stop_idle_seconds=60, auto_stop_countdown_seconds=60)
    old = box.alerts.raise_alert(KIND, KEY, "critical", "Stopping in 1 min", "old")
    box.alerts.dismiss(old.id)
    box.tick()
    box.tick()
    assert box.alerts.get(old.id).resolved is not None, "the stale countdown is cleared"
    box.run(60)
    a = box.shown(KIND, KEY)
    assert a is not None and a.id != old.id
    box.run(60)
    assert len(box.acts) == 1


def test_no_countdown_configured_acts_at_the_idle_time():
    box = auto_stop(auto_stop_idle_seconds=60, auto_stop_countdown_seconds=0)
    assert box.run(50) == []
    acts = box.run(10)
    assert [a.action for a in acts] == ["stop-server"]


def test_a_broken_activity_source_does_not_break_the_rule(caplog):
    def broken() -> float:
        raise OSError("nope")

    box = auto_stop(server_activity=broken, auto_stop_idle_seconds=60,
                   auto_stop_countdown_seconds=60)
    with caplog.at_level(logging.WARNING, logger="jupyter_costguard"):
        box.run(120)
    assert len(box.acts) == 1
    assert caplog.text.count("cannot read the server's terminal activity") == 1


def test_steps_are_logged(caplog):
    box = auto_stop(auto_stop_idle_seconds=60, auto_stop_countdown_seconds=60)
    with caplog.at_level(logging.INFO, logger="jupyter_costguard"):
        box.run(60)
        box.alerts.dismiss(box.shown(KIND, KEY).id)  # type: ignore[union-attr]
        box.tick()
        box.touch()
        box.tick()
        box.run(70)  # a new countdown
        box.touch()  # ... cancelled by activity
        box.tick()
        box.run(60)  # another
        box.run(60)  # ... which ends
    text = caplog.text
    assert text.count("; stopping this Jupyter server in 60 s unless cancelled") == 3
    assert "cancelled by the user" in text
    assert "re-armed by new activity" in text
    assert "countdown cancelled by activity" in text
    assert "countdown ended; stopping the Jupyter server" in text


def test_terminal_activity_reader():
    from datetime import datetime, timezone

    class Term:
        def __init__(self, t: float) -> None:
            self.last_activity = datetime.fromtimestamp(t, timezone.utc)

    class App:
        class web_app:
            settings: dict[str, Any] = {}

    read = terminal_activity(App())
    assert read() is None
    App.web_app.settings["terminal_last_activity"] = datetime.fromtimestamp(100, timezone.utc)
    assert read() == 100

    class Manager:
        terminals = {"1": Term(150), "2": Term(120)}

    App.web_app.settings["terminal_manager"] = Manager()
    assert read() == 150
    assert terminal_activity(object())() is None


def test_span():
    assert span(0) == "0 s"
    assert span(59.5) == "59 s"
    assert span(59.5, round_up=True) == "60 s"
    assert span(600) == "10 min"
    assert span(7200) == "2 h"
    assert span(7500) == "2 h 5 min"


# --- a real server ---------------------------------------------------------------------


def quiet_trace(path: Path) -> Path:
    """One GPU, idle, nobody on it (simulated)."""
    frame = {"t": 0, "gpus": [{"utilization_percent": 0, "power_watts": 50, "processes": []}]}
    return write_trace(path, [frame], gpus=1)


def server(tmp_path: Path, **costguard: Any) -> ServerProcess:
    config = {"db_path": str(tmp_path / "ledger.sqlite"), "sample_interval": 0.25,
              "hourly_rate": 10.0, "replay_trace": str(quiet_trace(tmp_path / "trace.json")),
              "replay_mode": "always", **costguard}
    return ServerProcess(tmp_path, config)


def countdown_alerts(srv: ServerProcess) -> list[dict[str, Any]]:
    return [a for a in srv.get("costguard/api/alerts")["alerts"] if a["kind"] == KIND]


def marker_command(marker: Path) -> list[str]:
    return [sys.executable, "-c", f"open({str(marker)!r}, 'a').write('stopped\\n')"]


@pytest.mark.timeout(120)
def test_server_runs_the_shutdown_command_after_the_countdown(tmp_path: Path):
    marker = tmp_path / "marker"
    srv = server(tmp_path, auto_stop_idle_seconds=2, auto_stop_countdown_seconds=2,
                 shutdown_command=marker_command(marker)).start()
    try:
        deadline = time.monotonic() + 30
        seen: list[dict[str, Any]] = []
        while not seen and time.monotonic() < deadline:
            assert not marker.exists(), "the command ran before any countdown was shown"
            seen = countdown_alerts(srv)
            time.sleep(0.05)
        assert seen, srv.log()
        alert = seen[0]
        assert not marker.exists()
        assert alert["severity"] == "critical" and alert["state"] == "active"
        assert alert["title"].startswith("Stopping the instance in ")
        assert {"id": "dismiss", "label": "Cancel auto-stop"} in alert["actions"]

        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marker.exists(), srv.log()
        assert marker.stat().st_mtime >= alert["details"]["deadline"] - 1.0, \
            "the command ran only once the countdown was over"
        time.sleep(6)  # several idle + countdown periods
        assert marker.read_text() == "stopped\n", "exactly once"
        assert countdown_alerts(srv) == [], "the countdown alert is resolved"
        assert srv.proc is not None and srv.proc.poll() is None, "the server itself stays up"
        log = srv.log()
        assert log.count("costguard: running the shutdown command [") == 1
        assert "finished (exit status 0)" in log
    finally:
        srv.stop()


@pytest.mark.timeout(120)
def test_server_cancelled_countdown_runs_nothing(tmp_path: Path):
    marker = tmp_path / "marker"
    srv = server(tmp_path, auto_stop_idle_seconds=2, auto_stop_countdown_seconds=6,
                 shutdown_command=marker_command(marker)).start()
    try:
        deadline = time.monotonic() + 30
        seen: list[dict[str, Any]] = []
        while not seen and time.monotonic() < deadline:
            seen = countdown_alerts(srv)
            time.sleep(0.05)
        assert seen, srv.log()
        code, body = srv.request(f"costguard/api/alerts/{seen[0]['id']}/dismiss", "POST", {})
        assert code == 200, body
        assert json.loads(body)["state"] == "dismissed"
        time.sleep(10)  # well past the countdown
        assert not marker.exists(), srv.log()
        assert countdown_alerts(srv) == []
        assert "cancelled by the user" in srv.log()
        assert srv.proc is not None and srv.proc.poll() is None
    finally:
        srv.stop()


@pytest.mark.timeout(120)
def test_server_stops_itself_without_a_shutdown_command(tmp_path: Path):
    srv = server(tmp_path, auto_stop_idle_seconds=2, auto_stop_countdown_seconds=2).start()
    try:
        seen = srv.wait_for("costguard/api/alerts",
                            lambda doc: any(a["kind"] == KIND for a in doc["alerts"]),
                            timeout=30)
        alert = next(a for a in seen["alerts"] if a["kind"] == KIND)
        assert alert["title"].startswith("Stopping this Jupyter server in ")
        assert srv.proc is not None
        try:
            srv.proc.wait(30)
        except Exception:
            pytest.fail(f"the server did not stop by itself:\n{srv.log()}")
        assert time.time() >= alert["details"]["deadline"] - 0.05
        assert "countdown ended; stopping the Jupyter server" in srv.log()
    finally:
        srv.stop()

"""Each store's file from before schema versions (user_version 0, as the release before the one
opener wrote it) opens and is brought up to date once; a newer one is refused; and the reads
other modules make of a store's tables go through that store."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from jupyter_costguard.alerts import store as alert_store
from jupyter_costguard.alerts.store import AlertStore
from jupyter_costguard.cli import main
from jupyter_costguard.common.hubprotocol import Report
from jupyter_costguard.common.sqlite import SchemaTooNew, store_version, user_version
from jupyter_costguard.cost import ledger as ledger_module
from jupyter_costguard.cost.ledger import Ledger, read_report
from jupyter_costguard.cost.spend import IntervalCost, Share
from jupyter_costguard.hub import store as hub_store
from jupyter_costguard.hub.budgets import Budgets
from jupyter_costguard.hub.store import HubStore, read_only
from jupyter_costguard.offload import store as job_store
from jupyter_costguard.offload.jobdir import JOBS_DB, recorded_results_digest
from jupyter_costguard.offload.spec import JobSpec, SpecCell
from jupyter_costguard.offload.store import JobStore

# --- the ledger and the alerts (one file) ---------------------------------------------------

#: the ledger's tables and the alerts' table as the release before versions made them
OLD_LEDGER = """
CREATE TABLE period_marks (start REAL PRIMARY KEY, spend REAL NOT NULL);
CREATE TABLE consumer (kind TEXT NOT NULL, id TEXT NOT NULL, path TEXT NOT NULL,
    name TEXT NOT NULL DEFAULT '', first_seen REAL NOT NULL, last_seen REAL NOT NULL,
    spend REAL NOT NULL DEFAULT 0, waste REAL NOT NULL DEFAULT 0,
    gpu_spend REAL NOT NULL DEFAULT 0, host_spend REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, id, path));
CREATE TABLE server (id INTEGER PRIMARY KEY CHECK (id = 1), since REAL NOT NULL,
    last_sample REAL, spend REAL NOT NULL DEFAULT 0, waste REAL NOT NULL DEFAULT 0,
    unattributed REAL NOT NULL DEFAULT 0, unattributed_gpu REAL NOT NULL DEFAULT 0,
    seconds REAL NOT NULL DEFAULT 0);
CREATE TABLE history (bucket INTEGER NOT NULL, path TEXT NOT NULL,
    spend REAL NOT NULL DEFAULT 0, waste REAL NOT NULL DEFAULT 0, PRIMARY KEY (bucket, path));
CREATE TABLE alert (id TEXT PRIMARY KEY, kind TEXT NOT NULL, key TEXT NOT NULL,
    severity TEXT NOT NULL, notebook TEXT, kernel_id TEXT, title TEXT NOT NULL,
    message TEXT NOT NULL, actions TEXT NOT NULL, details TEXT NOT NULL, created REAL NOT NULL,
    updated REAL NOT NULL, state TEXT NOT NULL, snoozed_until REAL, source TEXT NOT NULL,
    resolved REAL);
INSERT INTO server VALUES (1, 10.0, 70.0, 3.0, 1.5, 0.5, 0.5, 60.0);
INSERT INTO consumer VALUES ('kernel', 'k1', 'big.ipynb', 'Python 3', 10.0, 70.0, 2.5, 1.5,
    2.0, 0.5);
INSERT INTO history VALUES (1, '', 3.0, 1.5);
INSERT INTO alert VALUES ('a1', 'budget', 'server', 'warning', NULL, NULL, 'Budget', 'Half',
    '[]', '{}', 20.0, 20.0, 'dismissed', NULL, 'guard', NULL);
"""


def old_file(path: Path, script: str) -> Path:
    db = sqlite3.connect(path)
    db.executescript(script)
    db.close()
    return path


def test_a_ledger_file_from_before_versions_opens_with_its_alerts(tmp_path: Path) -> None:
    path = old_file(tmp_path / "ledger.sqlite", OLD_LEDGER)
    ledger = Ledger(path, now=100.0)
    alerts = AlertStore(path, clock=lambda: 100.0)
    try:
        assert ledger.server.spend == 3.0 and ledger.notebooks["big.ipynb"].spend == 2.5
        assert [h.spend for h in ledger.history("", 0)] == [3.0]
        alert = alerts.get("a1")
        assert alert is not None and alert.state == "dismissed"
        assert store_version(ledger.db, ledger_module.SCHEMA) == 1
        assert store_version(ledger.db, alert_store.SCHEMA) == 1
        assert user_version(ledger.db) == 1 + (1 << 8)  # a byte each: ledger, alerts
    finally:
        alerts.close()
        ledger.close()
    again = Ledger(path, now=200.0)  # the alerts' version is not read as the ledger's
    again.close()


def test_a_ledger_file_from_a_newer_release_is_refused(tmp_path: Path) -> None:
    path = old_file(tmp_path / "ledger.sqlite", OLD_LEDGER + "PRAGMA user_version = 2;")
    with pytest.raises(SchemaTooNew, match="ledger tables are at version 2"):
        Ledger(path)
    path = old_file(tmp_path / "alerts.sqlite", OLD_LEDGER + "PRAGMA user_version = 513;")
    with pytest.raises(SchemaTooNew, match="alerts tables are at version 2"):
        AlertStore(path)


def test_the_report_is_read_through_the_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    ledger = Ledger(path, now=0.0)
    ledger.record(2.0, 2.0, IntervalCost(total=3.0, unattributed=0.5, unattributed_gpu=0.5, shares={
        "k1": Share(gpu=2.0, waste=1.5), "k2": Share(host=0.5)}),
        {"k1": "big.ipynb", "k2": "small.ipynb"}, {})
    report = read_report(path, top=1)  # while the server still has it open
    ledger.close()
    assert report.server is not None and report.server.spend == 3.0
    assert [(n.path, n.spend, n.waste, n.kernels) for n in report.notebooks] == [
        ("big.ipynb", 2.0, 1.5, 1)]


def test_report_reads_a_ledger_in_a_folder_named_with_uri_characters(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI opened `file:{path}?mode=ro`: at a '#' SQLite cut the path there, opened (and
    created) another file read-write, and failed with "no such table"."""
    folder = tmp_path / "run#1"
    folder.mkdir()
    path = old_file(folder / "ledger.sqlite", OLD_LEDGER)
    assert main(["report", "--db", str(path)]) == 0
    out = capsys.readouterr().out
    assert "spent 3.00" in out and "big.ipynb" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run#1"]


# --- the jobs -----------------------------------------------------------------------------

#: the jobs table as the first release with jobs made it: before backends and summaries
OLD_JOBS = """
CREATE TABLE job (id INTEGER PRIMARY KEY AUTOINCREMENT, notebook TEXT NOT NULL,
    state TEXT NOT NULL, phase TEXT NOT NULL, created REAL NOT NULL, ended REAL,
    attempts INTEGER NOT NULL DEFAULT 0, exit_reason TEXT, spend REAL NOT NULL DEFAULT 0,
    runner_pid INTEGER, kernel_pid INTEGER, spec TEXT NOT NULL,
    phase_times TEXT NOT NULL DEFAULT '{}', phase_spend TEXT NOT NULL DEFAULT '{}',
    record TEXT NOT NULL DEFAULT '{}', slice TEXT NOT NULL DEFAULT '{}');
CREATE INDEX job_notebook ON job (notebook);
CREATE INDEX job_state ON job (state);
"""


def old_jobs(path: Path) -> Path:
    spec = JobSpec(notebook="n.ipynb", cwd="/srv", kernel_name="python3",
                   cells=(SpecCell("t", 0, True, "w = 1", "w = 1"),), bring_back=("w",))
    old_file(path, OLD_JOBS)
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO job (notebook, state, phase, created, ended, runner_pid, spec, "
                   "record) VALUES ('n.ipynb', 'succeeded', 'finishing', 1.0, 9.0, 4242, ?, ?)",
                   (json.dumps(spec.to_json()), json.dumps({"results_sha256": "ab" * 32})))
    return path


def test_a_jobs_file_from_before_versions_gains_its_columns_and_summaries(
        tmp_path: Path) -> None:
    path = old_jobs(tmp_path / JOBS_DB)
    store = JobStore(path)
    try:
        [job] = store.list_page()[0]
        assert job.spec.bring_back == ("w",) and job.spec.selected == ("t",)
        assert job.backend_ref == "4242"  # the runner's pid, as before backends
        assert store_version(store._db, job_store.SCHEMA) == 1
        full = store.get(job.id)
        assert full is not None and full.spec.cells[0].code == "w = 1"
    finally:
        store.close()


def test_a_jobs_file_from_a_newer_release_is_refused(tmp_path: Path) -> None:
    path = old_jobs(tmp_path / JOBS_DB)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 2")
    with pytest.raises(SchemaTooNew, match="jobs tables are at version 2"):
        JobStore(path)
    with sqlite3.connect(path) as db:  # not touched: no column added
        assert "summary" not in {r[1] for r in db.execute("PRAGMA table_info(job)")}


def test_the_kernel_reads_the_recorded_digest_the_store_wrote(tmp_path: Path) -> None:
    """`%costguard fetch` checks a pickle against what the server recorded, read through the
    one look-up the kernel may import (`jobdir.recorded_results_digest`)."""
    folder = tmp_path / "jobs#1"
    store = JobStore(folder / JOBS_DB)
    spec = JobSpec(notebook="n.ipynb", cwd="/srv", kernel_name="python3",
                   cells=(SpecCell("t", 0, True, "w = 1", "w = 1"),), bring_back=("w",))
    done = store.create(spec, 1.0, {}, {"results_sha256": "cd" * 32})
    none = store.create(spec, 2.0, {}, {})
    try:
        assert recorded_results_digest(folder, done.id) == "cd" * 32  # the store still open
        assert recorded_results_digest(str(folder), none.id) is None
        assert recorded_results_digest(folder, 999) is None
        assert recorded_results_digest(tmp_path / "elsewhere", done.id) is None
    finally:
        store.close()
    assert recorded_results_digest(old_jobs(tmp_path / JOBS_DB).parent, 1) == "ab" * 32


# --- the hub service ------------------------------------------------------------------------

#: the service's tables as its first release made them: before jobs, the node's GPU figures,
#: reported_since and the meter
OLD_HUB = """
CREATE TABLE epochs (user TEXT NOT NULL, server TEXT NOT NULL, since REAL NOT NULL,
    spend REAL NOT NULL, waste REAL NOT NULL, first_seen REAL NOT NULL, last_seen REAL NOT NULL,
    PRIMARY KEY (user, server, since));
CREATE TABLE hours (user TEXT NOT NULL, server TEXT NOT NULL, hour INTEGER NOT NULL,
    spend REAL NOT NULL DEFAULT 0, waste REAL NOT NULL DEFAULT 0,
    idle_gpu_seconds REAL NOT NULL DEFAULT 0, PRIMARY KEY (user, server, hour));
CREATE TABLE servers (user TEXT NOT NULL, server TEXT NOT NULL, url TEXT NOT NULL,
    state TEXT NOT NULL, detail TEXT NOT NULL DEFAULT '', last_ok REAL, last_try REAL,
    currency TEXT, simulated INTEGER NOT NULL DEFAULT 0,
    rate_per_hour REAL NOT NULL DEFAULT 0, gpu_count INTEGER NOT NULL DEFAULT 0,
    gpus_held INTEGER NOT NULL DEFAULT 0, gpus_busy INTEGER NOT NULL DEFAULT 0,
    gpu_idle_since REAL, profile TEXT NOT NULL DEFAULT '', PRIMARY KEY (user, server));
CREATE TABLE memberships (user TEXT NOT NULL, grp TEXT NOT NULL, PRIMARY KEY (user, grp));
INSERT INTO epochs VALUES ('alice', '', 0.0, 2.5, 0.5, 0.0, 7200.0);
INSERT INTO hours VALUES ('alice', '', 1, 2.5, 0.5, 0);
INSERT INTO servers VALUES ('alice', '', '/user/alice/', 'ok', '', 7200.0, 7200.0, 'USD', 0,
    1.25, 1, 1, 1, NULL, 'gpu');
INSERT INTO memberships VALUES ('alice', 'ml');
"""


def test_a_hub_file_from_before_versions_gains_every_column(tmp_path: Path) -> None:
    path = old_file(tmp_path / "hub.sqlite", OLD_HUB)
    store = HubStore(path, count="reported")
    try:
        assert store.budget_book(Budgets("day"), 0.0).spent == {"alice": 2.5}
        [row] = store.servers()
        assert (row.user, row.spend, row.active_jobs, row.node_gpus) == ("alice", 2.5, 0, None)
        assert row.node_unknown is None and row.waste_removed == 0.0
        assert store_version(store.db, hub_store.SCHEMA) == hub_store.SCHEMA.version == 6
        # a membership from before memberships had times counts as seen at the upgrade
        assert store.memberships() == {"alice": ["ml"]}
        assert store.memberships(time.time() - 60) == {"alice": ["ml"]}
        store.record_report("alice", "/user/alice/", "gpu", Report(
            server="", time=10800.0, since=0.0, spend=3.0, waste=0.5, currency="USD",
            simulated=False, rate_per_hour=1.25, gpu_count=1, gpus_held=1, gpus_busy=1,
            gpu_idle_since=None, active_jobs=2, kept=()), 0.0, 10800.0)
        assert store.servers()[0].active_jobs == 2
        assert store.meter_rows() == []
    finally:
        store.close()
    with sqlite3.connect(path) as db:
        assert "reported_since" in {r[1] for r in db.execute("PRAGMA table_info(epochs)")}
        assert {"metered", "priced"} <= {r[1] for r in db.execute("PRAGMA table_info(hours)")}


def test_the_hooks_read_a_hub_file_in_a_folder_named_with_uri_characters(
        tmp_path: Path) -> None:
    """`read_only` opened `file:{path}?mode=ro`: at a '#' the hooks read another file."""
    (tmp_path / "hub#1").mkdir()
    path = old_file(tmp_path / "hub#1" / "hub.sqlite", OLD_HUB)
    HubStore(path).close()
    assert read_only(path, ("SELECT user FROM servers", ())) == [[("alice",)]]

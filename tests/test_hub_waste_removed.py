"""The waste a server's hibernations removed travels from its report to the hub's rows, its
`/metrics` and its page as a display figure, labelled as the server's: checked as a bounded
finite number, kept as the server's last report said it (not added up run over run), the
same on the rows the page draws, the CSV and `/metrics`; a report of an earlier release (without
it) counts 0, and a service file of an earlier release gains the column."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from jupyter_costguard.common import hubprotocol as protocol
from jupyter_costguard.common.hubprotocol import Limits, ReportError, check_report
from jupyter_costguard.common.sqlite import Schema, open_db
from jupyter_costguard.hub import report
from jupyter_costguard.hub import store as hub_store
from jupyter_costguard.hub.budgets import Budgets
from jupyter_costguard.hub.metrics import HubCollector
from jupyter_costguard.hub.store import HubStore
from tests.support.exposition import promtool_complaints

NOW = 1_800_000_000.0 // 3600 * 3600 + 1800
STARTED = NOW - 600
LIMITS = Limits(now=NOW, started=STARTED, max_rate_per_hour=100.0)


def doc(**kw: Any) -> dict[str, Any]:
    return {**protocol.report_doc(
        server="", time=NOW, since=STARTED, spend=2.0, waste=0.5, unattributed=1.0,
        currency="USD", simulated=True, rate_per_hour=3.6, gpu_count=2, gpus_held=1,
        gpus_busy=0, gpu_idle_since=None, waste_removed=12.5), **kw}


def test_waste_removed_is_a_bounded_number_and_absent_is_zero() -> None:
    assert check_report(doc(), LIMITS).waste_removed == 12.5
    for bad in (-0.1, float("nan"), float("inf"), "1", True, 100.0 * 24 * 366 + 1):
        with pytest.raises(ReportError, match="waste_removed"):
            check_report(doc(waste_removed=bad), LIMITS)
    old = doc()
    del old["waste_removed"]  # a server of an earlier release
    assert check_report(old, LIMITS).waste_removed == 0.0


def exposition(store: HubStore) -> str:
    registry = CollectorRegistry()
    registry.register(HubCollector(store, Budgets(), lambda: None))  # type: ignore[arg-type]
    return generate_latest(registry).decode()


def scraped(store: HubStore) -> dict[str, float]:
    return {s.labels["user"]: s.value
            for f in text_string_to_metric_families(exposition(store))
            if f.name == "costguard_hub_user_waste_removed" for s in f.samples}


def test_rows_and_metrics_show_each_servers_last_figure(tmp_path: Path) -> None:
    store = HubStore(tmp_path / "hub.sqlite", count="reported")
    try:
        store.record_report("alice", "/user/alice/", "gpu",
                            check_report(doc(time=NOW - 300, waste_removed=4.0), LIMITS),
                            STARTED)
        store.record_report("alice", "/user/alice/", "gpu", check_report(doc(), LIMITS),
                            STARTED)
        store.record_report("alice", "/user/alice/gpu2", "gpu",
                            check_report(doc(server="gpu2", waste_removed=1.25), LIMITS),
                            STARTED)
        store.record_report("bob", "/user/bob/", "gpu", check_report(doc(waste_removed=0.0),
                                                                     LIMITS), STARTED)
        by_user = {r.key: r.doc() for r in report.rows(store, Budgets(), "user", NOW)}
        # the last report of each server, not the sum of its reports (a gauge, not a counter)
        assert by_user["alice"]["waste_removed"] == 13.75
        assert by_user["bob"]["waste_removed"] == 0.0
        # never counted into what decides money: spend and waste are as reported
        assert by_user["alice"]["spend"] == pytest.approx(4.0)
        assert scraped(store) == {"alice": 13.75, "bob": 0.0}
        text = exposition(store)
        complaints = promtool_complaints(text)
        assert complaints == "", f"{complaints}\n{text}"
        by_server = {r.key: r.doc()["waste_removed"]
                     for r in report.rows(store, Budgets(), "server", NOW)}
        assert by_server == {"alice/": 12.5, "alice/gpu2": 1.25, "bob/": 0.0}
        # the finance export carries the same figure, as its last column
        by_csv = {line["key"]: float(line["waste_removed"]) for line in csv.DictReader(
            io.StringIO(report.to_csv(report.rows(store, Budgets(), "user", NOW))))}
        assert by_csv == {"alice": 13.75, "bob": 0.0}
        assert report.CSV_COLUMNS[-1] == "waste_removed"
    finally:
        store.close()


def test_a_version_4_service_file_gains_the_column(tmp_path: Path) -> None:
    path = tmp_path / "hub.sqlite"
    open_db(path, Schema("hub", hub_store.SCHEMA.migrations[:4])).close()
    store = HubStore(path, count="reported")
    try:
        store.record_report("bob", "/user/bob/", "gpu", check_report(doc(), LIMITS), STARTED)
        (row,) = store.servers()
        assert row.waste_removed == 12.5
    finally:
        store.close()

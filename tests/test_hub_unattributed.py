"""What no kernel spent travels from a server's report to the hub's chart as its own figure
(`unattributed`), never as active spend: checked within the report's spend, kept per run and
per hour, summed in the series; a report of an earlier release (without it) counts 0, and a
service file of an earlier release gains the column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.common import hubprotocol as protocol
from jupyter_costguard.common.hubprotocol import Limits, ReportError, check_report
from jupyter_costguard.common.sqlite import Schema, open_db
from jupyter_costguard.hub import report
from jupyter_costguard.hub import store as hub_store
from jupyter_costguard.hub.store import HubStore

NOW = 1_800_000_000.0 // 3600 * 3600 + 1800  # half past an hour
STARTED = NOW - 600
LIMITS = Limits(now=NOW, started=STARTED, max_rate_per_hour=100.0)


def doc(**kw: Any) -> dict[str, Any]:
    return {**protocol.report_doc(
        server="", time=NOW, since=STARTED, spend=2.0, waste=0.5, unattributed=1.0,
        currency="USD", simulated=True, rate_per_hour=3.6, gpu_count=2, gpus_held=1,
        gpus_busy=0, gpu_idle_since=None), **kw}


def test_unattributed_is_checked_within_what_was_spent_and_not_wasted() -> None:
    assert check_report(doc(), LIMITS).unattributed == 1.0
    assert check_report(doc(unattributed=1.5), LIMITS).unattributed == 1.5
    for bad in (1.6, -0.1, float("nan"), "1"):
        with pytest.raises(ReportError, match="unattributed"):
            check_report(doc(unattributed=bad), LIMITS)
    old = doc()
    del old["unattributed"]  # a server of an earlier release
    assert check_report(old, LIMITS).unattributed == 0.0


def test_the_series_carries_unattributed_apart_from_waste(tmp_path: Path) -> None:
    store = HubStore(tmp_path / "hub.sqlite", count="reported")
    try:
        store.record_report("alice", "/user/alice/", "gpu", check_report(
            doc(time=NOW - 300, spend=1.0, waste=0.25, unattributed=0.5), LIMITS), STARTED)
        store.record_report("alice", "/user/alice/", "gpu", check_report(doc(), LIMITS),
                            STARTED)
        since = NOW // 3600 * 3600 - 3600
        points = [p for s in report.series(store, "user", since, since + 3 * 3600, "hour")[
            "series"] for p in s["points"]]
        assert round(sum(p["spend"] for p in points), 6) == 2.0
        assert round(sum(p["waste"] for p in points), 6) == 0.5
        assert round(sum(p["unattributed"] for p in points), 6) == 1.0
        # the older series (used by other readers) is unchanged
        assert all(len(r) == 5 for r in store.series(since, since + 3 * 3600))
    finally:
        store.close()


def test_where_the_meter_counts_no_hour_shows_more_unattributed_than_spend(
        tmp_path: Path) -> None:
    """The site counts its meter, which steps each cycle; a server's report taken after the
    meter's last step spreads its parts further into the hour than the counted spend. Each
    point's parts stay within its spend (the example hub's chart once showed an hour with
    more unattributed than spend)."""
    store = HubStore(tmp_path / "hub.sqlite", count="metered")
    try:
        running = {("alice", ""): (STARTED, "gpu")}
        store.record_meter(running, {"gpu": 3.6}, STARTED)
        store.record_meter(running, {"gpu": 3.6}, NOW - 300)  # the meter: 0.3 counted
        store.record_report("alice", "/user/alice/", "gpu", check_report(
            doc(spend=0.6, waste=0.1, unattributed=0.5), LIMITS), STARTED)  # reported to NOW
        (s,) = report.series(store, "user", NOW - 3600, NOW + 3600, "hour")["series"]
        for p in s["points"]:
            assert p["waste"] + p["unattributed"] <= p["spend"] + 1e-9, p
        assert sum(p["unattributed"] for p in s["points"]) > 0
    finally:
        store.close()


def test_a_version_1_service_file_gains_the_column(tmp_path: Path) -> None:
    path = tmp_path / "hub.sqlite"
    open_db(path, Schema("hub", hub_store.SCHEMA.migrations[:1])).close()
    store = HubStore(path, count="reported")
    try:
        store.record_report("bob", "/user/bob/", "gpu", check_report(doc(), LIMITS), STARTED)
        assert round(sum(r[5] for r in store.series_bands(0, NOW + 3600)), 6) == 1.0
    finally:
        store.close()

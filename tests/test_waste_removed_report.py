"""The waste removed a server shows is the figure it reports to the hub: one sum
(`hibernate/store.waste_removed`) behind `GET snapshots`, the server's `/metrics` and the
report document, which the hub's check accepts. Real parts: the cost service (its telemetry
scripted at the NVML/psutil boundary, as in test_consistency.py), the hibernate service over
a real snapshot index, the alert store and the hub reporter's own builder."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import pytest

from jupyter_costguard.alerts.store import AlertStore
from jupyter_costguard.common.hubprotocol import Limits, check_report
from jupyter_costguard.common.owner import Owner
from jupyter_costguard.cost.hubreport import HubReporter
from jupyter_costguard.cost.ledger import Ledger
from jupyter_costguard.cost.pricing import PricingConfig
from jupyter_costguard.cost.service import CostService
from jupyter_costguard.hibernate.service import HibernateService
from jupyter_costguard.hibernate.settings import Hibernate
from jupyter_costguard.hibernate.store import SnapshotRecord, SnapshotStore, new_id
from jupyter_costguard.metrics.collector import build_metrics
from tests.test_consistency import Held, ScriptedTelemetry, Step, infos


def test_the_report_carries_the_waste_removed_that_rest_and_metrics_show() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "snapshots"
        now = time.time()
        index = SnapshotStore(root)
        for created, restored in ((now - 86400, now - 86400 + 600), (now - 2 * 86400, None)):
            index.add(SnapshotRecord(
                id=new_id(), notebook="n.ipynb", created=created, bytes=1, saved=["x"],
                skipped=[], kernel_name="python3", user="alice", gpus_held=1, digest="d",
                mac="m", rate_per_hour_held=3.6, restored=restored))
        index.close()
        hibernation = HibernateService(root, Path(tmp) / "hibernate.key", None, None,
                                       Hibernate().service_settings(90), owner="alice")
        telemetry = ScriptedTelemetry()
        svc = CostService(telemetry, Ledger(Path(tmp) / "l.sqlite"),  # type: ignore[arg-type]
                          PricingConfig(hourly_rate=3.6, gpu_share=0.8), environ={},
                          metrics_builder=build_metrics)
        telemetry.now = svc.run_start()[0]  # the first sample comes after the run began
        step = Step(30.0, 3.6, (3.0, None, None, None), (Held("k1", False, 0.1, ((0, 4),)),))
        telemetry.step = step
        svc.tick(infos(step, telemetry.now + step.interval))
        reporter = HubReporter("http://127.0.0.1:9/hub", "token", Owner("alice", ""),
                               published=lambda: svc.published, run_start=svc.run_start,
                               alerts=AlertStore(None), alerts_changed=svc.alerts_changed,
                               active_jobs=lambda: 0, waste_removed=hibernation.waste_removed)
        try:
            listed = asyncio.run(hibernation.listing())
            (gauge,) = [m for m in hibernation.metrics()
                        if m.name == "costguard_hibernate_waste_avoided"]
            doc = reporter.build()
            assert doc is not None
            # 10 minutes, then the 12 h horizon of the abandoned one, at 3.6 an hour
            assert listed["waste_avoided"] == pytest.approx(0.6 + 12 * 3.6)
            assert gauge.samples[0].value == listed["waste_avoided"]
            assert doc["waste_removed"] == listed["waste_avoided"]
            checked = check_report(doc, Limits(now=doc["time"], max_rate_per_hour=100.0))
            assert checked.waste_removed == listed["waste_avoided"]
        finally:
            hibernation.close()
            svc.ledger.close()

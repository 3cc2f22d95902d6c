"""Hibernate's settings on a real server (issue 44): a `snapshot_store_url` that carries
credentials is refused, that setting alone, with a clear message; the rest of costguard
loads and runs, and hibernate answers 503 saying why."""

from __future__ import annotations

import json
from pathlib import Path

from jupyter_costguard.hibernate.settings import Hibernate
from tests.support.server_proc import ServerProcess

SECRET = "s3cr3tSECRETvalue"


def test_a_store_url_with_credentials_is_refused_and_costguard_still_runs(tmp_path: Path):
    settings = {"db_path": str(tmp_path / "data" / "ledger.sqlite"), "sample_interval": 0.25,
                "hourly_rate": 10.0, "LocalBackend.warm_kernels": 0,
                "Hibernate.on_stop_seconds": 0,
                "Hibernate.snapshot_store_url": f"s3://AKIAEXAMPLEKEY:{SECRET}@bucket/snapshots"}
    server = ServerProcess(tmp_path / "server", settings).start()
    try:
        # costguard is loaded and serves (it failed to load at all before)
        assert server.get("costguard/api/kernels")["kernels"] == []
        code, body = server.request("costguard/api/snapshots")
        assert code == 503, body
        message = json.loads(body)["message"]
        assert "snapshot_store_url" in message and "credentials" in message, message
        assert "s3://bucket/snapshots" in message and SECRET not in message
        code, body = server.request("costguard/api/kernels/k1/hibernate", "POST", {})
        assert code == 503 and b"credentials" in body, body
    finally:
        server.stop()
    log = server.log_path.read_text(errors="replace")
    assert "costguard: hibernate is off: c.Hibernate.snapshot_store_url" in log, log[-4000:]
    assert "store's own mechanisms" in log and SECRET not in log


def test_any_url_with_a_user_and_password_is_refused_alone():
    traits = Hibernate(snapshot_store_url="https://ann:pw@example.invalid/snapshots")
    assert traits.snapshot_store_url == "" and traits.store_url_refused is not None
    assert "pw" not in traits.store_url_refused.replace("https", "")
    fine = Hibernate(snapshot_store_url="s3://bucket/snapshots")
    assert fine.snapshot_store_url == "s3://bucket/snapshots" and fine.store_url_refused is None

"""Issue 13 item 1: under JupyterHub every document, alert, job record and Prometheus series
says whose server it is (`user`, `server`); outside a hub nothing is added."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families

from jupyter_costguard.common.owner import Owner, owner_doc, owner_from_environ
from jupyter_costguard.metrics.collector import with_owner
from tests.support.notebooks import code, write_notebook
from tests.support.openapi_check import validate
from tests.support.server_proc import ServerProcess
from tests.support.traces import write_trace
from tests.support.units import GiB

HUB = {"JUPYTERHUB_USER": "alice", "JUPYTERHUB_SERVER_NAME": "gpu-large"}


def test_the_owner_comes_from_the_hubs_variables():
    assert owner_from_environ({}) is None
    assert owner_from_environ({"JUPYTERHUB_USER": "  "}) is None
    assert owner_from_environ({"JUPYTERHUB_USER": "bob"}) == Owner("bob", "")
    assert owner_from_environ(HUB) == Owner("alice", "gpu-large")
    assert owner_doc(None) == {"user": None, "server": None}
    assert owner_doc(Owner("bob", "")) == {"user": "bob", "server": ""}


def test_every_series_gets_the_labels_and_keeps_its_type():
    rate = GaugeMetricFamily("costguard_rate", "r", labels=["currency"])
    rate.add_metric(["USD"], 2.5)
    spend = CounterMetricFamily("costguard_spend", "s", labels=["notebook"])
    spend.add_metric(["a.ipynb"], 1.0)
    assert with_owner([rate, spend], None) == [rate, spend]
    out = with_owner([rate, spend], Owner("alice", ""))
    assert [m.type for m in out] == ["gauge", "counter"]
    assert [(s.name, s.labels, s.value) for m in out for s in m.samples] == [
        ("costguard_rate", {"currency": "USD", "user": "alice", "server": ""}, 2.5),
        ("costguard_spend_total", {"notebook": "a.ipynb", "user": "alice", "server": ""}, 1.0),
    ]
    assert rate.samples[0].labels == {"currency": "USD"}, "the input is not changed"


def start(tmp_path: Path, env: dict[str, str]) -> ServerProcess:
    frame = {"t": 0, "gpus": [{"utilization_percent": 40, "processes": [
        {"kernel": 0, "used_memory_bytes": 2 * GiB}]}]}
    trace = write_trace(tmp_path / "trace.json", [frame], gpus=1)
    server = ServerProcess(tmp_path / "s", {
        "db_path": str(tmp_path / "ledger.sqlite"), "Offload.jobs_dir": str(tmp_path / "jobs"),
        "sample_interval": 0.25, "hourly_rate": 4.0, "replay_trace": str(trace),
        "replay_mode": "always", "LocalBackend.warm_kernels": 0}, env=env)
    write_notebook(tmp_path / "s" / "root", "n.ipynb", [code("a", "a = 6"),
                                                         code("b", "b = a * 7")])
    return server.start()


def scrape(server: ServerProcess) -> list[Any]:
    code_, body = server.request("metrics")
    assert code_ == 200
    return [f for f in text_string_to_metric_families(body.decode())
            if f.name.startswith("costguard_")]


def test_a_hub_servers_documents_alerts_jobs_and_series_say_whose(tmp_path):
    server = start(tmp_path, HUB)
    try:
        server.start_session("n.ipynb")
        server.wait_for("costguard/api/notebooks",
                        lambda d: any(n["spend"] > 0 for n in d["notebooks"]), timeout=60)
        docs = {name: server.get(f"costguard/api/{name}")
                for name in ("status", "gpus", "kernels", "notebooks", "notebooks/n.ipynb")}
        code_, body = server.request("costguard/api/alerts", "POST", {
            "kind": "k", "severity": "info", "title": "t", "message": "m"})
        raised = json.loads(body)
        listed = server.get("costguard/api/alerts")
        code_, body = server.request("costguard/api/jobs", "POST", {
            "notebook": "n.ipynb", "selected": ["b"]})
        assert code_ == 201, body
        job_id = json.loads(body)["id"]
        job = server.wait_for(f"costguard/api/jobs/{job_id}",
                              lambda d: d["state"] in ("succeeded", "failed"), timeout=120)
        page = server.get("costguard/api/jobs")
        families = scrape(server)
    finally:
        server.stop()
    for name, doc in docs.items():
        assert (doc["user"], doc["server"]) == ("alice", "gpu-large"), name
    validate("/status", 200, docs["status"])
    validate("/alerts", 200, listed)
    assert (raised["user"], raised["server"]) == ("alice", "gpu-large")
    assert all(a["user"] == "alice" for a in listed["alerts"]) and listed["alerts"]
    assert job["state"] == "succeeded", job
    assert (job["user"], job["server"]) == ("alice", "gpu-large")
    assert job["record"]["owner"] == {"user": "alice", "server": "gpu-large"}
    assert (page["jobs"][0]["user"], page["jobs"][0]["server"]) == ("alice", "gpu-large")
    validate("/jobs", 200, page)
    samples = [s for f in families for s in f.samples]
    assert len({f.name for f in families}) >= 10 and samples
    assert all(s.labels.get("user") == "alice" and s.labels.get("server") == "gpu-large"
               for s in samples), [s for s in samples if s.labels.get("user") != "alice"][:3]


def test_outside_a_hub_nothing_is_added(tmp_path):
    server = start(tmp_path, {"JUPYTERHUB_USER": "", "JUPYTERHUB_SERVER_NAME": ""})
    try:
        status = server.wait_for("costguard/api/status", lambda d: d["last_sample_time"],
                                 timeout=60)
        families = scrape(server)
    finally:
        server.stop()
    assert (status["user"], status["server"]) == (None, None)
    assert families and not any("user" in s.labels for f in families for s in f.samples)


def test_a_stored_owner_is_read_back_with_care():
    """Job records come back from disk: an old or edited one names no owner, or a wrong one."""
    from jupyter_costguard.common.owner import owner_from_doc

    assert owner_from_doc({"user": "alice", "server": "gpu"}) == Owner("alice", "gpu")
    assert owner_from_doc({"user": "alice"}) == Owner("alice", "")
    assert owner_from_doc({"user": "alice", "server": 3}) == Owner("alice", "")
    for bad in (None, "alice", {}, {"user": ""}, {"user": 7}, ["alice"]):
        assert owner_from_doc(bad) is None, bad

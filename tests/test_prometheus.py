"""Prometheus metrics on jupyter_server's own /metrics: content, conventions, real scraping.

A real `jupyter server` subprocess (GPU figures replayed, one real kernel) is scraped over
loopback by `promtool check metrics` and by a real Prometheus server; in-process servers
(pytest-jupyter) check that the process-wide collector is registered exactly once.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import prometheus_client
import pytest
from tornado.httpclient import HTTPClientError

from tests.support.exposition import costguard_lines, samples
from tests.support.rest import wait_for
from tests.support.server_proc import ServerProcess, free_port
from tests.support.services import require_binary, stop
from tests.support.traces import write_trace
from tests.support.units import GiB

HOURLY_RATE = 36.0
NOTEBOOK = "nb.ipynb"


# --- a real server process, shared by the tests that scrape it -------------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose one kernel (for nb.ipynb) holds a GPU and has already spent money."""
    tmp = tmp_path_factory.mktemp("prometheus")
    frame = {"t": 0, "gpus": [
        {"utilization_percent": 40, "power_watts": 200,
         "processes": [{"kernel": 0, "used_memory_bytes": 4 * GiB}]},
        {"utilization_percent": 0, "power_watts": 50, "processes": []},
    ]}
    trace = write_trace(tmp / "trace.json", [frame])
    config = {"db_path": str(tmp / "ledger.sqlite"), "sample_interval": 0.25,
              "hourly_rate": HOURLY_RATE, "gpu_share": 0.9, "replay_trace": str(trace),
              "replay_mode": "always"}
    proc = ServerProcess(tmp / "server", config)
    try:
        proc.start()
        proc.start_session(NOTEBOOK)
        proc.wait_for(f"costguard/api/notebooks/{NOTEBOOK}", lambda d: d["spend"] > 0)
        yield proc
    finally:
        proc.stop()


def scrape(server: ServerProcess) -> str:
    code, body = server.request("metrics")
    assert code == 200, body[:500]
    return body.decode()


@pytest.mark.timeout(180)
def test_metrics_expose_costguard_families(server: ServerProcess):
    text = scrape(server)
    assert re.search(r'^costguard_notebook_spend_total\{[^}]*notebook="nb\.ipynb"[^}]*\} \S+$',
                     text, re.MULTILINE), costguard_lines(text)
    got = samples(text)

    (labels, spend), = [(lb, v) for lb, v in got["costguard_notebook_spend_total"]
                        if lb["notebook"] == NOTEBOOK]
    assert spend > 0
    assert labels["currency"] == "USD"

    (price_labels, price), = got["costguard_instance_price_per_hour"]
    assert price == HOURLY_RATE
    assert price_labels["currency"] == "USD"

    util = {lb["gpu"]: v for lb, v in got["costguard_gpu_utilization_ratio"]}
    assert util == {"0": pytest.approx(0.4), "1": 0.0}

    (idle_labels, idle), = got["costguard_kernel_idle_seconds"]
    assert idle_labels["notebook"] == NOTEBOOK
    assert idle >= 0

    (_, kmem), = got["costguard_kernel_gpu_memory_bytes"]
    assert kmem == 4 * GiB
    (_, server_spend), = got["costguard_server_spend_total"]
    assert server_spend >= spend
    (_, simulated), = got["costguard_simulated"]
    assert simulated == 1.0


@pytest.mark.timeout(180)
def test_costguard_metrics_pass_promtool(server: ServerProcess):
    promtool = require_binary("promtool")
    ours = costguard_lines(scrape(server))
    assert "# TYPE costguard_notebook_spend_total counter" in ours, ours
    done = subprocess.run([promtool, "check", "metrics"], input=ours, capture_output=True,
                          text=True, timeout=30)
    complaints = (done.stdout + done.stderr).strip()
    assert done.returncode == 0, f"promtool exit {done.returncode}: {complaints}\n{ours}"
    assert complaints == "", f"{complaints}\n{ours}"


@pytest.mark.timeout(180)
def test_metrics_need_a_token(server: ServerProcess):
    for token in (None, "not-the-token"):
        code, body = server.request("metrics", token=token)
        assert code == 403, (code, body[:300])
        assert b"costguard_" not in body


# --- a real Prometheus server scraping it ----------------------------------------------


def prom_get(base: str, path: str, **params: str) -> Any:
    url = base + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def prom_query(base: str, query: str) -> list[dict[str, Any]]:
    doc = prom_get(base, "/api/v1/query", query=query)
    assert doc["status"] == "success", doc
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


def wait_query(base: str, query: str, predicate: Any, log: Path,
               timeout: float = 60.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    result: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        result = prom_query(base, query)
        if result and predicate(result):
            return result
        time.sleep(0.5)
    targets = prom_get(base, "/api/v1/targets")["data"]["activeTargets"]
    health = [(t["scrapeUrl"], t["health"], t["lastError"]) for t in targets]
    raise AssertionError(f"{query}: not satisfied in {timeout}s; last result {result}; "
                         f"targets {health}\n{log.read_text(errors='replace')[-4000:]}")


@pytest.mark.timeout(180)
def test_real_prometheus_scrapes_spend(server: ServerProcess, tmp_path: Path):
    prometheus = require_binary("prometheus")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    # Prometheus sends `Authorization: <type> <credentials>`; jupyter_server accepts
    # `token <tok>` and `Bearer <tok>` (IdentityProvider.auth_header_pat), so the default
    # Bearer type works as it would against any other bearer-token exporter.
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                   "evaluation_interval": "1s"},
        "scrape_configs": [{
            "job_name": "jupyter",
            "metrics_path": "/metrics",
            "scrape_interval": "1s",
            "scrape_timeout": "1s",
            "authorization": {"type": "Bearer", "credentials": server.token},
            "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}],
        }],
    }
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(json.dumps(config))  # JSON is YAML
    log = tmp_path / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [prometheus, f"--config.file={config_file}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
        )
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, f"prometheus exited:\n{log.read_text(errors='replace')}"
            try:
                with urllib.request.urlopen(base + "/-/ready", timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, OSError):
                pass
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.2)

        spend = wait_query(base, f'costguard_notebook_spend_total{{notebook="{NOTEBOOK}"}}',
                           lambda r: float(r[0]["value"][1]) > 0, log)
        (series,) = spend
        assert series["metric"]["job"] == "jupyter"
        assert series["metric"]["instance"] == f"127.0.0.1:{server.port}"
        assert series["metric"]["currency"] == "USD"

        # two scrapes at least inside the window: the server's spend grows
        wait_query(base, "rate(costguard_server_spend_total[10s])",
                   lambda r: float(r[0]["value"][1]) > 0, log)
        price = prom_query(base, "costguard_instance_price_per_hour")
        assert [float(s["value"][1]) for s in price] == [HOURLY_RATE]
    finally:
        stop(proc)


# --- in-process servers: one collector per process, re-pointed at the latest server ----


@pytest.fixture(params=[36.0, 12.5], ids=["first-load", "second-load"])
def costguard_config(request: pytest.FixtureRequest, tmp_path: Path,
                     trace_file: Path) -> dict[str, Any]:
    """Two in-process servers in a row, with different rates so each can be told apart."""
    return {
        "db_path": str(tmp_path / "ledger.sqlite"),
        "sample_interval": 0.25,
        "hourly_rate": request.param,
        "gpu_share": 0.9,
        "replay_trace": str(trace_file),
        "replay_mode": "always",
    }


async def test_registered_once_and_follows_latest_server(jp_fetch, costguard_config):
    rate = costguard_config["hourly_rate"]
    await wait_for(jp_fetch, lambda d: d["last_sample_time"] is not None)

    # what the process-wide registry holds ...
    text = prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()
    assert text.count("# TYPE costguard_server_spend_total counter\n") == 1, costguard_lines(text)
    assert text.count("# TYPE costguard_instance_price_per_hour gauge\n") == 1
    price = samples(text)["costguard_instance_price_per_hour"]
    assert [v for _, v in price] == [rate], "families come from this server, not an earlier one"

    # ... is what this server's /metrics serves
    resp = await jp_fetch("metrics")
    served = resp.body.decode()
    assert served.count("# TYPE costguard_server_spend_total counter\n") == 1
    assert [v for _, v in samples(served)["costguard_instance_price_per_hour"]] == [rate]

    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("metrics", headers={"Authorization": ""})
    assert e.value.code == 403

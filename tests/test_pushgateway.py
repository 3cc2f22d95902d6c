"""Job metrics on a real Prometheus Pushgateway (Debian `prometheus-pushgateway`), and the
monitoring examples (`examples/prometheus`, `examples/grafana`) checked by promtool and a real
Prometheus scraping that gateway.

What is pushed comes from real processes: the job runner (with a real kernel) at the end of a
job, `jobmetrics.record` in a job's code, and the server's call when it sees a job end. The
gateway is read back over HTTP; an unreachable or silent gateway must never fail a job.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from jupyter_costguard import jobmetrics
from jupyter_costguard.metrics import pushgateway
from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.spec import Job, JobSpec, Resources, SpecCell
from tests.support.server_proc import free_port
from tests.support.services import require_binary, stop

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DASHBOARD = EXAMPLES / "grafana" / "costguard-dashboard.json"
PROMETHEUS_YML = EXAMPLES / "prometheus" / "prometheus.yml"


def wait_ready(base: str, proc: subprocess.Popen[bytes], log: Path, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, log.read_text(errors="replace")
        try:
            with urllib.request.urlopen(base + "/-/ready", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        assert time.monotonic() < deadline, log.read_text(errors="replace")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Pushgateway on a free loopback port, in memory only (no persistence file)."""
    binary = require_binary("prometheus-pushgateway", "prometheus-pushgateway")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("pushgateway") / "pushgateway.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([binary, f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_ready(base, proc, log)
        yield base
    finally:
        stop(proc)


def exposition(base: str) -> str:
    with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
        return str(r.read().decode())


def job_samples(base: str, job_id: int | str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)] of one job's group, as the gateway serves them."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(exposition(base)):
        for s in family.samples:
            if s.labels.get("costguard_job") == str(job_id) and s.name.startswith("costguard_"):
                out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def deleted(base: str, job_id: int | str, timeout: float = 15.0) -> bool:
    """Whether the job's group is gone from the gateway within `timeout`. The Pushgateway
    answers a DELETE with 202 Accepted and applies it on its storage loop afterwards, so the
    next scrape may still show the group for a moment (CI saw it once)."""
    deadline = time.monotonic() + timeout
    while job_samples(base, job_id):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def one(samples: dict[str, list[tuple[dict[str, str], float]]], name: str
        ) -> tuple[dict[str, str], float]:
    assert name in samples, sorted(samples)
    (labels, value), = samples[name]
    return labels, value


def child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, **extra,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return env


def run_job(tmp_path: Path, job_id: int, code: str, environment: dict[str, str]
            ) -> tuple[int, str]:
    """Run one job through the real runner (nbclient, a fresh ipykernel); its exit code and
    log."""
    cell = SpecCell(cell_id="c1", index=0, selected=True, code=code, source=code)
    spec = JobSpec(notebook="work/train.ipynb", cwd=str(tmp_path), kernel_name="python3",
                   cells=(cell,))
    job_dir = tmp_path / f"job-{job_id}"
    job_dir.mkdir()
    (job_dir / "spec.json").write_text(json.dumps({
        "id": job_id, "spec": spec.to_json(), "checkpoint_dir": str(job_dir / "checkpoints"),
        "environment": environment}))
    env = child_env()
    env.pop(jobdir.ENV_PUSHGATEWAY_URL, None)  # only what the job's environment says
    proc = subprocess.run([sys.executable, "-m", "jupyter_costguard.offload.runner",
                           str(job_dir)], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    return proc.returncode, (job_dir / "log.txt").read_text() + proc.stderr


# --- pushing, reading back, deleting --------------------------------------------------------


def test_push_add_and_delete_job_metrics(gateway: str) -> None:
    labels = {"notebook": "nb.ipynb", "backend": "local"}
    assert pushgateway.push_job_metrics(gateway, 12, {
        "duration_seconds": 93.5, "attempts": 2, "succeeded": 1, "spend": 0.41,
        "gpu_utilization_ratio": 0.73, "gpus": None}, labels=labels, currency="EUR")
    assert pushgateway.push_job_metrics(gateway, 13, {"spend": 1.0}, labels=labels)
    got = job_samples(gateway, 12)
    duration_labels, duration = one(got, "costguard_job_duration_seconds")
    assert duration == 93.5
    # the gateway adds an empty `instance` to a group that has none
    assert duration_labels == {"job": "costguard", "costguard_job": "12", "instance": "",
                               **labels}
    assert one(got, "costguard_job_attempts")[1] == 2
    assert one(got, "costguard_job_succeeded")[1] == 1
    assert one(got, "costguard_job_gpu_utilization_ratio")[1] == pytest.approx(0.73)
    spend_labels, spend = one(got, "costguard_job_spend")
    assert spend == pytest.approx(0.41) and spend_labels["currency"] == "EUR"
    assert "costguard_job_gpus" not in got  # None: left out

    # a second writer adds to the group: only the names it sends are replaced
    assert pushgateway.push_job_metrics(gateway, 12, {"spend": 0.5}, labels=labels,
                                        currency="EUR")
    got = job_samples(gateway, 12)
    assert one(got, "costguard_job_spend")[1] == 0.5
    assert one(got, "costguard_job_duration_seconds")[1] == 93.5

    assert pushgateway.delete_job_metrics(gateway, 12)
    assert deleted(gateway, 12), job_samples(gateway, 12)
    assert one(job_samples(gateway, 13), "costguard_job_spend")[1] == 1.0  # others stay
    assert pushgateway.delete_job_metrics(gateway, 13)


def test_a_jobs_runner_code_and_server_push_to_one_group(gateway: str, tmp_path: Path) -> None:
    """A real job: its code records epoch times, its runner pushes duration, attempts and
    outcome when it ends, and the server adds spend; all in the job's group, then deleted."""
    code = textwrap.dedent("""
        from jupyter_costguard import jobmetrics
        for epoch, seconds in ((1, 12.5), (2, 11.0)):
            assert jobmetrics.record("epoch_seconds", seconds, epoch=epoch)
        assert jobmetrics.record("final_loss", 0.25)
    """)
    rc, log = run_job(tmp_path, 77, code, {jobdir.ENV_PUSHGATEWAY_URL: gateway})
    assert rc == 0, log
    assert f"metrics pushed to {gateway}" in log

    got = job_samples(gateway, 77)
    labels, duration = one(got, "costguard_job_duration_seconds")
    assert 0 < duration < 180
    assert labels == {"job": "costguard", "costguard_job": "77", "instance": "",
                      "notebook": "work/train.ipynb", "backend": "local", "state": "succeeded"}
    assert one(got, "costguard_job_attempts")[1] == 1
    assert one(got, "costguard_job_succeeded")[1] == 1
    assert abs(one(got, "costguard_job_end_time_seconds")[1] - time.time()) < 180
    epochs = {lb["epoch"]: v for lb, v in got["costguard_user_epoch_seconds"]}
    assert epochs == {"1": 12.5, "2": 11.0}
    assert one(got, "costguard_user_final_loss")[1] == 0.25

    # the server's part, when its follower sees the job end
    spec = JobSpec(notebook="work/train.ipynb", cwd=str(tmp_path), kernel_name="python3",
                   cells=(), resources=Resources(gpus=2))
    job = Job(id=77, spec=spec, state="succeeded", phase="done", created=time.time(),
              spend=0.42)
    thread = pushgateway.push_finished_job(gateway, job, currency="USD",
                                           gpu_utilization_ratio=0.61,
                                           extra_labels={"user": "alice", "server": ""})
    assert thread is not None
    thread.join(30)
    got = job_samples(gateway, 77)
    spend_labels, spend = one(got, "costguard_job_spend")
    assert spend == pytest.approx(0.42) and spend_labels["currency"] == "USD"
    assert (spend_labels["user"], spend_labels.get("server", "")) == ("alice", "")
    assert one(got, "costguard_job_gpu_utilization_ratio")[1] == pytest.approx(0.61)
    assert one(got, "costguard_job_gpus")[1] == 2
    assert one(got, "costguard_job_duration_seconds")[1] == duration  # the runner's stays
    assert len(got["costguard_user_epoch_seconds"]) == 2  # and so do the job's own

    promtool = shutil.which("promtool")
    if promtool is not None:  # the gateway's exposition of our families follows conventions
        ours = "\n".join(line for line in exposition(gateway).splitlines() if line.startswith(
            ("costguard_", "# HELP costguard_", "# TYPE costguard_"))) + "\n"
        done = subprocess.run([promtool, "check", "metrics"], input=ours, capture_output=True,
                              text=True, timeout=30)
        assert done.returncode == 0 and not (done.stdout + done.stderr).strip(), \
            done.stdout + done.stderr + ours

    assert pushgateway.delete_job_metrics(gateway, 77)
    assert deleted(gateway, 77), job_samples(gateway, 77)


def test_jobmetrics_keeps_every_label_set(gateway: str) -> None:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        from jupyter_costguard import jobmetrics
        assert jobmetrics.record("loss", 0.5, split="train")
        assert jobmetrics.record("loss", 0.7, split="val")
        assert jobmetrics.record("loss", 0.4, split="train")
        assert not jobmetrics.record("loss", 1.0)          # other label names: refused, logged
        assert not jobmetrics.record("bad name", 1.0)
        assert not jobmetrics.record("loss", "many", split="x")
        print(sorted(jobmetrics.values()["costguard_user_loss"].items()))
    """)], env=child_env(**{jobdir.ENV_PUSHGATEWAY_URL: gateway, "COSTGUARD_JOB_ID": "5"}),
        capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("ignored") == 3, out.stderr
    loss = {lb["split"]: v for lb, v in job_samples(gateway, 5)["costguard_user_loss"]}
    assert loss == {"train": 0.4, "val": 0.7}
    assert pushgateway.delete_job_metrics(gateway, 5)


def test_runner_metrics_of_a_failed_job(gateway: str) -> None:
    status = {"state": "failed", "attempt": 3,
              "phase_times": {"starting": 1000.0, "done": 1042.5}}
    assert pushgateway.push_runner_metrics(gateway, 8, status, notebook="a.ipynb",
                                           backend="slurm")
    got = job_samples(gateway, 8)
    labels, succeeded = one(got, "costguard_job_succeeded")
    assert succeeded == 0 and labels["state"] == "failed" and labels["backend"] == "slurm"
    assert one(got, "costguard_job_duration_seconds")[1] == 42.5
    assert one(got, "costguard_job_attempts")[1] == 3
    assert pushgateway.delete_job_metrics(gateway, 8)


# --- a gateway that isn't there never hurts --------------------------------------------------


@pytest.fixture
def silent_gateway() -> Iterator[str]:
    """Accepts connections and never answers: a push can only time out."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_unreachable_or_silent_gateway_is_logged_not_raised(
        silent_gateway: str, caplog: pytest.LogCaptureFixture) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    with caplog.at_level(logging.WARNING, logger="jupyter_costguard.metrics.pushgateway"):
        assert pushgateway.push_job_metrics(closed, 1, {"attempts": 1}) is False
        assert pushgateway.delete_job_metrics(closed, 1) is False
        started = time.monotonic()
        assert pushgateway.push_job_metrics(silent_gateway, 1, {"attempts": 1},
                                            timeout=0.5) is False
        assert time.monotonic() - started < 5
        assert pushgateway.push_job_metrics(closed, 1, {"no_such_metric": 1.0}) is False
    text = caplog.text
    assert text.count("could not push metrics of job 1") == 2, text
    assert "could not delete metrics of job 1" in text
    assert "unknown job metric 'no_such_metric'" in text


def test_a_job_with_an_unreachable_gateway_succeeds(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}"
    code = textwrap.dedent("""
        from jupyter_costguard import jobmetrics
        assert jobmetrics.record("epoch_seconds", 1.0, epoch=1) is False
        assert jobmetrics.record("epoch_seconds", 2.0, epoch=2) is False  # quiet for a while
        print("trained")
    """)
    rc, log = run_job(tmp_path, 9, code, {jobdir.ENV_PUSHGATEWAY_URL: closed})
    assert rc == 0, log
    assert "trained" in log and "job succeeded" in log
    assert f"could not push metrics to {closed}" in log  # the runner's own push
    kernel_output = log.split("job succeeded")[0]
    assert kernel_output.count("could not push metrics of job 9") == 1, log  # once, then quiet


def test_jobmetrics_outside_a_job_says_so_once(monkeypatch: pytest.MonkeyPatch,
                                               caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.delenv(jobdir.ENV_PUSHGATEWAY_URL, raising=False)
    monkeypatch.delenv("COSTGUARD_JOB_ID", raising=False)
    monkeypatch.setattr(jobmetrics, "_said_not_configured", False)
    monkeypatch.setattr(jobmetrics, "_values", {})
    with caplog.at_level(logging.WARNING, logger="jupyter_costguard.jobmetrics"):
        assert jobmetrics.record("epoch_seconds", 3.0) is False
        assert jobmetrics.record("epoch_seconds", 4.0) is False
    assert caplog.text.count("not set") == 1
    assert jobmetrics.values() == {"costguard_user_epoch_seconds": {(): 4.0}}


# --- the examples: Prometheus config and Grafana dashboard ------------------------------------


def exported_names() -> set[str]:
    """Every metric name costguard exposes: the server's families (counters get `_total`) and
    the job metrics pushed to the gateway."""
    names = {name for name, _ in pushgateway.JOB_METRICS.values()}
    for source in sorted((ROOT / "jupyter_costguard").rglob("*.py")):
        text = source.read_text()
        for kind, name in re.findall(r'(Counter|Gauge)MetricFamily\(\s*"(costguard_\w+)"', text):
            names.add(name + "_total" if kind == "Counter" else name)
    return names


def dashboard_queries() -> list[str]:
    doc = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in doc["templating"]["list"] if v["type"] == "query"]
    return exprs


def concrete(expr: str) -> str:
    """A dashboard expression with Grafana's variables filled in as Grafana would."""
    expr = re.sub(r"label_values\((\w+), *\w+\)", r"\1", expr)  # a variable's query
    return expr.replace("$__range", "1h").replace("$notebook", ".*")


def test_dashboard_is_importable_and_uses_exported_metrics() -> None:
    doc = json.loads(DASHBOARD.read_text())
    assert doc["uid"] and doc["title"] and doc["id"] is None
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in doc["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
    known = exported_names()
    assert {"costguard_notebook_spend_total", "costguard_jobs",
            "costguard_job_spend"} <= known
    used: set[str] = set()
    for expr in dashboard_queries():
        used |= set(re.findall(r"\bcostguard_\w+", expr)) - {"costguard_job", "costguard_user_"}
    assert used and used <= known, sorted(used - known)
    joined = "\n".join(dashboard_queries())
    for needed in ("rate(costguard_notebook_spend_total", "costguard_notebook_waste_total",
                   "costguard_gpu_utilization_ratio", "costguard_jobs",
                   "costguard_job_duration_seconds", "costguard_job_spend"):
        assert needed in joined, needed


def test_example_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    promtool = require_binary("promtool", "prometheus")
    config = tmp_path / "prometheus.yml"
    shutil.copyfile(PROMETHEUS_YML, config)
    (tmp_path / "jupyter_token").write_text("not-a-real-token\n")  # the file it points at
    done = subprocess.run([promtool, "check", "config", str(config)], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    doc = yaml.safe_load(PROMETHEUS_YML.read_text())
    jobs = {s["job_name"]: s for s in doc["scrape_configs"]}
    assert jobs["jupyter"]["authorization"]["credentials_file"]
    assert jobs["pushgateway"]["honor_labels"] is True


def prom_query(base: str, expr: str) -> list[dict[str, Any]]:
    url = base + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            doc = json.loads(r.read())
    except urllib.error.HTTPError as e:
        raise AssertionError(f"{expr}: {e.read().decode(errors='replace')}") from None
    assert doc["status"] == "success", (expr, doc)
    result: list[dict[str, Any]] = doc["data"]["result"]
    return result


@pytest.mark.timeout(180)
def test_dashboard_queries_on_prometheus_with_the_example_config(gateway: str,
                                                                 tmp_path: Path) -> None:
    """The example config (targets moved to this test's ports) on a real Prometheus: the
    pushed job metrics arrive with their own labels (honor_labels), and every query of the
    dashboard is accepted; the per-job ones find the job."""
    prometheus = require_binary("prometheus", "prometheus")
    assert pushgateway.push_job_metrics(gateway, 31, {
        "duration_seconds": 60.0, "attempts": 1, "succeeded": 1, "spend": 0.2,
        "gpu_utilization_ratio": 0.5}, labels={"notebook": "nb.ipynb", "backend": "local",
                                               "state": "succeeded"})
    assert pushgateway.push_metrics(gateway, 31, [(
        "costguard_user_epoch_seconds", "Recorded by the job's code.", {"epoch": "1"}, 9.0)])

    doc = yaml.safe_load(PROMETHEUS_YML.read_text())
    doc["global"].update(scrape_interval="1s", evaluation_interval="1s")
    for scrape in doc["scrape_configs"]:
        scrape["scrape_interval"] = scrape["scrape_timeout"] = "1s"
        target = gateway.split("//")[1] if scrape["job_name"] == "pushgateway" \
            else f"127.0.0.1:{free_port()}"  # no Jupyter server here: a down target
        scrape["static_configs"] = [{"targets": [target]}]
    (tmp_path / "jupyter_token").write_text("not-a-real-token\n")
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(doc))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = tmp_path / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([prometheus, f"--config.file={config}",
                                 f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                 f"--web.listen-address=127.0.0.1:{port}"],
                                stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        wait_ready(base, proc, log)
        deadline = time.monotonic() + 60
        while not prom_query(base, 'costguard_job_spend{costguard_job="31"}'):
            assert time.monotonic() < deadline, log.read_text(errors="replace")[-3000:]
            time.sleep(0.25)
        (series,) = prom_query(base, 'costguard_job_spend{costguard_job="31"}')
        assert series["metric"]["job"] == "costguard"  # as pushed, not "pushgateway"
        assert series["metric"]["notebook"] == "nb.ipynb"
        for expr in dashboard_queries():
            result = prom_query(base, concrete(expr))
            if re.search(r"costguard_job_|costguard_user_", expr):
                assert result, f"{expr}: no data from the pushed job"
    finally:
        stop(proc)
        pushgateway.delete_job_metrics(gateway, 31)


class TestThroughTheServer:
    """c.Pushgateway.url: a job submitted through the REST API pushes from its
    runner and its own code, the server adds its spend when it ends, and DELETE removes it."""

    @pytest.fixture
    def costguard_config(self, costguard_config: dict[str, Any], gateway: str,
                         tmp_path: Path) -> dict[str, Any]:
        return {**costguard_config, "Pushgateway.url": gateway,
                "Offload.jobs_dir": str(tmp_path / "jobs"), "Offload.poll_interval": 0.1}

    async def test_submit_push_and_delete(self, jp_fetch: Any, jp_root_dir: Path,
                                          gateway: str) -> None:
        from tests.support.jobs import submit, wait_job
        from tests.support.notebooks import code, write_notebook

        # long enough for the server to sample the job's kernel (0.25 s samples) a few times
        write_notebook(jp_root_dir, "pushed.ipynb", [code(
            "e", "import time\nfrom jupyter_costguard import jobmetrics\n"
                 "jobmetrics.record('epoch_seconds', 1.5, epoch='0')\ntime.sleep(2)")])
        doc = await submit(jp_fetch, "pushed.ipynb", ["e"])
        done = await wait_job(jp_fetch, doc["id"])
        assert done["state"] == "succeeded", done
        deadline = time.monotonic() + 20
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        while time.monotonic() < deadline:
            samples = job_samples(gateway, doc["id"])
            if {"costguard_job_spend", "costguard_job_attempts", "costguard_user_epoch_seconds",
                    "costguard_job_gpu_utilization_ratio"} <= set(samples):
                break
            time.sleep(0.2)
        labels, spend = one(samples, "costguard_job_spend")
        assert labels["notebook"] == "pushed.ipynb" and labels["currency"] == "USD"
        assert spend == pytest.approx(done["spend"], abs=1e-6)
        assert one(samples, "costguard_job_attempts")[1] == 1
        # the replayed trace puts the job's kernel (kernel 0) on GPU 0 at 2%
        assert one(samples, "costguard_job_gpu_utilization_ratio")[1] == pytest.approx(0.02)
        assert one(samples, "costguard_user_epoch_seconds")[1] == 1.5

        resp = await jp_fetch("costguard", "api", "jobs", str(doc["id"]), "metrics",
                              method="DELETE")
        assert resp.code == 204
        assert deleted(gateway, doc["id"]), job_samples(gateway, doc["id"])

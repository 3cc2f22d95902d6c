"""What the tests that start real services (Prometheus, the Pushgateway, an S3 server) share."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest


def require_binary(name: str, package: str = "prometheus") -> str:
    """A Debian tool the test starts for real: skipped where it is missing, but a failure on
    CI, which installs it (a missing binary there means a broken environment, not a test that
    does not apply)."""
    path = shutil.which(name)
    if path is None:
        if os.environ.get("CI"):
            pytest.fail(f"`{name}` not found on PATH, but CI must install it (Debian {package})")
        pytest.skip(f"`{name}` not installed (Debian package {package})")
    return path


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL what does not go within 15 s."""
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def start_prometheus(tmp: Path, targets: list[str], job: str = "dcgm-exporter",
                     ) -> tuple[subprocess.Popen[bytes], str, Path]:
    """A real Prometheus (Debian `prometheus`) on loopback scraping `targets` every second,
    with `honor_labels` as sites scrape dcgm-exporter (kube-prometheus-stack's honorLabels:
    its namespace/pod labels name the GPU's pod, not the exporter's own). Returns the process,
    its base URL and its log, once it answers /-/ready."""
    import json
    import time
    import urllib.error
    import urllib.request

    from tests.support.server_proc import free_port

    prometheus = require_binary("prometheus")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                   "evaluation_interval": "1s"},
        "scrape_configs": [{"job_name": job, "scrape_interval": "1s", "scrape_timeout": "1s",
                            "honor_labels": True, "static_configs": [{"targets": targets}]}],
    }
    config_file = tmp / "prometheus.yml"
    config_file.write_text(json.dumps(config))  # JSON is YAML
    log = tmp / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [prometheus, f"--config.file={config_file}", f"--storage.tsdb.path={tmp / 'tsdb'}",
             f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT, cwd=tmp)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"prometheus exited:\n{log.read_text(errors='replace')}")
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=2) as r:
                if r.status == 200:
                    return proc, url, log
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        if time.monotonic() > deadline:
            stop(proc)
            raise RuntimeError(f"prometheus not ready:\n{log.read_text(errors='replace')}")
        time.sleep(0.2)

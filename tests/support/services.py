"""What the tests that start real services (Prometheus, the Pushgateway, an S3 server) share."""

from __future__ import annotations

import os
import shutil
import subprocess

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

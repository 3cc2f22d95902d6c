"""Reading costguard's families out of a Prometheus text exposition."""

from __future__ import annotations

import subprocess

from prometheus_client.parser import text_string_to_metric_families

from tests.support.services import require_binary


def costguard_lines(exposition: str) -> str:
    """Only costguard's families (HELP, TYPE and samples) out of a whole exposition."""
    keep = [line for line in exposition.splitlines()
            if line.startswith(("costguard_", "# HELP costguard_", "# TYPE costguard_"))]
    return "\n".join(keep) + "\n"


def samples(exposition: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> [(labels, value)] for costguard's families."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(costguard_lines(exposition)):
        for s in family.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def promtool_complaints(exposition: str) -> str:
    """What Prometheus's `promtool check metrics` says of `exposition` (its naming and
    format checks): "" when it passes; its exit status, when not zero, is said too."""
    done = subprocess.run([require_binary("promtool"), "check", "metrics"], input=exposition,
                          capture_output=True, text=True, timeout=30)
    said = (done.stdout + done.stderr).strip()
    return said if done.returncode == 0 else f"exit {done.returncode}: {said}"

"""The job directory's status record: what the runner writes is read back as written, and a
file that is not a status (half written, wrong types) is read as none, never in part."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.jobdir import RunnerStatus

WRITTEN = {"runner_pid": 41, "state": "running", "phase": "running", "attempt": 2,
           "kernel_pid": 42, "phase_times": {"starting": 1.0, "running": 2},
           "attempts": [{"attempt": 1, "start": 1.0, "outcome": "failed"}],
           "exit_reason": None, "restarts": 1, "updated": 3.5}


def test_a_status_reads_back_as_written(tmp_path: Path) -> None:
    (tmp_path / jobdir.STATUS).write_text(json.dumps(WRITTEN))
    status = jobdir.read_status(tmp_path)
    assert status is not None and status.to_json() == WRITTEN
    jobdir.write_status(tmp_path, status)
    assert json.loads((tmp_path / jobdir.STATUS).read_text()) == WRITTEN


def test_fields_only_some_writers_set_are_left_out_when_unset() -> None:
    doc = RunnerStatus(state="failed", phase="done").to_json()
    assert "restarts" not in doc and "kubernetes" not in doc
    assert doc["attempt"] == 0 and doc["attempts"] == [] and doc["runner_pid"] is None


@pytest.mark.parametrize("change", [
    {"attempt": "x"}, {"attempt": True}, {"attempt": 1.5}, {"state": 3}, {"phase": None},
    {"phase_times": {"running": "soon"}}, {"phase_times": []}, {"attempts": [1]},
    {"attempts": {}}, {"kernel_pid": "42"}, {"exit_reason": 7}, {"updated": "now"},
    {"restarts": False}, {"kubernetes": []},
])
def test_a_field_of_the_wrong_type_makes_the_file_unreadable(tmp_path: Path,
                                                             change: dict[str, object]) -> None:
    (tmp_path / jobdir.STATUS).write_text(json.dumps({**WRITTEN, **change}))
    assert jobdir.read_status(tmp_path) is None


@pytest.mark.parametrize("text", ["", '{"state": "runn', "[]", '"running"',
                                  '{"phase": "running"}', '{"state": "running"}'])
def test_what_is_no_status_reads_as_none(tmp_path: Path, text: str) -> None:
    (tmp_path / jobdir.STATUS).write_text(text)
    assert jobdir.read_status(tmp_path) is None
    assert jobdir.read_status(tmp_path / "missing") is None


def test_a_status_read_is_a_copy(tmp_path: Path) -> None:
    doc = json.loads(json.dumps(WRITTEN))
    status = RunnerStatus.from_json(doc)
    assert status is not None
    status.attempts[0]["end"] = 9.0
    status.phase_times["done"] = 9.0
    assert doc == WRITTEN

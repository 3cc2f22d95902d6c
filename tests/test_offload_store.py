"""The job store, spec parsing and the job timeline (no server)."""

from __future__ import annotations

import dataclasses

import pytest

from jupyter_costguard.common.moneytext import format_amount
from jupyter_costguard.offload.spec import (
    Job,
    JobSpec,
    Resources,
    SpecCell,
    SpecError,
    duration_text,
    label,
)
from jupyter_costguard.offload.store import JobStore


def spec(**kw) -> JobSpec:
    return JobSpec(notebook="a/b.ipynb", cwd="/srv/a", kernel_name="python3",
                   cells=(SpecCell("x", 0, False, "x = 1", "x = 1", ("x",), "defines x"),
                          SpecCell("y", 2, True, "y = x", "y = x")), **kw)


def test_spec_round_trips_through_json():
    s = spec(resources=Resources(gpus=1, time_limit_seconds=60.0), retries=2,
             send=("a",), bring_back=("y",), inputs=("data.csv",))
    assert JobSpec.from_json(s.to_json()) == s
    assert s.selected == ("y",)
    assert s.code.startswith("# cell 0 (x)\nx = 1")


@pytest.mark.parametrize(("doc", "needle"), [
    ("x", "object"), ({"gpu": 1}, "unknown"), ({"gpus": True}, "gpus"),
    ({"gpus": 1.5}, "gpus"), ({"cpus": 0}, "cpus"), ({"memory_gib": float("nan")}, "memory"),
    ({"time_limit_seconds": 10**9}, "time_limit"),
])
def test_bad_resources_are_refused_with_the_field_named(doc, needle):
    with pytest.raises(SpecError, match=needle):
        Resources.parse(doc)


def test_store_survives_reopening_and_lists_newest_first(tmp_path):
    store = JobStore(tmp_path / "jobs.sqlite")
    first = store.create(spec(), 100.0, {"cells": []}, {"code": "x"})
    second = store.create(spec(), 101.0, {}, {})
    store.save(dataclasses.replace(first, state="running", phase="running", attempts=1,
                                   phase_times={"queued": 100.0, "starting": 100.5,
                                                "running": 101.0}))
    store.close()
    again = JobStore(tmp_path / "jobs.sqlite")
    assert [j.id for j in again.list_jobs()] == [second.id, first.id]
    assert [j.id for j in again.list_jobs(active_only=True)] == [second.id, first.id]
    got = again.get(first.id)
    assert got is not None and got.state == "running" and got.attempts == 1
    assert got.spec == spec() and got.record == {"code": "x"}
    assert again.get(999) is None
    assert again.list_jobs(notebook="other.ipynb") == []


def test_timeline_splits_time_and_spend_by_phase():
    job = Job(id=3, spec=spec(), state="succeeded", phase="done", created=0.0,
              phase_times={"queued": 0.0, "starting": 1.0, "running": 3.0, "finishing": 9.0,
                           "done": 10.0},
              phase_spend={"queued": 0.0, "starting": 0.0, "running": 0.02, "finishing": 0.5,
                           "done": 0.52},
              ended=10.0, spend=0.52)
    phases = [p.to_json(now=20.0) for p in job.timeline()]
    assert [(p["phase"], p["seconds"]) for p in phases] == [
        ("queued", 1.0), ("starting", 2.0), ("running", 6.0), ("finishing", 1.0)]
    assert [p["spend"] for p in phases] == [0.0, 0.02, 0.48, 0.02]
    assert label(job, 20.0, "EUR") == "ran as job 3 on local · 10s · EUR 0.52"
    cheap = dataclasses.replace(job, spend=0.000271)
    assert label(cheap, 20.0, "USD") == "ran as job 3 on local · 10s · USD 0.00027"
    assert label(dataclasses.replace(job, spend=0.0), 20.0, "USD").endswith("USD 0.00")
    # a running one-cell job costs a few thousandths of a cent: money, never an exponent
    # ("USD 5.6e-05" before)
    assert label(dataclasses.replace(job, spend=5.6e-05), 20.0, "USD").endswith("USD 0.000056")


@pytest.mark.parametrize("value, text", [
    # the frontend's own cases (labextension/src/__tests__/format.spec.ts, formatAmount)
    (32.77, "32.77"), (1.2345, "1.23"), (1, "1.00"), (0, "0.00"), (1234.5, "1234.50"),
    (0.042, "0.042"), (0.5, "0.50"), (0.123456, "0.123"), (0.0012, "0.0012"),
    (0.0000001, "0.00"), (-0.042, "-0.042"), (-0.0000001, "0.00"), (float("nan"), "–"),
    (5.6e-05, "0.000056"), (1e-05, "0.00001"), (12345678.9, "12345678.90"),
])
def test_money_is_written_as_the_frontend_writes_it(value: float, text: str) -> None:
    assert format_amount(value) == text


def test_durations_read_short():
    assert [duration_text(s) for s in (4.4, 59.6, 192, 3725)] == ["4s", "1m00s", "3m12s",
                                                                   "1h02m"]

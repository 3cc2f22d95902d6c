"""Issue 11 item 5: `GET jobs` reads summaries and pages; submit preparation does not make a
concurrent `GET jobs` wait."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_costguard.offload import service as service_module
from jupyter_costguard.offload.spec import JobSpec, Resources, SpecCell
from jupyter_costguard.offload.store import JobStore
from tests.support.jobs import submit, wait_job
from tests.support.notebooks import code, write_notebook
from tests.support.openapi_check import validate
from tests.support.rest import get_json

pytestmark = pytest.mark.usefixtures("no_leftover_jobs")


@pytest.fixture
def costguard_config(costguard_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {**costguard_config, "Offload.jobs_dir": str(tmp_path / "jobs"),
            "Offload.poll_interval": 0.1}


def spec(notebook: str = "a/b.ipynb") -> JobSpec:
    return JobSpec(notebook=notebook, cwd="/srv/a", kernel_name="python3",
                   cells=(SpecCell("x", 0, False, "x = 1", "x = 1", ("x",), "defines x"),
                          SpecCell("y", 2, True, "y = x", "y = x")),
                   resources=Resources(gpus=1), retries=2)


def ended(store: JobStore, notebook: str = "a/b.ipynb") -> int:
    job = store.create(spec(notebook), 100.0, {"cells": []}, {"code": "y = x"})
    store.save(dataclasses.replace(job, state="succeeded", phase="finishing", ended=160.0,
                                   record={**job.record, "gpu": {
                                       "mean_utilization_percent": 42.0}}))
    return job.id


def test_the_list_does_not_read_the_big_blobs(tmp_path):
    store = JobStore(tmp_path / "jobs.db")
    job_id = ended(store)
    with sqlite3.connect(tmp_path / "jobs.db") as db:  # what the list must not parse
        db.execute("UPDATE job SET spec='{not json', record='[', slice='x' WHERE id=?",
                   (job_id,))
    jobs, next_before = store.list_page()
    assert next_before is None
    [job] = jobs
    assert (job.id, job.state, job.spec.notebook, job.spec.backend) == (
        job_id, "succeeded", "a/b.ipynb", "local")
    assert job.spec.selected == ("y",) and job.spec.retries == 2
    assert job.spec.resources == Resources(gpus=1)
    assert job.record == {"gpu": {"mean_utilization_percent": 42.0}}


def test_a_store_from_before_summaries_is_migrated_in_place(tmp_path):
    path = tmp_path / "jobs.db"
    store = JobStore(path)
    first, second = ended(store), ended(store, "other.ipynb")
    store.close()
    with sqlite3.connect(path) as db:  # as an earlier version left it
        db.execute("ALTER TABLE job DROP COLUMN summary")
        db.execute("PRAGMA user_version = 0")  # which kept no schema version
    again = JobStore(path)
    jobs, _ = again.list_page()
    assert [(j.id, j.spec.notebook, j.spec.selected) for j in jobs] == [
        (second, "other.ipynb", ("y",)), (first, "a/b.ipynb", ("y",))]
    assert again.get(first) is not None and again.get(first).spec.cells  # type: ignore[union-attr]


def test_pages_run_newest_first_and_end_with_null(tmp_path):
    store = JobStore(tmp_path / "jobs.db")
    ids = [ended(store, "n1.ipynb" if i % 2 else "n2.ipynb") for i in range(7)]
    page, nxt = store.list_page(limit=3)
    assert [j.id for j in page] == ids[::-1][:3] and nxt == ids[4]
    page, nxt = store.list_page(limit=3, before=nxt)
    assert [j.id for j in page] == ids[::-1][3:6] and nxt == ids[1]
    page, nxt = store.list_page(limit=3, before=nxt)
    assert [j.id for j in page] == [ids[0]] and nxt is None
    page, nxt = store.list_page(notebook="n1.ipynb", limit=2)
    assert [j.id for j in page] == [ids[5], ids[3]] and nxt == ids[3]


def _store(jp_serverapp: Any) -> JobStore:
    return jp_serverapp.web_app.settings["costguard_jobs"].store


async def test_get_jobs_pages_over_rest(jp_fetch, jp_serverapp):
    store = _store(jp_serverapp)
    ids = [ended(store) for _ in range(55)]
    first = await get_json(jp_fetch, "costguard", "api", "jobs")
    validate("/jobs", 200, first)
    assert [j["id"] for j in first["jobs"]] == ids[::-1][:50]
    assert first["next_before"] == ids[5]
    job = first["jobs"][0]
    assert job["selected"] == ["y"] and job["max_attempts"] == 3
    assert job["resources"]["gpus"] == 1 and job["gpu_utilization_percent"] == 42.0
    assert "record" not in job and "spec" not in job
    older = await get_json(jp_fetch, "costguard", "api", "jobs",
                           params={"before": str(first["next_before"]), "limit": "10"})
    validate("/jobs", 200, older)
    assert [j["id"] for j in older["jobs"]] == ids[4::-1] and older["next_before"] is None
    # the full record is still in the job's own document
    one = await get_json(jp_fetch, "costguard", "api", "jobs", str(ids[0]))
    assert one["record"]["code"] == "y = x" and one["spec"]["cells"]


@pytest.mark.parametrize(("params", "needle"), [
    ({"limit": "0"}, "limit must"), ({"limit": "501"}, "500"), ({"limit": "x"}, "limit must"),
    ({"before": "x"}, "before must"), ({"before": "0"}, "before must"),
])
async def test_bad_paging_parameters_are_400_naming_them(jp_fetch, params, needle):
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", "jobs", params=params)
    assert e.value.code == 400
    doc = json.loads(e.value.response.body)  # type: ignore[union-attr]
    validate("/jobs", 400, doc)
    assert needle in doc["message"]


async def test_a_submit_being_prepared_does_not_hold_up_get_jobs(jp_fetch, jp_root_dir,
                                                                 monkeypatch):
    write_notebook(jp_root_dir, "nb.ipynb", [code("a", "a = 1")])
    entered, release = threading.Event(), threading.Event()
    real = service_module.make_record

    def slow_record(*args: Any, **kw: Any) -> Any:  # a manifest over many files, made slow
        entered.set()
        release.wait(60)
        return real(*args, **kw)

    monkeypatch.setattr(service_module, "make_record", slow_record)
    submitting = asyncio.ensure_future(submit(jp_fetch, "nb.ipynb", ["a"]))
    try:
        while not entered.is_set():
            await asyncio.sleep(0.01)
        listed = await get_json(jp_fetch, "costguard", "api", "jobs")
        assert listed["jobs"] == []
        assert not submitting.done()  # the list answered while the submit was still pending
    finally:
        release.set()
    doc = await submitting
    assert doc["state"] in ("queued", "running")
    assert (await wait_job(jp_fetch, doc["id"]))["state"] == "succeeded"


def test_a_row_that_does_not_parse_is_skipped_not_fatal(tmp_path, caplog):
    """Issue 11 item 2: a hand-edited or broken row is logged once and skipped by every read
    (the full list the follower walks, one job, a page), and stays in the database."""
    store = JobStore(tmp_path / "jobs.db")
    good = ended(store)
    bad = store.create(spec(), 100.0, {"cells": []}, {"code": "y = x"}).id  # queued: active
    with sqlite3.connect(tmp_path / "jobs.db") as db:
        db.execute("UPDATE job SET spec=?, phase_times='{' WHERE id=?",
                   ("[" * 100_000, bad))
    assert [j.id for j in store.list_jobs()] == [good]
    assert [j.id for j in store.list_jobs(active_only=True)] == []
    assert store.get(bad) is None and store.get(good) is not None
    page, _ = store.list_page()
    assert [j.id for j in page] == [bad, good]  # the summary columns still list it
    warned = [r for r in caplog.records if f"job {bad} " in r.getMessage()]
    assert len(warned) == 1, [r.getMessage() for r in caplog.records]
    with sqlite3.connect(tmp_path / "jobs.db") as db:
        assert db.execute("SELECT count(*) FROM job").fetchone() == (2,)


async def test_a_bad_row_does_not_break_the_jobs_routes(jp_fetch, jp_serverapp):
    store = _store(jp_serverapp)
    good = ended(store)
    bad = ended(store, "bad.ipynb")
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE job SET record='{\"a\": ' WHERE id=?", (bad,))
    listed = await get_json(jp_fetch, "costguard", "api", "jobs")
    assert {j["id"] for j in listed["jobs"]} >= {good}
    assert (await get_json(jp_fetch, "costguard", "api", "jobs", str(good)))["id"] == good
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", "jobs", str(bad))
    assert e.value.code == 404

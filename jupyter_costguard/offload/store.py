"""Jobs in SQLite: one row per job, rewritten whole on every change.

The server is the only writer (runners report through files in their job directory), and it
writes from one worker thread. WAL and a transaction per change mean a crash of the server
loses no job: on start the store is read back and non-terminal jobs are followed again.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jupyter_costguard.common.sqlite import Schema, add_columns, open_db, run_script
from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.spec import Job, JobSpec, Resources, SpecCell

#: the tables of version 1; `_baseline` also brings a file from before versions up to date
TABLES = """
CREATE TABLE IF NOT EXISTS job (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    notebook TEXT NOT NULL,
    state TEXT NOT NULL,
    phase TEXT NOT NULL,
    created REAL NOT NULL,
    ended REAL,
    attempts INTEGER NOT NULL DEFAULT 0,
    exit_reason TEXT,
    spend REAL NOT NULL DEFAULT 0,
    runner_pid INTEGER,
    backend_ref TEXT,
    kernel_pid INTEGER,
    spec TEXT NOT NULL,
    phase_times TEXT NOT NULL DEFAULT '{}',
    phase_spend TEXT NOT NULL DEFAULT '{}',
    record TEXT NOT NULL DEFAULT '{}',
    slice TEXT NOT NULL DEFAULT '{}',
    summary TEXT
);
CREATE INDEX IF NOT EXISTS job_notebook ON job (notebook);
CREATE INDEX IF NOT EXISTS job_state ON job (state);
"""

COLUMNS = ("id", "notebook", "state", "phase", "created", "ended", "attempts", "exit_reason",
           "spend", "runner_pid", "backend_ref", "kernel_pid", "spec", "phase_times",
           "phase_spend", "record", "slice")

#: what a job list reads: no code, slice, full spec or record (the small `summary` instead)
SUMMARY_COLUMNS = (*COLUMNS[:12], "phase_times", "phase_spend", "summary")

log = logging.getLogger(__name__)

#: a page of the job list: the default and the most one request may ask for
PAGE_DEFAULT = 50
PAGE_MAX = 500


def _baseline(db: sqlite3.Connection) -> None:
    """Version 1: the tables, and what a store from before versions lacks: the columns added
    since (found by probing, as the store did on every start before) and rows' summaries
    written before summaries, or before they held `bring_back` (a row that does not parse gets
    none and is listed from what its own columns hold)."""
    run_script(db, TABLES)
    add_columns(db, "job", {
        "backend_ref": "TEXT",  # a store from before the cluster backends
        "summary": "TEXT",  # a store from before paged summaries
    })
    rows = db.execute(
        "SELECT id, spec, record FROM job WHERE summary IS NULL OR (summary != '{}' "
        "AND json_type(summary, '$.bring_back') IS NULL)").fetchall()
    for job_id, spec_text, record_text in rows:
        try:
            spec = JobSpec.from_json(json.loads(spec_text))
            record = json.loads(record_text)
            text = _summary(spec, record if isinstance(record, dict) else {})
        except (ValueError, TypeError, KeyError, RecursionError):
            text = "{}"
        db.execute("UPDATE job SET summary=? WHERE id=?", (text, job_id))


#: the jobs' tables, each migration run once (`common/sqlite.py`). The kernel's one read of
#: them, a job's recorded results digest, is `jobdir.recorded_results_digest`: keep it in step
SCHEMA = Schema("jobs", (_baseline,))


class JobStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        # the jobs directory holds the job directories too: 0700 even when it already existed
        jobdir.private_dir(self.path.parent)
        # the jobs' code and records: 0600 (and its -wal and -shm)
        self._db = open_db(self.path, SCHEMA)
        self._lock = threading.Lock()
        self._bad: set[int] = set()  # rows that did not parse, warned about once

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def create(self, spec: JobSpec, created: float, slice_doc: dict[str, Any],
               record: dict[str, Any]) -> Job:
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO job (notebook, state, phase, created, spec, phase_times, "
                "phase_spend, record, slice, summary) "
                "VALUES (?, 'queued', 'queued', ?, ?, ?, '{}', ?, ?, ?)",
                (spec.notebook, created, json.dumps(spec.to_json()),
                 json.dumps({"queued": created}), json.dumps(record), json.dumps(slice_doc),
                 _summary(spec, record)))
            job_id = cur.lastrowid
        assert job_id is not None
        job = self.get(job_id)
        assert job is not None
        return job

    def save(self, job: Job) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE job SET state=?, phase=?, ended=?, attempts=?, exit_reason=?, spend=?, "
                "runner_pid=?, backend_ref=?, kernel_pid=?, phase_times=?, phase_spend=?, "
                "record=?, summary=? WHERE id=?",
                (job.state, job.phase, job.ended, job.attempts, job.exit_reason, job.spend,
                 job.runner_pid, job.backend_ref, job.kernel_pid,
                 json.dumps(dict(job.phase_times)),
                 json.dumps(dict(job.phase_spend)), json.dumps(dict(job.record)),
                 _summary(job.spec, job.record), job.id))

    def get(self, job_id: int) -> Job | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {', '.join(COLUMNS)} FROM job WHERE id=?", (job_id,)).fetchone()
        return self._parse(row) if row else None

    def list_jobs(self, notebook: str | None = None, active_only: bool = False,
             limit: int = 500) -> list[Job]:
        where: list[str] = []
        args: list[Any] = []
        if notebook is not None:
            where.append("notebook=?")
            args.append(notebook)
        if active_only:
            where.append("state IN ('queued', 'running')")
        sql = f"SELECT {', '.join(COLUMNS)} FROM job"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC LIMIT ?"
        with self._lock:
            rows = self._db.execute(sql, (*args, limit)).fetchall()
        return [job for job in map(self._parse, rows) if job is not None]

    def _parse(self, row: tuple[Any, ...]) -> Job | None:
        """A row as a job; a row that does not parse (edited by hand, written by a broken
        version) is logged once and skipped, so one bad row never stops the list, the
        follower or the extension loading. It stays in the database as it is."""
        try:
            return _job(row)
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as e:
            job_id = row[0]
            if job_id not in self._bad:
                self._bad.add(job_id)
                log.warning("costguard: job %s in the jobs database does not parse (%s); "
                            "skipped", job_id, e)
            return None

    def list_page(self, notebook: str | None = None, limit: int = PAGE_DEFAULT,
                  before: int | None = None) -> tuple[list[Job], int | None]:
        """A page of the job list, newest first, from the summaries (the spec holds only what
        a list shows; no code, slice or record beyond its GPU use), and the id to ask
        ``before`` for the next page (None: no more)."""
        where: list[str] = []
        args: list[Any] = []
        if notebook is not None:
            where.append("notebook=?")
            args.append(notebook)
        if before is not None:
            where.append("id<?")
            args.append(before)
        sql = f"SELECT {', '.join(SUMMARY_COLUMNS)} FROM job"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC LIMIT ?"
        with self._lock:
            rows = self._db.execute(sql, (*args, limit + 1)).fetchall()
        more = len(rows) > limit
        jobs = [_summary_job(r) for r in rows[:limit]]
        return jobs, (jobs[-1].id if more and jobs else None)

    def counts(self) -> dict[tuple[str, str], int]:
        """(state, backend) -> number of jobs."""
        with self._lock:
            rows = self._db.execute(
                "SELECT state, json_extract(spec, '$.backend'), count(*) FROM job "
                "GROUP BY 1, 2").fetchall()
        return {(state, backend or "local"): n for state, backend, n in rows}

    def close(self) -> None:
        with self._lock:
            self._db.close()


def _job(row: tuple[Any, ...]) -> Job:
    d = dict(zip(COLUMNS, row))
    return Job(
        id=d["id"], spec=JobSpec.from_json(json.loads(d["spec"])), state=d["state"],
        phase=d["phase"], created=d["created"], ended=d["ended"], attempts=d["attempts"],
        exit_reason=d["exit_reason"], spend=d["spend"], runner_pid=d["runner_pid"],
        backend_ref=d["backend_ref"] or (str(d["runner_pid"]) if d["runner_pid"] else None),
        kernel_pid=d["kernel_pid"], phase_times=json.loads(d["phase_times"]),
        phase_spend=json.loads(d["phase_spend"]), record=json.loads(d["record"]),
        slice_doc=json.loads(d["slice"]),
    )


def _summary(spec: JobSpec, record: Mapping[str, Any]) -> str:
    """What the job list needs of the spec and record, kept beside them."""
    gpu = record.get("gpu")
    return json.dumps({
        "kernel_name": spec.kernel_name, "backend": spec.backend,
        "resources": spec.resources.to_json(), "retries": spec.retries,
        "selected": [[c.cell_id, c.index] for c in spec.cells if c.selected],
        "bring_back": list(spec.bring_back),
        **({"bring_back_from": record["bring_back_from"]}
           if isinstance(record.get("bring_back_from"), str) else {}),
        **({"gpu": gpu} if isinstance(gpu, dict) else {}),
        **({"estimate": record["estimate"]} if isinstance(record.get("estimate"), dict)
           else {}),
        **({"owner": record["owner"]} if isinstance(record.get("owner"), dict) else {}),
    })


def _summary_job(row: tuple[Any, ...]) -> Job:
    d = dict(zip(SUMMARY_COLUMNS, row))
    try:
        summary = json.loads(d["summary"] or "{}")
        resources = Resources.parse(summary.get("resources"))
        cells = tuple(SpecCell(str(cell_id), int(index), True, "", "")
                      for cell_id, index in summary.get("selected", ()))
        bring_back = tuple(str(n) for n in summary.get("bring_back", ()))
        phase_times, phase_spend = json.loads(d["phase_times"]), json.loads(d["phase_spend"])
    except (ValueError, TypeError, AttributeError, RecursionError):
        summary, resources, cells, phase_times, phase_spend = {}, Resources(), (), {}, {}
        bring_back = ()
    spec = JobSpec(notebook=d["notebook"], cwd="", kernel_name=str(summary.get(
        "kernel_name", "")), cells=cells, resources=resources,
        retries=int(summary.get("retries", 0)), backend=str(summary.get("backend", "local")),
        bring_back=bring_back)
    gpu = summary.get("gpu")
    return Job(
        id=d["id"], spec=spec, state=d["state"], phase=d["phase"], created=d["created"],
        ended=d["ended"], attempts=d["attempts"], exit_reason=d["exit_reason"],
        spend=d["spend"], runner_pid=d["runner_pid"],
        backend_ref=d["backend_ref"] or (str(d["runner_pid"]) if d["runner_pid"] else None),
        kernel_pid=d["kernel_pid"],
        phase_times=phase_times if isinstance(phase_times, dict) else {},
        phase_spend=phase_spend if isinstance(phase_spend, dict) else {},
        record={**({"gpu": gpu} if isinstance(gpu, dict) else {}),
                **({"owner": summary["owner"]} if isinstance(summary.get("owner"), dict)
                   else {}),
                **({"bring_back_from": summary["bring_back_from"]}
                   if isinstance(summary.get("bring_back_from"), str) else {}),
                **({"estimate": summary["estimate"]}
                   if isinstance(summary.get("estimate"), dict) else {})},
    )

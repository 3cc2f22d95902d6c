"""Jobs in SQLite: one row per job, rewritten whole on every change.

The server is the only writer (runners report through files in their job directory), and it
writes from one worker thread. WAL and a transaction per change mean a crash of the server
loses no job: on start the store is read back and non-terminal jobs are followed again.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.spec import Job, JobSpec

SCHEMA = """
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
    slice TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS job_notebook ON job (notebook);
CREATE INDEX IF NOT EXISTS job_state ON job (state);
"""

COLUMNS = ("id", "notebook", "state", "phase", "created", "ended", "attempts", "exit_reason",
           "spend", "runner_pid", "backend_ref", "kernel_pid", "spec", "phase_times",
           "phase_spend", "record", "slice")


class JobStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        jobdir.private_dir(self.path.parent)
        # the jobs' code and records: 0600 (SQLite gives its -wal and -shm the same mode)
        os.close(jobdir.open_private(self.path, os.O_RDWR | os.O_CREAT))
        self._db = sqlite3.connect(str(self.path), check_same_thread=False,
                                   isolation_level=None)
        self._lock = threading.Lock()
        self._db.execute("PRAGMA journal_mode=WAL")
        for suffix in ("-wal", "-shm"):
            side = self.path.with_name(self.path.name + suffix)
            if side.exists():
                os.chmod(side, jobdir.PRIVATE_FILE)
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        columns = {row[1] for row in self._db.execute("PRAGMA table_info(job)")}
        if "backend_ref" not in columns:  # a store from before the cluster backends
            self._db.execute("ALTER TABLE job ADD COLUMN backend_ref TEXT")

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
                "phase_spend, record, slice) VALUES (?, 'queued', 'queued', ?, ?, ?, '{}', ?, ?)",
                (spec.notebook, created, json.dumps(spec.to_json()),
                 json.dumps({"queued": created}), json.dumps(record), json.dumps(slice_doc)))
            job_id = cur.lastrowid
        assert job_id is not None
        job = self.get(job_id)
        assert job is not None
        return job

    def save(self, job: Job) -> None:
        with self._tx() as db:
            db.execute(
                "UPDATE job SET state=?, phase=?, ended=?, attempts=?, exit_reason=?, spend=?, "
                "runner_pid=?, backend_ref=?, kernel_pid=?, phase_times=?, phase_spend=?, record=? "
                "WHERE id=?",
                (job.state, job.phase, job.ended, job.attempts, job.exit_reason, job.spend,
                 job.runner_pid, job.backend_ref, job.kernel_pid,
                 json.dumps(dict(job.phase_times)),
                 json.dumps(dict(job.phase_spend)), json.dumps(dict(job.record)), job.id))

    def get(self, job_id: int) -> Job | None:
        with self._lock:
            row = self._db.execute(
                f"SELECT {', '.join(COLUMNS)} FROM job WHERE id=?", (job_id,)).fetchone()
        return _job(row) if row else None

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
        return [_job(r) for r in rows]

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

"""Running totals of spend per kernel, notebook and server, persisted in SQLite.

Totals live in memory and every sample is committed in one small WAL transaction from the
sampler thread, so a crash of the server (even `kill -9`) loses at most the interval in
flight. History is rolled up per minute and pruned after `retention_days`: the table holds
at most (notebooks active in a minute) × 1440 × retention_days rows.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from jupyter_costguard.common.files import data_dir
from jupyter_costguard.common.sqlite import Schema, open_db, open_read_only
from jupyter_costguard.cost.spend import IntervalCost, Share

#: version 1, the baseline: the tables as they have been since the ledger began (a file from
#: before versions already has them, unchanged)
BASELINE = """
CREATE TABLE IF NOT EXISTS period_marks (
    start REAL PRIMARY KEY,      -- a budget period's start (epoch seconds)
    spend REAL NOT NULL          -- the server's spend when that period began
);
CREATE TABLE IF NOT EXISTS consumer (
    kind TEXT NOT NULL,          -- 'kernel' (jobs later)
    id TEXT NOT NULL,
    path TEXT NOT NULL,          -- notebook path, '' when none
    name TEXT NOT NULL DEFAULT '',
    first_seen REAL NOT NULL,
    last_seen REAL NOT NULL,
    spend REAL NOT NULL DEFAULT 0,
    waste REAL NOT NULL DEFAULT 0,
    gpu_spend REAL NOT NULL DEFAULT 0,
    host_spend REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, id, path)
);
CREATE TABLE IF NOT EXISTS server (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    since REAL NOT NULL,
    last_sample REAL,
    spend REAL NOT NULL DEFAULT 0,
    waste REAL NOT NULL DEFAULT 0,
    unattributed REAL NOT NULL DEFAULT 0,
    unattributed_gpu REAL NOT NULL DEFAULT 0,
    seconds REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS history (
    bucket INTEGER NOT NULL,     -- epoch minute
    path TEXT NOT NULL,          -- notebook path; '' for the whole server
    spend REAL NOT NULL DEFAULT 0,
    waste REAL NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, path)
);
"""
#: the ledger's tables; its file also holds the alerts' (`alerts/store.py`, slot 1)
SCHEMA = Schema("ledger", (BASELINE,), slot=0)

HISTORY_BUCKET_SECONDS = 60
#: Minute buckets kept in memory per notebook for sparklines and the API.
HISTORY_IN_MEMORY = 180
#: An interval is cut at most into this many minutes (its last ones); what came before them
#: (a sampler stalled for hours: a suspended VM) goes to the first of them.
MAX_SPLIT_MINUTES = 360


def minute_parts(now: float, seconds: float) -> list[tuple[float, float]]:
    """The interval of `seconds` ending at `now` cut at minute boundaries, oldest first:
    (a time inside the piece's minute, the piece's seconds). The last piece ends at `now`
    (0 seconds when `now` is a boundary itself), so it is the sample's time.

    Why: `Ledger.record` puts an interval in the minute bucket of its end, so an interval
    that began in the minute before gave that minute's spend to the next one, and a
    bucket's rate read above the instance's (a 60 s bucket held 60.2 s of spend)."""
    minute = int(now // HISTORY_BUCKET_SECONDS)
    start = now - max(0.0, seconds)
    first = max(int(start // HISTORY_BUCKET_SECONDS), minute - MAX_SPLIT_MINUTES + 1)
    if first >= minute:
        return [(now, seconds)]
    parts: list[tuple[float, float]] = []
    begin = start
    for m in range(first, minute):
        end = (m + 1) * HISTORY_BUCKET_SECONDS
        # a time inside minute m (record buckets by it), not on the boundary
        parts.append((end - 1e-3, end - begin))
        begin = end
    parts.append((now, now - begin))
    return parts


def scaled_cost(cost: IntervalCost, fraction: float) -> IntervalCost:
    """`cost` × `fraction`: the part of an interval's cost that fell in one of its pieces."""
    return IntervalCost(
        total=cost.total * fraction,
        unattributed=cost.unattributed * fraction,
        unattributed_gpu=cost.unattributed_gpu * fraction,
        shares={kid: Share(gpu=s.gpu * fraction, host=s.host * fraction,
                           waste=s.waste * fraction) for kid, s in cost.shares.items()},
    )


@dataclass
class Totals:
    spend: float = 0.0
    waste: float = 0.0
    gpu_spend: float = 0.0
    host_spend: float = 0.0
    first_seen: float = 0.0
    last_seen: float = 0.0

    def add(self, spend: float, waste: float, gpu: float, host: float, now: float) -> None:
        self.spend += spend
        self.waste += waste
        self.gpu_spend += gpu
        self.host_spend += host
        if not self.first_seen:
            self.first_seen = now
        self.last_seen = max(self.last_seen, now)


@dataclass
class ServerTotals:
    since: float
    last_sample: float | None = None
    spend: float = 0.0
    waste: float = 0.0
    unattributed: float = 0.0
    unattributed_gpu: float = 0.0
    seconds: float = 0.0


@dataclass
class HistoryPoint:
    bucket: int  # epoch minute
    spend: float
    waste: float


class Ledger:
    """Accumulates `IntervalCost`s; only the sampler thread writes."""

    def __init__(self, db_path: str | Path, retention_days: float = 7.0, now: float = 0.0) -> None:
        self.db_path = Path(db_path)
        self.retention_days = retention_days
        self._lock = threading.Lock()
        self.db = open_db(self.db_path, SCHEMA)
        self._kernels: dict[tuple[str, str], Totals] = {}
        self._names: dict[tuple[str, str], str] = {}
        self._notebooks: dict[str, Totals] = {}
        self._notebook_kernels: dict[str, set[str]] = {}
        self._history: dict[str, deque[HistoryPoint]] = {}
        self._last_prune = 0.0
        self.server = self._load(now)

    def _load(self, now: float) -> ServerTotals:
        row = self.db.execute(
            "SELECT since, last_sample, spend, waste, unattributed, unattributed_gpu, seconds "
            "FROM server WHERE id = 1"
        ).fetchone()
        if row is None:
            server = ServerTotals(since=now)
            self.db.execute("INSERT INTO server (id, since) VALUES (1, ?)", (now,))
        else:
            server = ServerTotals(*row)
        for kind, cid, path, name, first, last, spend, waste, gpu, host in self.db.execute(
            "SELECT kind, id, path, name, first_seen, last_seen, spend, waste, gpu_spend, "
            "host_spend FROM consumer"
        ):
            if kind != "kernel":
                continue
            t = Totals(spend, waste, gpu, host, first, last)
            self._kernels[(cid, path)] = t
            self._names[(cid, path)] = name
            if path:
                nb = self._notebooks.setdefault(path, Totals())
                nb.add(spend, waste, gpu, host, first)
                nb.last_seen = max(nb.last_seen, last)
                self._notebook_kernels.setdefault(path, set()).add(cid)
        floor = int(now // HISTORY_BUCKET_SECONDS) - HISTORY_IN_MEMORY
        for bucket, path, spend, waste in self.db.execute(
            "SELECT bucket, path, spend, waste FROM history WHERE bucket > ? ORDER BY bucket",
            (floor,),
        ):
            self._history_deque(path).append(HistoryPoint(bucket, spend, waste))
        return server

    def _history_deque(self, path: str) -> deque[HistoryPoint]:
        d = self._history.get(path)
        if d is None:
            d = self._history[path] = deque(maxlen=HISTORY_IN_MEMORY)
        return d

    def period_spend(self, start: float) -> float:
        """The server's spend since `start` (a budget period's beginning).

        What the server had spent when the period began is marked the first time the
        period is asked about (nothing, if the ledger began inside it) and kept in the
        ledger, so a restart does not reset the period's count."""
        with self._lock:
            row = self.db.execute("SELECT spend FROM period_marks WHERE start = ?",
                                  (start,)).fetchone()
            if row is None:
                mark = 0.0 if self.server.since >= start else self.server.spend
                self.db.execute("INSERT INTO period_marks VALUES (?, ?)", (start, mark))
                self.db.execute("DELETE FROM period_marks WHERE start < ?",
                                (start - 400 * 86400,))
            else:
                mark = float(row[0])
            return max(0.0, self.server.spend - mark)

    def record(
        self,
        now: float,
        seconds: float,
        cost: IntervalCost,
        paths: dict[str, str | None],
        names: dict[str, str],
    ) -> None:
        """Add one interval; `paths` maps kernel id to its notebook path (None if none)."""
        bucket = int(now // HISTORY_BUCKET_SECONDS)
        rows = []
        hist: dict[str, list[float]] = {"": [cost.total, 0.0]}
        with self._lock:
            s = self.server
            s.spend += cost.total
            s.unattributed += cost.unattributed
            s.unattributed_gpu += cost.unattributed_gpu
            s.seconds += seconds
            s.last_sample = now
            for kid, share in cost.shares.items():
                path = paths.get(kid) or ""
                key = (kid, path)
                t = self._kernels.get(key)
                if t is None:
                    t = self._kernels[key] = Totals(first_seen=now, last_seen=now)
                t.add(share.spend, share.waste, share.gpu, share.host, now)
                self._names[key] = names.get(kid, "")
                s.waste += share.waste
                if path:
                    nb = self._notebooks.get(path)
                    if nb is None:
                        nb = self._notebooks[path] = Totals(first_seen=now)
                    nb.add(share.spend, share.waste, share.gpu, share.host, now)
                    self._notebook_kernels.setdefault(path, set()).add(kid)
                    h = hist.setdefault(path, [0.0, 0.0])
                    h[0] += share.spend
                    h[1] += share.waste
                hist[""][1] += share.waste
                rows.append(("kernel", kid, path, self._names[key], t.first_seen, t.last_seen,
                             t.spend, t.waste, t.gpu_spend, t.host_spend))
            for path, (spend, waste) in hist.items():
                d = self._history_deque(path)
                if d and d[-1].bucket == bucket:
                    d[-1].spend += spend
                    d[-1].waste += waste
                else:
                    d.append(HistoryPoint(bucket, spend, waste))
        self._persist(rows, hist, bucket, now)

    def _persist(self, rows: list, hist: dict[str, list[float]], bucket: int, now: float) -> None:
        s = self.server
        db = self.db
        db.execute("BEGIN")
        try:
            db.executemany(
                "INSERT INTO consumer (kind, id, path, name, first_seen, last_seen, spend, waste,"
                " gpu_spend, host_spend) VALUES (?,?,?,?,?,?,?,?,?,?)"
                " ON CONFLICT (kind, id, path) DO UPDATE SET name=excluded.name,"
                " last_seen=excluded.last_seen, spend=excluded.spend, waste=excluded.waste,"
                " gpu_spend=excluded.gpu_spend, host_spend=excluded.host_spend",
                rows,
            )
            db.execute(
                "UPDATE server SET last_sample=?, spend=?, waste=?, unattributed=?,"
                " unattributed_gpu=?, seconds=? WHERE id=1",
                (s.last_sample, s.spend, s.waste, s.unattributed, s.unattributed_gpu, s.seconds),
            )
            db.executemany(
                "INSERT INTO history (bucket, path, spend, waste) VALUES (?,?,?,?)"
                " ON CONFLICT (bucket, path) DO UPDATE SET spend=spend+excluded.spend,"
                " waste=waste+excluded.waste",
                [(bucket, path, v[0], v[1]) for path, v in hist.items()],
            )
            if now - self._last_prune > 3600:
                cutoff = int((now - self.retention_days * 86400) // HISTORY_BUCKET_SECONDS)
                db.execute("DELETE FROM history WHERE bucket < ?", (cutoff,))
                self._last_prune = now
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def record_by_minute(
        self,
        now: float,
        seconds: float,
        cost: IntervalCost,
        paths: dict[str, str | None],
        names: dict[str, str],
    ) -> None:
        """`record` one sample's interval, its cost cut at minute boundaries (`minute_parts`)
        in proportion to time, so each minute of the history holds the spend of its own
        seconds. An interval inside one minute is one `record`; one across a boundary is one
        per minute (a second small transaction about once a minute)."""
        parts = minute_parts(now, seconds)
        if len(parts) == 1:
            self.record(now, seconds, cost, paths, names)
            return
        for end, part in parts:
            fraction = part / seconds if seconds > 0 else 0.0
            self.record(end, part, scaled_cost(cost, fraction), paths, names)

    def first_history_bucket(self) -> int | None:
        """The first epoch minute the history holds (of what is kept: `retention_days`), or
        None when it is empty (worker thread, like `history`)."""
        row = self.db.execute("SELECT bucket FROM history WHERE path = '' ORDER BY bucket"
                              " LIMIT 1").fetchone()
        return None if row is None else int(row[0])

    # Readers below run on the sampler thread, the only writer, so they need no copies.

    @property
    def kernels(self) -> dict[tuple[str, str], Totals]:
        """(kernel id, notebook path) -> totals, for every kernel ever seen."""
        return self._kernels

    def kernel_spend(self, kernel_id: str) -> float:
        """A kernel's total spend over all its notebooks; safe from any thread."""
        with self._lock:
            return sum(t.spend for (kid, _), t in self._kernels.items() if kid == kernel_id)

    @property
    def notebooks(self) -> dict[str, Totals]:
        return self._notebooks

    def notebook_kernel_ids(self, path: str) -> set[str]:
        return self._notebook_kernels.get(path, set())

    def recent_history(self, path: str) -> list[HistoryPoint]:
        """The last few hours of minute buckets ('' for the whole server)."""
        return list(self._history.get(path, ()))

    def history(self, path: str, since_bucket: int) -> list[HistoryPoint]:
        """Longer history than memory holds, read from disk (sampler thread or tests)."""
        rows = self.db.execute(
            "SELECT bucket, spend, waste FROM history WHERE path = ? AND bucket >= ?"
            " ORDER BY bucket",
            (path, since_bucket),
        ).fetchall()
        return [HistoryPoint(*r) for r in rows]

    def history_buckets(self, first: int, last: int,
                        step: int) -> list[tuple[int, str, float, float]]:
        """Every path's minute increments from epoch minute `first` to `last` (inclusive),
        summed in SQLite into buckets of `step` minutes aligned on multiples of `step`:
        (bucket's first minute, path, spend, waste). Worker thread, like `history`."""
        rows = self.db.execute(
            "SELECT (bucket / ?) * ?, path, SUM(spend), SUM(waste) FROM history"
            " WHERE bucket >= ? AND bucket <= ? GROUP BY 1, 2 ORDER BY 1, 2",
            (step, step, first, last),
        ).fetchall()
        return [(int(b), str(p), float(s), float(w)) for b, p, s, w in rows]

    def close(self) -> None:
        self.db.close()


def default_db_path() -> str:
    return str(data_dir() / "ledger.sqlite")



@dataclass(frozen=True)
class NotebookSpend:
    """One notebook's spend over every kernel that ran it."""

    path: str
    spend: float
    waste: float
    kernels: int


@dataclass(frozen=True)
class LedgerReport:
    """What `jupyter costguard report` prints: the server's totals (None before the first
    sample) and the notebooks that spent most."""

    server: ServerTotals | None
    notebooks: list[NotebookSpend]


def read_report(db_path: str | Path, top: int) -> LedgerReport:
    """The report, read-only from a ledger file a running server may be writing (its reads do
    not wait for the sampler's commits, nor hold them up)."""
    db = open_read_only(db_path)
    try:
        row = db.execute(
            "SELECT since, last_sample, spend, waste, unattributed, unattributed_gpu, seconds "
            "FROM server WHERE id = 1").fetchone()
        rows = db.execute(
            "SELECT path, SUM(spend), SUM(waste), COUNT(*) FROM consumer WHERE path != ''"
            " GROUP BY path ORDER BY SUM(spend) DESC LIMIT ?", (top,)).fetchall()
    finally:
        db.close()
    return LedgerReport(ServerTotals(*row) if row else None,
                        [NotebookSpend(*r) for r in rows])

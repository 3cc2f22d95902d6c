"""Hibernate a kernel (save its variables, then shut it down so its GPUs are freed), restore a
snapshot into a new kernel of the same notebook, list and delete snapshots.

Order is the promise: the kernel is shut down only after its snapshot is on disk, its manifest
read back, MACed and in the index, and only if no cell ran or was queued since the save began
(a cell sent meanwhile runs after the save, so its work would not be in the snapshot: the
snapshot is then discarded and the kernel keeps running); if anything before that fails the
kernel keeps running and the error says why. What a save may leave unsaved: nothing when it
is automatic (unless the admin's `may_leave_behind`), values that cannot live outside the
process when the user asked (`kernel.hibernate.LEAVE_*`), whatever cannot be saved when the
server is stopping (the kernel ends anyway). A save given up (its timeout, an error) leaves
nothing on disk: what it wrote is removed, and a marker tells the kernel, should it finish
later, to keep nothing. A restore loads only a snapshot whose MAC checks, into a kernel whose
session is the snapshot's notebook, for the server's owner who made it; the kernel is handed
the manifest digest the server checked, and checks every file against it before loading.

Disk, hashing and SQLite work runs on the service's one worker thread, and what may wait on
the snapshot store (an object store) on store threads of its own, never on the IO loop;
messages to kernels are awaited on the loop. What the service needs of the server (kernel
manager, session table, the latest views) it is given as plain objects and callables.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from prometheus_client.core import GaugeMetricFamily, Metric

from jupyter_costguard.cost.money import round_money
from jupyter_costguard.hibernate import mac, store
from jupyter_costguard.hibernate.errors import HibernateError
from jupyter_costguard.hibernate.kernelcall import call
from jupyter_costguard.hibernate.storagecost import StoragePrice, cost_doc
from jupyter_costguard.hibernate.store import SnapshotRecord, SnapshotStore
from jupyter_costguard.kernel.hibernate import (
    LEAVE_ANY,
    LEAVE_LIVE,
    LEAVE_NOTHING,
    CorruptSnapshot,
    Manifest,
    count_code,
    manifest_digest,
    read_manifest,
    restore_code,
    save_code,
    where,
)
from jupyter_costguard.sampling.kernels import session_paths

T = TypeVar("T")


@dataclass(frozen=True)
class Held:
    """What a kernel held when it was hibernated (from the latest sample's views)."""

    gpus: int = 0
    rate_per_hour: float | None = None


@dataclass(frozen=True)
class HibernateSettings:
    """What the service reads: `c.Hibernate`'s settings (`Hibernate.service_settings`, where
    their defaults and help live), resolved, and the service's own timings."""

    timeout_seconds: float
    max_bytes: int
    #: whether an automatic hibernation may leave behind values that cannot live outside the
    #: process (generators, open files, locks...)
    may_leave_behind: bool
    #: an fsspec URL new snapshots are written under (None: folders in the root)
    store_url: str | None
    #: what the store new snapshots go to costs (None: no price)
    price: StoragePrice | None
    #: how long a restore waits for a busy kernel to become idle before it answers 409: a
    #: kernel JupyterLab has just started is busy a moment with the page's own requests
    restore_wait_seconds: float = 10.0
    #: how long the check after a save (that no cell ran since it began) may wait: a cell
    #: queued behind the save holds it up, and is a reason to keep the kernel anyway
    check_seconds: float = 30.0


#: how often a waiting restore looks at the kernel's state again (seconds)
IDLE_POLL_SECONDS = 0.05


class HibernateService:
    """Snapshots of this server's kernels. `held(kernel_id)` says what a kernel holds now;
    `owner` is the Hub user whose server this is (None outside a hub): a snapshot records it,
    and another owner's is neither restored, listed, counted nor deleted (`owns`)."""

    def __init__(self, root: Path, key_file: Path, kernel_manager: Any, session_manager: Any,
                 settings: HibernateSettings, held: Callable[[str], Held] = lambda k: Held(),
                 owner: str | None = None, logger: Any = None,
                 currency: Callable[[], str] = lambda: "USD") -> None:
        self.store = SnapshotStore(root, settings.store_url)  # at start, before the loop serves
        self._key = mac.load_key(key_file)
        self.km = kernel_manager
        self.sessions = session_manager
        self.settings = settings
        self.held = held
        self.owner = owner
        self.log = logger
        self.currency = currency
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="costguard-hibernate")
        #: what may wait on the snapshot store (an object store across the network): its own
        #: threads, so a slow store holds up neither listings and scrapes nor a server stop
        self._io = ThreadPoolExecutor(max_workers=4,
                                      thread_name_prefix="costguard-hibernate-store")
        #: told the id of each snapshot restored or deleted (on the IO loop): what announced
        #: it (the idle rule's "hibernated" notice) ends with it
        self.listeners: list[Callable[[str], Awaitable[None]]] = []
        #: kernels being hibernated or restored into now: one operation per kernel at a time
        self._working: set[str] = set()
        #: snapshot id -> what resume on use is doing with it now (`resume.py`): restoring
        #: into a notebook's new kernel ({"restoring": {...}}), or why that last failed
        #: ({"restore_error": why}); the snapshot's doc carries it
        self.resuming: dict[str, dict[str, Any]] = {}
        removed = self.store.clear_leftovers(older_than=settings.timeout_seconds)
        #: the index as last read on the worker: what a scrape reads, without touching disk
        self._records: list[SnapshotRecord] = self.store.list()
        if removed and logger is not None:
            logger.info("costguard: removed %d unfinished, abandoned or unindexed snapshot "
                        "folder(s) in %s", len(removed), root)
        # an object store is not reached from the loop, nor made to hold up the start
        self._io.submit(self._clear_store, settings.timeout_seconds)

    def _clear_store(self, older_than: float) -> None:
        removed = self.store.clear_store_leftovers(older_than)
        if removed and self.log is not None:
            self.log.info("costguard: removed %d unfinished snapshot(s) from the snapshot "
                          "store: %s", len(removed), ", ".join(removed))

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    async def _in_store(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn` on a store thread: it reads or writes the snapshot store (and the index,
        whose calls are locked)."""
        return await asyncio.get_running_loop().run_in_executor(self._io, fn, *args)

    def _kernel(self, kernel_id: str) -> Any:
        try:
            return self.km.get_kernel(kernel_id)
        except KeyError:
            raise HibernateError(f"no running kernel {kernel_id}", 404) from None

    def notebook_of(self, kernel_id: str) -> str | None:
        """The notebook path of the kernel's session (the session table; one SELECT)."""
        return session_paths(self.sessions).get(kernel_id)

    def _idle(self, kernel: Any, kernel_id: str, doing: str, waited: float | None = None
              ) -> None:
        if getattr(kernel, "execution_state", None) == "busy":
            how_long = "" if waited is None else \
                f" (waited {waited:.1f} s for it to become idle)"
            raise HibernateError(f"kernel {kernel_id} is busy running a cell{how_long}; "
                                 f"{doing} it once it is idle (or interrupt it first)", 409)

    async def _wait_idle(self, kernel: Any, kernel_id: str, doing: str) -> None:
        """Wait (on the loop, without blocking it) up to `restore_wait_seconds` for a busy
        kernel to become idle, then refuse as `_idle` does, saying how long it waited."""
        limit = self.settings.restore_wait_seconds
        start = time.monotonic()
        while (getattr(kernel, "execution_state", None) == "busy"
               and time.monotonic() - start < limit):
            await asyncio.sleep(IDLE_POLL_SECONDS)
        self._idle(kernel, kernel_id, doing, waited=time.monotonic() - start)

    # --- hibernate ---------------------------------------------------------------------

    @contextlib.contextmanager
    def _one_at_a_time(self, kernel_id: str) -> Iterator[None]:
        """409 while another hibernate or restore of this kernel is under way (a second
        hibernate would queue its save behind the first, whose shutdown then cuts it off)."""
        if kernel_id in self._working:
            raise HibernateError(f"kernel {kernel_id} is already being hibernated or restored "
                                 "into; wait for that to finish", 409)
        self._working.add(kernel_id)
        try:
            yield
        finally:
            self._working.discard(kernel_id)

    async def hibernate(self, kernel_id: str, automatic: bool = False) -> dict[str, Any]:
        """Save the kernel's variables, then shut it down; the answer of `POST
        kernels/{id}/hibernate` (a user's: values that cannot live outside the process may be
        left behind, named). `automatic` (the idle rule's): every variable is saved or the
        kernel keeps running, and the error names those that block it, unless the admin's
        `may_leave_behind` lets it leave the same values a user may."""
        leave = LEAVE_LIVE if not automatic or self.settings.may_leave_behind else \
            LEAVE_NOTHING
        return await self._hibernate_one(kernel_id, leave)

    async def _hibernate_one(self, kernel_id: str, leave: str) -> dict[str, Any]:
        self._kernel(kernel_id)
        with self._one_at_a_time(kernel_id):
            return await self._hibernate(kernel_id, leave)

    async def _hibernate(self, kernel_id: str, leave: str) -> dict[str, Any]:
        kernel = self._kernel(kernel_id)
        notebook = self.notebook_of(kernel_id)
        if not notebook:
            raise HibernateError(f"kernel {kernel_id} belongs to no notebook session; only a "
                                 "notebook's kernel can be hibernated (its snapshot is restored "
                                 "into that notebook)", 409)
        self._idle(kernel, kernel_id, "hibernate")
        held = self.held(kernel_id)
        kernel_name = getattr(kernel, "kernel_name", "") or ""
        snapshot_id = store.new_id()
        dest = self.store.new_location(snapshot_id)
        # noted: what a save cut off (a timeout, a server killed) leaves is found and removed
        await self._off_loop(self.store.begin, snapshot_id, dest)
        try:
            answer = await call(kernel, kernel_id,
                                save_code(dest, self.settings.max_bytes, leave,
                                          self.store.abandoned_marker(snapshot_id)),
                                self.settings.timeout_seconds, "saving its variables")
        except asyncio.CancelledError:  # cut off (a stop's budget): a folder's removal ends
            # before the server does; an object store, which may not answer and so hold up
            # the stop, is cleared at the next start (the save stays noted pending)
            if not where.is_remote(dest):
                self._pool.submit(self._abandon, snapshot_id, dest, True)
            raise
        except Exception:  # given up (its timeout): nothing is kept
            await self._in_store(self._abandon, snapshot_id, dest, True)
            raise
        if "error" in answer:
            await self._in_store(self._abandon, snapshot_id, dest)
            raise HibernateError(f"the variables of kernel {kernel_id} could not be saved, so "
                                 f"it keeps running: {where.scrub(str(answer['error']), dest)}",
                                 409)
        try:
            record = await self._in_store(self._seal, snapshot_id, dest, notebook, kernel_name,
                                          held)
        except Exception as e:
            await self._in_store(self._abandon, snapshot_id, dest)
            raise HibernateError(f"the snapshot of kernel {kernel_id} could not be recorded, "
                                 f"so it keeps running: {where.scrub(str(e), dest)}", 409) from e
        if leave != LEAVE_ANY:  # at a stop the kernel ends anyway: the snapshot is kept
            why = await self._used_since_save(kernel, kernel_id, answer.get("execution_count"))
            if why is not None:
                await self._in_store(self._drop, snapshot_id)
                raise HibernateError(f"kernel {kernel_id} keeps running: {why}, so its "
                                     "snapshot would miss that work (it was discarded); "
                                     "hibernate it again once it is idle", 409)
        try:
            done = self.km.shutdown_kernel(kernel_id)
            if inspect.isawaitable(done):  # the async manager (jupyter_server's default)
                await done
        except Exception as e:  # saved and recorded: say so, the kernel's fate is the server's
            if self.log is not None:
                self.log.warning("costguard: kernel %s hibernated as %s but did not shut "
                                 "down: %s", kernel_id, snapshot_id, e)
            raise HibernateError(f"the variables were saved as snapshot {snapshot_id}, but "
                                 f"kernel {kernel_id} could not be shut down: {e}", 500) from e
        return {**self._doc(record), "gpus_freed": held.gpus}

    async def _used_since_save(self, kernel: Any, kernel_id: str, count: Any) -> str | None:
        """Why the kernel is not still as it was saved, or None. A cell sent during the save
        waits in the kernel's queue and runs after it: a call queued now runs after every
        such cell, and the execution count it reads says whether one ran. A cell still
        running is a reason too (the call is not waited for beyond `check_seconds`). The
        server's `execution_state` is no measure here: it still says busy a moment after the
        server's own calls."""
        try:
            now = await call(kernel, kernel_id, count_code(),
                             min(self.settings.check_seconds, self.settings.timeout_seconds),
                             "checking that no cell ran since the save")
        except HibernateError:
            return "a cell sent during the save is still running or queued"
        if type(count) is not int or now.get("execution_count") != count:
            return "a cell ran after its variables were saved"
        return None

    def _abandon(self, snapshot_id: str, dest: str, still_writing: bool = False) -> None:
        """Remove what a save given up on wrote (an error, the kernel's refusal, or, while the
        kernel may be `still_writing`, a timeout: it is then marked abandoned so the kernel
        keeps nothing either); a store that refuses now is tried again at the next start
        (the save stays noted pending)."""
        try:
            if still_writing:
                self.store.abandon(snapshot_id, dest)
            else:
                self.store.discard(snapshot_id, dest)
        except Exception as e:
            if self.log is not None:
                self.log.warning("costguard: could not remove the unfinished snapshot %s: %s",
                                 where.shown(dest), where.scrub(str(e), dest))

    def _drop(self, snapshot_id: str) -> None:
        """Forget and remove a sealed snapshot whose kernel was not shut down after all."""
        try:
            self.store.remove(snapshot_id)
        except Exception as e:  # forgotten; its objects are removed at a later start
            if self.log is not None:
                self.log.warning("costguard: could not remove the snapshot %s: %s",
                                 snapshot_id, type(e).__name__)
        self._records = self.store.list()

    def _seal(self, snapshot_id: str, dest: str, notebook: str, kernel_name: str, held: Held
              ) -> SnapshotRecord:
        """Read back what the kernel wrote (not what it printed), MAC it and index it."""
        manifest = read_manifest(dest)
        bound = mac.binding(snapshot_id, notebook, self.owner, kernel_name)
        record = SnapshotRecord(
            id=snapshot_id, notebook=notebook, created=manifest.created, bytes=manifest.bytes,
            saved=manifest.saved, skipped=[_skipped(s) for s in manifest.skipped],
            kernel_name=kernel_name, user=self.owner, gpus_held=held.gpus,
            rate_per_hour_held=held.rate_per_hour, digest=manifest_digest(manifest),
            mac=mac.sign(self._key, bound, manifest),
            location=self.store.elsewhere(snapshot_id, dest))
        self.store.add(record)
        self._records = self.store.list()
        return record

    # --- when the server stops ----------------------------------------------------------

    async def hibernate_on_stop(self, kernel_ids: list[str], budget: float
                                ) -> dict[str, str]:
        """Hibernate `kernel_ids` (the kernels holding GPUs) side by side within `budget`
        seconds in all, before the server shuts its kernels down: any stop (a spawner's
        SIGTERM, a culler, auto-stop) then keeps their work. Returns kernel id -> snapshot id
        or why not. A kernel busy running a cell is not interrupted (its save would wait
        behind the cell); one not done within the budget is given up and its partial files
        are cleared at the next start."""
        outcome: dict[str, str] = {}

        async def one(kernel_id: str) -> None:
            try:  # the kernel ends anyway: whatever can be kept is
                doc = await self._hibernate_one(kernel_id, LEAVE_ANY)
            except HibernateError as e:
                outcome[kernel_id] = f"not hibernated: {e}"
            else:
                outcome[kernel_id] = str(doc["id"])

        tasks = [asyncio.ensure_future(one(k)) for k in kernel_ids]
        if not tasks:
            return outcome
        _, pending = await asyncio.wait(tasks, timeout=budget)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for kernel_id in kernel_ids:
            outcome.setdefault(kernel_id, f"not hibernated: not done within {budget:g} s "
                                          "(c.Hibernate.on_stop_seconds)")
        return outcome

    # --- restore -----------------------------------------------------------------------

    async def restore(self, snapshot_id: str, kernel_id: str, *,
                      wrap: Callable[[str], str] | None = None,
                      started: Callable[[], None] | None = None) -> dict[str, Any]:
        """Load the snapshot into `kernel_id`, a kernel of the same notebook; the answer of
        `POST snapshots/{id}/restore`. Resume on use (`resume.py`) runs the restore cell
        `wrap`ped and is told when the kernel has `started` it."""
        record = await self.get(snapshot_id)  # this server's owner's, or 404
        kernel = self._kernel(kernel_id)
        notebook = self.notebook_of(kernel_id)
        if notebook != record.notebook:
            raise HibernateError(
                f"snapshot {snapshot_id} is of {record.notebook}; kernel {kernel_id} is "
                f"{'of ' + notebook if notebook else 'of no notebook'}: a snapshot is restored "
                "only into a kernel of its own notebook", 409)
        with self._one_at_a_time(kernel_id):
            digest = await self._in_store(self._check, record)
            await self._wait_idle(kernel, kernel_id, "restore into")
            src = self.store.location(record)
            staging = self.store.root if where.is_remote(src) else None
            code = restore_code(src, digest, staging)
            answer = await call(kernel, kernel_id, wrap(code) if wrap else code,
                                self.settings.timeout_seconds, "loading the snapshot",
                                started=started)
        if "error" in answer:
            raise HibernateError(f"snapshot {snapshot_id} was not restored: "
                                 f"{where.scrub(str(answer['error']), src)}", 409)
        await self._off_loop(self._restored, snapshot_id, time.time())
        await self._tell(snapshot_id)
        replaced = [str(n) for n in answer.get("replaced", [])]
        if replaced and self.log is not None:
            self.log.warning("costguard: restoring snapshot %s into kernel %s replaced the "
                             "kernel's own values of %s", snapshot_id, kernel_id,
                             ", ".join(replaced))
        return {"restored": list(answer.get("restored", [])),
                "skipped": [_skipped(s) for s in answer.get("skipped", [])],
                "notes": list(answer.get("notes", [])), "replaced": replaced}

    def _check(self, record: SnapshotRecord) -> str:
        """The digest of the snapshot's manifest, if its MAC is this server's for this
        record; else HibernateError (409): nothing is loaded."""
        try:
            manifest: Manifest = read_manifest(self.store.location(record))
        except CorruptSnapshot as e:
            raise HibernateError(f"snapshot {record.id} cannot be restored: "
                                 f"{where.scrub(str(e), self.store.location(record))}",
                                 409) from None
        bound = mac.binding(record.id, record.notebook, record.user, record.kernel_name)
        if not mac.verify(self._key, bound, manifest, record.mac):
            raise HibernateError(
                f"snapshot {record.id} was changed after this server wrote it (its MAC does "
                "not match); it is not loaded", 409)
        return manifest_digest(manifest)

    # --- list, get, delete -------------------------------------------------------------

    def owns(self, record: SnapshotRecord) -> bool:
        """Whether `record` is this server's owner's: the one test restoring, listing,
        deleting and the metrics apply. Another owner's snapshot (an index a hub admin pointed
        several users' servers at) does not exist for this server: it is neither shown nor
        counted, and asking for it by id is a 404 like an id never made, so its existence
        does not leak either."""
        return record.user == self.owner

    async def get(self, snapshot_id: str) -> SnapshotRecord:
        """This owner's snapshot `snapshot_id`; 404 for one there is none of, or another's."""
        if not store.ID_PATTERN.match(snapshot_id):
            raise HibernateError(f"no snapshot {snapshot_id}", 404)
        record = await self._off_loop(self.store.get, snapshot_id)
        if record is None or not self.owns(record):
            raise HibernateError(f"no snapshot {snapshot_id}", 404)
        return record

    async def pending(self, notebook: str) -> SnapshotRecord | None:
        """The notebook's newest snapshot of this owner if it is not restored yet: what its
        next kernel resumes from (None: nothing to resume). From the index as last read, so
        a kernel's start never waits on the disk or the snapshot store."""
        records = [r for r in self._records if r.notebook == notebook and self.owns(r)]
        newest = max(records, key=lambda r: r.created, default=None)
        return None if newest is None or newest.restored is not None else newest

    async def listing(self, notebook: str | None = None) -> dict[str, Any]:
        """The answer of `GET snapshots`: this owner's snapshots, newest first, and the waste
        they avoided together (in `currency`)."""
        records = [r for r in await self._off_loop(self.store.list, notebook) if self.owns(r)]
        now = time.time()
        docs = [self._doc(r, now) for r in records]
        priced = [d for d in docs if d["storage_cost"] is not None]
        price = self.settings.price
        return {"snapshots": docs, "currency": self.currency(),
                "waste_avoided": store.waste_removed(records, now),
                "storage_price": None if price is None else price.doc(now, self.currency()),
                "storage_cost": round_money(sum(d["storage_cost"] for d in priced))
                if priced else None,
                "storage_cost_per_month": round_money(
                    sum(d["storage_cost_per_month"] for d in priced)) if priced else None}

    async def delete(self, snapshot_id: str) -> None:
        if not store.ID_PATTERN.match(snapshot_id) or \
                not await self._in_store(self._remove, snapshot_id):
            raise HibernateError(f"no snapshot {snapshot_id}", 404)
        await self._tell(snapshot_id)

    async def _tell(self, snapshot_id: str) -> None:
        for listener in self.listeners:
            try:
                await listener(snapshot_id)
            except Exception:  # a listener's failure is not the restore's or the delete's
                if self.log is not None:
                    self.log.exception("costguard: after snapshot %s", snapshot_id)

    def _remove(self, snapshot_id: str) -> bool:
        """Forget and delete this owner's snapshot; False when there is none (or it is
        another's: left as it is)."""
        record = self.store.get(snapshot_id)
        if record is None or not self.owns(record):
            return False
        try:
            gone = self.store.remove(snapshot_id)
        except Exception as e:  # forgotten, its objects noted for removal at a later start
            self._records = self.store.list()
            raise HibernateError(f"snapshot {snapshot_id} is forgotten, but its files could not "
                                 f"be removed now (they will be at the next start): "
                                 f"{type(e).__name__}", 502) from None
        self._records = self.store.list()
        return gone

    def _restored(self, snapshot_id: str, when: float) -> None:
        self.store.mark_restored(snapshot_id, when)
        self._records = self.store.list()

    def _price_of(self, record: SnapshotRecord) -> StoragePrice | None:
        """The price of the store the snapshot is in: the configured one's, or none."""
        return self.settings.price if self.store.in_store(record) else None

    def _doc(self, record: SnapshotRecord, now: float | None = None) -> dict[str, Any]:
        now = time.time() if now is None else now
        resuming = self.resuming.get(record.id, {})
        return {**record.doc(now), "restoring": resuming.get("restoring"),
                "restore_error": resuming.get("restore_error"),
                **cost_doc(self._price_of(record), record.bytes, now - record.created)}

    def waste_removed(self, now: float | None = None) -> float:
        """This owner's waste removed over the kept snapshots (`store.waste_removed`), from the
        index as last read: what `/metrics` and the hub report say (no disk)."""
        return store.waste_removed([r for r in self._records if self.owns(r)],
                                   time.time() if now is None else now)

    def metrics(self) -> list[Metric]:
        """The kept snapshots, their bytes and the waste they avoided, from the index as
        last read (a scrape reads no disk)."""
        records, now, currency = [r for r in self._records if self.owns(r)], time.time(), \
            self.currency()
        count = GaugeMetricFamily("costguard_snapshots", "Hibernated kernels' snapshots kept.")
        count.add_metric([], len(records))
        size = GaugeMetricFamily("costguard_snapshot_bytes", "Bytes the kept snapshots hold.")
        size.add_metric([], float(sum(r.bytes for r in records)))
        waste = GaugeMetricFamily(
            "costguard_hibernate_waste_avoided",
            "The waste removed: the rate each hibernated kernel held times the time it stayed "
            "hibernated (until its first restore, at most 12 h a snapshot), over the kept "
            "snapshots, in the labelled currency.", labels=["currency"])
        waste.add_metric([currency], self.waste_removed(now))
        return [count, size, waste, *self._storage_metrics(records, now, currency)]

    def _storage_metrics(self, records: list[SnapshotRecord], now: float, currency: str
                         ) -> list[Metric]:
        """What keeping the snapshots costs, so far and per month, where the store has a
        price; without a price the families have no sample ("no price", not 0)."""
        so_far = GaugeMetricFamily(
            "costguard_snapshot_storage_cost",
            "What keeping the kept snapshots has cost so far, at the snapshot store's price "
            "per GiB-month, in the labelled currency (no sample: no price).",
            labels=["currency"])
        monthly = GaugeMetricFamily(
            "costguard_snapshot_storage_cost_per_month",
            "What keeping the kept snapshots costs per month at the snapshot store's price, "
            "in the labelled currency (no sample: no price).", labels=["currency"])
        priced = [(r, p) for r in records if (p := self._price_of(r)) is not None]
        if priced:
            so_far.add_metric([currency], round_money(
                sum(p.so_far(r.bytes, now - r.created) for r, p in priced)))
            monthly.add_metric([currency], round_money(
                sum(p.per_month(r.bytes) for r, p in priced)))
        return [so_far, monthly]

    def close(self) -> None:
        # a store call still under way (a slow object store) is not waited for
        self._io.shutdown(wait=False, cancel_futures=True)
        self._pool.shutdown(wait=True)
        self.store.close()


def _skipped(s: Any) -> dict[str, Any]:
    """A skipped name as the API shows it: {"name", "reason"} (and "module" when that is it)."""
    d = s if isinstance(s, dict) else {"name": s.name, "reason": s.reason, "module": s.module}
    out = {"name": str(d.get("name")), "reason": str(d.get("reason"))}
    if d.get("module"):
        out["module"] = str(d["module"])
    return out


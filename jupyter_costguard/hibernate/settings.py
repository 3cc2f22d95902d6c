"""The hibernate and snapshot options (`c.Hibernate.<name>`), declared beside the part they
configure; the server extension creates them with itself as parent."""

from __future__ import annotations

import datetime as dt
from typing import Any, ClassVar

from traitlets import Bool, Float, Int, TraitError, Unicode, validate
from traitlets.config import Configurable

from jupyter_costguard.hibernate.service import HibernateSettings
from jupyter_costguard.hibernate.storagecost import StoragePrice
from jupyter_costguard.kernel.hibernate import where


class Hibernate(Configurable):
    """Hibernation: where snapshots go, what their store costs, how long a save may take."""

    #: the old names (`c.CostGuard.<old>`), which still work for a release
    moved_from_costguard: ClassVar[dict[str, str]] = {
        "snapshot_dir": "snapshot_dir",
        "snapshot_store_url": "snapshot_store_url",
        "snapshot_store_price_per_gib_month": "snapshot_store_price_per_gib_month",
        "snapshot_store_price_source": "snapshot_store_price_source",
        "snapshot_store_price_as_of": "snapshot_store_price_as_of",
        "hibernate_timeout_seconds": "timeout_seconds",
        "hibernate_max_bytes": "max_bytes",
        "hibernate_may_leave_behind": "may_leave_behind",
        "hibernate_resume": "resume",
        "hibernate_on_stop_seconds": "on_stop_seconds",
    }

    snapshot_dir = Unicode(
        "", config=True,
        help="Folder of the hibernated kernels' snapshots and their index (made 0700). Empty: "
             "'snapshots' beside the ledger (the costguard data folder). On a hub, each "
             "user's are in users/<user>/ of it, with their own index (and key).")
    snapshot_store_url = Unicode(
        "", config=True,
        help="Where new snapshots are written: an fsspec URL such as s3://bucket/prefix or "
             "gs://bucket/prefix (needs fsspec, and s3fs or gcsfs), or a folder or file:// "
             "URL. Empty: the snapshot_dir folder. Each snapshot is a prefix <url>/<id>/ whose "
             "manifest is written last; the index stays in snapshot_dir. Credentials come "
             "from the environment the server and its kernels share (AWS_* variables, "
             "fsspec's configuration), never from this URL: put none in it. Use one prefix "
             "per server.")
    snapshot_store_price_per_gib_month = Float(
        None, allow_none=True, config=True,
        help="What the snapshot store charges per GiB-month, in the server's currency "
             "(c.CostGuard.currency); the panel and /metrics then show each snapshot's "
             "storage cost. None: no price (shown as such, never as 0).")
    snapshot_store_price_source = Unicode(
        "", config=True,
        help="Where snapshot_store_price_per_gib_month comes from (a price page's URL, or "
             "'our contract'), shown with the price.")
    snapshot_store_price_as_of = Unicode(
        "", config=True,
        help="The date snapshot_store_price_per_gib_month was read (YYYY-MM-DD); its age is "
             "shown, and it is called stale after price_stale_after_days.")
    timeout_seconds = Float(
        600.0, config=True,
        help="How long a kernel may take to save (or load) its variables. Past it the request "
             "is refused and the kernel keeps running.")
    max_bytes = Int(
        100 * 10**9, config=True,
        help="The largest snapshot a kernel may write (bytes); a larger namespace is refused, "
             "naming its largest values, and the kernel keeps running.")
    may_leave_behind = Bool(
        False, config=True,
        help="Whether an automatic hibernation (c.Guard.hibernate_idle_after_seconds) may leave "
             "behind values that cannot live outside the process (generators, open files, "
             "locks, sockets, threads, connections), naming them, as a hand-made Hibernate "
             "does. Off: an idle kernel is hibernated only when every variable is saved; "
             "otherwise it keeps running and the alert names the variables that block it. "
             "Any other value that fails to save always keeps the kernel running.")
    resume = Bool(
        True, config=True,
        help="Resume on use: when a notebook with a pending snapshot (hibernated, not restored "
             "or discarded) gets a new kernel, the server restores the snapshot into it "
             "before any cell runs; a restore that fails makes the first cell say why "
             "instead of running. False: only the notebook's Restore button restores.")
    on_stop_seconds = Float(
        30.0, config=True,
        help="When the server stops, hibernate the kernels that hold GPUs first, within this "
             "many seconds in all (0: off).")

    #: why snapshot_store_url was refused (None: it was not): hibernate is then off
    store_url_refused: str | None = None

    @validate("snapshot_store_url")
    def _check_store_url(self, proposal: Any) -> str:
        """A URL that carries credentials (or a query or fragment, where a signed URL keeps
        its signature) is refused, that one setting alone: raising here would stop the
        whole extension from loading. Hibernate is then off, saying why (`_hibernate_service`);
        the rest of costguard runs."""
        url = str(proposal["value"]).strip()
        self.store_url_refused = None
        if where.is_remote(url) and where.shown(url) != url:
            self.store_url_refused = (
                f"c.Hibernate.snapshot_store_url ({where.shown(url)}) was refused: it carries "
                "credentials, a query or a fragment, which do not belong in the URL (they "
                "would reach the kernels' code and the logs); give credentials through the "
                "store's own mechanisms (the environment, such as AWS_* variables, or "
                "fsspec's configuration)")
            return ""
        return url

    @validate("snapshot_store_price_per_gib_month")
    def _check_price(self, proposal: Any) -> float | None:
        value = proposal["value"]
        if value is not None and not value >= 0:
            raise TraitError("snapshot_store_price_per_gib_month must be 0 or more")
        return None if value is None else float(value)

    @validate("snapshot_store_price_as_of")
    def _check_as_of(self, proposal: Any) -> str:
        value = str(proposal["value"]).strip()
        if value:
            try:
                dt.date.fromisoformat(value)
            except ValueError:
                raise TraitError(f"snapshot_store_price_as_of must be a date (YYYY-MM-DD), not "
                                 f"{value!r}") from None
        return value

    def service_settings(self, stale_after_days: int) -> HibernateSettings:
        """What the service reads: these settings, the store's price resolved."""
        return HibernateSettings(timeout_seconds=self.timeout_seconds, max_bytes=self.max_bytes,
                                 may_leave_behind=self.may_leave_behind,
                                 store_url=self.snapshot_store_url or None,
                                 price=self.snapshot_store_price(stale_after_days))

    def snapshot_store_price(self, stale_after_days: int) -> StoragePrice | None:
        """The snapshot store's price as configured, or None (no price)."""
        if self.snapshot_store_price_per_gib_month is None:
            return None
        return StoragePrice(per_gib_month=float(self.snapshot_store_price_per_gib_month),
                            source=self.snapshot_store_price_source or "config",
                            as_of=self.snapshot_store_price_as_of or None,
                            stale_after_days=stale_after_days)

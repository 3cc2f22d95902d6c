"""The hibernate options (`c.CostGuard.snapshot_dir`, `hibernate_*`), declared beside the part
they configure and mixed into the server extension."""

from __future__ import annotations

from traitlets import Float, HasTraits, Int, Unicode


class HibernateTraits(HasTraits):
    snapshot_dir = Unicode(
        "", config=True,
        help="Folder of the hibernated kernels' snapshots and their index (made 0700). Empty: "
             "'snapshots' beside the ledger (the costguard data folder).")
    hibernate_timeout_seconds = Float(
        600.0, config=True,
        help="How long a kernel may take to save (or load) its variables. Past it the request "
             "is refused and the kernel keeps running.")
    hibernate_max_bytes = Int(
        100 * 10**9, config=True,
        help="The largest snapshot a kernel may write (bytes); a larger namespace is refused, "
             "naming its largest values, and the kernel keeps running.")
    hibernate_on_stop_seconds = Float(
        30.0, config=True,
        help="When the server stops, hibernate the kernels that hold GPUs first, within this "
             "many seconds in all (0: off).")

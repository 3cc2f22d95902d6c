"""The metadata lookup, kept fresh on a thread of its own.

Off a cloud a lookup waits about one timeout; on one, a few round trips. Neither may hold up
the server's start or its IO loop, so the first lookup starts with the server and the price
is re-decided when it answers. The lifecycle (spot or on-demand) can change only on restart,
but an instance can be stopped and started as another type, so it is asked again every few
minutes.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from jupyter_costguard.cloud.metadata import MetadataResult, describe

log = logging.getLogger(__name__)


class MetadataWatcher:
    """`result` is None until the first lookup has answered, then the latest answer."""

    def __init__(self, lookup: Callable[[], MetadataResult], interval: float = 300.0) -> None:
        self._lookup = lookup
        self.interval = max(1.0, interval)
        self.result: MetadataResult | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="costguard-metadata",
                                            daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        """The thread's loop: look up, keep a changed answer, wait; stops when lookups are off
        (or the first one raised, which `lookup` never should)."""
        while not self._stop.is_set():
            try:
                result = self._lookup()
            except Exception:  # lookup never raises; a bug here must not kill pricing
                log.exception("costguard: the cloud metadata lookup failed")
            else:
                if result != self.result:
                    if self.result is None or result.identity != self.result.identity:
                        log.info("costguard: %s", describe(result))
                    self.result = result
            if not self.result or not self.result.enabled:
                return  # turned off: nothing will change
            self._stop.wait(self.interval)

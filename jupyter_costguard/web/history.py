"""`GET costguard/api/history`: the server's spend and waste over time, per notebook, for
the cost panel's and the widget's spend chart.

The buckets are summed by SQLite on the service's worker thread (cost/timeline.py says how
coarse they are); the IO loop only parses the query and writes the answer."""

from __future__ import annotations

import json
import re

from jupyter_server.auth.decorator import authorized
from tornado import web

from jupyter_costguard.cost.timeline import DEFAULT_MINUTES, MAX_MINUTES
from jupyter_costguard.web.base import CostguardHandler

_DIGITS = re.compile(r"[0-9]{1,9}")


class HistoryHandler(CostguardHandler):
    """`?minutes=N` (1 to 10080, default 360), optionally `?notebook=<path>` and
    `?fit=true` (the window starts at the ledger's first minute when that is inside it)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        self._check_params("minutes", "notebook", "fit")
        raw = self.get_query_argument("minutes", None)
        minutes = DEFAULT_MINUTES
        if raw is not None:
            if not _DIGITS.fullmatch(raw):
                raise web.HTTPError(400, "minutes must be a whole number of minutes, not %r",
                                    raw[:40])
            minutes = int(raw)
            if not 1 <= minutes <= MAX_MINUTES:
                raise web.HTTPError(400, "minutes must be between 1 and %d (7 days)",
                                    MAX_MINUTES)
        fit = self.get_query_argument("fit", "false")
        if fit not in ("true", "false"):
            raise web.HTTPError(400, "fit must be true or false, not %r", fit[:40])
        notebook = self.get_query_argument("notebook", None)
        published = self.service.published
        if notebook is not None:
            notebook = notebook.strip("/")
            if not notebook:
                raise web.HTTPError(400, "notebook must be a notebook's server-relative path")
            if notebook not in published.views.notebooks:
                raise web.HTTPError(404, "no costs recorded for notebook %r", notebook)
        header = published.views.header
        common = header.doc() if header is not None else dict.fromkeys(
            ("simulated", "currency", "time", "user", "server"))
        doc = await self.service.spend_history(minutes, notebook, fit == "true")
        self.write_json_bytes(json.dumps({**common, **doc}).encode())

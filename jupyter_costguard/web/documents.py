"""Reads of the last published sample: status, gpus, kernels, notebooks, one notebook.

They come from memory (the published snapshot); only a notebook's long history is read from
the ledger, on the service's worker thread."""

from __future__ import annotations

import json

from jupyter_server.auth.decorator import authorized
from tornado import web

from jupyter_costguard.web.base import CostguardHandler

#: History longer than memory holds is read from SQLite; cap it so one request stays small.
MAX_HISTORY_MINUTES = 7 * 1440

DOCUMENTS = ("status", "gpus", "kernels", "notebooks")


class DocumentHandler(CostguardHandler):
    """Serves one prebuilt document (status, gpus, kernels, notebooks)."""

    def initialize(self, document: str) -> None:
        self.document = document

    @web.authenticated
    @authorized
    def get(self) -> None:
        self._check_params()
        self.write_json_bytes(self.service.published.views.document(self.document))


class NotebookHandler(CostguardHandler):
    """One notebook by its server-relative path, with optional longer history."""

    @web.authenticated
    @authorized
    async def get(self, path: str) -> None:
        path = path.strip("/")  # tornado has already URL-decoded it
        self._check_params("history_minutes")
        minutes = None
        raw = self.get_query_argument("history_minutes", None)
        if raw is not None:
            try:
                minutes = int(raw)
            except ValueError:
                raise web.HTTPError(
                    400, "history_minutes must be an integer, not %r", raw
                ) from None
            if not 1 <= minutes <= MAX_HISTORY_MINUTES:
                raise web.HTTPError(
                    400, "history_minutes must be between 1 and %d", MAX_HISTORY_MINUTES
                )
        doc = self.service.published.views.notebook_doc(path)
        if doc is None:
            raise web.HTTPError(404, "no costs recorded for notebook %r", path)
        if minutes is not None:
            doc = {**doc, "history": await self.service.history(path, minutes)}
        self.write_json_bytes(json.dumps(doc).encode())

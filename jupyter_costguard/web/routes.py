"""Every costguard route, under {base_url}costguard/api/; anything else there is a JSON 404."""

from __future__ import annotations

from typing import Any

from tornado import web

from jupyter_costguard.web.alerts import AlertActionHandler, AlertsHandler
from jupyter_costguard.web.base import API_PREFIX, NotFoundHandler
from jupyter_costguard.web.documents import DOCUMENTS, DocumentHandler, NotebookHandler
from jupyter_costguard.web.hibernate import routes as hibernate_routes
from jupyter_costguard.web.history import HistoryHandler
from jupyter_costguard.web.jobs import routes as job_routes
from jupyter_costguard.web.openapi import OpenAPIHandler


def handlers(base: str) -> list[tuple[str, type[web.RequestHandler], dict[str, Any]]]:
    def url(tail: str) -> str:
        return base.rstrip("/") + "/" + API_PREFIX + tail

    routes: list[tuple[str, type[web.RequestHandler], dict[str, Any]]] = [
        (url(f"/{d}"), DocumentHandler, {"document": d}) for d in DOCUMENTS
    ]
    routes += [
        (url(r"/notebooks/(.+)"), NotebookHandler, {}),
        (url("/history"), HistoryHandler, {}),
        (url("/alerts"), AlertsHandler, {}),
        (url(r"/alerts/([^/]+)/dismiss"), AlertActionHandler, {"action": "dismiss"}),
        (url(r"/alerts/([^/]+)/snooze"), AlertActionHandler, {"action": "snooze"}),
        (url("/openapi.json"), OpenAPIHandler, {}),
    ]
    routes += job_routes(url)
    routes += hibernate_routes(url)
    routes += [
        (url(r"/?(.*)"), NotFoundHandler, {}),
    ]
    return routes

"""REST handlers under {base_url}costguard/api/: thin readers of the last published sample."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from .service import CostService

AUTH_RESOURCE = "costguard"
API_PREFIX = "costguard/api"
OPENAPI_PATH = Path(__file__).with_name("openapi.yaml")
#: History longer than memory holds is read from SQLite; cap it so one request stays small.
MAX_HISTORY_MINUTES = 7 * 1440


class CostguardHandler(APIHandler):
    """Base: authenticated, authorised against the `costguard` resource, JSON errors."""

    auth_resource = AUTH_RESOURCE

    @property
    def service(self) -> CostService:
        svc: CostService = self.settings["costguard_service"]
        return svc

    def write_json_bytes(self, body: bytes) -> None:
        self.set_header("Content-Type", "application/json")
        self.set_header("Cache-Control", "no-store")
        self.finish(body)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """JSON error bodies with a message and no traceback, whatever went wrong."""
        self.set_header("Content-Type", "application/json")
        reason = self._reason
        message = reason
        exc_info = kwargs.get("exc_info")
        if exc_info:
            e = exc_info[1]
            if isinstance(e, web.HTTPError) and e.log_message:
                message = e.log_message % e.args if e.args else e.log_message
            elif status_code >= 500:
                message = "internal error; see the server log"
        self.finish(json.dumps({"status": status_code, "reason": reason, "message": message}))


class DocumentHandler(CostguardHandler):
    """Serves one prebuilt document (status, gpus, kernels, notebooks)."""

    def initialize(self, document: str) -> None:
        self.document = document

    @web.authenticated
    @authorized
    def get(self) -> None:
        self._check_no_params()
        self.write_json_bytes(self.service.published.views.documents[self.document])

    def _check_no_params(self) -> None:
        unknown = sorted(self.request.arguments)
        if unknown:
            raise web.HTTPError(400, "unknown query parameter(s): %s", ", ".join(unknown))


class NotebookHandler(CostguardHandler):
    """One notebook by its server-relative path, with optional longer history."""

    @web.authenticated
    @authorized
    async def get(self, path: str) -> None:
        path = unquote(path).strip("/")
        for name in self.request.arguments:
            if name != "history_minutes":
                raise web.HTTPError(400, "unknown query parameter: %s", name)
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
        published = self.service.published
        doc = published.views.notebooks.get(path)
        if doc is None:
            raise web.HTTPError(404, "no costs recorded for notebook %r", path)
        if minutes is not None:
            doc = {**doc, "history": await self.service.history(path, minutes)}
        self.write_json_bytes(json.dumps(doc).encode())


@functools.lru_cache(maxsize=1)
def openapi_json() -> bytes:
    import yaml

    return json.dumps(yaml.safe_load(OPENAPI_PATH.read_text())).encode()


class OpenAPIHandler(CostguardHandler):
    @web.authenticated
    @authorized
    def get(self) -> None:
        self.write_json_bytes(openapi_json())


class NotFoundHandler(CostguardHandler):
    """Anything else under the API prefix: a JSON 404 rather than an HTML page."""

    @web.authenticated
    @authorized
    def get(self, rest: str) -> None:
        raise web.HTTPError(404, "no such costguard endpoint: %s", rest)

    post = put = delete = patch = get


def handlers(base: str) -> list[tuple[str, type[web.RequestHandler], dict[str, Any]]]:
    def url(tail: str) -> str:
        return base.rstrip("/") + "/" + API_PREFIX + tail

    docs = ["status", "gpus", "kernels", "notebooks"]
    routes: list[tuple[str, type[web.RequestHandler], dict[str, Any]]] = [
        (url(f"/{d}"), DocumentHandler, {"document": d}) for d in docs
    ]
    routes += [
        (url(r"/notebooks/(.+)"), NotebookHandler, {}),
        (url("/openapi.json"), OpenAPIHandler, {}),
        (url(r"/?(.*)"), NotFoundHandler, {}),
    ]
    return routes

"""REST handlers under {base_url}costguard/api/: thin readers of the last published sample.

Reads come from memory (the published sample, the alert store). Alert changes are made in
memory on the IO loop and written by the service's worker thread, which the request awaits.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from jupyter_costguard.alerts.store import (
    MAX_BODY_BYTES,
    AlertError,
    AlertLimitError,
    AlertStore,
    parse_raise_request,
    parse_snooze_request,
)
from jupyter_costguard.cost.service import CostService

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

    @property
    def alerts(self) -> AlertStore:
        return self.service.alerts

    def read_json_body(self, limit: int = MAX_BODY_BYTES) -> Any:
        """The request's JSON body; None when empty. 400 when too large or not JSON."""
        raw = self.request.body or b""
        if len(raw) > limit:
            raise web.HTTPError(400, "request body is larger than %d bytes", limit)
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise web.HTTPError(400, "request body is not valid JSON") from None

    def _check_params(self, *allowed: str) -> None:
        """400 for unknown query parameters.

        A bare number with no value is JupyterLab's cache-buster (`ServerConnection` adds
        `?<timestamp>` to GETs), not a parameter.
        """
        unknown = sorted(
            name for name, values in self.request.query_arguments.items()
            if name not in allowed and not (name.isdigit() and values in ([b""], []))
        )
        if unknown:
            raise web.HTTPError(400, "unknown query parameter(s): %s", ", ".join(unknown))

    def write_json(self, doc: Any, status: int = 200) -> None:
        self.set_status(status)
        self.write_json_bytes(json.dumps(doc).encode())

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
        self._check_params()
        self.write_json_bytes(self.service.published.views.documents[self.document])


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
        published = self.service.published
        doc = published.views.notebooks.get(path)
        if doc is None:
            raise web.HTTPError(404, "no costs recorded for notebook %r", path)
        if minutes is not None:
            doc = {**doc, "history": await self.service.history(path, minutes)}
        self.write_json_bytes(json.dumps(doc).encode())


def _alert_error(e: AlertError) -> web.HTTPError:
    return web.HTTPError(429 if isinstance(e, AlertLimitError) else 400, "%s", str(e))


class AlertsHandler(CostguardHandler):
    """List alerts (GET) and raise one (POST: tests, admins, scripts)."""

    @web.authenticated
    @authorized
    def get(self) -> None:
        self._check_params("notebook", "include")
        include = self.get_query_argument("include", "active")
        if include not in ("active", "all"):
            raise web.HTTPError(400, "include must be 'active' or 'all', not %r", include)
        notebook = self.get_query_argument("notebook", None)
        if notebook is not None:
            notebook = notebook.strip("/")
        now = self.alerts.clock()
        status = self.service.published.views.data["status"]
        self.write_json({
            "simulated": status["simulated"],
            "currency": status["currency"],
            "time": now,
            "alerts": self.alerts.documents(now, notebook=notebook,
                                            include_all=include == "all"),
        })

    @web.authenticated
    @authorized
    async def post(self) -> None:
        self._check_params()
        try:
            request = parse_raise_request(self.read_json_body())
            alert, created = self.alerts.upsert(**request)
        except AlertError as e:
            raise _alert_error(e) from None
        await self.service.alerts_changed()
        self.write_json(alert.to_dict(self.alerts.clock()), 201 if created else 200)


class AlertActionHandler(CostguardHandler):
    """POST alerts/{id}/dismiss and alerts/{id}/snooze; both idempotent."""

    def initialize(self, action: str) -> None:
        self.action = action

    @web.authenticated
    @authorized
    async def post(self, alert_id: str) -> None:
        self._check_params()
        if self.alerts.get(alert_id) is None:
            raise web.HTTPError(404, "no such alert: %s", alert_id)
        body = self.read_json_body()
        try:
            if self.action == "snooze":
                alert = self.alerts.snooze(alert_id, parse_snooze_request(body))
            else:
                if body is not None and not isinstance(body, dict):
                    raise AlertError("request body must be empty or a JSON object")
                if body:
                    raise AlertError(f"unknown field(s): {', '.join(sorted(body))}")
                alert = self.alerts.dismiss(alert_id)
        except AlertError as e:
            raise _alert_error(e) from None
        if alert is None:  # pruned in between
            raise web.HTTPError(404, "no such alert: %s", alert_id)
        await self.service.alerts_changed()
        self.write_json(alert.to_dict(self.alerts.clock()))


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
        (url("/alerts"), AlertsHandler, {}),
        (url(r"/alerts/([^/]+)/dismiss"), AlertActionHandler, {"action": "dismiss"}),
        (url(r"/alerts/([^/]+)/snooze"), AlertActionHandler, {"action": "snooze"}),
        (url("/openapi.json"), OpenAPIHandler, {}),
    ]
    from jupyter_costguard.web.jobs import routes as job_routes

    routes += job_routes(url)
    routes += [
        (url(r"/?(.*)"), NotFoundHandler, {}),
    ]
    return routes

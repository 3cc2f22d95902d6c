"""The base of every costguard handler: authenticated, authorised against the `costguard`
resource, JSON in and out, and JSON errors without a traceback whatever went wrong."""

from __future__ import annotations

import json
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from jupyter_costguard.alerts.store import MAX_BODY_BYTES, AlertStore
from jupyter_costguard.cost.service import CostService

AUTH_RESOURCE = "costguard"
API_PREFIX = "costguard/api"


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

    def read_json_body(self, limit: int = MAX_BODY_BYTES, too_large: int = 400) -> Any:
        """The request's JSON body; None when empty. 400 when not JSON; `too_large` (400, or
        413 where a big body is a legitimate request over the limit) when too large."""
        raw = self.request.body or b""
        if len(raw) > limit:
            raise web.HTTPError(too_large, "request body is larger than %d bytes", limit)
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


class NotFoundHandler(CostguardHandler):
    """Anything else under the API prefix: a JSON 404 rather than an HTML page."""

    @web.authenticated
    @authorized
    def get(self, rest: str) -> None:
        raise web.HTTPError(404, "no such costguard endpoint: %s", rest)

    post = put = delete = patch = get

"""The base of every costguard handler: authenticated, authorised against the `costguard`
resource (and, where a request runs or stops code, `execute` on `kernels`), JSON in and out
within limits, and JSON errors without a traceback whatever went wrong."""

from __future__ import annotations

import json
from typing import Any

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import ensure_async
from tornado import web

from jupyter_costguard.alerts.store import MAX_BODY_BYTES, AlertStore
from jupyter_costguard.common.jsonlimits import (
    MAX_DEPTH,
    JSONLimitError,
    check_string,
    parse_json,
)
from jupyter_costguard.common.stopping import ShuttingDown
from jupyter_costguard.cost.service import CostService

AUTH_RESOURCE = "costguard"
API_PREFIX = "costguard/api"


class CostguardHandler(APIHandler):
    """Base: authenticated, authorised against the `costguard` resource, JSON errors."""

    auth_resource = AUTH_RESOURCE

    async def prepare(self) -> None:  # type: ignore[override]
        """400 for path parts or query parameters holding a NUL or a lone surrogate (before
        the handler, so no such string reaches a file name or a query)."""
        await super().prepare()
        try:
            for arg in self.path_args:
                if isinstance(arg, str):
                    check_string(arg, "the URL path")
            for name, values in self.request.query_arguments.items():
                check_string(name, "query parameter names")
                for value in values:
                    try:
                        text = value.decode("utf-8")
                    except UnicodeDecodeError:
                        raise JSONLimitError(
                            f"query parameter {name} must be valid UTF-8") from None
                    check_string(text, f"query parameter {name}")
        except JSONLimitError as e:
            raise web.HTTPError(400, "%s", str(e)) from None

    async def require(self, action: str, resource: str) -> None:
        """403 unless the Jupyter server's authorizer lets the caller `action` on
        `resource` (beyond the `costguard` permission `@authorized` checked)."""
        user = self.current_user
        allowed = bool(user) and await ensure_async(
            self.authorizer.is_authorized(self, user, action, resource))
        if not allowed:
            raise web.HTTPError(403, "this request needs permission to %s on %s, which "
                                "the server's authorizer refuses you", action, resource)

    @property
    def service(self) -> CostService:
        svc: CostService = self.settings["costguard_service"]
        return svc

    @property
    def alerts(self) -> AlertStore:
        return self.service.alerts

    def read_json_body(self, limit: int = MAX_BODY_BYTES, too_large: int = 400) -> Any:
        """The request's JSON body; None when empty. 400 when not JSON, nested deeper than
        `MAX_DEPTH` levels, or holding a string (key or value) with a NUL or a lone surrogate;
        `too_large` (400, or 413 where a big body is a legitimate request over the limit) when
        too large."""
        raw = self.request.body or b""
        if len(raw) > limit:
            raise web.HTTPError(too_large, "request body is larger than %d bytes", limit)
        if not raw:
            return None
        try:
            doc = parse_json(raw, MAX_DEPTH)
        except JSONLimitError as e:
            raise web.HTTPError(400, "request body refused: %s", str(e)) from None
        if doc is None:  # every body here is an object; `null` is not "no body"
            raise web.HTTPError(400, "request body must be a JSON object (or empty), not null")
        return doc

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
        if status_code == 405:  # RFC 9110: a 405 names the methods the route has
            self.set_header("Allow", ", ".join(self.allowed_methods()))
        exc_info = kwargs.get("exc_info")
        e = exc_info[1] if exc_info else None
        if isinstance(e, ShuttingDown):  # the server is stopping: say so, not "internal error"
            status_code = 503
            self.set_status(status_code)
        reason = self._reason
        message = reason
        if e is not None:
            if isinstance(e, ShuttingDown):
                message = str(e)
            elif isinstance(e, web.HTTPError) and e.log_message:
                message = e.log_message % e.args if e.args else e.log_message
            elif status_code >= 500:
                message = "internal error; see the server log"
        self.finish(json.dumps({"status": status_code, "reason": reason, "message": message}))


    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        """A request refused because the server is stopping is a warning, not a traceback."""
        if isinstance(value, ShuttingDown):
            self.log.warning("costguard: %s %s refused: %s", self.request.method,
                             self.request.uri, value)
            return
        super().log_exception(typ, value, tb)

    def allowed_methods(self) -> list[str]:
        """The methods this handler defines (what tornado's default answers 405 to, it
        does not)."""
        return [m for m in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
                if getattr(type(self), m.lower()) is not getattr(web.RequestHandler, m.lower())]


class NotFoundHandler(CostguardHandler):
    """Anything else under the API prefix: a JSON 404 rather than an HTML page."""

    @web.authenticated
    @authorized
    def get(self, rest: str) -> None:
        raise web.HTTPError(404, "no such costguard endpoint: %s", rest)

    post = put = delete = patch = get

"""`POST api/report`: a user's server reports what it has spent, with its own token.

Who reports comes from the token, through the Hub (HubAuth and its cache), never from the
body: a token of alice's server speaks for alice's server only. The body is read only up to
`protocol.MAX_BODY_BYTES`, parsed (off the IO loop when it is large) and checked, and recorded
on the worker in a transaction of its own, so one user's report can neither slow nor roll back
another's. A refused report is answered with a 4xx that names the reason, logged, and shown
on the admin page as that server's problem. The answer carries the cull warnings that stand
for the server.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from tornado import web

from jupyter_costguard.hub import protocol
from jupyter_costguard.hub.handlers import no_framing
from jupyter_costguard.hub.hubapi import RunningServer
from jupyter_costguard.hub.protocol import Limits, ReportError

#: a body up to this size is parsed on the IO loop: a report is about 400 bytes, which parses
#: in ~10 us, while a round trip to the worker thread costs ~0.1 ms of CPU (at 10,000 servers
#: one in ten of the service's cycles; bench/hub.py); a bigger body still goes off the loop
INLINE_PARSE_BYTES = 16 * 1024


@dataclass(frozen=True)
class Reporter:
    """Who a token speaks for: a user, and the servers of theirs (None: any of them)."""

    user: str
    servers: frozenset[str] | None


def reporter_of(model: dict[str, Any]) -> Reporter:
    """From the Hub's model of a token (`/hub/api/user`): a server's own token carries
    `access:servers!server=<user>/<name>`; a user's own token may speak for all their
    servers. Anything else is refused."""
    if model.get("kind", "user") != "user" or not isinstance(model.get("name"), str):
        raise ReportError("only a user's server reports to this service", 403)
    name = model["name"]
    names: set[str] = set()
    every = False
    for scope in model.get("scopes") or ():
        base, _, which = str(scope).partition("!")
        if base != "access:servers":
            continue
        if which in ("", f"user={name}"):
            every = True
        elif which.startswith(f"server={name}/"):
            names.add(which[len(f"server={name}/"):])
    if not every and not names:
        raise ReportError("this token belongs to no server of its user", 403)
    return Reporter(name, None if every else frozenset(names))


@web.stream_request_body
class ReportHandler(web.RequestHandler):
    """Thin: authenticate, bound the body, hand it to the service (`ctx.intake`)."""

    def set_default_headers(self) -> None:
        no_framing(self)

    async def prepare(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        auth = self.settings["hub_auth"]
        header = self.request.headers.get("Authorization", "")
        match = auth.auth_header_pat.match(header)
        model = await auth.user_for_token(match.group(1), sync=False) if match else None
        if not model:
            raise web.HTTPError(403, "a JupyterHub token of the reporting server is required")
        if not auth.check_scopes(auth.access_scopes, model):
            raise web.HTTPError(403, "this token has no access to the costguard service: "
                                     "the site adds access:services!service=costguard to "
                                     "the Hub's server role")
        try:
            self.reporter = reporter_of(model)
        except ReportError as e:
            raise web.HTTPError(e.status, str(e)) from None
        # a chunked body past the limit ends the connection; a declared one is refused unread
        self.request.connection.set_max_body_size(protocol.MAX_BODY_BYTES)  # type: ignore[union-attr]
        length = self.request.headers.get("Content-Length")
        if length is not None and length.isdigit() and int(length) > protocol.MAX_BODY_BYTES:
            await self._too_large(int(length))

    def data_received(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size <= protocol.MAX_BODY_BYTES:  # beyond it, nothing more is kept
            self._chunks.append(chunk)

    async def _too_large(self, size: int) -> None:
        """Refused unread: shown on the admin page like any refusal, where the token names
        one server (the body, which would name it, is not read)."""
        why = f"the report is {size} bytes; at most {protocol.MAX_BODY_BYTES}"
        servers = self.reporter.servers
        if servers is not None and len(servers) == 1:
            await self.settings["costguard"].intake.refused(
                self.reporter.user, next(iter(servers)), ReportError(why, 413))
        raise web.HTTPError(413, why)

    async def post(self) -> None:
        if self._size > protocol.MAX_BODY_BYTES:
            await self._too_large(self._size)
        status, doc = await self.settings["costguard"].intake.accept(
            self.reporter, b"".join(self._chunks))
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(doc))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        message = self._reason
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps({"message": message, "status": status_code}))


class Intake:
    """The service's side of a report: the Hub's record of the server, the checks, the
    store, the culler's warnings."""

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        #: when each unknown server was last looked up at the Hub (at most every 10 s)
        self._looked_up: dict[tuple[str, str], float] = {}

    async def _running(self, user: str, server: str) -> RunningServer | None:
        ctx = self.ctx
        known: RunningServer | None = ctx.running.get((user, server))
        if known is not None:
            return known
        key = (user, server)
        now = time.monotonic()
        if now - self._looked_up.get(key, -1e9) < 10.0:
            return None
        if len(self._looked_up) > 10_000:
            self._looked_up.clear()
        self._looked_up[key] = now
        try:
            found: RunningServer | None = await ctx.hub.server(user, server)
        except Exception as e:  # the Hub restarting: the server reports again later
            ctx.log.warning("costguard-hub: asking the Hub about %s/%s: %s", user, server, e)
            return None
        if found is not None:
            ctx.running[key] = found
        return found

    async def refused(self, user: str, name: str, e: ReportError) -> None:
        """Logged, and shown as the server's state when the Hub lists it as running."""
        ctx = self.ctx
        ctx.log.warning("costguard-hub: refused a report of %s/%s: %s", user, name, e)
        running = ctx.running.get((user, name))
        if running is not None:
            await ctx.run(ctx.store.record_refused, user, name, running.url, str(e),
                          time.time())

    async def accept(self, who: Reporter, body: bytes) -> tuple[int, dict[str, Any]]:
        ctx = self.ctx
        now = time.time()
        name = ""
        try:
            doc = (protocol.parse_body(body) if len(body) <= INLINE_PARSE_BYTES
                   else await ctx.run(protocol.parse_body, body))  # a big one off the loop
            if isinstance(doc, dict) and isinstance(doc.get("server"), str):
                name = doc["server"]
            # the server's name must be one the token speaks for
            if who.servers is not None and name not in who.servers:
                raise ReportError(f"this token does not speak for server {name!r} of "
                                  f"{who.user}", 403)
            running = await self._running(who.user, name)
            if running is None:
                raise ReportError(f"the Hub lists no running server {who.user}/{name}", 409)
            limits = Limits(now=now, started=running.started,
                            max_rate_per_hour=ctx.max_rate_per_hour,
                            skew=ctx.clock_skew_seconds)
            report = protocol.check_report(doc, limits)
        except ReportError as e:
            await self.refused(who.user, name, e)
            return e.status, {"message": str(e), "status": e.status}
        await ctx.run(ctx.store.record_report, who.user, running.url, running.profile, report,
                      running.started, now)
        key = (who.user, name)
        warnings: list[dict[str, Any]] = []
        if ctx.culler is not None:
            ctx.culler.kept_by_user(key, report.kept, now)
            warnings = ctx.culler.warnings_for(key, now)
        return 200, protocol.answer_doc(now, ctx.report_interval, warnings)

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

import asyncio
import hashlib
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from tornado import web

from jupyter_costguard.common import hubprotocol as protocol
from jupyter_costguard.common.hubprotocol import Limits, Report, ReportError
from jupyter_costguard.hub.handlers import error_message, no_framing
from jupyter_costguard.hub.hubapi import RunningServer

if TYPE_CHECKING:
    from jupyter_costguard.hub.context import IntakeContext

#: how long a report waits for others to share its trip to the worker and its commit
BATCH_SECONDS = 0.05
#: how long a token the Hub does not know is refused without asking the Hub again (short: a
#: server's new token is known to the Hub before the server first reports with it)
REFUSED_TOKEN_SECONDS = 10.0
#: a server's refusal with the same reason is logged and recorded at most this often
REFUSAL_RECORD_SECONDS = 5.0

#: a body up to this size is parsed on the IO loop: a report is about 400 bytes, which parses
#: in ~10 us, while a round trip to the worker thread costs ~0.1 ms of CPU (at 10,000 servers
#: one in ten of the service's cycles; bench/hub.py); a bigger body still goes off the loop


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
    """Thin: authenticate, bound the body, hand it to the service's `Intake` (the
    application's `costguard_intake` setting)."""

    def set_default_headers(self) -> None:
        no_framing(self)

    @property
    def intake(self) -> Intake:
        return cast(Intake, self.settings["costguard_intake"])

    async def prepare(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        header = self.request.headers.get("Authorization", "")
        self.reporter = await self.intake.identify(
            self.settings["hub_auth"], header)
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
            await self.intake.refused(
                self.reporter.user, next(iter(servers)), ReportError(why, 413))
        raise web.HTTPError(413, why)

    async def post(self) -> None:
        if self._size > protocol.MAX_BODY_BYTES:
            await self._too_large(self._size)
        status, doc = await self.intake.accept(
            self.reporter, b"".join(self._chunks))
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(doc))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        message = error_message(self, **kwargs)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps({"message": message, "status": status_code}))


class Intake:
    """The service's side of a report: the Hub's record of the server, the checks, the
    store, the culler's warnings."""

    def __init__(self, ctx: IntakeContext) -> None:
        self.ctx = ctx
        #: when each unknown server was last looked up at the Hub (at most every 10 s)
        self._looked_up: dict[tuple[str, str], float] = {}
        #: who each token speaks for, once the Hub said so and its scopes were checked
        #: (sha256 of the token -> (reporter, until when, monotonic))
        self._tokens: dict[str, tuple[Reporter, float]] = {}
        #: tokens the Hub did not know, until when they are refused without asking again
        #: (each unauthenticated report would otherwise cost a call to the Hub)
        self._refused: dict[str, float] = {}
        #: each server's last refusal logged and recorded: (why, when, monotonic)
        self._last_refusal: dict[tuple[str, str], tuple[str, float]] = {}
        #: reports waiting for the next trip to the worker
        self._batch: list[tuple[tuple[str, str, RunningServer | None, bytes, float],
                                asyncio.Future[Report | ReportError]]] = []
        #: batches on their way through the worker
        self._flushing: set[asyncio.Future[list[Report | ReportError]]] = set()

    async def identify(self, auth: Any, header: str) -> Reporter:
        """Who a report's token speaks for: the Hub's answer (HubAuth, cached for
        `token_cache_seconds`) with its scopes checked; a 403 naming why otherwise."""
        match = auth.auth_header_pat.match(header)
        if not match:
            raise web.HTTPError(403, "a JupyterHub token of the reporting server is required")
        token = match.group(1)
        key = hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()
        now = time.monotonic()
        hit = self._tokens.get(key)
        if hit is not None and hit[1] > now:
            return hit[0]
        if self._refused.get(key, 0.0) > now:  # asked the Hub moments ago: still no
            raise web.HTTPError(403, "a JupyterHub token of the reporting server is required")
        model = await auth.user_for_token(token, sync=False)
        if not model:
            if len(self._refused) >= 10_000:
                self._refused = {k: t for k, t in self._refused.items() if t > now}
            if len(self._refused) < 10_000:
                self._refused[key] = now + REFUSED_TOKEN_SECONDS
            raise web.HTTPError(403, "a JupyterHub token of the reporting server is required")
        if not auth.check_scopes(auth.access_scopes, model):
            raise web.HTTPError(403, "this token has no access to the costguard service: "
                                     "the site adds access:services!service=costguard to "
                                     "the Hub's server role")
        try:
            reporter = reporter_of(model)
        except ReportError as e:
            raise web.HTTPError(e.status, str(e)) from None
        if len(self._tokens) >= 100_000:
            self._tokens = {k: v for k, v in self._tokens.items() if v[1] > now}
        self._tokens[key] = (reporter, now + self.ctx.token_cache_seconds)
        return reporter

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
            found = ctx.running[key] = ctx.as_run(found)
        return found

    async def refused(self, user: str, name: str, e: ReportError) -> None:
        """Logged, and shown as the server's state when the Hub lists it as running."""
        ctx = self.ctx
        key, why, now = (user, name), str(e), time.monotonic()
        last = self._last_refusal.get(key)
        if last is not None and last[0] == why and now - last[1] < REFUSAL_RECORD_SECONDS:
            return  # the same refusal moments ago: a flood is one line and one write
        if len(self._last_refusal) >= 10_000:
            self._last_refusal.clear()
        self._last_refusal[key] = (why, now)
        ctx.log.warning("costguard-hub: refused a report of %s/%s: %s", user, name, e)
        running = ctx.running.get(key)
        if running is not None:
            await ctx.run(ctx.store.record_refused, user, name, running.url, str(e),
                          time.time())

    def _name(self, body: bytes) -> str:
        """Worker thread: the server a report names (a user's own token names none)."""
        doc = protocol.parse_body(body)
        said = doc.get("server") if isinstance(doc, dict) else None
        return said if isinstance(said, str) else ""

    def _check(self, user: str, name: str, running: RunningServer | None, body: bytes,
               now: float) -> Report:
        """Worker thread: parse and check one report; ReportError when refused."""
        ctx = self.ctx
        doc = protocol.parse_body(body)
        if not isinstance(doc, dict):
            raise ReportError("the report must be a JSON object")
        said = doc.get("server", "")
        if isinstance(said, str) and said != name:  # one the token speaks for
            raise ReportError(f"this token does not speak for server {said!r} of {user}",
                              403)
        if running is None:
            raise ReportError(f"the Hub lists no running server {user}/{name}", 409)
        limits = Limits(now=now, started=running.started,
                        max_rate_per_hour=ctx.max_rate_per_hour, skew=ctx.clock_skew_seconds)
        return protocol.check_report(doc, limits)

    def _take_batch(self, items: list[tuple[str, str, RunningServer | None, bytes, float]],
                    ) -> list[Report | ReportError]:
        """Worker thread: check every report of a batch, then record the good ones in one
        transaction, each in a savepoint of its own (hub/store.py record_reports)."""
        out: list[Report | ReportError] = []
        good = []
        for user, name, running, body, now in items:
            try:
                report = self._check(user, name, running, body, now)
            except ReportError as e:
                out.append(e)
                continue
            except Exception as e:  # a check's own bug: this report's refusal, no one else's
                self.ctx.log.exception("costguard-hub: checking a report of %s/%s", user, name)
                out.append(ReportError(f"the report could not be checked "
                                       f"({type(e).__name__})", 400))
                continue
            assert running is not None
            out.append(report)
            good.append((user, running.url, running.profile, report, running.started, now))
        errors: list[Exception | None]
        try:
            errors = self.ctx.store.record_reports(good)
        except Exception as e:  # the store itself: these reports again next time
            self.ctx.log.exception("costguard-hub: recording %d report(s)", len(good))
            errors = [e] * len(good)
        failed = iter(errors)
        for i, r in enumerate(out):
            if isinstance(r, Report):
                error = next(failed)
                if error is not None:
                    out[i] = ReportError(f"the report could not be recorded ({error})", 422)
        return out

    async def _take(self, user: str, name: str, running: RunningServer | None, body: bytes,
                    now: float) -> Report:
        """Checked and recorded with the other reports that arrive within BATCH_SECONDS:
        one trip to the worker and one commit for them all, instead of one each."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Report | ReportError] = loop.create_future()
        self._batch.append(((user, name, running, body, now), future))
        if len(self._batch) == 1:
            loop.call_later(BATCH_SECONDS, self._flush)
        result = await future
        if isinstance(result, ReportError):
            raise result
        return result

    def _flush(self) -> None:
        batch, self._batch = self._batch, []
        if not batch:
            return
        try:
            done = self.ctx.run(self._take_batch, [item for item, _ in batch])
        except RuntimeError as e:  # the worker has stopped: the service is stopping
            for _, future in batch:
                if not future.done():
                    future.set_exception(e)
            return
        self._flushing.add(done)
        done.add_done_callback(self._flushing.discard)

        def settle(f: asyncio.Future[list[Report | ReportError]]) -> None:
            error = f.exception()
            for i, (_, future) in enumerate(batch):
                if future.done():
                    continue
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(f.result()[i])

        done.add_done_callback(settle)

    async def drain(self) -> None:
        """The reports waiting for their batch recorded now, and every batch on the worker
        settled (the service stopping)."""
        self._flush()
        if self._flushing:
            await asyncio.wait(list(self._flushing))

    async def accept(self, who: Reporter, body: bytes) -> tuple[int, dict[str, Any]]:
        ctx = self.ctx
        now = time.time()
        servers = who.servers
        name = next(iter(servers)) if servers is not None and len(servers) == 1 else None
        try:
            if name is None:  # a token of the user's own: the body names the server
                name = await ctx.run(self._name, body)
                if servers is not None and name not in servers:
                    raise ReportError(f"this token does not speak for server {name!r} of "
                                      f"{who.user}", 403)
            running = await self._running(who.user, name)
            report = await self._take(who.user, name, running, body, now)
        except ReportError as e:
            await self.refused(who.user, name or "", e)
            return e.status, {"message": str(e), "status": e.status}
        key = (who.user, name)
        warnings: list[dict[str, Any]] = []
        if ctx.culler is not None:
            ctx.culler.kept_by_user(key, report.kept, now)
            warnings = ctx.culler.warnings_for(key, now)
        if ctx.budget_hold is not None:
            warnings = warnings + ctx.budget_hold.warnings_for(key, now)
        return 200, protocol.answer_doc(now, ctx.report_interval, warnings)

"""The service's routes, behind the Hub's OAuth: thin handlers over the report and the store.

Who sees what: an *admin* (the `custom:costguard:admin` scope on their token, or a name in
`admin_users`, or a group in `admin_groups`) sees every user, group and server; anyone else
with access to the service sees their own figures only, and asking for another's is a 403.
API routes answer a missing or invalid token with 403 JSON, never a login redirect; pages
send a browser through the Hub's login.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from jupyterhub.services.auth import (
    HubOAuthCallbackHandler,
    HubOAuthenticated,
    UserNotAllowed,
)
from tornado import web

from jupyter_costguard.common.periods import parse_time
from jupyter_costguard.hub import report
from jupyter_costguard.hub.budgets import Budgets, BudgetState, shown_to_member
from jupyter_costguard.hub.metrics import exposition
from jupyter_costguard.hub.store import HubStore

if TYPE_CHECKING:
    from jupyter_costguard.hub.context import HandlerContext, Worker

ADMIN_SCOPE = "custom:costguard:admin"
PAGE = Path(__file__).with_name("page.html")
#: the pages' script, built from labextension/src/hub by the labextension's build
STATIC = Path(__file__).with_name("static")
SCRIPT = "costguard-hub.js"
#: what the static route serves: the script and its source map, by suffix
STATIC_TYPES = {".js": "text/javascript; charset=UTF-8",
                ".map": "application/json; charset=UTF-8"}
STATIC_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}\Z")
#: the longest chart a request may ask for, in points
MAX_POINTS = 24 * 400


def error_message(handler: web.RequestHandler, **kwargs: Any) -> str:
    """The sentence an error answer carries: the HTTPError's own message, else the reason."""
    exc = kwargs.get("exc_info", (None, None, None))[1]
    if isinstance(exc, web.HTTPError) and exc.log_message:
        return exc.log_message % exc.args if exc.args else exc.log_message
    return handler._reason


NO_FRAMING = "frame-ancestors 'none'"
#: the page's scripts: its own from the service's origin, no inline script, no plugin
PAGE_SCRIPTS = "script-src 'self'; object-src 'none'; base-uri 'none'"


def no_framing(handler: web.RequestHandler) -> None:
    """No page or answer of the service may be framed by another site (clickjacking): user
    servers share the Hub's origin by default."""
    handler.set_header("Content-Security-Policy", NO_FRAMING)
    handler.set_header("X-Frame-Options", "DENY")
    handler.set_header("X-Content-Type-Options", "nosniff")


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    #: a hash of the body: the `v` of the page's URL for it (cached for good when it matches)
    version: str
    content_type: str


def read_static() -> dict[str, StaticFile]:
    """The files of the pages' static folder by name (empty where it was not built)."""
    out = {}
    try:
        paths = sorted(STATIC.iterdir())
    except OSError:
        return {}
    for path in paths:
        content_type = STATIC_TYPES.get(path.suffix)
        if content_type is None or not STATIC_NAME.match(path.name) or not path.is_file():
            continue
        body = path.read_bytes()
        out[path.name] = StaticFile(body, hashlib.sha256(body).hexdigest()[:16], content_type)
    return out


_static: dict[str, StaticFile] | None = None


async def static_file(ctx: Worker, name: str) -> StaticFile | None:
    """The static file `name` (None: there is none), the folder read once on the worker
    (never on the IO loop) and kept: the package's files do not change while it runs."""
    global _static
    if _static is None:
        _static = await ctx.run(read_static)
    return _static.get(name)


class StaticHandler(web.RequestHandler):
    """The pages' script, without a login (the package's own code, like the Hub's own static
    files; every figure it shows comes from the API, behind the login). Asked with the `v`
    the page names it is cached for a year; otherwise revalidated by its ETag."""

    def set_default_headers(self) -> None:
        no_framing(self)

    async def get(self, path: str) -> None:
        f = await static_file(cast("Worker", self.settings["costguard"]), path)
        if f is None:
            raise web.HTTPError(404)
        self.set_header("Content-Type", f.content_type)
        self.set_header("Cache-Control",
                        "public, max-age=31536000, immutable"
                        if self.get_query_argument("v", None) == f.version else "no-cache")
        self.finish(f.body)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps({"message": "not found" if status_code == 404 else
                                error_message(self, **kwargs), "status": status_code}))


class OAuthCallbackHandler(HubOAuthCallbackHandler):
    """JupyterHub's OAuth callback, with the service's headers."""

    def set_default_headers(self) -> None:
        super().set_default_headers()
        no_framing(self)


class NotFoundHandler(web.RequestHandler):
    """Every path the service does not serve: a 404 with the service's headers."""

    def set_default_headers(self) -> None:
        no_framing(self)

    def prepare(self) -> None:
        raise web.HTTPError(404)

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps({"message": "not found", "status": status_code}))


class BaseHandler(HubOAuthenticated, web.RequestHandler):
    """Identifies the caller off the IO loop's critical path: the Hub is asked asynchronously
    (the HubAuth cache answers repeat visits), in `prepare`."""

    api = True

    @property
    def ctx(self) -> HandlerContext:
        return cast("HandlerContext", self.settings["costguard"])

    def set_default_headers(self) -> None:
        no_framing(self)

    def compute_etag(self) -> None:
        """No ETag: every answer is `no-store`, and hashing a page's megabytes of figures
        on the IO loop costs more than sending them."""
        return None

    @property
    def site_currency(self) -> str:
        """The site's currency: what figures that add up several users' servers are shown in
        (a currency a server reported is that user's text)."""
        return self.ctx.currency or "USD"

    async def prepare(self) -> None:
        model = await self.hub_auth.get_user(self, sync=False)
        user = None
        if model:
            try:
                user = self.check_hub_user(model)
            except UserNotAllowed:
                user = None
        self._hub_auth_user_cache = user
        if user is None and self.api:
            raise web.HTTPError(403, "a valid JupyterHub token with access to this service "
                                     "is required")

    @property
    def who(self) -> dict[str, Any]:
        user = self.current_user
        assert user is not None
        return user

    def is_admin(self) -> bool:
        return is_admin(self.ctx, self.who)

    def require_admin(self, what: str) -> None:
        if not self.is_admin():
            raise web.HTTPError(403, f"{what} is for costguard admins ({ADMIN_SCOPE})")

    def arg_time(self, name: str) -> float | None:
        raw = self.get_query_argument(name, None)
        if raw is None or raw == "":
            return None
        try:
            return parse_time(raw, name)
        except ValueError as e:
            raise web.HTTPError(400, str(e)) from None

    def arg_choice(self, name: str, choices: tuple[str, ...], default: str) -> str:
        value = self.get_query_argument(name, default)
        if value not in choices:
            raise web.HTTPError(400, f"{name} must be one of {', '.join(choices)}, "
                                     f"not {value!r}")
        return value

    def own_users(self) -> list[str] | None:
        """None for an admin (everyone), else the caller's own name; `?user=` narrows it."""
        asked = self.get_query_argument("user", None)
        name = self.who.get("name", "")
        if self.is_admin():
            return None if asked in (None, "") else [asked]
        if asked not in (None, "", name):
            raise web.HTTPError(403, "you may read only your own figures")
        return [name]

    def write_json(self, doc: Any) -> None:
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(json.dumps(doc))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        message = error_message(self, **kwargs)
        if self.api:
            self.set_header("Content-Type", "application/json; charset=UTF-8")
            self.finish(json.dumps({"message": message, "status": status_code}))
        else:
            self.set_header("Content-Type", "text/plain; charset=UTF-8")
            self.finish(f"{status_code}: {message}\n")


class PageHandler(BaseHandler):
    """The page: every user and group for an admin, one's own spend and budget for others."""

    api = False

    @web.authenticated
    async def get(self) -> None:
        html = await page_html(self.ctx)
        script = await static_file(self.ctx, SCRIPT)
        # the site's currency: what a user with no server yet sees their zeros in
        boot = {"admin": self.is_admin(), "user": self.who.get("name"),
                "prefix": self.ctx.prefix, "xsrf": self.xsrf_token.decode(),
                "currency": self.site_currency}
        src = f"{self.ctx.prefix}static/{SCRIPT}" + (f"?v={script.version}" if script else "")
        if script is None:  # a checkout whose labextension was not built: say so, not blank
            html = html.replace('role="alert" hidden>', 'role="alert">The page\'s script is '
                                'not built: run `npm run build` in labextension/.', 1)
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        # the page runs only the service's own script: nothing inline, whatever a name holds
        self.set_header("Content-Security-Policy", f"{NO_FRAMING}; {PAGE_SCRIPTS}")
        self.finish(html.replace("__COSTGUARD_SCRIPT__", src).replace(
            "__COSTGUARD_BOOT__", json.dumps(boot).replace("<", "\\u003c")))


class SpendHandler(BaseHandler):
    """`api/spend?by=user|group|server&since=&until=&user=` as JSON, or CSV with
    `format=csv` (or the `api/spend.csv` route)."""

    def initialize(self, fmt: str = "json") -> None:
        self.fmt = fmt

    @web.authenticated
    async def get(self) -> None:
        by = self.arg_choice("by", report.BY, "user")
        fmt = self.arg_choice("format", ("json", "csv"), self.fmt)
        since, until = self.arg_time("since"), self.arg_time("until")
        if since is not None and until is not None and until <= since:
            raise web.HTTPError(400, "until must be after since")
        users = self.own_users()
        if by == "group" and users is not None and not self.is_admin():
            raise web.HTTPError(403, "group totals are for costguard admins")
        now = time.time()
        # the cache is keyed on the period's start, not the second (budgets move by period)
        args = (self.ctx.store, self.ctx.budgets, by, self.ctx.budgets.start(now) + 1, since,
                until, users, self.site_currency, self.ctx.reconcile)
        if fmt == "csv":
            body = report.to_csv(await self.ctx.report(report.rows, *args))
            self.set_header("Content-Type", "text/csv; charset=UTF-8")
            self.set_header("Content-Disposition",
                            f'attachment; filename="costguard-{by}.csv"')
            self.finish(body)
            return
        rows = await self.ctx.report(report.rows_json, *args)  # encoded once, on the worker
        head = json.dumps({"by": by, "since": since, "until": until, "time": now,
                           "poll": self.ctx.poll_doc() if self.is_admin() else None})
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(f'{head[:-1]}, "rows": {rows}}}')


class SeriesHandler(BaseHandler):
    """`api/series?by=&step=hour|day&since=&until=&key=`: the chart's stacked points."""

    @web.authenticated
    async def get(self) -> None:
        by = self.arg_choice("by", report.BY, "user")
        step = self.arg_choice("step", ("hour", "day"), "hour")
        now = time.time()
        # the end of this hour by default: the same chart (and cache entry) all hour
        until = self.arg_time("until") or math.ceil(now / 3600) * 3600
        since = self.arg_time("since")
        width = 3600 if step == "hour" else 86400
        if since is None:
            since = until - (48 * 3600 if step == "hour" else 30 * 86400)
        if until <= since:
            raise web.HTTPError(400, "until must be after since")
        if (until - since) / width > MAX_POINTS:
            raise web.HTTPError(400, f"at most {MAX_POINTS} points; ask for a shorter "
                                     "period or a longer step")
        keys = self.get_query_arguments("key") or None
        users = self.own_users()
        if users is not None and not self.is_admin():
            if by == "group":
                raise web.HTTPError(403, "group totals are for costguard admins")
            name = users[0]
            allowed = [name] if by == "user" else None
            if by == "server":
                keys = [k for k in (keys or []) if k.split("/", 1)[0] == name] or \
                    [f"{name}/{s.server}" for s in await self.ctx.run(self.ctx.store.servers)
                     if s.user == name]
            else:
                keys = allowed
        elif users is not None:  # an admin narrowing to one user
            keys = keys or (users if by == "user" else None)
        body = await self.ctx.report(series_json, self.ctx.store, by, since, until, step,
                                     keys)  # encoded once, off the IO loop
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(body)


def series_json(*args: Any) -> str:
    """`report.series(*args)` as JSON: built once in the pages' process and kept by the page
    cache, never encoded on the IO loop per request."""
    return json.dumps(report.series(*args))


class MeHandler(BaseHandler):
    """`api/me`: the caller's own spend, servers and budgets (what the user's page shows)."""

    @web.authenticated
    async def get(self) -> None:
        name = self.who.get("name", "")
        now = time.time()
        ctx = self.ctx
        # what a member sees of a group's spend is the site's choice; an admin sees it all
        view = "full" if self.is_admin() else ctx.member_group_view
        user_rows = await ctx.run(report.rows, ctx.store, ctx.budgets, "user", now, None,
                                  None, [name], self.site_currency, ctx.reconcile)
        server_rows = await ctx.run(report.rows, ctx.store, ctx.budgets, "server", now,
                                    None, None, [name], self.site_currency, ctx.reconcile)
        self.write_json({"user": name, "admin": self.is_admin(), "time": now,
                         "totals": user_rows[0].doc() if user_rows else None,
                         "servers": [r.doc() for r in server_rows],
                         "budgets": shown_to_member(await ctx.run(budgets_of, ctx, name, now),
                                                    view),
                         })


class EventsHandler(BaseHandler):
    """`api/events`: what the service did to servers (cull warnings and stops), newest first."""

    @web.authenticated
    async def get(self) -> None:
        self.require_admin("the event log")
        events = await self.ctx.run(self.ctx.store.events)
        self.write_json({"events": [
            {"time": t, "user": u, "server": s, "kind": k, "detail": d}
            for t, u, s, k, d in events]})


class MetricsHandler(BaseHandler):
    """`metrics`: per-user and per-group series (Prometheus text format)."""

    @web.authenticated
    async def get(self) -> None:
        self.require_admin("metrics")
        body = await self.ctx.run(exposition, self.ctx.collector)
        self.set_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.finish(body)


class Admins(Protocol):
    admin_users: set[str]
    admin_groups: set[str]


def is_admin(site: Admins, model: dict[str, Any]) -> bool:
    """An admin by the Hub's word (the admin scope on their token) or the site's (a name in
    `admin_users`, a group in `admin_groups`)."""
    return (ADMIN_SCOPE in (model.get("scopes") or ())
            or model.get("name") in site.admin_users
            or bool(set(model.get("groups") or ()) & site.admin_groups))


#: the page's HTML, read from the package once
_page_html: list[str] = []


async def page_html(worker: Worker) -> str:
    """The page's HTML, read from the package once (off the loop)."""
    if not _page_html:
        _page_html.append(await worker.run(PAGE.read_text, "utf-8"))
    return _page_html[0]


class BudgetSource(Protocol):
    store: HubStore

    @property
    def budgets(self) -> Budgets: ...


def budgets_of(ctx: BudgetSource, name: str, now: float) -> list[BudgetState]:
    """Every budget that applies to `name` with what this period has spent of it (the same
    book as the budget hold's, the rows' and the spawn hook's, hub/budgetbook.py)."""
    groups = ctx.store.memberships().get(name, [])
    return ctx.store.budget_book(ctx.budgets, now).states(name, groups)

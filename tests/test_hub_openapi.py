"""Issue 24 item 2: the hub service's routes have an OpenAPI document (hub/openapi.yaml), held
to its handlers as the server's are to web/openapi.yaml: every route the service's app serves
is documented with the methods its handler has, every documented route is served, and what a
real service (in-process: its own app, store, worker and report intake; only the Hub's word
on tokens is a stand-in) answers validates against the document, errors included."""

from __future__ import annotations

import asyncio
import functools
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_spec
from referencing import Registry
from referencing.jsonschema import DRAFT202012
from tornado import web
from tornado.httpclient import AsyncHTTPClient, HTTPResponse
from tornado.httpserver import HTTPServer
from tornado.testing import bind_unused_port

from jupyter_costguard.common import hubprotocol as protocol
from jupyter_costguard.hub import handlers
from jupyter_costguard.hub.app import CostGuardHub
from jupyter_costguard.hub.hubapi import RunningServer

HUB_OPENAPI = Path(handlers.__file__).with_name("openapi.yaml")
PREFIX = "/services/costguard/"
BASE = "urn:costguard-hub-openapi"
METHODS = ("get", "post", "put", "patch", "delete")
#: the Hub's word on each token: ann's server's own token, ann, and an admin
TOKENS = {
    "ann-server": {"name": "ann", "kind": "user", "groups": ["ml"],
                   "scopes": ["access:servers!server=ann/", "access:services"]},
    "ann": {"name": "ann", "kind": "user", "groups": ["ml"], "scopes": ["access:services"]},
    "root": {"name": "root", "kind": "user", "groups": [],
             "scopes": ["access:services", handlers.ADMIN_SCOPE]},
}


@functools.lru_cache(maxsize=1)
def spec() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(HUB_OPENAPI.read_text("utf-8"))
    return doc


@functools.lru_cache(maxsize=1)
def registry() -> Registry:
    return Registry().with_resource(BASE, DRAFT202012.create_resource(spec()))


def operation(template: str, method: str) -> dict[str, Any]:
    op: dict[str, Any] = spec()["paths"][template][method]
    return op


def validate(template: str, method: str, resp: HTTPResponse) -> None:
    """Raise unless the answer is one the document promises: its status, its media type,
    and (JSON) its body against the schema."""
    responses = operation(template, method)["responses"]
    status = str(resp.code)
    assert status in responses, f"{method.upper()} {template} documents no {status}"
    response = responses[status]
    if "$ref" in response:
        response = spec()["components"]["responses"][response["$ref"].rsplit("/", 1)[1]]
    media = resp.headers.get("Content-Type", "").split(";")[0].strip()
    if resp.code in (301, 302, 303, 307):
        assert "content" not in response, response
        return
    content = response.get("content", {})
    assert media in content, f"{method.upper()} {template} {status}: {media} not documented"
    schema = content[media].get("schema")
    if media == "application/json":
        if "$ref" in schema:
            schema = {"$ref": BASE + schema["$ref"]}
        Draft202012Validator(schema, registry=registry()).validate(json.loads(resp.body))


class FakeHubAuth:
    """The Hub's answers about tokens (the one stand-in): HubAuth's few methods the
    service calls, from TOKENS."""

    access_scopes = {"access:services"}
    login_url = "/hub/login"
    base_url = PREFIX
    auth_header_pat = re.compile(r"(?:token|bearer)\s+(.+)", re.IGNORECASE)

    async def get_user(self, handler: web.RequestHandler, sync: bool = True) -> Any:
        header = handler.request.headers.get("Authorization", "")
        match = self.auth_header_pat.match(header)
        return TOKENS.get(match.group(1)) if match else None

    async def user_for_token(self, token: str, sync: bool = True) -> Any:
        return TOKENS.get(token)

    def check_scopes(self, required: set[str], model: dict[str, Any]) -> set[str]:
        return required & set(model.get("scopes") or ())


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", "service-token")
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", PREFIX)
    monkeypatch.setattr(handlers.BaseHandler, "_hub_auth", FakeHubAuth())
    hub = CostGuardHub(db_path=str(tmp_path / "hub.sqlite"), user_budgets={"ann": 10.0},
                       group_budgets={"ml": 50.0}, report_interval=30.0)
    hub.initialize([])
    yield hub
    hub.worker.shutdown(wait=True)
    hub.store.close()


def served_routes(hub: CostGuardHub) -> dict[str, type[web.RequestHandler]]:
    """What the service's own app routes: path template (below the prefix) -> handler."""
    app = hub.make_app()
    out = {}
    for rule in app.wildcard_router.rules:
        pattern = rule.matcher.regex.pattern  # type: ignore[attr-defined]
        # a named group is the document's path parameter: static/(?P<path>...) is {path}
        path = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"{\1}", pattern.removesuffix("$"))
        assert path.startswith(PREFIX), path
        out["/" + path[len(PREFIX):]] = rule.target
    return out


def methods_of(handler: type[web.RequestHandler]) -> set[str]:
    return {m for m in METHODS
            if getattr(handler, m) is not getattr(web.RequestHandler, m)}


def test_the_document_is_valid_openapi() -> None:
    validate_spec(spec())


def test_every_route_is_documented_and_every_documented_route_served(service: Any) -> None:
    routes = served_routes(service)
    documented = spec()["paths"]
    assert sorted(routes) == sorted(documented)
    for template, handler in routes.items():
        ops = {m for m in documented[template] if m in METHODS}
        assert ops == methods_of(handler), template


def test_every_operation_states_who_may_call_it() -> None:
    for template, ops in spec()["paths"].items():
        for method in (m for m in ops if m in METHODS):
            assert ops[method].get("x-costguard-access"), f"{method.upper()} {template}"


def test_the_report_schema_holds_the_protocols_limits() -> None:
    """The report's limits are written in common/hubprotocol (both processes check with
    them); the document must say the same."""
    s = spec()["components"]["schemas"]["HubReport"]
    props = s["properties"]
    assert set(props) == protocol.FIELDS
    assert props["version"]["const"] == protocol.VERSION
    assert props["gpu_count"]["maximum"] == protocol.MAX_GPUS
    assert props["active_jobs"]["maximum"] == protocol.MAX_JOBS
    assert props["kept"]["maxItems"] == protocol.MAX_KEPT
    assert props["kept"]["items"]["maxLength"] == protocol.MAX_KEY
    # ECMA-262 (JSON Schema) `$` is the end of the text; Python needs `\Z` for that
    assert props["currency"]["pattern"] == "^" + protocol.CURRENCY.pattern.replace("\\Z", "$")
    assert props["server"]["pattern"] == "^" + protocol.SERVER_NAME.pattern.replace("\\Z", "$")
    now = time.time()
    doc = report_of(now)
    Draft202012Validator({"$ref": BASE + "#/components/schemas/HubReport"},
                         registry=registry()).validate(doc)
    protocol.check_report(doc, protocol.Limits(now=now, started=now - 600))


def report_of(now: float) -> dict[str, Any]:
    return protocol.report_doc(
        server="", time=now, since=now - 600, spend=0.5, waste=0.1, currency="USD",
        simulated=True, rate_per_hour=3.0, gpu_count=1, gpus_held=1, gpus_busy=0,
        gpu_idle_since=now - 300, active_jobs=0, kept=[])


#: (method, path below the prefix, token, body, documented template)
REQUESTS: list[tuple[str, str, str | None, Any, str]] = [
    ("POST", "api/report", "ann-server", "REPORT", "/api/report"),
    ("POST", "api/report", "ann-server", {"version": 99}, "/api/report"),
    ("POST", "api/report", "ann-server", "not json", "/api/report"),
    ("POST", "api/report", None, "REPORT", "/api/report"),
    ("GET", "", "ann", None, "/"),
    ("GET", "", None, None, "/"),
    ("GET", "api/spend", "root", None, "/api/spend"),
    ("GET", "api/spend?by=group", "root", None, "/api/spend"),
    ("GET", "api/spend?by=server", "ann", None, "/api/spend"),
    ("GET", "api/spend?format=csv", "root", None, "/api/spend"),
    ("GET", "api/spend?by=nope", "ann", None, "/api/spend"),
    ("GET", "api/spend?user=bob", "ann", None, "/api/spend"),
    ("GET", "api/spend", None, None, "/api/spend"),
    ("GET", "api/spend.csv?by=server", "root", None, "/api/spend.csv"),
    ("GET", "api/series", "root", None, "/api/series"),
    ("GET", "api/series?by=server&step=day", "ann", None, "/api/series"),
    ("GET", "api/series?since=2030-01-01&until=2029-01-01", "root", None, "/api/series"),
    ("GET", "api/me", "ann", None, "/api/me"),
    ("GET", "api/me", "root", None, "/api/me"),
    ("GET", "api/events", "root", None, "/api/events"),
    ("GET", "api/events", "ann", None, "/api/events"),
    ("GET", "metrics", "root", None, "/metrics"),
    ("GET", "metrics", "ann", None, "/metrics"),
    ("GET", "oauth_callback", None, None, "/oauth_callback"),
    ("GET", f"static/{handlers.SCRIPT}", None, None, "/static/{path}"),
    ("GET", "static/nothing-here.js", None, None, "/static/{path}"),
]


def test_what_the_service_answers_is_what_the_document_says(service: Any) -> None:
    now = time.time()
    service.running[("ann", "")] = RunningServer("ann", "", "/user/ann/", started=now - 600)
    # what the Hub says runs, and who is in which group (a member sees what is left of ml's)
    service.store.record_cycle({("ann", ""): ("/user/ann/", "")}, {"ann": ["ml"]}, now,
                               service.stale_after)
    service.store.add_event(now, "ann", "", "cull-warning", "idle for 2 h")

    async def main() -> list[HTTPResponse]:
        app = service.make_app()
        app.settings["hub_auth"] = FakeHubAuth()
        sock, port = bind_unused_port()
        server = HTTPServer(app)
        server.add_sockets([sock])
        client = AsyncHTTPClient()
        out = []
        try:
            for method, path, token, body, _ in REQUESTS:
                data = json.dumps(report_of(time.time())) if body == "REPORT" else \
                    body if isinstance(body, str) else json.dumps(body) if body else None
                out.append(await client.fetch(
                    f"http://127.0.0.1:{port}{PREFIX}{path}", method=method, body=data,
                    raise_error=False, follow_redirects=False,
                    headers={"Authorization": f"token {token}"} if token else {}))
        finally:
            server.stop()
        return out

    answers = asyncio.run(main())
    seen = set()
    for (method, _, _, _, template), resp in zip(REQUESTS, answers, strict=True):
        validate(template, method.lower(), resp)
        seen.add((template, method.lower(), resp.code))
    assert answers[0].code == 200, answers[0].body
    assert json.loads(answers[6].body)["rows"], "the report was recorded and counted"
    member = json.loads(answers[17].body)["budgets"]
    assert {b["scope"] for b in member} == {"user", "group"}, member
    # every documented JSON answer of a route was seen at least once
    for template, ops in spec()["paths"].items():
        for method in (m for m in ops if m in METHODS):
            assert any(t == template and m == method for t, m, _ in seen), template

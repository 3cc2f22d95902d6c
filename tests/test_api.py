"""The REST API on a real Jupyter server with real kernels (GPU figures replayed)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from openapi_spec_validator import validate as validate_spec
from tornado.httpclient import HTTPClientError

from tests.support.costguard_config import server_sections
from tests.support.openapi_check import documented_get_paths, spec, validate
from tests.support.rest import get_json, start_session, wait_for
from tests.support.units import GiB


def test_openapi_document_is_valid():
    validate_spec(spec())


async def test_status_before_and_after_samples(jp_fetch):
    status = await wait_for(jp_fetch, lambda d: d["last_sample_time"] is not None)
    validate("/status", 200, status)
    assert status["simulated"] is True
    assert status["currency"] == "USD"
    assert status["rate_per_hour"] == 36.0
    assert status["price_source"] == "hourly_rate"
    assert status["gpu_count"] == 2
    first = status["totals"]["spend"]
    later = await wait_for(jp_fetch, lambda d: d["totals"]["spend"] > first + 0.001)
    # nothing holds a GPU: all of it is unattributed, and the total is rate × time
    totals = later["totals"]
    # (documents round money to 1e-6 and seconds to 1e-3)
    assert totals["spend"] == pytest.approx(36.0 * totals["seconds"] / 3600, abs=2e-5)
    assert totals["unattributed"] == pytest.approx(totals["spend"], abs=2e-6)


async def test_kernel_holding_gpu_is_charged_and_wastes_when_idle(jp_fetch):
    session = await start_session(jp_fetch, "explore.ipynb")
    kid = session["kernel"]["id"]

    def charged(doc: dict[str, Any]) -> bool:
        return any(k["kernel_id"] == kid and k["spend"] > 0 and k["gpus"]
                   for k in doc["kernels"])

    kernels = await wait_for(jp_fetch, charged, endpoint="kernels")
    validate("/kernels", 200, kernels)
    k = next(k for k in kernels["kernels"] if k["kernel_id"] == kid)
    assert k["notebook"] == "explore.ipynb"
    assert k["gpus"] == ["GPU-test-0"]
    assert k["gpu_memory_bytes"] == 4 * GiB
    assert k["attribution"] == "pid"
    assert k["pids"], "the kernel's process tree is reported"

    gpus = await get_json(jp_fetch, "costguard", "api", "gpus")
    validate("/gpus", 200, gpus)
    owners = {p["kernel_id"] for g in gpus["gpus"] for p in g["processes"]}
    assert owners == {kid}

    # GPU at 2% and the kernel idle: its GPU spend is waste
    nbs = await wait_for(
        jp_fetch, lambda d: any(n["path"] == "explore.ipynb" and n["waste"] > 0
                                for n in d["notebooks"]),
        endpoint="notebooks")
    validate("/notebooks", 200, nbs)
    nb = next(n for n in nbs["notebooks"] if n["path"] == "explore.ipynb")
    assert nb["kernel_ids"] == [kid]
    assert 0 < nb["waste"] <= nb["gpu_spend"] <= nb["spend"]
    assert nb["history"], "a sparkline series comes with each notebook"

    detail = await get_json(jp_fetch, "costguard", "api", "notebooks", "explore.ipynb")
    validate("/notebooks/explore.ipynb", 200, detail)
    assert detail["path"] == "explore.ipynb"
    assert [k["kernel_id"] for k in detail["kernels"]] == [kid]

    longer = await get_json(jp_fetch, "costguard", "api", "notebooks", "explore.ipynb",
                            params={"history_minutes": "60"})
    validate("/notebooks/explore.ipynb", 200, longer)
    assert longer["history"] and longer["history"][-1]["spend"] > 0


async def test_notebook_paths_are_decoded_once(jp_fetch):
    """A literal '%41' in a file name must not turn into 'A' (double decoding)."""
    await start_session(jp_fetch, "odd%41 name.ipynb")
    await wait_for(jp_fetch, lambda d: any(n["path"] == "odd%41 name.ipynb"
                                           for n in d["notebooks"]), endpoint="notebooks")
    detail = await get_json(jp_fetch, "costguard", "api", "notebooks", "odd%41 name.ipynb")
    assert detail["path"] == "odd%41 name.ipynb"


async def test_conservation_on_a_live_server(jp_fetch):
    await start_session(jp_fetch, "a.ipynb")
    await start_session(jp_fetch, "b.ipynb")
    await wait_for(jp_fetch, lambda d: len([n for n in d["notebooks"] if n["spend"] > 0]) == 2,
                   endpoint="notebooks")
    status = await get_json(jp_fetch, "costguard", "api", "status")
    nbs = await get_json(jp_fetch, "costguard", "api", "notebooks")
    # The ledger may move between the two reads: compare one consistent document's parts
    totals = status["totals"]
    assert totals["spend"] == pytest.approx(36.0 * totals["seconds"] / 3600, abs=2e-5)
    notebook_sum = sum(n["spend"] for n in nbs["notebooks"])
    assert notebook_sum > 0
    assert notebook_sum + totals["unattributed"] == pytest.approx(
        totals["spend"], abs=36.0 * 2 * 0.25 / 3600 + 1e-5)


async def test_notebook_spend_survives_kernel_change(jp_fetch):
    session = await start_session(jp_fetch, "train.ipynb")
    first_kid = session["kernel"]["id"]
    before = await wait_for(
        jp_fetch, lambda d: any(n["path"] == "train.ipynb" and n["spend"] > 0
                                for n in d["notebooks"]), endpoint="notebooks")
    spent = next(n for n in before["notebooks"] if n["path"] == "train.ipynb")["spend"]
    # switch the notebook to a new kernel (as "Change kernel" does)
    await jp_fetch("api", "sessions", session["id"], method="PATCH",
                   body=json.dumps({"kernel": {"name": "python3"}}))

    def moved(d: dict[str, Any]) -> bool:
        nb = next((n for n in d["notebooks"] if n["path"] == "train.ipynb"), None)
        return bool(nb and nb["kernels_seen"] == 2 and nb["kernel_ids"]
                    and nb["kernel_ids"][0] != first_kid and nb["spend"] > spent)

    after = await wait_for(jp_fetch, moved, endpoint="notebooks")
    nb = next(n for n in after["notebooks"] if n["path"] == "train.ipynb")
    assert nb["spend"] > spent


async def test_a_session_under_jupyterlabs_placeholder_path_is_no_notebook(jp_fetch):
    """JupyterLab starts a session under a UUID path and renames it once the kernel is up: no
    spend goes to a notebook named by the UUID (failed before: the spend history and the chart
    showed it beside the real notebook)."""
    placeholder = "sub/5b6aae4a-0aa1-4ed1-9ece-5811484428e6"
    session = await start_session(jp_fetch, placeholder)
    kid = session["kernel"]["id"]
    seen = await wait_for(jp_fetch, lambda d: any(
        k["kernel_id"] == kid and k["spend"] > 0 for k in d["kernels"]), endpoint="kernels")
    assert next(k for k in seen["kernels"] if k["kernel_id"] == kid)["notebook"] is None
    await jp_fetch("api", "sessions", session["id"], method="PATCH",
                   body=json.dumps({"path": "sub/explore.ipynb"}))
    await wait_for(jp_fetch, lambda d: any(
        n["path"] == "sub/explore.ipynb" and n["spend"] > 0 for n in d["notebooks"]),
        endpoint="notebooks")
    notebooks = await get_json(jp_fetch, "costguard", "api", "notebooks")
    assert [n["path"] for n in notebooks["notebooks"]] == ["sub/explore.ipynb"]
    history = await get_json(jp_fetch, "costguard", "api", "history")
    assert placeholder not in history["notebooks"]


async def test_sampling_never_touches_kernel_activity(jp_fetch):
    session = await start_session(jp_fetch, "quiet.ipynb")
    kid = session["kernel"]["id"]
    await wait_for(jp_fetch, lambda d: any(k["kernel_id"] == kid for k in d["kernels"]),
                   endpoint="kernels")
    # let the kernel's own start-up messages settle: no client talks to it after that
    before = None
    for _ in range(100):
        now = (await get_json(jp_fetch, "api", "kernels", kid))["last_activity"]
        if now == before:
            break
        before = now
        await asyncio.sleep(1.5)
    status = await get_json(jp_fetch, "costguard", "api", "status")
    n = status["last_sample_time"]
    await wait_for(jp_fetch, lambda d: d["last_sample_time"] > n + 2.0)  # ≥ 8 samples later
    after = (await get_json(jp_fetch, "api", "kernels", kid))["last_activity"]
    assert after == before


ROUTES = [p.lstrip("/").replace("{path}", "x.ipynb") for p in documented_get_paths()]


@pytest.mark.parametrize("route", [*ROUTES, "nope"])
async def test_every_route_refuses_requests_without_a_token(jp_fetch, route):
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", *route.split("/"), headers={"Authorization": ""})
    assert e.value.code == 403


@pytest.mark.parametrize(
    ("parts", "params", "code", "needle"),
    [
        (("status",), {"bogus": "1"}, 400, "bogus"),
        (("notebooks", "nowhere.ipynb"), None, 404, "nowhere.ipynb"),
        (("notebooks", "x.ipynb"), {"history_minutes": "abc"}, 400, "integer"),
        (("notebooks", "x.ipynb"), {"history_minutes": "0"}, 400, "between"),
        (("notebooks", "x.ipynb"), {"history_minutes": "99999999"}, 400, "between"),
        (("does", "not", "exist"), None, 404, "does/not/exist"),
    ],
)
async def test_bad_input_gets_json_4xx_with_message(jp_fetch, parts, params, code, needle):
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", *parts, params=params)
    assert e.value.code == code
    body = json.loads(e.value.response.body)
    assert needle in body["message"]
    assert "Traceback" not in e.value.response.body.decode()
    if parts[0] != "does":
        validate("/" + "/".join(parts), code, body)


@pytest.mark.parametrize("route", ["status", "notebooks", "alerts"])
async def test_jupyterlab_cache_buster_is_not_a_bad_parameter(jp_fetch, route):
    """JupyterLab's ServerConnection appends `?<timestamp>` to GETs (found in a real browser)."""
    resp = await jp_fetch("costguard", "api", route, params={"1795995172938": ""})
    assert resp.code == 200
    with pytest.raises(HTTPClientError) as e:  # a named parameter is still refused
        await jp_fetch("costguard", "api", route, params={"1795995172938": "x"})
    assert e.value.code == 400


async def test_openapi_document_is_served(jp_fetch):
    doc = await get_json(jp_fetch, "costguard", "api", "openapi.json")
    assert doc == spec()


class DenyCostguard:
    """An authorizer that allows everything except the costguard resource."""


@pytest.fixture
def jp_server_config(costguard_config, request):
    from jupyter_server.auth.authorizer import Authorizer

    class _Deny(Authorizer):
        def is_authorized(self, handler, user, action, resource):
            return resource != "costguard"

    deny = getattr(request, "param", False)
    server: dict[str, Any] = {
        "jpserver_extensions": {"jupyter_costguard": True},
        "allow_unauthenticated_access": False,
    }
    if deny:
        server["authorizer_class"] = _Deny
    return {"ServerApp": server, **server_sections(costguard_config)}


@pytest.mark.parametrize("jp_server_config", [True], indirect=True)
@pytest.mark.parametrize("route", ROUTES)
async def test_authorizer_decides_on_the_costguard_resource(jp_fetch, route):
    await jp_fetch("api", "status")  # other resources still allowed
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", *route.split("/"))
    assert e.value.code == 403


async def test_a_kernels_connections_are_what_jupyter_server_counts(jp_fetch, jp_ws_fetch):
    """`connections` comes from the server's own count, as `GET api/kernels` says it: one
    while a websocket is open on the kernel's channels, none after it closes."""
    session = await start_session(jp_fetch, "explore.ipynb")
    kid = session["kernel"]["id"]

    def connections(n: int):  # type: ignore[no-untyped-def]
        return lambda doc: any(k["kernel_id"] == kid and k["connections"] == n
                               for k in doc["kernels"])

    await wait_for(jp_fetch, connections(0), endpoint="kernels")
    ws = await jp_ws_fetch("api", "kernels", kid, "channels")
    try:
        await wait_for(jp_fetch, connections(1), endpoint="kernels")
        model = await get_json(jp_fetch, "api", "kernels", kid)
        assert model["connections"] == 1
    finally:
        ws.close()
    await wait_for(jp_fetch, connections(0), endpoint="kernels")

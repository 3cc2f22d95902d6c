"""GPU activity from the node (jupyter_costguard/hub/nodegpu.py): a real Prometheus (Debian
`prometheus`) scrapes a loopback stand-in of dcgm-exporter every second, and the service's
reader asks Prometheus's HTTP API for each pod's GPUs.

The stand-in is one (no GPU here); Prometheus, its scraping, its storage, its PromQL engine and
its HTTP API are the real ones. Failures a real Prometheus cannot be made to produce on demand
(a malformed answer, an error status, NaN and absurd values, a hang) come from small loopback
servers of canned answers. Pod names are held to outputs of the real KubeSpawner.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.hub.nodegpu import (
    ENGINE_ACTIVE,
    GPU_UTIL,
    NodeGpu,
    NodeGpuError,
    PodGpu,
    activity_query,
    pod_name,
    pod_of_state,
    promql_string,
    regex_quote,
)
from tests.support.dcgm_standin import BUSY_PERCENT, IDLE_PERCENT, DcgmStandIn
from tests.support.server_proc import free_port
from tests.support.services import start_prometheus, stop

# --- pod names -------------------------------------------------------------------------------

#: Computed once with the real jupyterhub-kubespawner 7.1.0 (and escapism 1.1.0) in a
#: throwaway venv: KubeSpawner._expand_user_properties(self, template) on a stand-in `self`
#: with user.name, user.id = 7, name (the server), slug_scheme, namespace = "jhub" and
#: _namespace_default() -> "jhub" (the last row: -> "default"). The wheel cannot be imported
#: here without its dependencies (escapism, kubernetes_asyncio, jupyterhub), and kubespawner
#: is no dependency of this project, so the outputs are written down instead.
T = "jupyter-{user_server}"
KUBESPAWNER_7_1_0 = [
    # template, user, server, slug_scheme, expected pod name
    (T, "alice", "", "safe", "jupyter-alice"),
    (T, "alice", "gpu", "safe", "jupyter-alice--gpu"),
    (T, "Alice", "", "safe", "jupyter-alice---3bc51062"),
    (T, "alice@example.com", "", "safe", "jupyter-alice-example-com---ff8d9819"),
    (T, "a--b", "", "safe", "jupyter-a-b---90827a2e"),
    (T, "1user", "", "safe", "jupyter-x-1user---b5732d84"),
    (T, "alice", "My Server!", "safe", "jupyter-alice--my-server---35749f40"),
    (T, "alice", "x" * 50, "safe", "jupyter-alice--xxxxxxxxxxxxxxxxx---981a4da5"),
    (T, "u" * 30, "s" * 20, "safe", "jupyter-uuuuuuuuuuuuuuuuu--sssssssssssssssss---0779888b"),
    (T, "\u00fcn\u00efc\u00f8de", "", "safe", "jupyter-n-c-de---d9680c37"),
    (T, "-", "", "safe", "jupyter-x---3973e022"),
    (T, "alice", "", "escape", "jupyter-alice"),
    (T, "Alice.Smith", "", "escape", "jupyter--41lice-2e-53mith"),
    (T, "alice", "Gpu Box", "escape", "jupyter-alice---47pu-20-42ox"),
    (T, "\u00fcn\u00ef\n", "", "escape", "jupyter--c3-bcn-c3-af-a"),
    ("jupyter-{username}--{servername}", "alice", "", "safe", "jupyter-alice"),
    ("jupyter-{username}--{servername}", "alice", "gpu", "safe", "jupyter-alice--gpu"),
    ("{hubnamespace}-{userid}-{unescaped_username}", "bob", "", "safe", "jhub-7-bob"),
    ("jupyter-{escaped_user_server}", "Bob", "", "safe", "jupyter--42ob"),
    ("jupyter-{safe_username}-{escaped_username}-{safe_servername}", "Bob", "Lab", "escape",
     "jupyter-bob---cd9fb1e1--42ob-lab---efdcf466"),
    ("p-{namespace}-{username}-", "bob", "", "safe", "p-jhub-bob-"),
]


@pytest.mark.parametrize(("template", "user", "server", "scheme", "expected"),
                         KUBESPAWNER_7_1_0, ids=[f"{r[1]!r}/{r[2]!r}/{r[3]}"[:40]
                                                 for r in KUBESPAWNER_7_1_0])
def test_pod_name_as_kubespawner_7_names_it(template: str, user: str, server: str,
                                            scheme: str, expected: str) -> None:
    got = pod_name(template, user, server, namespace="jhub", user_id=7, slug_scheme=scheme)
    assert got == expected


def test_pod_name_hub_namespace_default_reads_user_and_unknown_fields_are_refused() -> None:
    # KubeSpawner 7.1.0 writes a hub in "default" as "user" in {hubnamespace}
    assert pod_name("{hubnamespace}-{username}", "bob", namespace="default") == "user-bob"
    assert pod_name("{hubnamespace}-{username}", "bob", namespace="jhub",
                    hub_namespace="hub") == "hub-bob"
    with pytest.raises(ValueError, match="userid"):
        pod_name("jupyter-{userid}", "bob")  # the Hub's user id was not given
    with pytest.raises(ValueError, match="slug scheme"):
        pod_name(T, "bob", slug_scheme="fancy")


def test_pod_of_state_reads_kubespawners_saved_names() -> None:
    state = {"pod_name": "jupyter-old-name", "namespace": "jhub", "dns_name": "x",
             "kubespawner_version": "7.1.0"}
    assert pod_of_state(state) == ("jhub", "jupyter-old-name")
    assert pod_of_state({}) is None
    assert pod_of_state(None) is None
    assert pod_of_state({"pod_name": 3, "namespace": "jhub"}) is None


# --- PromQL strings --------------------------------------------------------------------------


def test_label_values_are_quoted_for_promql_and_its_regexes() -> None:
    assert promql_string('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'
    assert promql_string("\x01") == '"\\x01"'
    assert regex_quote("a.b|c*") == "a\\.b\\|c\\*"
    q = activity_query([("jhub", "p1"), ("jhub", "p.2")])
    assert 'namespace="jhub"' in q and 'pod=~"p\\\\.2|p1"' in q
    assert f"or on (namespace, pod, gpu) label_replace(max by (namespace, pod, gpu) " \
           f"({GPU_UTIL}" in q


# --- a real Prometheus scraping the stand-in -------------------------------------------------


@dataclass
class Node:
    dcgm: DcgmStandIn
    url: str  # Prometheus's base URL
    log: Path

    def query(self, promql: str) -> list[dict[str, Any]]:
        """A query straight to Prometheus's API (not through the reader)."""
        qs = urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(f"{self.url}/api/v1/query?{qs}", timeout=5) as r:
            answer = json.loads(r.read())
        assert answer["status"] == "success", answer
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def scraped_since(self, count: int, timeout: float = 15.0) -> None:
        """Wait until the stand-in has been scraped `count` more times."""
        with self.dcgm.lock:
            target = self.dcgm.scrapes + count
        deadline = time.monotonic() + timeout
        while True:
            with self.dcgm.lock:
                if self.dcgm.scrapes >= target:
                    return
            assert time.monotonic() < deadline, self.log.read_text(errors="replace")[-3000:]
            time.sleep(0.1)


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    tmp = tmp_path_factory.mktemp("nodegpu")
    dcgm = DcgmStandIn().start()
    try:
        proc, url, log = start_prometheus(tmp, [dcgm.target])
    except BaseException:
        dcgm.stop()
        raise
    try:
        yield Node(dcgm, url, log)
    finally:
        stop(proc)
        dcgm.stop()


async def wait_read(reader: NodeGpu, pods: list[tuple[str, str]],
                    predicate: Callable[[dict[tuple[str, str], PodGpu]], bool],
                    timeout: float = 15.0) -> dict[tuple[str, str], PodGpu]:
    """Read until the answer satisfies `predicate` (Prometheus scrapes once a second)."""
    deadline = time.monotonic() + timeout
    while True:
        got = await reader.read(pods)
        if predicate(got):
            return got
        assert time.monotonic() < deadline, f"not satisfied in {timeout}s: {got}"
        await asyncio.sleep(0.25)


async def test_busy_and_idle_follow_the_node(node: Node) -> None:
    ns, pod = "jhub", "jupyter-ann"
    node.dcgm.add_gpu(ns, pod, busy=True)
    node.dcgm.add_gpu(ns, pod, busy=False)
    reader = NodeGpu(node.url)
    key = (ns, pod)

    got = await wait_read(reader, [key], lambda g: key in g and g[key].gpus == 2)
    ann = got[key]
    assert (ann.namespace, ann.pod) == key
    assert ann.busy == 1 and not ann.idle
    assert ann.metric == ENGINE_ACTIVE
    assert ann.activity == pytest.approx((BUSY_PERCENT, IDLE_PERCENT))
    assert len(ann.gpu_ids) == 2 and ann.gpu_ids == tuple(sorted(ann.gpu_ids, key=int))
    assert abs(ann.time - time.time()) < 30

    node.dcgm.set_busy(ns, pod, False)
    got = await wait_read(reader, [key], lambda g: g[key].busy == 0)
    assert got[key].idle and got[key].activity == pytest.approx((IDLE_PERCENT,) * 2)

    node.dcgm.set_busy(ns, pod, True)
    got = await wait_read(reader, [key], lambda g: g[key].busy == 2)
    assert got[key].activity == pytest.approx((BUSY_PERCENT,) * 2)

    # the threshold is the reader's: 30 % is busy at 5 %, not at 50 %
    node.dcgm.set_activity(ns, pod, 30.0)
    await wait_read(reader, [key], lambda g: g[key].activity == pytest.approx((30.0, 30.0)))
    assert (await NodeGpu(node.url, busy_percent=50.0).read([key]))[key].busy == 0
    assert (await reader.read([key]))[key].busy == 2

    # the pod goes away: its GPUs are nobody's, and it is absent from the answer
    node.dcgm.release(ns, pod)
    await wait_read(reader, [key], lambda g: key not in g)


async def test_a_gpu_without_profiling_metrics_falls_back_to_gpu_util(node: Node) -> None:
    old, new = ("jhub", "jupyter-t4-user"), ("jhub", "jupyter-a100-user")
    node.dcgm.add_gpu(*old, busy=True, profiling=False)
    node.dcgm.add_gpu(*new, busy=False)
    reader = NodeGpu(node.url)
    got = await wait_read(reader, [old, new], lambda g: old in g and new in g)
    assert got[old].metric == GPU_UTIL
    assert got[old].activity == (float(round(BUSY_PERCENT)),)  # whole percent, as DCGM
    assert got[old].busy == 1
    assert got[new].metric == ENGINE_ACTIVE and got[new].idle

    # asked alone, the fallback is the only answer
    assert (await reader.read([old]))[old].metric == GPU_UTIL


async def test_unassigned_gpus_and_pods_without_series(node: Node) -> None:
    # GPUs nobody holds, busy: pod labels empty (older exporters) or left out (newer)
    node.dcgm.add_gpu(busy=True, empty_pod_labels=True)
    node.dcgm.add_gpu(busy=True, empty_pod_labels=False)
    held = ("jhub", "jupyter-cy")
    node.dcgm.add_gpu(*held, busy=False)
    # the same pod name in another namespace is another pod
    node.dcgm.add_gpu("other", "jupyter-cy", busy=True)
    reader = NodeGpu(node.url)
    no_gpu = ("jhub", "jupyter-cpu-only")
    asked = [held, no_gpu, ("jhub", ""), ("", "jupyter-cy")]
    got = await wait_read(reader, asked, lambda g: held in g)
    assert set(got) == {held}
    assert got[held].gpus == 1 and got[held].idle
    # the unassigned GPUs are there in Prometheus, and no answer counts them
    unassigned = node.query(f'{ENGINE_ACTIVE}{{pod=""}}')
    assert len(unassigned) >= 2
    assert await reader.read([no_gpu]) == {}
    assert await reader.read([]) == {}


async def test_nan_and_absurd_values_are_unknown_activity(node: Node) -> None:
    # a series whose value is no activity: the pod holds that GPU, its activity unknown
    pod = ("jhub", "jupyter-broken")
    node.dcgm.add_gpu(*pod, percent=math.nan)
    node.dcgm.add_gpu(*pod, percent=50.0)
    node.dcgm.add_gpu(*pod, percent=1e9)
    blind = ("jhub", "jupyter-mig")
    node.dcgm.add_gpu(*blind, percent=math.nan)
    node.dcgm.add_gpu(*blind, percent=0.0)
    reader = NodeGpu(node.url)
    got = await wait_read(reader, [pod, blind], lambda g: pod in g and blind in g)
    p = got[pod]
    assert sorted(p.activity, key=lambda a: (a is not None, a)) == [None, None, 50.0]
    assert (p.gpus, p.busy, p.unknown) == (3, 1, 2) and not p.idle
    assert sorted(p.states) == ["busy", "unknown", "unknown"]
    # one idle GPU beside one that cannot be seen: not idle (the culler keeps it)
    b = got[blind]
    assert (b.gpus, b.busy, b.unknown) == (2, 0, 1) and not b.idle


async def test_label_values_cannot_break_the_query(node: Node) -> None:
    weird = ("jhub", 'we"ird\\pod')  # no Kubernetes name looks so; a test-only call
    dotted = ("jhub", "axb")
    node.dcgm.add_gpu(*weird, busy=True)
    node.dcgm.add_gpu(*dotted, busy=True)
    reader = NodeGpu(node.url)
    got = await wait_read(reader, [weird], lambda g: weird in g)
    assert set(got) == {weird} and got[weird].busy == 1

    # a regex metacharacter is a literal: "a.b" is not "axb", ".*" is no wildcard
    for name in ("a.b", ".*", "axb|.*"):
        assert node.query(activity_query([("jhub", name)])) == []
    hits = node.query(activity_query([dotted, ("jhub", ".+")]))
    assert {s["metric"]["pod"] for s in hits} == {"axb"}
    # an attempt to close the string and the selector is a pod name like any other
    injection = ("jhub", '"} or vector(1) or {"')
    assert node.query(activity_query([injection])) == []
    assert await reader.read([injection, ("jhub", 'x\\"} or up{"'), ("jhub", "\\")]) == {}
    assert await reader.read([("jh\"ub", "axb"), ("jhub\\", "axb")]) == {}


async def test_many_pods_ask_for_the_namespace_and_filter_here(node: Node) -> None:
    pods = [("crowd", f"jupyter-user-{i}") for i in range(3)]
    for i, p in enumerate(pods):
        node.dcgm.add_gpu(*p, busy=i == 0)
    node.dcgm.add_gpu("crowd", "jupyter-not-asked", busy=True)
    reader = NodeGpu(node.url, max_matcher_chars=10)
    assert "pod=~" not in activity_query(pods, max_matcher_chars=10)
    got = await wait_read(reader, pods, lambda g: len(g) == 3)
    assert set(got) == set(pods)
    assert [got[p].busy for p in pods] == [1, 0, 0]


async def test_prometheus_unreachable_or_wrong_is_one_clear_error(node: Node) -> None:
    with pytest.raises(NodeGpuError, match=r"Prometheus at http://127\.0\.0\.1:\d+: cannot "
                                           r"connect"):
        await NodeGpu(f"http://127.0.0.1:{free_port()}", timeout=2).read([("jhub", "p")])
    # a path that is not Prometheus's API: the HTTP status and what came back
    with pytest.raises(NodeGpuError, match="HTTP 404"):
        await NodeGpu(node.url + "/not-prometheus").read([("jhub", "p")])
    with pytest.raises(NodeGpuError, match="cannot ask"):
        await NodeGpu("prometheus:9090").read([("jhub", "p")])
    # credentials in the URL or the headers stay out of messages and reprs
    secret = NodeGpu(f"http://admin:s3cret@127.0.0.1:{free_port()}", timeout=2,
                     headers={"Authorization": "Bearer s3cret"})
    with pytest.raises(NodeGpuError) as caught:
        await secret.read([("jhub", "p")])
    assert "s3cret" not in str(caught.value) and "s3cret" not in repr(secret)
    assert "Prometheus at http://127.0.0.1:" in str(caught.value)


# --- canned answers: what a real Prometheus cannot be made to say on demand ------------------


class Canned:
    """A loopback server answering every request with one canned (status, body), or never."""

    def __init__(self, status: int, body: bytes, hang: float = 0.0) -> None:
        self.status, self.body, self.hang = status, body, hang
        canned = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if canned.hang:
                    time.sleep(canned.hang)
                self.send_response(canned.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(canned.body)))
                self.end_headers()
                self.wfile.write(canned.body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def vector(*samples: tuple[dict[str, str], list[Any]]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": m, "value": v} for m, v in samples]}}).encode()


POD = {"namespace": "jhub", "pod": "p", "costguard_source": ENGINE_ACTIVE}


@pytest.mark.parametrize(("status", "body", "message"), [
    (200, b"<html>proxy login</html>", "not a JSON object"),
    (200, b"[1, 2]", "not a JSON object"),
    (200, json.dumps({"status": "error", "errorType": "execution",
                      "error": "query timed out"}).encode(),
     "status 'error': execution query timed out"),
    (400, json.dumps({"status": "error", "errorType": "bad_data",
                      "error": "parse error"}).encode(), "HTTP 400 .*parse error"),
    (503, b"Service Unavailable", "HTTP 503 .*Service Unavailable"),
    (200, json.dumps({"status": "success", "data": {"resultType": "matrix",
                                                    "result": []}}).encode(),
     "expected an instant vector"),
    (200, json.dumps({"status": "success", "data": None}).encode(), "expected an instant"),
    (200, vector(({**POD, "gpu": "0"}, [1.0])), "malformed sample"),
    (200, vector(({**POD, "gpu": "0"}, [1.0, "lots"])), "malformed value"),
    (200, vector(({**POD, "gpu": "0"}, [None, "1"])), "malformed value"),
], ids=["html", "list", "status-error", "400", "503", "matrix", "no-data", "short-value",
        "word-value", "null-time"])
async def test_malformed_answers_are_one_clear_error(status: int, body: bytes,
                                                     message: str) -> None:
    canned = Canned(status, body)
    try:
        with pytest.raises(NodeGpuError, match=f"Prometheus at {canned.url}: .*{message}"):
            await NodeGpu(canned.url).read([("jhub", "p")])
    finally:
        canned.close()


async def test_values_that_are_not_activity_are_unknown() -> None:
    t = 1_800_000_000.5
    body = vector(
        ({**POD, "gpu": "0"}, [t, "NaN"]), ({**POD, "gpu": "1"}, [t, "-3"]),
        ({**POD, "gpu": "2"}, [t, "+Inf"]), ({**POD, "gpu": "3"}, [t, "9.2e18"]),
        ({**POD, "gpu": "10"}, [t, "100.4"]), ({**POD, "gpu": "4"}, [t, "2"]),
        ({**POD, "pod": "not-asked", "gpu": "0"}, [t, "90"]),
        ({"namespace": "jhub", "pod": "q", "gpu": "0", "costguard_source": GPU_UTIL}, [t, "NaN"]),
    )
    canned = Canned(200, body)
    try:
        got = await NodeGpu(canned.url).read([("jhub", "p"), ("jhub", "q")])
    finally:
        canned.close()
    # q had nothing but NaN: it holds a GPU of unknown activity, not idle
    assert set(got) == {("jhub", "p"), ("jhub", "q")}
    q = got[("jhub", "q")]
    assert q.activity == (None,) and q.states == ("unknown",) and q.unknown == 1
    assert not q.idle
    p = got[("jhub", "p")]
    assert p.gpu_ids == ("0", "1", "2", "3", "4", "10")
    assert p.activity == (None, None, None, None, 2.0, 100.0)
    assert p.states == ("unknown",) * 4 + ("idle", "busy")
    assert p.busy == 1 and p.unknown == 4 and p.metric == ENGINE_ACTIVE and p.time == t


async def test_a_hanging_prometheus_times_out_with_a_message() -> None:
    canned = Canned(200, vector(), hang=5.0)
    try:
        start = time.monotonic()
        with pytest.raises(NodeGpuError, match="no answer"):
            await NodeGpu(canned.url, timeout=0.5).read([("jhub", "p")])
        assert time.monotonic() - start < 3
    finally:
        canned.close()

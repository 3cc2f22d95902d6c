"""Culling by the node's GPU activity, on the real hub, with a real Prometheus scraping a
loopback stand-in of NVIDIA's dcgm-exporter (tests/support/dcgm_standin.py: no GPU exists
here, so the stand-in serves dcgm-exporter's documented text format, each GPU's series
labelled with the `namespace` and `pod` holding it, as the kubelet's pod-resources mapping
does).

The service is told where Prometheus is (`prometheus_url`) and how KubeSpawner names pods
(`pod_name_template`, `pod_namespace`); the servers here are local processes, and the
stand-in labels each one's GPU with the pod name KubeSpawner would give it. Three members run
the GPU profile under a policy that stops a GPU server idle for 18 s after a 15 s warning:

- ida: the node shows her GPU idle; her own config says every GPU is busy
  (`idle_gpu_threshold_percent = 0`): warned and stopped all the same;
- sid: the node shows his GPU idle; his server reports nothing (`enabled = False`): warned
  (the warning's lead runs from when it is raised, since no report can carry it) and stopped;
- bo: the node shows his GPU busy; his own server says it is idle (its replayed trace):
  never warned, never stopped.
The page says where each server's GPU figures came from, and idle GPU hours follow the node.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from jupyter_costguard.hub.store import read_only
from tests.support.dcgm_standin import DcgmStandIn
from tests.support.hub import Hub, HubUser, gpu_trace, wait_for
from tests.support.services import start_prometheus, stop

pytestmark = pytest.mark.timeout(600)

NAMESPACE = "hubtest"
POLICY = {"name": "gpu", "profiles": ["gpu"], "idle_minutes": 0.3, "warn_minutes": 0.25}
CONFIGS = {
    "ida": "c.CostGuard.idle_gpu_threshold_percent = 0\n",
    "sid": "c.CostGuard.enabled = False\n",
    "bo": "",
}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Hub, DcgmStandIn]]:
    d = tmp_path_factory.mktemp("hubnode")
    dcgm = DcgmStandIn().start()
    for user in CONFIGS:  # busy while the servers start (spawns take a while here)
        dcgm.add_gpu(NAMESPACE, f"jupyter-{user}", busy=True)
    dcgm.add_gpu()  # a GPU no pod holds
    proc, url, _log = start_prometheus(d, [dcgm.target])
    users = [HubUser(name, gpu_trace(d / f"{name}.json", 0), ["ml"],
                     server_config="c = get_config()  # noqa\n" + extra)
             for name, extra in CONFIGS.items()]
    users.append(HubUser("admin", gpu_trace(d / "admin.json", 0), []))
    h = Hub(d / "hub", users, service_settings={
        "prometheus_url": url, "pod_name_template": "jupyter-{username}",
        "pod_namespace": NAMESPACE, "cull_policies": [POLICY]})
    try:
        h.start()
        h.admin_token = h.token_for("admin")  # type: ignore[attr-defined]
        wait_for(lambda: h.service("api/spend", h.admin_token)[0] == 200,  # type: ignore
                 60, "the service")
        for name in CONFIGS:
            h.start_server(name, {"profile": "gpu"})
        for name in CONFIGS:
            h.wait_ready(name)
        for name in ("ida", "sid"):  # then their GPUs fall idle on the node
            dcgm.set_busy(NAMESPACE, f"jupyter-{name}", False)
        yield h, dcgm
    finally:
        h.stop()
        stop(proc)
        dcgm.stop()


def events(hub: Hub) -> list[tuple[str, str, str]]:
    found = read_only(hub.service_db, ("SELECT user, kind, detail FROM events ORDER BY id", ()))
    return [] if found is None else [tuple(r) for r in found[0]]  # type: ignore[misc]


def running(hub: Hub, user: str) -> bool:
    return bool(hub.api("GET", f"/users/{user}").get("servers"))


def by_server(hub: Hub) -> dict[str, dict[str, Any]]:
    status, doc = hub.service("api/spend?by=server", hub.admin_token)  # type: ignore
    assert status == 200, doc
    return {r["user"]: r for r in doc["rows"]}


def test_the_page_shows_the_nodes_gpu_figures(site: tuple[Hub, DcgmStandIn]) -> None:
    hub, _ = site
    rows = wait_for(lambda: (lambda r: r if all(
        r.get(u, {}).get("gpu_source") == "node" for u in CONFIGS)
        and r["ida"]["gpus_busy"] == 0 and r["sid"]["gpus_busy"] == 0 else None)(
            by_server(hub)), 60, "the node's figures on the page")
    assert (rows["bo"]["gpus_held"], rows["bo"]["gpus_busy"]) == (1, 1)
    # ida's server says both its GPUs are busy; the node says her pod's one GPU is idle
    assert (rows["ida"]["gpus_held"], rows["ida"]["gpus_busy"]) == (1, 0)
    assert (rows["sid"]["gpus_held"], rows["sid"]["gpus_busy"]) == (1, 0)


def test_idle_on_the_node_is_warned_and_stopped_busy_never_is(
        site: tuple[Hub, DcgmStandIn]) -> None:
    hub, _ = site
    wait_for(lambda: not running(hub, "ida") and not running(hub, "sid"), 180,
             "ida's and sid's idle GPU servers stopped")
    seen = events(hub)
    for user in ("ida", "sid"):
        kinds = [k for u, k, _ in seen if u == user]
        assert "warn" in kinds and "stop" in kinds, seen
        assert kinds.index("warn") < kinds.index("stop"), seen
        stop_detail = next(d for u, k, d in seen if u == user and k == "stop")
        assert "every GPU idle" in stop_detail, stop_detail
    # bo, busy on the node all along, was judged the whole time and never warned
    assert running(hub, "bo")
    assert not [e for e in seen if e[0] == "bo"], seen
    # idle GPU hours follow the node: ida's and sid's idle GPU-seconds, none of bo's
    found = read_only(hub.service_db, (
        "SELECT user, SUM(idle_gpu_seconds) FROM hours GROUP BY user", ()))
    assert found is not None
    idle = dict(found[0])
    assert idle.get("ida", 0) > 5 and idle.get("sid", 0) > 5, idle
    assert idle.get("bo", 0) == 0, idle


def test_busy_turning_idle_on_the_node_is_then_warned(site: tuple[Hub, DcgmStandIn]) -> None:
    """The same server, judged by the node as it changes: bo's GPU goes idle on the node
    (his own server still says nothing new): he is warned."""
    hub, dcgm = site
    assert running(hub, "bo")
    dcgm.set_busy(NAMESPACE, "jupyter-bo", False)
    wait_for(lambda: any(u == "bo" and k == "warn" for u, k, _ in events(hub)), 90,
             "bo warned once his GPU is idle on the node")
    rows = by_server(hub)
    assert rows["bo"]["gpu_source"] == "node" and rows["bo"]["gpus_busy"] == 0

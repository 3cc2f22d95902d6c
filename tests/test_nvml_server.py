"""End to end through NVML: a real server whose real pynvml loads the C stand-in for
libnvidia-ml.so.1, with scenarios naming the PIDs of real kernels the test started."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient

from tests.support.nvmlstub import Gpu, Mig, Proc, Scenario, subprocess_env
from tests.support.server_proc import ServerProcess
from tests.support.units import GiB

pytestmark = pytest.mark.timeout(240)

A100 = "NVIDIA A100-SXM4-40GB"


def _config(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {"db_path": str(tmp_path / "ledger.sqlite"), "sample_interval": 0.25,
            "hourly_rate": 8.0, "gpu_share": 0.8, **extra}


def _kernel(server: ServerProcess, path: str) -> dict[str, Any]:
    kid = server.start_session(path)["kernel"]["id"]
    docs = server.wait_for("costguard/api/kernels",
                           lambda d: any(k["kernel_id"] == kid and k["pids"]
                                         for k in d["kernels"]))
    return next(k for k in docs["kernels"] if k["kernel_id"] == kid)


def _find(doc: dict[str, Any], kid: str) -> dict[str, Any]:
    return next(k for k in doc["kernels"] if k["kernel_id"] == kid)


@pytest.fixture
def gpus() -> list[Gpu]:
    return [Gpu(uuid="GPU-0000-aaaa", name=A100, mem_total=40 * GiB, util=3),
            Gpu(uuid="GPU-0000-bbbb", name=A100, mem_total=40 * GiB, util=0)]


def test_kernels_are_matched_to_gpus_by_pid(tmp_path: Path, gpus: list[Gpu]):
    scenario = tmp_path / "scenario.txt"
    Scenario(gpus=gpus).write(scenario)
    server = ServerProcess(tmp_path / "srv", _config(tmp_path),
                           env=subprocess_env(scenario)).start()
    try:
        status = server.wait_for("costguard/api/status", lambda d: d["gpu_count"] == 2)
        assert status["gpu_status"] == "ok" and status["simulated"] is False

        a = _kernel(server, "a.ipynb")
        b = _kernel(server, "b.ipynb")
        # The fake driver now reports the real kernels' PIDs on the GPUs
        gpus[0].procs = [Proc(a["pids"][0], 3 * GiB), Proc(b["pids"][0], 1 * GiB)]
        gpus[0].mem_used = 4 * GiB
        gpus[1].procs = [Proc(b["pids"][0], 10 * GiB)]
        gpus[1].mem_used = 10 * GiB
        gpus[1].util = 95
        Scenario(gpus=gpus).write(scenario)

        def attributed(d: dict[str, Any]) -> bool:
            ka, kb = _find(d, a["kernel_id"]), _find(d, b["kernel_id"])
            return ka["attribution"] == kb["attribution"] == "pid" and len(kb["gpus"]) == 2

        kernels = server.wait_for("costguard/api/kernels", attributed)
        ka, kb = _find(kernels, a["kernel_id"]), _find(kernels, b["kernel_id"])
        assert ka["gpus"] == ["GPU-0000-aaaa"] and ka["gpu_memory_bytes"] == 3 * GiB
        assert kb["gpu_memory_bytes"] == 11 * GiB
        assert ka["gpu_utilization_percent"] == 3.0
        assert kb["gpu_utilization_percent"] == pytest.approx(49.0)

        gdoc = server.get("costguard/api/gpus")
        owners = {p["pid"]: p["kernel_id"] for g in gdoc["gpus"] for p in g["processes"]}
        assert owners[a["pids"][0]] == a["kernel_id"]
        assert gdoc["driver_version"] == "550.54.15"

        # per sample, GPU 0's cost splits 3:1 between a and b; b also has all of GPU 1
        server.wait_for("costguard/api/kernels",
                        lambda d: _find(d, a["kernel_id"])["spend_rate_per_hour"] > 0)
        rates = server.get("costguard/api/kernels")
        ra = _find(rates, a["kernel_id"])["spend_rate_per_hour"]
        rb = _find(rates, b["kernel_id"])["spend_rate_per_hour"]
        per_gpu = 8.0 * 0.8 / 2
        # host CPU shares make the rates a little higher than the GPU part alone
        assert per_gpu * 0.75 - 1e-6 <= ra < per_gpu * 0.75 + 8.0 * 0.2 + 1e-6
        assert per_gpu * 1.25 - 1e-6 <= rb < per_gpu * 1.25 + 8.0 * 0.2 + 1e-6

        # a kernel holding an idle GPU while idle is wasting; b's busy GPU 1 is not
        nbs = server.wait_for("costguard/api/notebooks",
                              lambda d: all(n["waste"] > 0 for n in d["notebooks"]))
        by_path = {n["path"]: n for n in nbs["notebooks"]}
        assert by_path["a.ipynb"]["waste"] == pytest.approx(by_path["a.ipynb"]["gpu_spend"],
                                                            rel=1e-3)
        assert by_path["b.ipynb"]["waste"] < by_path["b.ipynb"]["gpu_spend"] * 0.5

        # the GPU is lost: the device is marked faulty, the server carries on
        gpus[1].lost = True
        Scenario(gpus=gpus).write(scenario)
        gdoc = server.wait_for("costguard/api/gpus",
                               lambda d: any(g["faulty"] for g in d["gpus"]))
        lost = next(g for g in gdoc["gpus"] if g["uuid"] == "GPU-0000-bbbb")
        assert "lost" in lost["faulty"].lower()
        assert next(g for g in gdoc["gpus"] if g["uuid"] == "GPU-0000-aaaa")["faulty"] is None
        assert server.get("costguard/api/status")["gpu_status"] == "ok"
    finally:
        server.stop()
    lost_lines = [line for line in server.log().splitlines() if "GPU is lost" in line]
    assert len(lost_lines) == 1, "logged once, not on every sample"


def test_container_pids_fall_back_to_cuda_mapping(tmp_path: Path, gpus: list[Gpu]):
    """NVML reports host PIDs the server can't see; the kernel that maps libcuda gets the GPU."""
    lib = tmp_path / "libcuda.so.1"
    src = tmp_path / "cuda.c"
    src.write_text("int cuInit(unsigned int flags) { return 0; }\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)

    scenario = tmp_path / "scenario.txt"
    gpus[0].procs = [Proc(4_000_001, 6 * GiB)]  # a PID from another PID namespace
    gpus[0].mem_used = 6 * GiB
    Scenario(gpus=gpus).write(scenario)
    server = ServerProcess(tmp_path / "srv", _config(tmp_path),
                           env=subprocess_env(scenario)).start()
    try:
        cuda = _kernel(server, "cuda.ipynb")
        plain = _kernel(server, "plain.ipynb")
        conn = tmp_path / "srv" / "runtime" / f"kernel-{cuda['kernel_id']}.json"
        client = BlockingKernelClient(connection_file=str(conn))
        client.load_connection_file()
        client.start_channels(hb=False)
        try:
            reply = client.execute_interactive(
                f"import ctypes; _cuda = ctypes.CDLL({str(lib)!r})", timeout=60)
            assert reply["content"]["status"] == "ok"
        finally:
            client.stop_channels()

        kernels = server.wait_for(
            "costguard/api/kernels",
            lambda d: _find(d, cuda["kernel_id"])["attribution"] == "cuda-mapped")
        k = _find(kernels, cuda["kernel_id"])
        assert k["gpus"] == ["GPU-0000-aaaa"] and k["gpu_memory_bytes"] == 6 * GiB
        p = _find(kernels, plain["kernel_id"])
        assert p["attribution"] == "none" and p["gpus"] == []
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("setup", "detail"),
    [("driver-not-loaded", "driver"), ("no-library", "not found")],
)
def test_no_gpu_means_no_gpu_costs(tmp_path: Path, setup: str, detail: str):
    scenario = tmp_path / "scenario.txt"
    Scenario(gpus=[Gpu()], init_error="DRIVER_NOT_LOADED").write(scenario)
    env = subprocess_env(scenario) if setup == "driver-not-loaded" else {"LD_LIBRARY_PATH": ""}
    server = ServerProcess(tmp_path / "srv", _config(tmp_path), env=env).start()
    try:
        kid = _kernel(server, "cpu.ipynb")["kernel_id"]
        status = server.wait_for("costguard/api/status",
                                 lambda d: d["gpu_status"] != "starting"
                                 and d["totals"]["spend"] > 0)
        assert status["gpu_status"] == "no-gpu"
        assert detail in status["gpu_detail"].lower()
        assert status["gpu_count"] == 0
        k = _find(server.get("costguard/api/kernels"), kid)
        assert k["gpus"] == [] and k["attribution"] == "none" and k["waste"] == 0
        # the GPU part of the rate is nobody's: it shows as unattributed GPU spend
        totals = status["totals"]
        # (documents round money to 1e-6)
        assert totals["unattributed_gpu"] == pytest.approx(totals["spend"] * 0.8, abs=2e-6)
    finally:
        server.stop()


def test_a_mig_kernel_is_charged_spend_not_waste_and_said_unknown(tmp_path: Path):
    """A kernel on a MIG instance (NVML reports no utilisation for it): its GPU cost is
    spend but not waste, every document says "unknown", and no idle alert is raised about
    it, while an idle kernel on a plain idle GPU beside it is warned and wasting."""
    scenario = tmp_path / "scenario.txt"
    mig = Mig(uuid="MIG-0000-aaaa", name="NVIDIA A100-SXM4-80GB MIG 3g.40gb",
              mem_total=40 * GiB)
    gpus = [Gpu(uuid="GPU-0000-mmmm", name="NVIDIA A100-SXM4-80GB", migs=[mig]),
            Gpu(uuid="GPU-0000-pppp", name="NVIDIA A100-SXM4-80GB", util=0)]
    Scenario(gpus=gpus).write(scenario)
    server = ServerProcess(tmp_path / "srv", _config(tmp_path, idle_kernel_seconds=1.0),
                           env=subprocess_env(scenario)).start()
    try:
        m = _kernel(server, "mig.ipynb")
        p = _kernel(server, "plain.ipynb")
        mig.procs, mig.mem_used = [Proc(m["pids"][0], 4 * GiB)], 4 * GiB
        gpus[1].procs, gpus[1].mem_used = [Proc(p["pids"][0], 4 * GiB)], 4 * GiB
        Scenario(gpus=gpus).write(scenario)

        def charged(d: dict[str, Any]) -> bool:
            km, kp = _find(d, m["kernel_id"]), _find(d, p["kernel_id"])
            return km["spend"] > 0 and kp["waste"] > 0 and km["gpus"] == ["MIG-0000-aaaa"]

        kernels = server.wait_for("costguard/api/kernels", charged)
        km, kp = _find(kernels, m["kernel_id"]), _find(kernels, p["kernel_id"])
        assert km["waste"] == 0 and km["gpu_activity"] == "unknown"
        assert km["gpu_utilization_percent"] is None
        assert kp["gpu_activity"] == "idle"
        gdoc = server.get("costguard/api/gpus")
        assert {g["uuid"]: g["activity"] for g in gdoc["gpus"]} == {
            "MIG-0000-aaaa": "unknown", "GPU-0000-pppp": "idle"}
        by_path = {n["path"]: n for n in server.get("costguard/api/notebooks")["notebooks"]}
        assert by_path["mig.ipynb"]["gpu_activity"] == "unknown"
        assert by_path["mig.ipynb"]["waste"] == 0 and by_path["mig.ipynb"]["gpu_spend"] > 0
        status = server.get("costguard/api/status")
        assert status["gpu_activity"]["gpus_unknown"] == 1
        assert status["gpu_activity"]["idle_since"] is None

        alerts = server.wait_for(
            "costguard/api/alerts",
            lambda d: any(a["kernel_id"] == p["kernel_id"] for a in d["alerts"]))
        assert not [a for a in alerts["alerts"] if a["kernel_id"] == m["kernel_id"]]
        nbs = server.get("costguard/api/notebooks")
        assert {n["path"]: n for n in nbs["notebooks"]}["mig.ipynb"]["waste"] == 0
    finally:
        server.stop()

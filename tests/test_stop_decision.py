"""Issue 44, one stop decision: a real server, its real pynvml loading the NVML stand-in, and a
real kernel that starts a training loop (in a thread, a child process or an asyncio task)
and returns to its prompt while the GPU works at 90 %. Idle by no measure
(`common/gpuactivity.idleness`), it is never warned idle, culled, hibernated or auto-stopped,
and its work finishes."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from jupyter_client import BlockingKernelClient

from tests.support.nvmlstub import Gpu, Proc, Scenario, subprocess_env
from tests.support.server_proc import ServerProcess
from tests.support.units import GiB

pytestmark = pytest.mark.timeout(240)

IDLE_KIND = "idle-gpu-kernel"
HIBERNATED_KIND = "kernel-hibernated"
#: per consumer, the settings that would act on an idle GPU kernel within seconds
CONSUMERS: dict[str, dict[str, Any]] = {
    "cull": {"Guard.idle_kernel_seconds": 1.0, "Guard.cull_idle_kernels": True,
             "Guard.cull_after_seconds": 2.0, "Guard.cull_warning_seconds": 1.0},
    "hibernate": {"Guard.idle_kernel_seconds": 1.0, "Guard.hibernate_idle_after_seconds": 1.5},
    "autostop": {"Guard.auto_stop_idle_seconds": 2.0, "Guard.auto_stop_countdown_seconds": 1.0},
}
#: how long past its last activity the kernel is watched: past every limit above
WATCH_SECONDS = 8.0

_TRAIN = '''
import pathlib as _p, time as _t
while not _p.Path({go!r}).exists():
    _t.sleep(0.05)
_p.Path({done!r}).write_text("trained")
'''


def _code(worker: str, go: Path, done: Path, pidfile: Path) -> str:
    """The cell: start the training loop and return to the prompt at once."""
    train = _TRAIN.format(go=str(go), done=str(done))
    if worker == "thread":
        return ("import threading, os, pathlib\n"
                f"pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid()))\n"
                "def _train():\n"
                + "".join(f"    {line}\n" for line in train.strip().splitlines())
                + "threading.Thread(target=_train, daemon=True).start()\n")
    if worker == "task":  # an asyncio task on the kernel's own event loop
        wait = train.replace("_t.sleep(0.05)", "await _asyncio.sleep(0.05)")
        return ("import asyncio as _asyncio, os, pathlib\n"
                f"pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid()))\n"
                "async def _train():\n"
                + "".join(f"    {line}\n" for line in wait.strip().splitlines())
                + "_task = _asyncio.get_event_loop().create_task(_train())\n")
    child = (f"import os, pathlib; pathlib.Path({str(pidfile)!r}).write_text(str(os.getpid()))"
             + train)
    return f"import subprocess, sys\n_child = subprocess.Popen([sys.executable, '-c', {child!r}])\n"


def _alerts(server: ServerProcess, kind: str, kid: str) -> list[dict[str, Any]]:
    doc = server.get("costguard/api/alerts?include=all")
    return [a for a in doc["alerts"] if a["kind"] == kind and a.get("kernel_id") == kid]


def _kernel_doc(server: ServerProcess, kid: str) -> dict[str, Any] | None:
    return next((k for k in server.get("costguard/api/kernels")["kernels"]
                 if k["kernel_id"] == kid), None)


def _wait(what: Any, timeout: float = 60.0, why: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = what()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out: {why}"
        time.sleep(0.1)


@pytest.mark.parametrize("consumer", sorted(CONSUMERS))
@pytest.mark.parametrize("worker", ["thread", "child", "task"])
def test_a_kernel_at_its_prompt_whose_gpu_works_is_never_stopped(
        tmp_path: Path, worker: str, consumer: str):
    marker = tmp_path / "auto-stopped"
    config = {"db_path": str(tmp_path / "ledger.sqlite"), "sample_interval": 0.25,
              "hourly_rate": 8.0, "gpu_share": 0.8, "Hibernate.on_stop_seconds": 0,
              "LocalBackend.warm_kernels": 0, **CONSUMERS[consumer]}
    if consumer == "autostop":
        config["Guard.shutdown_command"] = [sys.executable, "-c",
                                      f"open({str(marker)!r}, 'a').write('stopped')"]
    gpu = Gpu(uuid="GPU-0000-aaaa", name="NVIDIA A100-SXM4-40GB", mem_total=40 * GiB, util=0)
    scenario = tmp_path / "scenario.txt"
    Scenario(gpus=[gpu]).write(scenario)
    server = ServerProcess(tmp_path / "srv", config, env=subprocess_env(scenario)).start()
    go, done, pidfile = tmp_path / "go", tmp_path / "done", tmp_path / "worker.pid"
    try:
        kid = server.start_session("train.ipynb")["kernel"]["id"]
        _wait(lambda: (d := _kernel_doc(server, kid)) is not None and d["pids"],
              why="the kernel is sampled")
        conn = tmp_path / "srv" / "runtime" / f"kernel-{kid}.json"
        client = BlockingKernelClient(connection_file=str(conn))
        client.load_connection_file()
        # no heartbeat: on two busy cores a late beat reads as "Kernel died before replying
        # to kernel_info" (jupyter_client judges a client without a manager by it alone)
        client.start_channels(hb=False)
        try:
            client.wait_for_ready(timeout=60)  # its IOPub subscribed, so the reply is heard
            reply = client.execute_interactive(_code(worker, go, done, pidfile), timeout=120)
            assert reply["content"]["status"] == "ok", reply
        finally:
            client.stop_channels()
        pid = int(_wait(lambda: pidfile.exists() and pidfile.read_text(), why="worker pid"))
        # the worker trains on the GPU at 90 %: the driver lists its process there
        gpu.procs, gpu.mem_used, gpu.util = [Proc(pid, 4 * GiB)], 4 * GiB, 90
        Scenario(gpus=[gpu]).write(scenario)

        def held() -> dict[str, Any] | None:
            k = _kernel_doc(server, kid)
            return k if k is not None and k["gpus"] == ["GPU-0000-aaaa"] else None

        _wait(held, why="the kernel holds the GPU (its worker's pid is in its tree)")
        # back at its prompt, its last activity ever further behind: watched past every limit
        deadline = time.monotonic() + 90
        while True:
            assert _alerts(server, IDLE_KIND, kid) == [], "a kernel whose GPU works is idle"
            assert _alerts(server, HIBERNATED_KIND, kid) == [], "hibernated"
            assert kid in {k["id"] for k in server.get("api/kernels")}, "culled"
            assert not marker.exists(), "auto-stopped"
            assert server.proc is not None and server.proc.poll() is None
            auto = [a for a in server.get("costguard/api/alerts")["alerts"]
                    if a["kind"] == "auto-stop"]
            assert auto == [], auto
            doc = server.get("costguard/api/kernels")
            k = next((k for k in doc["kernels"] if k["kernel_id"] == kid), None)
            assert k is not None and k["gpus"] == ["GPU-0000-aaaa"], k
            quiet = doc["time"] - k["last_activity"]  # since the kernel last said anything
            if k["execution_state"] == "idle" and quiet >= WATCH_SECONDS:
                # the API says what the rules decide: at work, not idle
                assert k["idle_seconds"] < WATCH_SECONDS / 2, k
                break
            assert time.monotonic() < deadline, k
            time.sleep(0.1)

        # its work finishes
        go.write_text("go")
        assert _wait(lambda: done.exists() and done.read_text(), why="the work finishes") \
            == "trained"
        if consumer == "cull":
            # the same kernel holding the same GPU, now idle, is judged as any other: the
            # setup above would have been warned had the GPU not worked
            gpu.util = 0
            Scenario(gpus=[gpu]).write(scenario)
            _wait(lambda: _alerts(server, IDLE_KIND, kid), why="warned once the GPU idles")
    finally:
        server.stop()

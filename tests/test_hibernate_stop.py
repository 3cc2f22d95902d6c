"""Stops keep the work (issue 37 item 4): a real server stopped with SIGTERM (as a spawner, a
culler or auto-stop stops it) hibernates the kernel that holds a (replayed) GPU first, and the
next start keeps the snapshot, and the notebook's next kernel starts with its variables."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.attach import KERNEL_CLIENT
from tests.support.notebooks import code, write_notebook
from tests.support.server_proc import ServerProcess
from tests.support.traces import write_trace
from tests.support.units import GiB


def in_kernel(server: ServerProcess, kernel_id: str, source: str) -> str:
    connection = server.workdir / "runtime" / f"kernel-{kernel_id}.json"
    done = subprocess.run([sys.executable, "-c", KERNEL_CLIENT, str(connection), source],
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


def config(tmp_path: Path) -> dict[str, Any]:
    trace = write_trace(tmp_path / "trace.json", [{"t": 0, "gpus": [
        {"utilization_percent": 0, "power_watts": 60,
         "processes": [{"kernel": 0, "used_memory_bytes": 4 * GiB}]}]}], gpus=1)
    return {"db_path": str(tmp_path / "data" / "ledger.sqlite"), "sample_interval": 0.25,
            "hourly_rate": 10.0, "replay_trace": str(trace), "replay_mode": "always",
            "LocalBackend.warm_kernels": 0, "Hibernate.on_stop_seconds": 60}


def test_a_stopped_server_hibernates_its_gpu_kernel_and_the_next_start_restores_it(tmp_path):
    settings = config(tmp_path)
    server = ServerProcess(tmp_path / "server", settings)
    write_notebook(tmp_path / "server" / "root", "train.ipynb", [code("a", "x = 1")])
    server.start()
    try:
        kernel_id = server.start_session("train.ipynb")["kernel"]["id"]
        out = in_kernel(server, kernel_id,
                        "weights = {'w': [1.5, 2.5]}\nsteps = list(range(1000))\nprint('set')")
        assert "set" in out and out.strip().endswith("ok"), out
        server.wait_for("costguard/api/kernels", lambda d: any(
            k["kernel_id"] == kernel_id and k["gpus"] for k in d["kernels"]))
    finally:
        server.stop()
    log = server.log_path.read_text(errors="replace")
    assert f"kernel {kernel_id}: hibernated as snapshot" in log, log[-4000:]

    again = ServerProcess(tmp_path / "server", settings).start()
    try:
        listed = again.get("costguard/api/snapshots?notebook=train.ipynb")["snapshots"]
        assert len(listed) == 1 and {"weights", "steps"} <= set(listed[0]["saved"]), listed
        # the notebook's next kernel starts with them (resume on use), no restore asked
        new_kernel = again.start_session("train.ipynb")["kernel"]["id"]
        out = in_kernel(again, new_kernel, "print(weights['w'][1], len(steps))")
        assert "2.5 1000" in out, out
        restored = again.wait_for("costguard/api/snapshots?notebook=train.ipynb", lambda d: d[
            "snapshots"][0]["restored"] is not None)["snapshots"][0]
        assert restored["id"] == listed[0]["id"] and restored["restore_error"] is None
    finally:
        again.stop()


def _kill_kernel(kernel_id: str) -> None:
    """SIGKILL the kernel process of `kernel_id` (found by its connection file)."""
    import os
    import signal

    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if f"kernel-{kernel_id}.json".encode() in cmdline:
            os.kill(int(pid), signal.SIGKILL)


def test_what_a_server_killed_mid_save_left_is_removed_at_the_next_start(tmp_path):
    """Issue 44: a server (and its kernel) killed while saving left a full copy of the
    variables on disk until a start 10 minutes later. The next start removes it, at any
    age."""
    import threading

    settings = {**config(tmp_path), "Hibernate.on_stop_seconds": 0}
    server = ServerProcess(tmp_path / "server", settings)
    write_notebook(tmp_path / "server" / "root", "train.ipynb", [code("a", "x = 1")])
    server.start()
    root = tmp_path / "data" / "snapshots"
    started, go = tmp_path / "saving", tmp_path / "go"
    try:
        kernel_id = server.start_session("train.ipynb")["kernel"]["id"]
        out = in_kernel(server, kernel_id, (
            "class Slow:\n    def __reduce__(self):\n        import os, time\n"
            f"        open({str(started)!r}, 'w').close()\n"
            f"        while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
            "        return (int, ())\n"
            "big = bytes(20_000_000)\nzslow = Slow()\nprint('set')"))
        assert "set" in out, out

        def hibernate() -> None:
            try:
                server.request(f"costguard/api/kernels/{kernel_id}/hibernate", "POST", {})
            except Exception:  # the server is killed under it
                pass

        asker = threading.Thread(target=hibernate, daemon=True)
        asker.start()
        deadline = time.monotonic() + 60
        while not started.exists():
            assert time.monotonic() < deadline, server.log()
            time.sleep(0.05)
        partial = [p for p in root.iterdir() if p.name.endswith(".partial")]
        assert len(partial) == 1 and any(partial[0].iterdir()), partial  # `big` is written
        server.kill9()
        _kill_kernel(kernel_id)
    finally:
        go.touch()
        server.stop()
    assert partial[0].exists()

    again = ServerProcess(tmp_path / "server", settings).start()
    try:
        assert again.get("costguard/api/snapshots")["snapshots"] == []
        assert not partial[0].exists()
        assert [p.name for p in root.iterdir()
                if not p.name.startswith(("index.sqlite", ".server-"))
                and not p.name.endswith(".abandoned")] == []
    finally:
        again.stop()

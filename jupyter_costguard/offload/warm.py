"""A warm runner: a kernel started before its job comes, so a local job starts without
waiting for one.

``python -m jupyter_costguard.offload.runner --warm DIR KERNEL SERVER_PID`` (the local
backend's pool) starts the kernel, says so in ``DIR/status.json`` and waits for the server to
write ``DIR/assign.json`` (the job's directory); the job then runs in that kernel. It exits,
shutting the kernel down, when the server is gone or on SIGTERM.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from jupyter_costguard.common.proc import pid_exists
from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.jobclient import job_client

#: runs the assigned job (its directory) in the warm client; returns the exit code
RunJob = Callable[[Path, Any], Awaitable[int]]


async def warm_main(warm_dir: Path, kernel_name: str, server_pid: int, run_job: RunJob) -> int:
    """Wait with a started kernel for a job, then `run_job` it; the directory goes after."""
    try:
        return await _warm_wait(warm_dir, kernel_name, server_pid, run_job)
    finally:
        shutil.rmtree(warm_dir, ignore_errors=True)


async def _warm_wait(warm_dir: Path, kernel_name: str, server_pid: int, run_job: RunJob) -> int:
    import nbformat

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    status: dict[str, Any] = {"pid": os.getpid(), "kernel_name": kernel_name,
                              "state": "starting", "kernel_pid": None}
    jobdir.write_json(warm_dir / jobdir.STATUS, status)
    client = job_client(None, nbformat.v4.new_notebook(), kernel_name)
    async with client.async_setup_kernel(env=dict(os.environ), cwd=str(warm_dir)):
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        pid = getattr(getattr(client.km, "provisioner", None), "pid", None)
        status.update(state=jobdir.WARM_READY, kernel_pid=pid, ready=time.time())
        jobdir.write_json(warm_dir / jobdir.STATUS, status)
        assignment = warm_dir / jobdir.WARM_ASSIGNMENT
        checked = time.monotonic()
        while not stop.is_set():
            doc = jobdir.read_json(assignment)
            if isinstance(doc, dict) and isinstance(doc.get("job_dir"), str):
                break
            if time.monotonic() - checked > 1.0:
                checked = time.monotonic()
                if not pid_exists(server_pid) or not await client.km.is_alive():
                    return 0
            try:
                await asyncio.wait_for(stop.wait(), 0.01)
            except asyncio.TimeoutError:
                pass
        else:
            return 0
        return await run_job(Path(doc["job_dir"]), client)

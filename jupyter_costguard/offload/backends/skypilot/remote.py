"""The ``run`` of a SkyPilot task: the job's side, on the machine SkyPilot launched.

``python -m jupyter_costguard.offload.backends.skypilot.remote INPUT WORK STORE``
(`task.REMOTE_MODULE`) copies the mounted input into the writable WORK directory, brings back
the job's status and log from object storage STORE (``<storage_url>/job-<id>``) when an earlier
machine left them (SkyPilot recovered the job after a preemption), runs the job runner there,
and keeps STORE up to date with the runner's status and log while it runs and with its outputs
when it ends. The server reads STORE; it never reaches the remote machine itself.

Each machine the job starts on is recorded in ``machines.json`` (`MACHINES`): its cloud
identity, read from the metadata service as the server reads its own, when it started, when it
was last seen and when it ended. The server prices the job's spend from those records (each
machine at its own instance's price): what SkyPilot really launched, not what was asked.

A recovery is a requeue to the runner: `jobdir.ENV_RESTART_COUNT` is one more than the restart
count in the status found, so the runner continues the interrupted attempt from the latest
checkpoint without using a retry (see runner.py's scheduler hooks). STORE empty: no status,
log or outputs travel (SkyPilot's own state is all the server sees).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jupyter_costguard.offload import jobdir

#: seconds between two uploads of the status and the log while the job runs
PUSH_INTERVAL = 2.0
#: the machines the job ran on, one record each, for pricing its spend
MACHINES = "machines.json"
#: what travels while the job runs; outputs travel once it has ended
LIVE_FILES = (jobdir.STATUS, jobdir.LOG, MACHINES)


def _fs(url: str) -> tuple[Any, str]:
    import fsspec

    fs, path = fsspec.core.url_to_fs(url)
    return fs, path


def fetch(store: str, name: str, dest: Path) -> bool:
    """Copy ``STORE/name`` to `dest`; whether it was there."""
    fs, root = _fs(store)
    try:
        data = fs.cat_file(f"{root}/{name}")
    except FileNotFoundError:
        return False
    dest.write_bytes(data)
    return True


def push(store: str, work: Path, names: tuple[str, ...], sent: dict[str, tuple[int, int]]) -> None:
    """Upload each of `names` from `work` whose size or mtime changed since `sent`."""
    fs, root = _fs(store)
    fs.makedirs(root, exist_ok=True)
    for name in names:
        path = work / name
        try:
            st = path.stat()
        except FileNotFoundError:
            continue
        key = (st.st_size, st.st_mtime_ns)
        if sent.get(name) == key:
            continue
        fs.pipe_file(f"{root}/{name}", path.read_bytes())
        sent[name] = key


def live_files(work: Path) -> tuple[str, ...]:
    """What the pusher sends while the runner runs: its status only until it is final. The
    runner writes its final status before it exits, and the server takes a final status to
    mean the outputs are there: that one goes after them, in the last push."""
    status = jobdir.read_status(work)
    if status is not None and status.state in jobdir.TERMINAL:
        return tuple(name for name in LIVE_FILES if name != jobdir.STATUS)
    return LIVE_FILES


def identify(environ: Mapping[str, str]) -> dict[str, Any]:
    """This machine as the server would price it: its cloud identity from the metadata
    service (off with ``COSTGUARD_CLOUD_METADATA=off``), or why there is none."""
    from jupyter_costguard.cloud.metadata import lookup

    result = lookup(environ)
    found = result.identity
    if found is None:
        return {"provider": None, "detail": "; ".join(result.tried)}
    return {"provider": found.provider, "instance_type": found.instance_type,
            "region": found.region, "market": found.market, "detail": found.detail}


def read_machines(directory: Path) -> list[dict[str, Any]]:
    """The machine records in `directory` (none when the file is missing or not a list)."""
    found = jobdir.read_json(directory / MACHINES)
    return [m for m in found if isinstance(m, dict)] if isinstance(found, list) else []


def start_machine(work: Path, restarts: int, environ: Mapping[str, str]) -> list[dict[str, Any]]:
    """The job's machine records with this machine's appended (the earlier ones came back
    from object storage with the status)."""
    machines = read_machines(work)
    now = time.time()
    machines.append({"restart": restarts, "start": now, "seen": now, **identify(environ)})
    jobdir.write_json(work / MACHINES, machines)
    return machines


def mark_machine(work: Path, machines: list[dict[str, Any]], ended: bool = False) -> None:
    """This machine is still up (or has ended its part)."""
    now = time.time()
    machines[-1]["seen"] = now
    if ended:
        machines[-1]["end"] = now
    jobdir.write_json(work / MACHINES, machines)


def restart_count(work: Path) -> int:
    """0 for a first run; one more than the status found says for a recovery."""
    status = jobdir.read_status(work)
    if status is None or status.attempt == 0:
        return 0
    return (status.restarts or 0) + 1


def expand_paths(spec_path: Path) -> None:
    """The spec's ``~/`` paths (the task is written before the machine's home is known) as
    this machine's: the kernel changes into its cwd, which no shell expands."""
    doc = json.loads(spec_path.read_text())
    doc["spec"]["cwd"] = os.path.expanduser(doc["spec"]["cwd"])
    if str(doc.get("checkpoint_dir", "")).startswith("~"):
        doc["checkpoint_dir"] = os.path.expanduser(doc["checkpoint_dir"])
    jobdir.write_json(spec_path, doc)


def prepare(input_dir: Path, work: Path, store: str) -> int:
    """The work directory as the runner needs it; returns the restart count."""
    work.mkdir(parents=True, exist_ok=True)
    for entry in input_dir.iterdir():
        if entry.is_file():
            shutil.copyfile(entry, work / entry.name)
    expand_paths(work / jobdir.SPEC)
    if store:
        for name in LIVE_FILES:
            fetch(store, name, work / name)
    return restart_count(work)


def remote_main(input_dir: Path, work: Path, store: str) -> int:
    """Run the job runner in `work`, keeping `store` up to date; exits with its code."""
    restarts = prepare(input_dir, work, store)
    machines = start_machine(work, restarts, os.environ)
    env = dict(os.environ)
    env[jobdir.ENV_RESTART_COUNT] = str(restarts)
    proc = subprocess.Popen(jobdir.runner_command(work), cwd=str(work), env=env)

    def forward(sig: int, frame: Any) -> None:
        proc.send_signal(sig)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, forward)
    sent: dict[str, tuple[int, int]] = {}
    done = threading.Event()

    def pusher() -> None:
        while not done.wait(PUSH_INTERVAL):
            try:
                mark_machine(work, machines)
                push(store, work, live_files(work), sent)
            except Exception as e:  # the next round tries again
                print(f"costguard: could not update {store}: {e}", file=sys.stderr)

    thread = threading.Thread(target=pusher, daemon=True) if store else None
    if thread is not None:
        thread.start()
    rc = proc.wait()
    done.set()
    if thread is not None:
        thread.join(30)
    mark_machine(work, machines, ended=True)
    if thread is not None:
        # outputs first: the final status tells the server the outputs are there
        push(store, work, (*jobdir.OUTPUT_FILES, jobdir.LOG, MACHINES), sent)
        push(store, work, (jobdir.STATUS,), sent)
    return rc


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m jupyter_costguard.offload.backends.skypilot.remote INPUT WORK "
              "STORE", file=sys.stderr)
        return 2
    return remote_main(Path(args[0]).expanduser(), Path(args[1]).expanduser(), args[2])


if __name__ == "__main__":
    sys.exit(main())

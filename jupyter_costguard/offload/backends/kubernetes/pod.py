"""The container's command of a Kubernetes job: the job's pod side.

``python -m jupyter_costguard.offload.backends.kubernetes.pod pod JOB_MOUNT WORK_DIR``
(`manifest.POD_MODULE`) copies the ConfigMap's input into a writable directory, runs the same
job runner the local backend runs there, streams the runner's log to the container's stdout
and leaves the runner's final status as the container's termination message.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.backends.kubernetes import manifest, storage
from jupyter_costguard.offload.jobdir import RunnerStatus

TERMINATION_LOG = "/dev/termination-log"


def pod_main(job_mount: Path, work: Path) -> int:
    """The container's command: copy the ConfigMap's files into the writable `work`, fetch
    inputs kept in object storage, run the job runner there, copy its log to stdout as it
    grows (``kubectl logs`` and the server read it), put outputs into object storage, and
    leave the runner's final status in the termination message. Exits with the runner's
    code (2: the input cannot be read, which the Job's podFailurePolicy does not retry)."""
    work.mkdir(parents=True, exist_ok=True)
    try:
        for entry in job_mount.iterdir():
            # a ConfigMap volume holds its files as links into a hidden ..data directory
            if not entry.name.startswith("..") and entry.is_file():
                shutil.copyfile(entry, work / entry.name)
        doc = json.loads((work / jobdir.SPEC).read_text())
        extra = doc.get("kubernetes") or {}
    except (OSError, ValueError) as e:
        print(f"costguard: cannot read the job's input in {job_mount}: {e}", file=sys.stderr)
        _terminate({"state": "failed", "exit_reason": f"cannot read the job's input: {e}"})
        return manifest.EXIT_USAGE
    log_path = work / jobdir.LOG
    log_path.touch()
    if extra.get("inputs_url"):
        try:
            (work / jobdir.INPUTS).write_bytes(storage.get(extra["inputs_url"]))
        except Exception as e:
            reason = f"cannot fetch the job's inputs from {extra['inputs_url']}: {e}"
            print(f"costguard: {reason}", file=sys.stderr)
            _terminate({"state": "failed", "exit_reason": reason})
            return 1
    proc = subprocess.Popen(jobdir.runner_command(work), cwd=str(work))

    def forward(sig: int, frame: Any) -> None:
        proc.send_signal(sig)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    done = threading.Event()
    tail = threading.Thread(target=_tail, args=(log_path, done), daemon=True)
    tail.start()
    rc = proc.wait()
    done.set()
    tail.join(10)
    status = jobdir.read_status(work)
    if extra.get("outputs_url"):
        for file in jobdir.OUTPUT_FILES:
            if (work / file).exists():
                try:
                    storage.put(f"{extra['outputs_url']}/{file}", (work / file).read_bytes())
                except Exception as e:
                    print(f"costguard: could not store {file}: {e}", file=sys.stderr)
    _terminate(_final_status(status))
    return rc


def _final_status(status: RunnerStatus | None) -> dict[str, Any]:
    """What of the runner's final status the termination message carries."""
    doc = status.to_json() if status is not None else {}
    return {k: doc.get(k) for k in ("state", "exit_reason", "attempt", "phase_times")}


def _tail(path: Path, done: threading.Event) -> None:
    out = sys.stdout.buffer
    with open(path, "rb") as f:
        while True:
            finished = done.is_set()
            chunk = f.read(1 << 16)
            if chunk:
                out.write(chunk)
                out.flush()
                continue
            if finished:
                return
            done.wait(0.2)


def _terminate(doc: dict[str, Any]) -> None:
    """The termination message holds at most 4096 bytes."""
    reason = doc.get("exit_reason")
    if isinstance(reason, str) and len(reason) > 2000:
        doc["exit_reason"] = reason[:2000] + "…"
    text = json.dumps(doc)
    if len(text.encode()) > 4000:
        text = json.dumps({"state": doc.get("state"), "exit_reason": doc.get("exit_reason")})
    try:
        Path(os.environ.get(jobdir.ENV_TERMINATION_LOG, TERMINATION_LOG)).write_text(text)
    except OSError:
        pass


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3 or args[0] != "pod":
        print(f"usage: python -m {manifest.POD_MODULE} pod JOB_MOUNT WORK_DIR", file=sys.stderr)
        return manifest.EXIT_USAGE
    return pod_main(Path(args[1]), Path(args[2]))


if __name__ == "__main__":
    sys.exit(main())

"""The ``%costguard`` line magic and ``%load_ext jupyter_costguard``.

``%costguard [--refresh SECONDS] [--notebook PATH]`` shows a cost widget under the cell;
``%costguard fetch JOB [--dir JOBS_DIR]`` loads what a batch job brought back into the user's
namespace, read from the job's directory in the server's jobs directory.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import shlex
import sys
from typing import Any

from traitlets import TraitError

from jupyter_costguard.common.files import data_dir
from jupyter_costguard.kernel.widget import widget
from jupyter_costguard.offload.jobdir import (
    ENV_JOBS_DIR,
    RESULTS,
    recorded_results_digest,
    server_jobs_dir,
    unsafe_location,
)


def kernels_server_jobs_dir() -> str | None:
    """The jobs directory of the Jupyter server that started this kernel, from the note it
    keeps beside the kernel's connection file (None outside a kernel a costguard server
    started)."""
    try:
        from ipykernel.connect import get_connection_file
        connection = get_connection_file()
    except Exception:  # not in an IPython kernel
        return None
    return server_jobs_dir(os.path.dirname(connection), os.getppid())


def fetch_results(job: str, jobs_dir: str | None = None) -> dict[str, Any]:
    """A batch job's results (the names it brought back), read from its job directory:
    `jobs_dir`, else the jobs directory of the server that started this kernel, else
    $COSTGUARD_JOBS_DIR, else the default next to the ledger. Loaded only if the server
    recorded that the job produced them, from a directory and file of the user's that group
    and others cannot write, and if the file's sha256 is the recorded one (ValueError
    otherwise)."""
    if not job.isdigit():
        raise ValueError(f"a job id is a number, not {job!r}")
    base = (jobs_dir or kernels_server_jobs_dir() or os.environ.get(ENV_JOBS_DIR)
            or str(data_dir() / "jobs"))
    path = os.path.join(base, job, RESULTS)
    digest = recorded_results_digest(base, int(job))
    if digest is None:
        raise ValueError(f"job {job} brought nothing back that costguard recorded in {base} "
                         "(not finished, brought nothing back, or another jobs directory: "
                         "--dir DIR); nothing loaded")
    if not os.path.exists(path):
        raise FileNotFoundError(f"job {job}'s results are no longer in {base}")
    unsafe = unsafe_location(path)
    if unsafe is not None:
        raise ValueError(f"job {job}'s results are not loaded: {unsafe}")
    with open(path, "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != digest:
        raise ValueError(f"job {job}'s results are not loaded: {path} does not match the "
                         "sha256 recorded when the job ended")
    values: dict[str, Any] = pickle.loads(data)
    return values


def _fetch_magic(args: list[str]) -> None:
    from IPython import get_ipython

    usage = "usage: %costguard fetch JOB [--dir JOBS_DIR]"
    jobs_dir = None
    if len(args) == 3 and args[1] == "--dir":
        jobs_dir = args[2]
    elif len(args) != 1:
        print(usage, file=sys.stderr)
        return
    try:
        values = fetch_results(args[0], jobs_dir)
    except (ValueError, OSError) as e:
        print(f"%costguard fetch: {e}", file=sys.stderr)
        return
    get_ipython().user_ns.update(values)
    print(f"costguard: loaded {', '.join(sorted(values)) or 'nothing'} from job {args[0]}")


def _costguard_magic(line: str = "") -> None:
    """%costguard [--refresh SECONDS] [--notebook PATH]: show the cost widget here.
    %costguard fetch JOB [--dir JOBS_DIR]: load what batch job JOB brought back."""
    from IPython.display import display

    args = shlex.split(line or "")
    if args and args[0] == "fetch":
        _fetch_magic(args[1:])
        return
    options: dict[str, Any] = {}
    usage = "usage: %costguard [--refresh SECONDS] [--notebook PATH]"
    while args:
        arg = args.pop(0)
        name, eq, value = arg.partition("=")
        if name in ("--refresh", "--notebook"):
            if not eq:
                if not args:
                    print(usage, file=sys.stderr)
                    return
                value = args.pop(0)
            if name == "--refresh":
                try:
                    options["refresh_seconds"] = float(value)
                except ValueError:
                    print(f"%costguard: --refresh needs seconds, not {value!r}", file=sys.stderr)
                    return
            else:
                options["notebook"] = value
        else:
            print(usage, file=sys.stderr)
            return
    try:
        w = widget(**options)
    except TraitError as e:
        print(f"%costguard: {e}", file=sys.stderr)
        return
    display(w)


def register(ipython: Any) -> None:
    """``%costguard`` in this shell (again is harmless)."""
    ipython.register_magic_function(_costguard_magic, magic_kind="line", magic_name="costguard")


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext jupyter_costguard``: show the widget and register ``%costguard``."""
    from IPython.display import display

    register(ipython)
    display(widget())

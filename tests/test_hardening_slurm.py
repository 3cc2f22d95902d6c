"""Issue 11, item 6: the Slurm batch script survives any character a path may hold, no setting
can smuggle a shell command into it, and finished local runners are reaped (no zombies).

The quoting is checked by a real single-node Slurm (tests/support/slurm_cluster.py) running a
job from a notebook directory named with quotes, a backslash, ``#``, ``$``, backticks, spaces
and non-ASCII letters, with a job directory almost as odd; the reaping by a real server
(in-process, so its children are this process's) running a real local job.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from traitlets import TraitError

from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.backends.slurm import SlurmBackend, SlurmError, SlurmExecutor
from jupyter_costguard.offload.spec import Job, JobSpec, SpecCell
from tests.support.jobs import submit as submit_local
from tests.support.jobs import wait_job
from tests.support.notebooks import code, write_notebook
from tests.support.server_proc import ServerProcess
from tests.support.slurm_cluster import SlurmCluster, running_cluster

#: every character the issue names, in the directory of the notebook
ODD_DIR = "we'ird \\ #dir $x `id` \"q\" ünï %j"
#: the job directory may hold all but the backslash (Slurm's --output cannot take one)
ODD_JOBS = "jobs we'ird #dir $x `id` \"q\" ünï %j"
ENDED = ("succeeded", "failed", "cancelled", "lost")


def _job(cwd: str = "/home/u/project", job_id: int = 3) -> Job:
    spec = JobSpec(notebook="project/n.ipynb", cwd=cwd, kernel_name="python3",
                   cells=(SpecCell("c", 0, True, "x = 1", "x = 1"),), backend="slurm")
    return Job(id=job_id, spec=spec, state="queued", phase="queued", created=0.0)


# --- settings that go into the script ----------------------------------------------------

BAD = ["a\nb", "a\rb", "a\0b"]


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("setting", ["partition", "account", "extra_args", "python"])
def test_no_setting_can_put_a_line_break_or_nul_into_the_script(
        setting: str, bad: str, tmp_path: Path) -> None:
    value: Any = [f"--comment={bad}"] if setting == "extra_args" else bad
    backend = SlurmExecutor(**{setting: value})
    with pytest.raises(SlurmError, match=setting.replace("_", " ")):
        backend.script(_job(), tmp_path / "1")


def test_a_newline_in_extra_args_fails_the_job_and_never_runs(tmp_path: Path) -> None:
    """Before: the arguments were echoed into a comment line, so the part after the newline
    was a command of the batch script. Now the submit fails the job, saying why."""
    planted = tmp_path / "PWNED"
    d = tmp_path / "jobs" / "3"
    d.mkdir(parents=True)
    backend = SlurmExecutor(extra_args=["--qos=normal", f"--comment=x\ntouch {planted}"])
    assert backend.launch(_job(), d) is None
    status = jobdir.read_status(d)
    assert status is not None and status.state == "failed"
    assert "newline" in (status.exit_reason or "") and "extra args" in (status.exit_reason or "")
    assert not (d / jobdir.SLURM_SCRIPT).exists() and not planted.exists()


@pytest.mark.parametrize("setting", ["partition", "account", "python"])
def test_the_server_refuses_a_line_break_in_a_slurm_setting_at_startup(setting: str) -> None:
    with pytest.raises(TraitError, match=f"SlurmBackend.{setting}.*newline"):
        SlurmBackend(**{setting: "gpu\n#SBATCH --exclusive"})
    with pytest.raises(TraitError, match=r"extra_args.*NUL"):
        SlurmBackend(extra_args=["--qos=a\0b"])
    assert SlurmBackend(partition="gpu #1", extra_args=["--comment=a b"])
    # what the server does with such a config file (old name or new): it refuses to
    # configure the backend
    from traitlets.config import Config

    from jupyter_costguard.app import CostGuard

    for config in ({"SlurmBackend": {"extra_args": ["--qos=a\ntouch x"]}},
                   {"CostGuard": {"slurm_extra_args": ["--qos=a\ntouch x"]}}):
        with pytest.raises(TraitError, match="extra_args holds a newline"):
            SlurmBackend(parent=CostGuard(config=Config(config)))


def test_a_job_directory_with_a_backslash_is_refused_with_the_reason(tmp_path: Path) -> None:
    """Slurm drops backslashes from an --output path (and stops expanding %j), so the job
    could never start: say so instead of submitting it."""
    with pytest.raises(SlurmError, match="backslash"):
        SlurmExecutor().script(_job(), tmp_path / "a\\b" / "3")
    # in the notebook's directory a backslash is fine (the real cluster below runs one)
    assert "--chdir=" in SlurmExecutor().script(_job(cwd="/x/a\\b"), tmp_path / "3")


def test_the_script_hands_odd_paths_to_the_runner_unchanged(tmp_path: Path) -> None:
    """The body of the batch script (what bash runs; #SBATCH lines are comments to it): an
    interpreter and a job directory full of shell metacharacters arrive as one argument
    each, and nothing in them is expanded or run."""
    odd = tmp_path / "py $(touch PWNED) `id` 'q' \\ #x ü"
    odd.mkdir()
    python = odd / "python"
    python.write_text('#!/bin/sh\nfor a in "$@"; do printf "[%s]\\n" "$a"; done\n')
    python.chmod(0o755)
    job_dir = tmp_path / ODD_JOBS / "3"
    script = SlurmExecutor(python=str(python)).script(_job(cwd=str(tmp_path / ODD_DIR)), job_dir)
    run = subprocess.run(["bash", "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["[-m]", f"[{jobdir.RUNNER_MODULE}]", f"[{job_dir}]"]
    assert not (tmp_path / "PWNED").exists()


# --- a real cluster ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    yield from running_cluster()


@pytest.fixture(scope="module")
def server(cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("slurm-odd")
    config = {"db_path": str(base / "ledger.sqlite"), "Offload.jobs_dir": str(base / ODD_JOBS),
              "sample_interval": 0.25, "hourly_rate": 36.0, "Offload.poll_interval": 0.1,
              "LocalBackend.warm_kernels": 0, "SlurmBackend.enabled": True}
    srv = ServerProcess(base / "srv", config, env={"SLURM_CONF": str(cluster.conf)}).start()
    try:
        yield srv
    finally:
        srv.stop()


def test_a_job_from_a_directory_named_with_every_odd_character_runs_in_slurm(
        cluster: SlurmCluster, server: ServerProcess) -> None:
    root = server.workdir / "root"
    write_notebook(root / ODD_DIR, "odd.ipynb", [
        code("a", "import os\nprint('cwd is', repr(os.getcwd()))\nz = 6 * 7\nprint('z', z)")])
    status, body = server.request("costguard/api/jobs", "POST", {
        "notebook": f"{ODD_DIR}/odd.ipynb", "selected": ["a"], "backend": "slurm"})
    assert status == 201, body
    job_id = json.loads(body)["id"]
    done = server.wait_for(f"costguard/api/jobs/{job_id}", lambda d: d["state"] in ENDED,
                           timeout=120)
    status, body = server.request(f"costguard/api/jobs/{job_id}/log?limit=1000000")
    log = json.loads(body)["text"]
    assert done["state"] == "succeeded", (done, log, cluster.logs())
    assert f"cwd is {str(root / ODD_DIR)!r}" in log  # --chdir held the whole name
    assert "z 42" in log
    d = Path(server.costguard["Offload.jobs_dir"]) / str(job_id)
    m = re.search(r"submitted to Slurm as job (\d+)", log)
    assert m, log
    # --output held the job directory (its %j a literal one), and Slurm expanded its own %j
    assert (d / f"slurm-{m.group(1)}.out").exists(), sorted(p.name for p in d.iterdir())


# --- local runners are reaped -------------------------------------------------------------

@pytest.fixture
def costguard_config(costguard_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {**costguard_config, "Offload.jobs_dir": str(tmp_path / "jobs"),
            "Offload.poll_interval": 0.1}


def _children() -> tuple[list[int], list[int]]:
    """This process's job runners still running, and its zombie children."""
    running, zombies = [], []
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                zombies.append(child.pid)
            elif jobdir.RUNNER_MODULE in " ".join(child.cmdline()):
                running.append(child.pid)
        except psutil.NoSuchProcess:
            pass
    return running, zombies


def _name(pid: int) -> str:
    """What a zombie was (its name; a zombie has no command line left), for the message."""
    try:
        return f"{pid} {psutil.Process(pid).name()}"
    except psutil.Error:
        return f"{pid} (gone)"


@pytest.mark.usefixtures("no_leftover_jobs")
async def test_a_finished_local_runner_is_not_left_as_a_zombie(jp_fetch: Any,
                                                               jp_root_dir: Path) -> None:
    """The in-process server's runners are this process's children: once a job has ended,
    its runner must be reaped, not left <defunct> until the next job."""
    import asyncio

    assert _children() == ([], [])
    write_notebook(jp_root_dir, "reap.ipynb", [code("a", "x = 1")])
    doc = await submit_local(jp_fetch, "reap.ipynb", ["a"])
    done = await wait_job(jp_fetch, doc["id"])
    assert done["state"] == "succeeded", done
    # the runner exits a moment after it reports the end: wait for it to leave
    deadline = time.monotonic() + 20
    while _children() != ([], []) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    running, zombies = _children()
    assert running == [], "the runner did not exit"
    assert zombies == [], ("a finished runner was left as a zombie of the server: "
                           f"{[_name(pid) for pid in zombies]}")

"""The Slurm backend against a real Slurm: a single-node cluster on localhost (see
tests/support/slurm_cluster.py), a real Jupyter server in its own process, cells offloaded
through the REST API and run by the same job runner as locally, in real kernels, as Slurm batch
jobs.

Without root or the Slurm packages these tests are skipped, except in CI (``CI=true``), where
scripts/test.sh installs the packages and a skip would hide a broken backend: there they fail.
"""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard import checkpoint
from jupyter_costguard.offload.backends.slurm import SlurmExecutor, parse_scontrol, time_minutes
from jupyter_costguard.offload.spec import Job, JobSpec, Resources, SpecCell
from tests.support.notebooks import code, write_notebook
from tests.support.server_proc import ServerProcess
from tests.support.slurm_cluster import SlurmCluster, running_cluster

ENDED = ("succeeded", "failed", "cancelled", "lost")
#: a notebook directory with a space in it: the batch script must quote it
PROJECT = "my project"


def _job(job_id: int = 7, resources: Resources | None = None, cwd: str = "/home/u/my project",
         ref: str | None = None) -> Job:
    spec = JobSpec(notebook="my project/train.ipynb", cwd=cwd, kernel_name="python3",
                   cells=(SpecCell("c", 0, True, "x = 1", "x = 1"),),
                   resources=resources or Resources(), backend="slurm")
    return Job(id=job_id, spec=spec, state="queued", phase="queued", created=0.0,
               backend_ref=ref)


# --- the batch script (no cluster needed) -------------------------------------------------

def test_the_batch_script_asks_slurm_for_what_the_job_needs(tmp_path: Path) -> None:
    backend = SlurmExecutor(partition="gpu", account="proj-42", extra_args=["--qos=high"],
                           signal_seconds=90, python="/opt/conda/bin/python")
    job_dir = tmp_path / "jobs dir" / "7"
    job = _job(resources=Resources(gpus=2, cpus=3.5, memory_gib=1.5, time_limit_seconds=61))
    script = backend.script(job, job_dir)
    directives = [line for line in script.splitlines() if line.startswith("#SBATCH")]
    assert directives == [
        "#SBATCH --job-name=costguard-7",
        f'#SBATCH --output="{job_dir}/slurm-%j.out"',
        "#SBATCH --open-mode=append",
        '#SBATCH --chdir="/home/u/my project"',
        "#SBATCH --nodes=1",
        "#SBATCH --ntasks=1",
        "#SBATCH --requeue",
        "#SBATCH --export=ALL",
        "#SBATCH --signal=B:USR1@90",
        "#SBATCH --cpus-per-task=4",
        "#SBATCH --mem=1536M",
        "#SBATCH --gres=gpu:2",
        "#SBATCH --time=2",
        "#SBATCH --partition=gpu",
        "#SBATCH --account=proj-42",
    ]
    assert "# and on sbatch's command line: --qos=high" in script
    assert 'export COSTGUARD_RESTART_COUNT="${SLURM_RESTART_COUNT:-0}"' in script
    assert script.rstrip().endswith(
        f"exec /opt/conda/bin/python -m jupyter_costguard.offload.runner '{job_dir}'")
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)  # valid shell

    # nothing asked for: no resource directives (the partition's defaults apply)
    plain = SlurmExecutor(signal_seconds=0).script(_job(), job_dir)
    assert not re.search(r"--(gres|cpus-per-task|mem|time|partition|account|signal)=", plain)
    assert "--gres" not in SlurmExecutor().script(_job(resources=Resources(gpus=0)), job_dir)
    assert [time_minutes(s) for s in (1, 60, 60.5, 3600)] == [1, 1, 2, 60]


def test_scontrol_lines_are_read_even_with_spaces_in_paths() -> None:
    line = ("JobId=12 JobName=costguard-3 UserId=root(0) JobState=TIMEOUT Reason=TimeLimit "
            "Requeue=1 Restarts=2 BatchFlag=1 ExitCode=0:15 TimeLimit=00:01:00 "
            "Command=/tmp/my project/job.sbatch WorkDir=/tmp/my project NodeList=node1")
    info = parse_scontrol(line)
    assert info is not None
    assert (info.job_id, info.state, info.reason, info.restarts, info.exit_code,
            info.exit_signal, info.time_limit, info.node) == \
        ("12", "TIMEOUT", "TimeLimit", 2, 0, 15, "00:01:00", "node1")
    assert not info.active
    assert parse_scontrol("slurm_load_jobs error: Invalid job id specified") is None


def test_the_settings_example_names_real_settings() -> None:
    from traitlets.config.loader import PyFileConfigLoader

    from jupyter_costguard.offload.backends.slurm import SlurmBackend

    example = Path(__file__).resolve().parent.parent / "examples" / "slurm"
    config = PyFileConfigLoader("jupyter_server_config.py", path=str(example)).load_config()
    names = set(config.SlurmBackend)
    assert {"enabled", "partition", "account", "extra_args", "signal_seconds"} <= names
    assert names <= set(SlurmBackend.class_trait_names(config=True))
    backend = SlurmBackend(config=config)
    assert (backend.partition, backend.signal_seconds) == ("gpu", 120)


# --- a real cluster -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmCluster]:
    yield from running_cluster()


@pytest.fixture(scope="module")
def server(cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[ServerProcess]:
    base = tmp_path_factory.mktemp("slurm-server")
    config = {"db_path": str(base / "ledger.sqlite"), "Offload.jobs_dir": str(base / "jobs"),
              "sample_interval": 0.25, "hourly_rate": 36.0, "Offload.poll_interval": 0.1,
              "LocalBackend.warm_kernels": 0, "SlurmBackend.enabled": True,
              "Offload.cluster_rates": {"slurm": {"cpu_per_hour": 3600.0, "gpu_per_hour": 1e6}}}
    srv = ServerProcess(base / "srv", config, env={"SLURM_CONF": str(cluster.conf)}).start()
    try:
        yield srv
    finally:
        srv.stop()


def root(server: ServerProcess) -> Path:
    return server.workdir / "root"


def submit(server: ServerProcess, name: str, cells: list[dict[str, Any]], selected: list[str],
           **extra: Any) -> dict[str, Any]:
    write_notebook(root(server) / PROJECT, name, cells)
    status, body = server.request("costguard/api/jobs", "POST", {
        "notebook": f"{PROJECT}/{name}", "selected": selected, "backend": "slurm", **extra})
    assert status == 201, body
    doc: dict[str, Any] = json.loads(body)
    assert doc["backend"] == "slurm"
    return doc


def job_dir(server: ServerProcess, job_id: int) -> Path:
    return Path(server.costguard["Offload.jobs_dir"]) / str(job_id)


def wait(server: ServerProcess, job_id: int, predicate: Any = None,
         timeout: float = 90.0) -> dict[str, Any]:
    doc: dict[str, Any] = server.wait_for(f"costguard/api/jobs/{job_id}",
                                          predicate or (lambda d: d["state"] in ENDED),
                                          timeout=timeout)
    return doc


def slurm_id(server: ServerProcess, job_id: int, timeout: float = 30.0) -> str:
    """Slurm's id for the job, from the line the backend puts in the job's log."""
    doc = wait(server, job_id, lambda d: "submitted to Slurm as job" in d["log_tail"]
               or d["state"] in ENDED, timeout)
    m = re.search(r"submitted to Slurm as job (\d+)", doc["log_tail"])
    assert m, doc
    return m.group(1)


def full_log(server: ServerProcess, job_id: int) -> str:
    status, body = server.request(f"costguard/api/jobs/{job_id}/log?limit=1000000")
    assert status == 200, body
    text: str = json.loads(body)["text"]
    return text


def scontrol(cluster: SlurmCluster, ref: str, ended: bool = True, timeout: float = 30.0
             ) -> Any:
    """Slurm's record of the job; with `ended`, once the job has left the node (the runner
    reports its end a moment before its process exits)."""
    deadline = time.monotonic() + timeout
    while True:
        info = parse_scontrol(cluster.command("scontrol", "show", "job", "-o", ref))
        assert info is not None
        if not ended or not info.active or time.monotonic() > deadline:
            return info
        time.sleep(0.1)


def test_a_cell_runs_as_a_slurm_job_logs_and_brings_its_results_back(
        cluster: SlurmCluster, server: ServerProcess) -> None:
    cells = [code("a", "x = 6"),
             code("noise", "print('unrelated')"),
             code("b", "import os\ny = x * 7\n"
                       "print('answer', y, 'in Slurm job', os.environ.get('SLURM_JOB_ID'), "
                       "'from', os.getcwd())")]
    doc = submit(server, "answer.ipynb", cells, ["b"], resources={"cpus": 1, "memory_gib": 0.5,
                                                               "time_limit_seconds": 300})
    ref = slurm_id(server, doc["id"])
    done = wait(server, doc["id"])
    assert done["state"] == "succeeded", (done, cluster.logs())
    assert done["attempts"] == 1 and done["exit_reason"] is None
    # spend from the allocation it held: 1 CPU at 3600 an hour is one unit a second
    held = sum(p["seconds"] for p in done["timeline"] if p["phase"] != "queued")
    assert done["spend"] == pytest.approx(held, rel=0.05, abs=0.05)
    assert done["spend"] > 0

    log = full_log(server, doc["id"])
    assert f"answer 42 in Slurm job {ref} from {root(server) / PROJECT}" in log
    assert "unrelated" not in log  # only the cells the selection needs ran
    results = server.get(f"costguard/api/jobs/{doc['id']}/results")
    assert [r["name"] for r in results["results"]] == ["y"]
    namespace: dict[str, Any] = {}
    exec(results["load_code"], namespace)
    assert namespace["y"] == 42
    out = results["cells"][0]["outputs"][0]
    assert out["name"] == "stdout" and "answer 42" in out["text"]

    d = job_dir(server, doc["id"])
    script = (d / "job.sbatch").read_text()
    assert "#SBATCH --cpus-per-task=1" in script and "#SBATCH --mem=512M" in script
    assert "#SBATCH --time=5" in script
    info = scontrol(cluster, ref)
    assert (info.state, info.exit_code) == ("COMPLETED", 0)
    assert (d / f"slurm-{ref}.out").exists()  # Slurm's own output goes to the job's directory


def test_a_cancelled_job_leaves_slurm(
        cluster: SlurmCluster, server: ServerProcess) -> None:
    cells = [code("s", "import time\nprint('started', flush=True)\ntime.sleep(600)")]
    doc = submit(server, "sleeper.ipynb", cells, ["s"])
    ref = slurm_id(server, doc["id"])
    wait(server, doc["id"], lambda d: "started" in d["log_tail"])
    assert cluster.state(ref) == "RUNNING"

    t0 = time.monotonic()
    status, body = server.request(f"costguard/api/jobs/{doc['id']}/cancel", "POST")
    assert status == 202, body
    done = wait(server, doc["id"], timeout=30)
    took = time.monotonic() - t0
    assert done["state"] == "cancelled", done
    assert done["exit_reason"] == "cancelled by the user"  # the runner's own word: not killed
    assert took < 10
    assert scontrol(cluster, ref).state == "CANCELLED"
    assert ref not in cluster.jobs(active=True)
    runner_status = json.loads((job_dir(server, doc["id"]) / "status.json").read_text())
    assert runner_status["attempts"][-1]["outcome"] == "cancelled"  # not "interrupted"
    status, _ = server.request(f"costguard/api/jobs/{doc['id']}/cancel", "POST")
    assert status == 409


RESUMABLE = """\
import os, time
from jupyter_costguard import checkpoint
ckpt = checkpoint.latest()
steps = ckpt.state if ckpt else []
start = ckpt.step + 1 if ckpt else 0
run = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
print("run", run, "attempt", os.environ["COSTGUARD_JOB_ATTEMPT"], "starts at step", start,
      flush=True)
for step in range(start, 8):
    steps = steps + [(run, step)]
    checkpoint.save(steps, step)
    time.sleep(0.4)
"""


def test_a_requeued_job_resumes_from_its_checkpoint_without_using_a_retry(
        cluster: SlurmCluster, server: ServerProcess) -> None:
    doc = submit(server, "train.ipynb", [code("t", RESUMABLE)], ["t"])  # retries: 0
    ref = slurm_id(server, doc["id"])
    d = job_dir(server, doc["id"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        saved = checkpoint.list_checkpoints(str(d / "checkpoints"))
        if saved and saved[-1] >= 2:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"the job saved no checkpoints:\n{full_log(server, doc['id'])}")
    cluster.command("scontrol", "requeue", ref)
    requeued_after = checkpoint.list_checkpoints(str(d / "checkpoints"))[-1]
    # meanwhile the job is still the user's running job, waiting in Slurm's queue
    between = wait(server, doc["id"], lambda x: x["phase"] == "queued" or x["state"] in ENDED)
    assert between["state"] == "running", between

    done = wait(server, doc["id"], timeout=120)
    assert done["state"] == "succeeded", (done, full_log(server, doc["id"]))
    assert done["attempts"] == 1 and done["max_attempts"] == 1  # the requeue used no retry
    attempts = server.get(f"costguard/api/jobs/{doc['id']}")["record"]["attempts"]
    assert [(a["attempt"], a["outcome"]) for a in attempts] == \
        [(1, "requeued"), (1, "succeeded")]

    namespace: dict[str, Any] = {}
    exec(server.get(f"costguard/api/jobs/{doc['id']}/results")["load_code"], namespace)
    steps = namespace["steps"]
    assert [s for _, s in steps] == list(range(8))  # every step once: resumed, not restarted
    resumed_at = next(s for run, s in steps if run == 1)
    # from the newest checkpoint of the first run (the state held its steps), not from zero
    assert resumed_at == max(s for run, s in steps if run == 0) + 1
    assert 0 < requeued_after <= resumed_at
    log = full_log(server, doc["id"])
    assert "run 0 attempt 1 starts at step 0" in log
    assert f"run 1 attempt 1 starts at step {resumed_at}" in log
    assert "requeued the job (restart 1)" in log
    assert scontrol(cluster, ref).restarts == 1


def test_a_pending_job_says_why_and_runs_once_the_node_is_free(
        cluster: SlurmCluster, server: ServerProcess) -> None:
    blocker = cluster.command("sbatch", "--parsable", "--exclusive", "--job-name=blocker",
                              "--output=/dev/null", "--wrap", "sleep 600").strip()
    try:
        deadline = time.monotonic() + 30
        while cluster.state(blocker) != "RUNNING" and time.monotonic() < deadline:
            time.sleep(0.1)
        doc = submit(server, "later.ipynb", [code("l", "print('finally ran')")], ["l"])
        ref = slurm_id(server, doc["id"])
        backend = SlurmExecutor(environ=cluster.env, query_interval=0)
        job = _job(doc["id"], ref=ref)
        deadline = time.monotonic() + 30
        described = backend.describe(job, job_dir(server, doc["id"]))
        while (described or {}).get("reason") in (None, "None") and \
                time.monotonic() < deadline:  # Slurm sets the reason at its first look
            time.sleep(0.2)
            described = backend.describe(job, job_dir(server, doc["id"]))
        assert described is not None
        assert described["slurm_job_id"] == ref and described["slurm_state"] == "PENDING"
        assert described["reason"] in ("Resources", "Priority"), described
        assert backend.reconcile(job, job_dir(server, doc["id"]))
        queued = wait(server, doc["id"], lambda d: True)
        assert (queued["state"], queued["phase"]) == ("queued", "queued")
    finally:
        cluster.command("scancel", blocker)
    done = wait(server, doc["id"])
    assert done["state"] == "succeeded", done
    assert "finally ran" in full_log(server, doc["id"])
    assert scontrol(cluster, ref).state == "COMPLETED"
    assert backend.describe(job, job_dir(server, doc["id"])) == {
        "slurm_job_id": ref, "slurm_state": "COMPLETED", "reason": None, "node": cluster.node}


def test_a_job_slurm_refuses_fails_with_slurms_reason(
        cluster: SlurmCluster, server: ServerProcess) -> None:
    doc = submit(server, "huge.ipynb", [code("h", "print('never')")], ["h"],
                 resources={"memory_gib": 60000})
    done = wait(server, doc["id"], timeout=30)
    assert done["state"] == "failed", done
    assert done["exit_reason"].startswith("sbatch failed:")
    assert "Memory specification can not be satisfied" in done["exit_reason"]
    assert "Memory specification can not be satisfied" in full_log(server, doc["id"])


def test_a_job_that_can_never_start_says_so_and_can_be_cancelled(
        cluster: SlurmCluster, server: ServerProcess) -> None:
    # more CPUs than any node: sbatch takes it, Slurm keeps it pending (PartitionConfig)
    doc = submit(server, "wide.ipynb", [code("w", "print('never')")], ["w"],
                 resources={"cpus": cluster.cpus + 64})
    ref = slurm_id(server, doc["id"])
    backend = SlurmExecutor(environ=cluster.env, query_interval=0)
    job, d = _job(doc["id"], ref=ref), job_dir(server, doc["id"])
    deadline = time.monotonic() + 30
    while (backend.describe(job, d) or {}).get("reason") is None and \
            time.monotonic() < deadline:
        time.sleep(0.2)
    assert backend.describe(job, d) == {"slurm_job_id": ref, "slurm_state": "PENDING",
                                        "reason": "PartitionConfig", "node": None}
    # ... and so does the API, in the job and in the list while it waits
    detail = server.get(f"costguard/api/jobs/{doc['id']}")["backend_detail"]
    assert detail["reason"] == "PartitionConfig" and detail["slurm_state"] == "PENDING"
    listed = server.get("costguard/api/jobs")["jobs"]
    assert next(j for j in listed if j["id"] == doc["id"])["backend_detail"] == detail
    status, body = server.request(f"costguard/api/jobs/{doc['id']}/cancel", "POST")
    assert status == 202, body
    done = wait(server, doc["id"], timeout=30)
    assert (done["state"], done["exit_reason"]) == ("cancelled", "cancelled by the user")
    assert done["attempts"] == 0
    assert scontrol(cluster, ref).state == "CANCELLED"


WARNED = """\
import os, pathlib, signal, time
print('waiting', flush=True)
while not pathlib.Path('phase2').exists():
    time.sleep(0.05)
warned = []
signal.signal(signal.SIGUSR1, lambda *a: warned.append(time.time()))
pathlib.Path(os.environ['COSTGUARD_JOB_DIR'], 'signal-ok').write_text(str(os.getpid()))
print('armed', flush=True)
while not warned:
    time.sleep(0.05)
print('final save on the warning', flush=True)
"""


def test_slurms_warning_signal_reaches_only_a_kernel_that_handles_it(
        cluster: SlurmCluster, server: ServerProcess) -> None:
    doc = submit(server, "warned.ipynb", [code("w", WARNED)], ["w"])
    ref = slurm_id(server, doc["id"])
    wait(server, doc["id"], lambda d: "waiting" in d["log_tail"])
    # what --signal=B:USR1@N sends ahead of the time limit: SIGUSR1 to the batch script
    cluster.command("scancel", "--signal=USR1", "--batch", ref)
    wait(server, doc["id"], lambda d: "does not handle it" in d["log_tail"])
    (root(server) / PROJECT / "phase2").write_text("")  # the kernel survived; now it opts in
    wait(server, doc["id"], lambda d: "armed" in d["log_tail"])
    cluster.command("scancel", "--signal=USR1", "--batch", ref)
    done = wait(server, doc["id"])
    assert done["state"] == "succeeded", done
    log = full_log(server, doc["id"])
    assert "passed to the kernel for a final checkpoint" in log
    assert "final save on the warning" in log


def test_a_runner_that_cannot_start_on_the_node_fails_with_what_slurm_saw(
        cluster: SlurmCluster, tmp_path: Path) -> None:
    """No status from the runner at all: the interpreter is missing on the node (127), or
    exits at once (1, as when the package is not installed there)."""
    launched = {}
    for name, python in (("missing", "/nonexistent/bin/python"), ("exits", "/bin/false")):
        backend = SlurmExecutor(python=python, environ=cluster.env, query_interval=0,
                               settle_seconds=0.5)
        d = tmp_path / name
        d.mkdir()
        job = _job(cwd=str(tmp_path))
        ref = backend.launch(job, d)
        assert ref is not None and ref.isdigit()
        launched[name] = (backend, dataclasses.replace(job, backend_ref=ref), d)
    deadline = time.monotonic() + 60
    while any(b.reconcile(j, d) for b, j, d in launched.values()):
        assert time.monotonic() < deadline, cluster.logs()
        time.sleep(0.2)
    missing = json.loads((tmp_path / "missing" / "status.json").read_text())
    assert missing["state"] == "failed"
    assert missing["exit_reason"].startswith("the Slurm job ended FAILED (exit code 127) "
                                             "before the runner reported")
    log = (tmp_path / "missing" / "log.txt").read_text()
    assert "/nonexistent/bin/python: No such file or directory" in log  # from slurm-N.out
    exits = json.loads((tmp_path / "exits" / "status.json").read_text())
    assert exits["state"] == "failed"
    assert exits["exit_reason"].startswith("the job runner did not start on the node")


STEPS = ("import time\nfor i in range(10):\n    print('step', i, flush=True)\n"
         "    time.sleep(0.5)\nfinished = True")


def test_a_slurm_job_outlives_a_restart_of_the_server(cluster: SlurmCluster,
                                                      tmp_path: Path) -> None:
    config = {"db_path": str(tmp_path / "ledger.sqlite"),
              "Offload.jobs_dir": str(tmp_path / "jobs"),
              "hourly_rate": 36.0, "Offload.poll_interval": 0.1, "LocalBackend.warm_kernels": 0}
    env = {"SLURM_CONF": str(cluster.conf)}  # slurm_enabled unset: offered as sbatch is found
    first = ServerProcess(tmp_path / "srv", config, env=env).start()
    second = None
    try:
        doc = submit(first, "steps.ipynb", [code("s", STEPS)], ["s"])
        ref = slurm_id(first, doc["id"])
        wait(first, doc["id"], lambda d: "step 2" in d["log_tail"])
        first.kill9()
        second = ServerProcess(tmp_path / "srv", config, env=env).start()
        done = wait(second, doc["id"])
        assert done["state"] == "succeeded", done
        assert done["attempts"] == 1
        log = full_log(second, doc["id"])
        assert [log.count(f"step {i}") for i in range(10)] == [1] * 10
        assert scontrol(cluster, ref).restarts == 0
    finally:
        first.stop()
        if second is not None:
            second.stop()

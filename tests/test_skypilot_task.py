"""The SkyPilot backend without SkyPilot: the task a job becomes, what SkyPilot's answers mean
for the job, and the remote side's round trip through object storage (a real runner in a real
kernel, with a ``file://`` store standing for the bucket the server and the machine share).
SkyPilot itself (launch, queue, cancel, recovery) is exercised by tests/test_skypilot.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.backends.skypilot import remote
from jupyter_costguard.offload.backends.skypilot import task as sky_task
from jupyter_costguard.offload.backends.skypilot.backend import STATE, SkyPilotExecutor
from jupyter_costguard.offload.backends.skypilot.task import SkyPilotSettings
from jupyter_costguard.offload.spec import Job, JobSpec, Resources, SpecCell


def _job(job_id: int = 7, resources: Resources | None = None, code: str = "x = 41 + 1",
         checkpoint_location: str | None = None, bring_back: tuple[str, ...] = ()) -> Job:
    spec = JobSpec(notebook="p/train.ipynb", cwd="/home/u/p", kernel_name="python3",
                   cells=(SpecCell("c", 0, True, code, code),),
                   resources=resources or Resources(), backend="skypilot",
                   bring_back=bring_back, checkpoint_location=checkpoint_location)
    return Job(id=job_id, spec=spec, state="queued", phase="queued", created=0.0)


# --- the task ----------------------------------------------------------------------------


def test_the_task_asks_skypilot_for_what_the_job_needs_where_the_admin_allows() -> None:
    job = _job(resources=Resources(gpus=2, cpus=3.5, memory_gib=15.2))
    settings = SkyPilotSettings(accelerator="H100", use_spot=True, infra=("aws", "gcp/us-east1"),
                                setup="pip install jupyter-costguard", env={"A": "1"},
                                recovery_strategy="EAGER_NEXT_REGION",
                                extra_resources={"disk_size": 100})
    doc = sky_task.task_config(job, settings, "/jobs/7/skypilot-input")
    res = doc["resources"]
    assert res["accelerators"] == "H100:2"
    assert res["use_spot"] is True
    assert (res["cpus"], res["memory"]) == ("4+", "16+")  # at least what it asked, rounded up
    assert res["any_of"] == [{"infra": "aws"}, {"infra": "gcp/us-east1"}]
    assert "infra" not in res
    # a failure is the runner's to retry; SkyPilot recovers only preemptions
    assert res["job_recovery"] == {"max_restarts_on_errors": 0,
                                   "strategy": "EAGER_NEXT_REGION"}
    assert res["disk_size"] == 100
    assert doc["file_mounts"] == {"~/.costguard/job-7/input": "/jobs/7/skypilot-input"}
    assert doc["setup"] == "pip install jupyter-costguard"
    assert doc["envs"] == {"A": "1", jobdir.ENV_JOB_ID: "7"}
    assert doc["name"] == "costguard-job-7"


def test_a_cpu_job_on_demand_in_one_place_asks_for_no_accelerator() -> None:
    doc = sky_task.task_config(_job(resources=Resources(gpus=0)),
                               SkyPilotSettings(use_spot=False, infra=("slurm",)), "/in")
    res = doc["resources"]
    assert "accelerators" not in res and "cpus" not in res and "memory" not in res
    assert res["use_spot"] is False
    assert res["infra"] == "slurm" and "any_of" not in res
    assert "setup" not in doc


def test_a_gpu_job_without_an_accelerator_type_is_refused_with_the_setting_to_change() -> None:
    with pytest.raises(sky_task.TaskError, match=r"SkyPilotBackend\.accelerator"):
        sky_task.task_config(_job(resources=Resources(gpus=1)),
                             SkyPilotSettings(accelerator=""), "/in")


def test_the_run_command_reaches_the_remote_entry_point_with_its_paths(tmp_path: Path) -> None:
    """The shell SkyPilot runs ``run`` in expands the home-relative paths and keeps a storage
    URL with spaces and quotes as one argument."""
    store = "file:///tmp/a 'b' $HOME"
    script = tmp_path / "echo.py"
    script.write_text("import sys\nprint('\\n'.join(sys.argv[1:]))\n")
    settings = SkyPilotSettings(python=sys.executable, storage_url=store)
    command = sky_task.run_command(_job(), settings).replace(
        f"-m {sky_task.REMOTE_MODULE}", str(script))
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True,
                         env={"HOME": str(tmp_path)}, check=True)
    assert out.stdout.splitlines() == [f"{tmp_path}/.costguard/job-7/input",
                                       f"{tmp_path}/.costguard/job-7/work",
                                       f"{store.rstrip('/')}/job-7"]


def test_the_remote_spec_has_the_remote_machines_paths_and_keeps_checkpoints_in_storage() -> None:
    spec_doc = {"id": 7, "spec": _job().spec.to_json(), "checkpoint_dir": "/jobs/7/checkpoints",
                "environment": {"CUDA_VISIBLE_DEVICES": "GPU-1", "COSTGUARD_X": "y"}}
    doc = sky_task.remote_spec_doc(spec_doc, _job(), SkyPilotSettings(storage_url="s3://b/cg/"))
    assert doc["spec"]["cwd"] == "~/.costguard/job-7/work"
    assert doc["environment"] == {"COSTGUARD_X": "y"}  # the server's GPU pick stays here
    assert doc["checkpoint_dir"] == "s3://b/cg/job-7/checkpoints"  # survives a recovery
    assert spec_doc["checkpoint_dir"] == "/jobs/7/checkpoints"  # the server's copy unchanged
    own = sky_task.remote_spec_doc(spec_doc, _job(checkpoint_location="gs://mine/ck"),
                                   SkyPilotSettings(storage_url="s3://b/cg"))
    assert own["checkpoint_dir"] == "gs://mine/ck"
    bare = sky_task.remote_spec_doc(spec_doc, _job(), SkyPilotSettings())
    assert bare["checkpoint_dir"] == "~/.costguard/job-7/work/checkpoints"


# --- SkyPilot's answers --------------------------------------------------------------------


def test_queue_records_are_read_whatever_form_the_status_comes_in() -> None:
    class Status:
        value = "RECOVERING"

    info = sky_task.parse_record({"job_id": 3, "status": Status(), "recovery_count": 2,
                                  "cloud": "AWS", "region": "us-east-1",
                                  "cluster_resources": "1x(gpus=A100:1)", "start_at": 0})
    assert info is not None
    assert (info.job_id, info.status, info.recovery_count) == (3, "RECOVERING", 2)
    assert info.active and info.start_at is None
    assert info.where == "AWS, us-east-1, 1x(gpus=A100:1)"
    named = sky_task.parse_record({"job_id": "4", "status": "ManagedJobStatus.FAILED_SETUP",
                                   "cluster_resources": "-"})
    assert named is not None and named.status == "FAILED_SETUP" and not named.active
    assert named.where is None
    assert sky_task.parse_record({"job_id": 5}) is None


def test_how_a_job_skypilot_ended_ends_for_the_user() -> None:
    def ended(status: str, reason: str | None = None, cancel: bool = False,
              storage: bool = True) -> tuple[str, str | None]:
        info = sky_task.ManagedJob(job_id=9, status=status, failure_reason=reason)
        return sky_task.ended_as(info, cancel, storage)

    state, why = ended("FAILED_NO_RESOURCE", "no A100 in us-east-1")
    assert state == "failed" and why is not None
    assert "no capacity" in why and "no A100 in us-east-1" in why and "managed job 9" in why
    assert ended("FAILED_PRECHECKS")[0] == "failed"
    assert ended("CANCELLED", cancel=True) == ("cancelled", "cancelled by the user")
    assert ended("CANCELLED") == ("cancelled", "cancelled in SkyPilot")
    assert ended("SUCCEEDED", storage=False) == ("succeeded", None)
    state, why = ended("SUCCEEDED")  # with storage the runner's own status should have come
    assert state == "failed" and why is not None and "SkyPilotBackend.storage_url" in why


def test_only_a_recovery_overrides_what_the_runner_last_said() -> None:
    """SkyPilot's STARTING lags behind a runner that has already reported (seen against the
    real SkyPilot: a running job shown queued); a recovery means that machine is gone."""
    assert sky_task.waiting_as(sky_task.ManagedJob(1, "RECOVERING")) == ("running", "queued")
    for status in ("PENDING", "STARTING", "RUNNING"):
        assert sky_task.waiting_as(sky_task.ManagedJob(1, status)) is None


def test_the_price_cap_refuses_only_a_dearer_choice() -> None:
    assert sky_task.price_refusal(2.0, None, "AWS p4d") is None
    assert sky_task.price_refusal(2.0, 2.0, "AWS p4d") is None
    assert sky_task.price_refusal(None, 1.0, "AWS p4d") is None
    refusal = sky_task.price_refusal(2.5, 1.0, "AWS p4d")
    assert refusal is not None and "AWS p4d" in refusal and "max_price_per_hour" in refusal


# --- the remote side and the server's copy, through storage -------------------------------


def _stage(tmp_path: Path, job: Job, settings: SkyPilotSettings) -> Path:
    staging = tmp_path / "input"
    staging.mkdir()
    spec_doc = {"id": job.id, "spec": job.spec.to_json(), "checkpoint_dir": "unused",
                "environment": {}}
    jobdir.write_json(staging / jobdir.SPEC, sky_task.remote_spec_doc(spec_doc, job, settings))
    return staging


def _remote(staging: Path, home: Path, store: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(home)}
    return subprocess.run([sys.executable, "-m", remote.__name__, str(staging),
                           "~/.costguard/job-7/work", store], env=env, capture_output=True,
                          text=True, timeout=180, check=False)


def test_a_job_run_remotely_comes_back_through_storage(tmp_path: Path) -> None:
    """The remote entry point runs the runner in a real kernel on the "machine" (a home of its
    own), and the backend's sync copies the log, results and final status into the server's
    job directory, where the follower reads them."""
    store_root = tmp_path / "bucket"
    settings = SkyPilotSettings(storage_url=f"file://{store_root}")
    job = _job(code="import os\nanswer = 41 + 1\nprint('cwd', os.getcwd())",
               bring_back=("answer",))
    home = tmp_path / "machine"
    proc = _remote(_stage(tmp_path, job, settings), home,
                   sky_task.storage_prefix(settings, job) or "")
    assert proc.returncode == 0, proc.stderr
    server_dir = tmp_path / "server" / "7"
    jobdir.private_dir(server_dir)
    jobdir.say(server_dir, "sent to SkyPilot")
    jobdir.write_json(server_dir / STATE, {"request_id": None, "job_id": None, "log_offset": 0})
    backend = SkyPilotExecutor(settings)
    backend.sync(job, server_dir)
    status = jobdir.read_status(server_dir)
    assert status is not None and status.state == "succeeded"
    log = (server_dir / jobdir.LOG).read_text()
    assert "sent to SkyPilot" in log  # the server's own lines are kept
    assert f"cwd {home}/.costguard/job-7/work" in log  # ran in the remote work directory
    index = jobdir.read_results_index(server_dir)
    assert index["sha256"] == jobdir.sha256_file(server_dir / jobdir.RESULTS)
    assert json.loads((server_dir / STATE).read_text())["final"] is True
    backend.sync(job, server_dir)  # ended: nothing is appended again
    assert (server_dir / jobdir.LOG).read_text() == log


def test_a_recovered_job_continues_its_attempt_from_the_status_in_storage(
        tmp_path: Path) -> None:
    """SkyPilot launches a preempted job again on a new machine: the status left in storage
    (attempt 1 interrupted) makes the runner there a requeue of that attempt, not a retry."""
    store_root = tmp_path / "bucket"
    settings = SkyPilotSettings(storage_url=f"file://{store_root}")
    prefix = store_root / "job-7"
    prefix.mkdir(parents=True)
    interrupted = jobdir.RunnerStatus(
        state="running", phase="queued", attempt=1, restarts=0,
        attempts=[{"attempt": 1, "start": 1.0, "end": 2.0, "outcome": "interrupted"}],
        phase_times={"queued": 0.5, "starting": 1.0, "running": 1.5})
    (prefix / jobdir.STATUS).write_text(json.dumps(interrupted.to_json()))
    (prefix / jobdir.LOG).write_text("first machine's lines\n")
    proc = _remote(_stage(tmp_path, _job(), settings), tmp_path / "machine2",
                   sky_task.storage_prefix(settings, _job()) or "")
    assert proc.returncode == 0, proc.stderr
    status = json.loads((prefix / jobdir.STATUS).read_text())
    assert status["state"] == "succeeded"
    assert status["restarts"] == 1
    assert status["attempt"] == 1  # the same attempt, continued: no retry used
    assert [a.get("outcome") for a in status["attempts"]] == ["requeued", "succeeded"]
    log = (prefix / jobdir.LOG).read_text()
    assert log.startswith("first machine's lines\n") and "requeued" in log


# --- the backend's verdicts, with SkyPilot's answers given ---------------------------------


class _Answers(SkyPilotExecutor):
    """The backend with SkyPilot's queue answered by the test (None: no answer)."""

    def __init__(self, answer: sky_task.ManagedJob | None,
                 settings: SkyPilotSettings | None = None) -> None:
        super().__init__(settings or SkyPilotSettings())
        self.answer = answer

    def query(self, job_id: int) -> sky_task.ManagedJob | None:
        return self.answer


def _launched(tmp_path: Path, status: jobdir.RunnerStatus | None = None) -> Path:
    d = tmp_path / "7"
    jobdir.private_dir(d)
    jobdir.write_json(d / STATE, {"request_id": "r", "job_id": 12, "log_offset": 0})
    if status is not None:
        jobdir.write_status(d, status)
    return d


def test_a_job_skypilot_still_runs_or_cannot_be_asked_about_stays_as_it_is(
        tmp_path: Path) -> None:
    running = jobdir.RunnerStatus(state="running", phase="queued", attempt=1)
    d = _launched(tmp_path, running)
    for answer in (sky_task.ManagedJob(12, "RECOVERING", recovery_count=1), None):
        assert _Answers(answer).reconcile(_job(), d) is True
        status = jobdir.read_status(d)
        assert status is not None and status.state == "running"


def test_a_cancel_ends_the_job_cancelled_with_its_last_attempt(tmp_path: Path) -> None:
    """The remote side ended the attempt "interrupted" (it cannot tell a cancel from a
    preemption); once SkyPilot says CANCELLED the job and that attempt are cancelled."""
    d = _launched(tmp_path, jobdir.RunnerStatus(
        state="running", phase="queued", attempt=1,
        attempts=[{"attempt": 1, "start": 1.0, "end": 2.0, "outcome": "interrupted"}]))
    (d / jobdir.CANCEL).write_text("{}")
    assert _Answers(sky_task.ManagedJob(12, "CANCELLED")).reconcile(_job(), d) is False
    status = jobdir.read_status(d)
    assert status is not None
    assert (status.state, status.exit_reason) == ("cancelled", "cancelled by the user")
    assert status.attempts[-1]["outcome"] == "cancelled" and status.attempts[-1]["end"] == 2.0
    assert "job cancelled" in (d / jobdir.LOG).read_text()


def test_a_job_skypilot_could_not_place_fails_with_skypilots_reason(tmp_path: Path) -> None:
    d = _launched(tmp_path)
    info = sky_task.ManagedJob(12, "FAILED_NO_RESOURCE",
                               failure_reason="no H100 spot capacity in gcp/us-central1")
    assert _Answers(info).reconcile(_job(), d) is False
    status = jobdir.read_status(d)
    assert status is not None and status.state == "failed"
    assert status.exit_reason is not None
    assert "no H100 spot capacity in gcp/us-central1" in status.exit_reason
    assert status.phase == "done" and "done" in status.phase_times


def test_a_job_skypilot_recovers_waits_until_its_new_machine_reports(tmp_path: Path) -> None:
    """The runner died with its machine, so the status in storage still says running; while
    SkyPilot recovers the job it waits (phase queued), and the new machine's status wins."""
    store = tmp_path / "bucket"
    settings = SkyPilotSettings(storage_url=f"file://{store}")
    remote_dir = store / "job-7"
    remote_dir.mkdir(parents=True)
    stale = jobdir.RunnerStatus(state="running", phase="running", attempt=1,
                                updated=time.time() - 60)
    (remote_dir / jobdir.STATUS).write_text(json.dumps(stale.to_json()))
    d = _launched(tmp_path)
    backend = _Answers(sky_task.ManagedJob(12, "RECOVERING", recovery_count=1), settings)
    backend.sync(_job(), d)
    status = jobdir.read_status(d)
    assert status is not None and (status.state, status.phase) == ("running", "queued")
    log = (d / jobdir.LOG).read_text()
    assert "recovery 1" in log and "waiting for SkyPilot (RECOVERING)" in log
    backend.sync(_job(), d)  # the stale status is not read again
    status = jobdir.read_status(d)
    assert status is not None and status.phase == "queued"
    # the new machine's runner reports while SkyPilot's queue still says RECOVERING
    resumed = jobdir.RunnerStatus(state="running", phase="running", attempt=1, restarts=1,
                                  updated=time.time() + 1)
    (remote_dir / jobdir.STATUS).write_text(json.dumps(resumed.to_json()))
    backend.sync(_job(), d)
    backend.sync(_job(), d)
    status = jobdir.read_status(d)
    assert status is not None and (status.phase, status.restarts) == ("running", 1)
    assert (d / jobdir.LOG).read_text().count("recovery 1") == 1


def test_the_live_pusher_holds_back_a_final_status_until_the_outputs_have_gone(
        tmp_path: Path) -> None:
    """The runner writes its final status before it exits; pushed then by the live pusher,
    it told the server the job had ended before its outputs were in storage, and the server,
    taking a final status to mean they were there, never brought them back (a recovered
    job's results went missing in the end-to-end run)."""
    work, store = tmp_path / "work", tmp_path / "store"
    work.mkdir()
    url = f"file://{store}"
    (work / jobdir.LOG).write_text("step 1\n")
    jobdir.write_status(work, jobdir.RunnerStatus(state="running", phase="running", attempt=1))
    assert jobdir.STATUS in remote.live_files(work)
    remote.push(url, work, remote.live_files(work), {})
    assert (store / jobdir.STATUS).exists()

    (store / jobdir.STATUS).unlink()
    jobdir.write_status(work, jobdir.RunnerStatus(state="succeeded", phase="done", attempt=1))
    (work / jobdir.LOG).write_text("step 1\nstep 2\n")
    remote.push(url, work, remote.live_files(work), {})
    assert not (store / jobdir.STATUS).exists()  # the last push sends it, after the outputs
    assert (store / jobdir.LOG).read_text().endswith("step 2\n")

"""Issue 11, items 3 and 4: a job's own files are untrusted, and job files stay private.

Real server (pytest-jupyter), real runners and kernels; the attacks are what a job's cell (or
another user on a shared filesystem) can do to the files of a job directory.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.kernel.magics import fetch_results
from jupyter_costguard.offload import jobdir
from jupyter_costguard.offload.backends.base import Backend
from tests.support.jobs import full_log, post, submit, wait_job
from tests.support.notebooks import code, write_notebook
from tests.support.rest import get_json, start_session

pytestmark = pytest.mark.usefixtures("no_leftover_jobs")

#: a cell that replaces the runner's status with `changes` applied, atomically, then waits
FORGE = """\
import json, os, time
d = os.environ["COSTGUARD_JOB_DIR"]
with open(os.path.join(d, "status.json")) as f:
    doc = json.load(f)
doc.update({changes})
with open(os.path.join(d, "status.json.forged"), "w") as f:
    json.dump(doc, f)
os.replace(os.path.join(d, "status.json.forged"), os.path.join(d, "status.json"))
print("forged", flush=True)
time.sleep({sleep})
"""


@pytest.fixture
def costguard_config(costguard_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {**costguard_config, "Offload.jobs_dir": str(tmp_path / "jobs"),
            "Offload.poll_interval": 0.1, "Offload.retry_backoff_seconds": 0.2}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# --- item 3: untrusted job output --------------------------------------------------------------


async def test_a_malformed_status_fails_only_that_job_with_a_reason(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir, "bad.ipynb", [code("f", FORGE.format(
        changes='{"attempt": "x"}', sleep=60))])
    write_notebook(jp_root_dir, "good.ipynb", [code("s", "import time\ntime.sleep(2)\nok = 1")])
    bad = await submit(jp_fetch, "bad.ipynb", ["f"])
    good = await submit(jp_fetch, "good.ipynb", ["s"])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # every route answers while the forged file is there
        listed = await get_json(jp_fetch, "costguard", "api", "jobs")
        assert {j["id"] for j in listed["jobs"]} >= {bad["id"], good["id"]}
        await get_json(jp_fetch, "costguard", "api", "jobs", str(bad["id"]), "log")
        doc = await get_json(jp_fetch, "costguard", "api", "jobs", str(bad["id"]))
        if doc["state"] not in ("queued", "running"):
            break
        await asyncio.sleep(0.1)
    assert doc["state"] == "failed", doc
    assert "status.json is malformed" in doc["exit_reason"]
    assert "attempt must be an integer" in doc["exit_reason"]
    done = await wait_job(jp_fetch, good["id"])
    assert done["state"] == "succeeded", done


async def test_one_job_that_cannot_be_followed_does_not_stop_the_others(jp_fetch, jp_root_dir,
                                                                        jp_serverapp):
    class Exploding(Backend):
        name = "exploding"

        def launch(self, job, job_dir, environment):
            return "ref"

        def sync(self, job, job_dir):
            raise RuntimeError("sync exploded")

        def reconcile(self, job, job_dir):
            return True

        def cancel(self, job, job_dir, force=False):
            pass

    jp_serverapp.web_app.settings["costguard_jobs"].backends["exploding"] = Exploding()
    write_notebook(jp_root_dir, "e.ipynb", [code("a", "import time\ntime.sleep(1)\na = 1")])
    bad = await submit(jp_fetch, "e.ipynb", ["a"], backend="exploding")
    good = await submit(jp_fetch, "e.ipynb", ["a"])
    listed = await get_json(jp_fetch, "costguard", "api", "jobs")  # 200, not 500
    assert {j["id"] for j in listed["jobs"]} >= {bad["id"], good["id"]}
    assert (await wait_job(jp_fetch, good["id"]))["state"] == "succeeded"
    failed = await wait_job(jp_fetch, bad["id"])
    assert failed["state"] == "failed", failed
    assert "could not follow the job: RuntimeError: sync exploded" in failed["exit_reason"]


def test_a_status_is_checked_field_by_field():
    problem = jobdir.RunnerStatus.problem
    ok = {"state": "running", "phase": "running"}
    assert problem(ok) is None
    assert problem([]) == "it is not a JSON object"
    assert problem({"state": "running"}) == "it has no phase"
    assert "phase must be one of" in str(problem({**ok, "phase": "bogus"}))
    assert "phase_times" in str(problem({**ok, "phase_times": {"running": float("nan")}}))
    assert "exit_reason" in str(problem({**ok, "exit_reason": "x" * 5000}))
    assert problem({**ok, "kernel_pid": True}) == "kernel_pid must be an integer or null"


async def test_a_kernel_pid_outside_the_runners_tree_is_not_attributed(jp_fetch, jp_root_dir):
    server = os.getpid()  # the in-process server: its tree is everything here
    write_notebook(jp_root_dir, "pid.ipynb", [code("f", FORGE.format(
        changes=f'{{"kernel_pid": {server}}}', sleep=4))])
    doc = await submit(jp_fetch, "pid.ipynb", ["f"])
    deadline = time.monotonic() + 60
    while "forged" not in await full_log(jp_fetch, doc["id"]):
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    end = time.monotonic() + 2.5  # several samples (0.25 s) and follower passes (0.1 s)
    while time.monotonic() < end:
        kernels = await get_json(jp_fetch, "costguard", "api", "kernels")
        mine = [k for k in kernels["kernels"] if k["kernel_id"] == f"job-{doc['id']}"]
        assert not any(server in k["pids"] for k in mine), mine
        await asyncio.sleep(0.1)
    assert (await wait_job(jp_fetch, doc["id"]))["state"] == "succeeded"


PLANT = """\
import os, time
d = os.environ["COSTGUARD_JOB_DIR"]
os.mkfifo(os.path.join(d, "fifo"))
os.replace(os.path.join(d, "fifo"), os.path.join(d, "status.json"))
os.symlink({secret!r}, os.path.join(d, "link"))
os.replace(os.path.join(d, "link"), os.path.join(d, "log.txt"))
time.sleep(3)
"""


async def test_links_and_fifos_in_a_job_directory_are_not_read(jp_fetch, jp_root_dir, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET\n")
    before = mode(secret)
    write_notebook(jp_root_dir, "l.ipynb", [code("a", PLANT.format(secret=str(secret)))])
    doc = await submit(jp_fetch, "l.ipynb", ["a"])
    log = tmp_path / "jobs" / str(doc["id"]) / jobdir.LOG
    deadline = time.monotonic() + 60
    while not log.is_symlink():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)
    # a FIFO as status.json would block the worker thread on open: every route would hang
    listed = await asyncio.wait_for(get_json(jp_fetch, "costguard", "api", "jobs"), 20)
    assert "SECRET" not in json.dumps(listed)
    chunk = await asyncio.wait_for(get_json(jp_fetch, "costguard", "api", "jobs",
                                            str(doc["id"]), "log"), 20)
    assert "SECRET" not in chunk["text"]
    assert (await wait_job(jp_fetch, doc["id"]))["state"] == "succeeded"
    assert secret.read_text() == "SECRET\n" and mode(secret) == before


async def test_type_checked_outputs_and_results_index(jp_fetch, jp_root_dir, tmp_path):
    """outputs.json and results.json are the job's to write: wrong shapes read as nothing."""
    write_notebook(jp_root_dir, "shapes.ipynb", [code("a", "a = 1")])
    doc = await submit(jp_fetch, "shapes.ipynb", ["a"])
    await wait_job(jp_fetch, doc["id"])
    d = tmp_path / "jobs" / str(doc["id"])
    jobdir.write_json(d / jobdir.OUTPUTS, {"not": "a list"})
    jobdir.write_json(d / jobdir.RESULTS_INDEX, {"results": "x", "skipped": [1]})
    results = await get_json(jp_fetch, "costguard", "api", "jobs", str(doc["id"]), "results")
    assert results["cells"] == [] and results["results"] == [] and results["skipped"] == {}
    assert results["load_code"] is None


# --- item 4: private files and pickles ------------------------------------------------------


async def test_job_files_ledger_and_jobs_database_are_private(jp_fetch, jp_root_dir, tmp_path,
                                                               costguard_config, jp_serverapp):
    write_notebook(jp_root_dir, "p.ipynb", [code("a", "from jupyter_costguard import checkpoint\n"
                                                      "checkpoint.save({'k': k}, 1)\na = k")])
    session = await start_session(jp_fetch, "p.ipynb")
    kid = session["kernel"]["id"]
    client = jp_serverapp.kernel_manager.get_kernel(kid).client()
    client.start_channels(hb=False)
    try:
        await client.wait_for_ready(timeout=60)
        reply = await client.execute_interactive("k = 6", timeout=30)
        assert reply["content"]["status"] == "ok"
    finally:
        client.stop_channels()
    doc = await submit(jp_fetch, "p.ipynb", ["a"], kernel_id=kid, send=["k"],
                       bring_back=["a"])
    assert (await wait_job(jp_fetch, doc["id"]))["state"] == "succeeded"
    jobs = tmp_path / "jobs"
    d = jobs / str(doc["id"])
    assert mode(jobs) == 0o700 and mode(d) == 0o700
    files = sorted(p for p in d.rglob("*"))
    names = {p.name for p in files}
    assert {jobdir.SPEC, jobdir.INPUTS, jobdir.STATUS, jobdir.LOG, jobdir.OUTPUTS,
            jobdir.RESULTS, jobdir.RESULTS_INDEX, jobdir.ENVIRONMENT, jobdir.RUNNER_OUT,
            jobdir.CHECKPOINTS} <= names
    assert any(p.parent.name == jobdir.CHECKPOINTS and p.is_file() for p in files)
    for p in files:
        assert mode(p) == (0o700 if p.is_dir() else 0o600), p
    ledger = Path(costguard_config["db_path"])
    for p in [jobs / "jobs.sqlite", ledger]:
        for f in [p, p.with_name(p.name + "-wal"), p.with_name(p.name + "-shm")]:
            if f.exists() or f == p:
                assert mode(f) == 0o600, f


class TestWarmDirectories:
    @pytest.fixture
    def costguard_config(self, costguard_config: dict[str, Any]) -> dict[str, Any]:
        return {**costguard_config, "LocalBackend.warm_kernels": 1}

    async def test_warm_runner_directories_are_private(self, jp_fetch, tmp_path):
        warm = tmp_path / "jobs" / "warm"
        deadline = time.monotonic() + 60
        while not list(warm.glob(f"warm-*/{jobdir.STATUS}")):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.1)
        assert mode(warm) == 0o700
        for p in warm.rglob("*"):
            assert mode(p) == (0o700 if p.is_dir() else 0o600), p


async def test_a_planted_results_pickle_is_not_loaded(jp_fetch, jp_root_dir, tmp_path):
    write_notebook(jp_root_dir, "n.ipynb", [code("a", "print(1)")])
    doc = await submit(jp_fetch, "n.ipynb", ["a"])  # defines nothing: brings nothing back
    assert (await wait_job(jp_fetch, doc["id"]))["spec"]["bring_back"] == []
    d = tmp_path / "jobs" / str(doc["id"])
    (d / jobdir.RESULTS).write_bytes(pickle.dumps({"planted": 1}))
    jobdir.write_json(d / jobdir.RESULTS_INDEX, {"results": [
        {"name": "planted", "type": "builtins.int", "size_bytes": 1}], "skipped": {}})
    results = await get_json(jp_fetch, "costguard", "api", "jobs", str(doc["id"]), "results")
    assert results["load_code"] is None and results["results_path"] is None
    with pytest.raises(ValueError, match="brought nothing back"):
        fetch_results(str(doc["id"]), str(tmp_path / "jobs"))


async def test_a_swapped_results_pickle_is_refused(jp_fetch, jp_root_dir, tmp_path):
    write_notebook(jp_root_dir, "s.ipynb", [code("c", "c = 48")])
    doc = await submit(jp_fetch, "s.ipynb", ["c"], bring_back=["c"])
    assert (await wait_job(jp_fetch, doc["id"]))["state"] == "succeeded"
    jobs = str(tmp_path / "jobs")
    assert fetch_results(str(doc["id"]), jobs) == {"c": 48}  # the real one loads
    results = await get_json(jp_fetch, "costguard", "api", "jobs", str(doc["id"]), "results")
    ns: dict[str, Any] = {}
    exec(results["load_code"], ns)
    assert ns["c"] == 48
    d = tmp_path / "jobs" / str(doc["id"])
    jobdir.write_bytes(d / jobdir.RESULTS, pickle.dumps({"c": "swapped"}))
    with pytest.raises(ValueError, match="sha256"):
        fetch_results(str(doc["id"]), jobs)
    ns = {}
    with pytest.raises(ValueError, match="sha256"):
        exec(results["load_code"], ns)
    assert "c" not in ns
    # a directory others may write to is refused before anything is read
    jobdir.write_bytes(d / jobdir.RESULTS, pickle.dumps({"c": 48}))
    os.chmod(d, 0o777)
    try:
        with pytest.raises(ValueError, match="writable by group or others"):
            fetch_results(str(doc["id"]), jobs)
    finally:
        os.chmod(d, 0o700)


async def test_inputs_are_not_copied_by_a_rerun_when_nothing_was_sent(jp_fetch, jp_root_dir,
                                                                     tmp_path):
    write_notebook(jp_root_dir, "r.ipynb", [code("a", "print('planted' in globals())")])
    doc = await submit(jp_fetch, "r.ipynb", ["a"])
    await wait_job(jp_fetch, doc["id"])
    (tmp_path / "jobs" / str(doc["id"]) / jobdir.INPUTS).write_bytes(
        pickle.dumps({"planted": 1}))
    again = await post(jp_fetch, "jobs", str(doc["id"]), "rerun", code=201)
    assert (await wait_job(jp_fetch, again["id"]))["state"] == "succeeded"
    assert not (tmp_path / "jobs" / str(again["id"]) / jobdir.INPUTS).exists()
    assert "False" in await full_log(jp_fetch, again["id"])


def test_the_runner_does_not_unpickle_inputs_nothing_sent(tmp_path):
    """A runner on a directory with an inputs.pkl its spec did not send leaves it alone."""
    from jupyter_costguard.offload.spec import JobSpec, SpecCell

    d = tmp_path / "job"
    d.mkdir()
    src = "print('planted:', 'planted' in globals())"
    spec = JobSpec(notebook="x.ipynb", cwd=str(tmp_path), kernel_name="python3",
                   cells=(SpecCell("a", 0, True, src, src),))
    jobdir.write_json(d / jobdir.SPEC, {"id": 1, "spec": spec.to_json(),
                                        "checkpoint_dir": str(d / "ck"), "environment": {}})
    (d / jobdir.INPUTS).write_bytes(pickle.dumps({"planted": 1}))
    subprocess.run([sys.executable, "-m", jobdir.RUNNER_MODULE, str(d)], timeout=120,
                   check=False)
    assert json.loads((d / jobdir.STATUS).read_text())["state"] == "succeeded"
    assert "planted: False" in (d / jobdir.LOG).read_text()


@pytest.mark.parametrize("digest", ["0" * 64, None], ids=["wrong", "none recorded"])
def test_sent_inputs_that_do_not_match_their_digest_fail_the_job(tmp_path, digest):
    """A wrong digest, or none (a spec from before digests, or one written by hand), never
    lets the sent pickle load."""
    from jupyter_costguard.offload.spec import JobSpec, SpecCell

    d = tmp_path / "job"
    d.mkdir()
    src = "print('x is', x)"
    spec = JobSpec(notebook="x.ipynb", cwd=str(tmp_path), kernel_name="python3",
                   cells=(SpecCell("a", 0, True, src, src),), send=("x",))
    doc = {"id": 1, "spec": spec.to_json(), "checkpoint_dir": str(d / "ck"),
           "environment": {}, **({"inputs_sha256": digest} if digest else {})}
    jobdir.write_json(d / jobdir.SPEC, doc)
    (d / jobdir.INPUTS).write_bytes(pickle.dumps({"x": 1}))
    subprocess.run([sys.executable, "-m", jobdir.RUNNER_MODULE, str(d)], timeout=120,
                   check=False)
    status = json.loads((d / jobdir.STATUS).read_text())
    assert status["state"] == "failed" and "sha256" in status["exit_reason"], status
    assert "x is" not in (d / jobdir.LOG).read_text()

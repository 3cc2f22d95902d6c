"""Batch jobs through the REST API of a real server, run by the local backend in real kernels.

Each job runs as a detached runner process with a fresh ipykernel, as in production. Nothing
here is a stand-in except the replayed GPU trace that gives the instance its price.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_costguard import checkpoint
from jupyter_costguard.offload.backends.base import Backend
from tests.support.attach import KERNEL_CLIENT
from tests.support.jobs import full_log, job, post, submit, wait_job
from tests.support.notebooks import code, markdown, write_notebook
from tests.support.openapi_check import validate
from tests.support.processes import alive
from tests.support.rest import get_json, start_session

# jobs outlive their server by design; a test's must not outlive the test
pytestmark = pytest.mark.usefixtures("no_leftover_jobs")

PRODUCT = [
    code("a", "a = 6"),
    markdown("m", "# notes"),
    code("b", "b = 7"),
    code("noise", "print('noise from an unrelated cell')\nunrelated = 1"),
    code("c", "c = a * b\nprint('product', c)"),
]


@pytest.fixture
def costguard_config(costguard_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {**costguard_config, "Offload.jobs_dir": str(tmp_path / "jobs"),
            "Offload.poll_interval": 0.1, "Offload.retry_backoff_seconds": 0.2}




async def in_new_kernel(jp_fetch: Any, serverapp: Any, source: str) -> str:
    """`source` run in a fresh kernel the server starts; its output, then the reply's status."""
    import sys

    kernel = json.loads((await jp_fetch("api", "kernels", method="POST",
                                        body=json.dumps({"name": "python3"}))).body)
    connection = serverapp.kernel_manager.get_kernel(kernel["id"]).connection_file
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", KERNEL_CLIENT, connection, source,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 120)
        return out.decode(errors="replace")
    finally:
        await jp_fetch("api", "kernels", kernel["id"], method="DELETE")


async def test_selected_cell_runs_with_exactly_the_cells_it_needs(jp_fetch, jp_root_dir,
                                                                  tmp_path, jp_serverapp):
    write_notebook(jp_root_dir, "work/product.ipynb", PRODUCT)
    # the user's unsaved edit: b is 7 on disk but 8 on screen
    cells = [*PRODUCT[:2], code("b", "b = 8"), *PRODUCT[3:]]
    doc = await submit(jp_fetch, "work/product.ipynb", ["c"], cells=cells)
    assert [c["cell_id"] for c in doc["slice"]["cells"]] == ["a", "b", "c"]
    assert {c["cell_id"]: c["provides"] for c in doc["slice"]["cells"]} == {
        "a": ["a"], "b": ["b"], "c": []}
    assert doc["state"] in ("queued", "running") and doc["selected"] == ["c"]

    done = await wait_job(jp_fetch, doc["id"])
    assert done["state"] == "succeeded", done
    assert done["attempts"] == 1 and done["exit_reason"] is None
    log = await full_log(jp_fetch, doc["id"])
    assert "product 48" in log and "noise" not in log
    assert [p["phase"] for p in done["timeline"]] == ["queued", "starting", "running",
                                                      "finishing"]
    assert done["label"].startswith(f"ran as job {doc['id']} on local · ")

    # reproducibility: the exact code, hashes, and the kernel's environment
    record = done["record"]
    assert "b = 8" in record["code"] and "noise" not in record["code"]
    assert len(record["cells_sha256"]) == 64 and len(record["notebook_file_sha256"]) == 64
    assert record["environment"]["packages"].get("ipykernel")
    assert done["spec"]["cwd"] == str(jp_root_dir / "work")

    results = await get_json(jp_fetch, "costguard", "api", "jobs", str(doc["id"]), "results")
    validate(f"/jobs/{doc['id']}/results", 200, results)
    assert [c["cell_id"] for c in results["cells"]] == ["c"]
    assert results["cells"][0]["outputs"][0]["text"] == "product 48\n"
    assert {r["name"]: r["type"] for r in results["results"]} == {"c": "builtins.int"}
    namespace: dict[str, Any] = {}
    exec(results["load_code"], namespace)  # what "load results" runs in the user's kernel
    assert namespace["c"] == 48
    # ... and what `%costguard fetch N` does in an IPython shell
    from IPython.core.interactiveshell import InteractiveShell

    from jupyter_costguard.kernel.magics import _costguard_magic

    shell = InteractiveShell.instance()
    shell.register_magic_function(_costguard_magic, magic_kind="line", magic_name="costguard")
    shell.run_line_magic("costguard", f"fetch {doc['id']} --dir {tmp_path / 'jobs'}")
    assert shell.user_ns["c"] == 48
    # ... and in a kernel this server started, as examples/README.md says it: no --dir (the
    # kernel learns the server's jobs directory, not a default) and no %load_ext first
    out = await in_new_kernel(jp_fetch, jp_serverapp, "import jupyter_costguard\n"
                              f"%costguard fetch {doc['id']}\nprint('c is', c)")
    assert f"costguard: loaded c from job {doc['id']}" in out and "c is 48" in out, out
    assert out.rstrip().endswith("ok"), out

    metrics = (await jp_fetch("metrics")).body.decode()
    assert 'costguard_jobs{backend="local",state="succeeded"} 1.0' in metrics
    assert 'costguard_jobs{backend="local",state="running"} 0.0' in metrics

    listed = await get_json(jp_fetch, "costguard", "api", "jobs",
                            params={"notebook": "work/product.ipynb"})
    validate("/jobs", 200, listed)
    assert [j["id"] for j in listed["jobs"]] == [doc["id"]]


async def test_working_directory_is_the_notebooks_and_files_there_are_found(jp_fetch,
                                                                             jp_root_dir):
    (jp_root_dir / "proj").mkdir()
    (jp_root_dir / "proj" / "data.csv").write_text("x\n1\n2\n")
    write_notebook(jp_root_dir, "proj/nb.ipynb", [
        code("read", "import os\nrows = open('data.csv').read().split()\nhere = os.getcwd()")])
    doc = await submit(jp_fetch, "proj/nb.ipynb", ["read"], inputs=["data.csv"])
    done = await wait_job(jp_fetch, doc["id"])
    assert done["state"] == "succeeded", done
    manifest = done["record"]["inputs"]
    assert manifest[0]["path"] == "data.csv" and manifest[0]["size_bytes"] == 6
    assert len(manifest[0]["sha256"]) == 64


async def test_a_failing_cell_fails_the_job_with_its_error(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir, "bad.ipynb", [code("x", "print('before')\n1 / 0")])
    doc = await submit(jp_fetch, "bad.ipynb", ["x"])
    done = await wait_job(jp_fetch, doc["id"])
    assert done["state"] == "failed"
    assert "ZeroDivisionError" in done["exit_reason"]
    assert "ZeroDivisionError" in await full_log(jp_fetch, doc["id"])
    results = await get_json(jp_fetch, "costguard", "api", "jobs", str(doc["id"]), "results")
    kinds = [o["output_type"] for o in results["cells"][0]["outputs"]]
    assert kinds == ["stream", "error"]


async def test_the_time_limit_stops_a_job(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir, "slow.ipynb", [code("s", "import time\ntime.sleep(120)")])
    doc = await submit(jp_fetch, "slow.ipynb", ["s"], retries=2,
                       resources={"time_limit_seconds": 3})
    done = await wait_job(jp_fetch, doc["id"])
    assert done["state"] == "failed"
    assert "time limit of 3 s" in done["exit_reason"]
    assert done["attempts"] == 1  # a time limit is not retried
    assert done["elapsed_seconds"] < 60


async def test_cancel_stops_the_job_and_its_kernel(jp_fetch, jp_root_dir, tmp_path):
    write_notebook(jp_root_dir, "long.ipynb", [
        code("s", "import os, time\nprint('user code runs in', os.getpid(), flush=True)\n"
                  "time.sleep(300)")])
    doc = await submit(jp_fetch, "long.ipynb", ["s"])
    await wait_job(jp_fetch, doc["id"], lambda d: "user code runs in" in d["log_tail"])
    status = json.loads((tmp_path / "jobs" / str(doc["id"]) / "status.json").read_text())
    kernel_pid, runner_pid = status["kernel_pid"], status["runner_pid"]
    assert alive(kernel_pid) and alive(runner_pid)

    cancelled = await post(jp_fetch, "jobs", str(doc["id"]), "cancel", code=202)
    assert cancelled["id"] == doc["id"]
    done = await wait_job(jp_fetch, doc["id"], timeout=30)
    assert done["state"] == "cancelled"
    deadline = time.monotonic() + 15
    while (alive(kernel_pid) or alive(runner_pid)) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert not alive(kernel_pid) and not alive(runner_pid)

    with pytest.raises(HTTPClientError) as e:  # already ended
        await jp_fetch("costguard", "api", "jobs", str(doc["id"]), "cancel", method="POST",
                       body="")
    assert e.value.code == 409 and "already ended" in json.loads(e.value.response.body)[
        "message"]


RESUMABLE = """\
import os, time
from jupyter_costguard import checkpoint
ckpt = checkpoint.latest()
steps = ckpt.state if ckpt else []
start = ckpt.step + 1 if ckpt else 0
attempt = int(os.environ["COSTGUARD_JOB_ATTEMPT"])
print("attempt", attempt, "starts at step", start, "pid", os.getpid(), flush=True)
for step in range(start, 8):
    steps = steps + [(attempt, step)]
    checkpoint.save(steps, step)
    time.sleep(0.4)
"""


async def test_a_killed_job_is_retried_and_resumes_from_its_checkpoint(jp_fetch, jp_root_dir,
                                                                       tmp_path):
    write_notebook(jp_root_dir, "train.ipynb", [code("t", RESUMABLE)])
    doc = await submit(jp_fetch, "train.ipynb", ["t"], retries=1)
    job_dir = tmp_path / "jobs" / str(doc["id"])
    # kill the job's kernel once it has saved a few steps
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        saved = checkpoint.list_checkpoints(str(job_dir / "checkpoints"))
        if saved and saved[-1] >= 2:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the job saved no checkpoints")
    status = json.loads((job_dir / "status.json").read_text())
    os.kill(status["kernel_pid"], signal.SIGKILL)
    killed_after = checkpoint.list_checkpoints(str(job_dir / "checkpoints"))[-1]

    done = await wait_job(jp_fetch, doc["id"])
    assert done["state"] == "succeeded", done
    assert done["attempts"] == 2
    attempts = done["record"]["attempts"]
    assert attempts[0]["outcome"] == "failed" and "died" in attempts[0]["reason"]
    results = await get_json(jp_fetch, "costguard", "api", "jobs", str(doc["id"]), "results")
    namespace: dict[str, Any] = {}
    exec(results["load_code"], namespace)
    steps = namespace["steps"]
    assert [s for _, s in steps] == list(range(8))  # every step once: resumed, not restarted
    first_of_second = next(s for a, s in steps if a == 2)
    assert first_of_second >= killed_after  # continued from the latest checkpoint
    assert first_of_second > 0
    log = await full_log(jp_fetch, doc["id"])
    assert f"attempt 2 starts at step {first_of_second}" in log


async def test_variables_are_sent_in_and_results_can_be_fetched(jp_fetch, jp_root_dir,
                                                                jp_serverapp):
    write_notebook(jp_root_dir, "send.ipynb", [
        code("load", "big = list(range(10))"), code("use", "total = sum(big) + offset")])
    session = await start_session(jp_fetch, "send.ipynb")
    kid = session["kernel"]["id"]
    client = jp_serverapp.kernel_manager.get_kernel(kid).client()
    client.start_channels(hb=False)
    try:
        await client.wait_for_ready(timeout=60)
        reply = await client.execute_interactive("offset = 100\nbig = [1, 2, 3]", timeout=30)
        assert reply["content"]["status"] == "ok"
    finally:
        client.stop_channels()
    # `big` is sent, so the cell that computes it is not needed
    doc = await submit(jp_fetch, "send.ipynb", ["use"], kernel_id=kid, send=["offset", "big"])
    assert [c["cell_id"] for c in doc["slice"]["cells"]] == ["use"]
    done = await wait_job(jp_fetch, doc["id"])
    assert done["state"] == "succeeded", done
    results = await get_json(jp_fetch, "costguard", "api", "jobs", str(doc["id"]), "results")
    namespace: dict[str, Any] = {}
    exec(results["load_code"], namespace)
    assert namespace["total"] == 106


async def test_rerun_submits_the_same_spec(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir, "again.ipynb", [code("x", "x = 1\nprint('x is', x)")])
    first = await submit(jp_fetch, "again.ipynb", ["x"])
    await wait_job(jp_fetch, first["id"])
    # the notebook changes on disk; the rerun still runs the recorded code
    write_notebook(jp_root_dir, "again.ipynb", [code("x", "x = 2")])
    second = await post(jp_fetch, "jobs", str(first["id"]), "rerun", code=201)
    assert second["id"] != first["id"]
    done = await wait_job(jp_fetch, second["id"])
    assert done["state"] == "succeeded"
    assert done["record"]["rerun_of"] == first["id"]
    assert "x is 1" in await full_log(jp_fetch, second["id"])


@pytest.mark.parametrize(
    ("body", "code", "needle"),
    [
        ({"notebook": "p.ipynb", "selected": []}, 400, "select"),
        ({"notebook": "p.ipynb", "selected": ["nope"]}, 400, "nope"),
        ({"notebook": "p.ipynb", "selected": ["m"]}, 400, "markdown"),
        ({"notebook": "missing.ipynb", "selected": ["c"]}, 404, "missing.ipynb"),
        ({"notebook": "../outside.ipynb", "selected": ["c"]}, 400, "outside"),
        ({"notebook": "p.ipynb", "selected": ["c"], "bogus": 1}, 400, "bogus"),
        ({"notebook": "p.ipynb", "selected": ["c"], "resources": {"gpus": -1}}, 400, "gpus"),
        ({"notebook": "p.ipynb", "selected": ["c"], "resources": {"time_limit_seconds": 0}},
         400, "time_limit_seconds"),
        ({"notebook": "p.ipynb", "selected": ["c"], "retries": 99}, 400, "retries"),
        ({"notebook": "p.ipynb", "selected": ["c"], "send": ["x"]}, 400, "kernel_id"),
        ({"notebook": "p.ipynb", "selected": ["c"], "send": ["not a name"]}, 400, "name"),
        ({"notebook": "p.ipynb", "selected": ["c"], "kernel_name": "nokernel"}, 400,
         "nokernel"),
        ({"notebook": "p.ipynb", "selected": ["c"], "backend": "mainframe"}, 400, "mainframe"),
        ({"notebook": "p.ipynb", "selected": ["c"], "send": ["x"], "kernel_id": "k-nope"},
         404, "k-nope"),
        ({"notebook": "p.ipynb", "selected": ["c"],
          "cells": [code("a", "a = ("), code("c", "a")]}, 400, "cell 0"),
        ([1, 2], 400, "object"),
    ],
)
async def test_bad_submissions_get_4xx_with_a_message(jp_fetch, jp_root_dir, body, code,
                                                      needle):
    write_notebook(jp_root_dir, "p.ipynb", PRODUCT)
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", "jobs", method="POST", body=json.dumps(body))
    assert e.value.code == code, e.value.response.body
    doc = json.loads(e.value.response.body)
    assert needle in doc["message"], doc
    assert "Traceback" not in e.value.response.body.decode()
    validate("/jobs", code, doc, method="post")
    listed = await get_json(jp_fetch, "costguard", "api", "jobs")
    assert listed["jobs"] == []  # nothing half-made


@pytest.mark.parametrize(
    ("parts", "method", "code"),
    [
        (("jobs", "abc"), "GET", 400),
        (("jobs", "999"), "GET", 404),
        (("jobs", "999", "log"), "GET", 404),
        (("jobs", "999", "results"), "GET", 404),
        (("jobs", "999", "cancel"), "POST", 404),
        (("jobs", "999", "rerun"), "POST", 404),
        (("jobs", "999", "metrics"), "DELETE", 404),
        (("jobs", "abc", "metrics"), "DELETE", 400),
        (("jobs", "0"), "GET", 404),
    ],
)
async def test_unknown_jobs_are_4xx(jp_fetch, parts, method, code):
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", *parts, method=method,
                       body="" if method == "POST" else None)
    assert e.value.code == code
    assert json.loads(e.value.response.body)["message"]


async def test_log_parameters_are_checked(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir, "p.ipynb", PRODUCT)
    doc = await submit(jp_fetch, "p.ipynb", ["a"])
    for params, needle in (({"offset": "-1"}, "negative"), ({"limit": "0"}, "limit"),
                           ({"offset": "x"}, "integer"), ({"tail": "1"}, "tail")):
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("costguard", "api", "jobs", str(doc["id"]), "log", params=params)
        assert e.value.code == 400 and needle in json.loads(e.value.response.body)["message"]
    await wait_job(jp_fetch, doc["id"])


@pytest.mark.parametrize(
    ("parts", "method"),
    [(("jobs",), "GET"), (("jobs",), "POST"), (("jobs", "slice"), "POST"),
     (("jobs", "1"), "GET"), (("jobs", "1", "log"), "GET"), (("jobs", "1", "results"), "GET"),
     (("jobs", "1", "cancel"), "POST"), (("jobs", "1", "rerun"), "POST")],
)
async def test_job_routes_refuse_requests_without_a_token(jp_fetch, parts, method):
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", *parts, method=method,
                       body="{}" if method == "POST" else None, headers={"Authorization": ""})
    assert e.value.code == 403


async def test_slice_preview_runs_nothing(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir, "p.ipynb", PRODUCT)
    doc = await post(jp_fetch, "jobs", "slice", body={"notebook": "p.ipynb", "selected": ["c"]})
    cells = doc["slice"]["cells"]
    assert [(c["cell_id"], c["selected"]) for c in cells] == [
        ("a", False), ("b", False), ("c", True)]
    assert "a" in cells[0]["reason"]
    assert (await get_json(jp_fetch, "costguard", "api", "jobs"))["jobs"] == []


async def test_slice_preview_says_how_much_may_be_sent_and_a_sent_name_needs_no_cell(
        jp_fetch, jp_root_dir):
    """What the dialog's "send instead of re-running" is built on."""
    write_notebook(jp_root_dir, "p.ipynb", PRODUCT)
    doc = await post(jp_fetch, "jobs", "slice", body={"notebook": "p.ipynb", "selected": ["c"]})
    assert doc["max_send_bytes"] == 100 << 20  # offload_max_send_bytes's default
    assert [c["cell_id"] for c in doc["slice"]["cells"]] == ["a", "b", "c"]
    sent = await post(jp_fetch, "jobs", "slice",
                      body={"notebook": "p.ipynb", "selected": ["c"], "send": ["a"]})
    assert [c["cell_id"] for c in sent["slice"]["cells"]] == ["b", "c"]


class TestWarmKernel:
    @pytest.fixture
    def costguard_config(self, costguard_config: dict[str, Any]) -> dict[str, Any]:
        return {**costguard_config, "LocalBackend.warm_kernels": 1}

    async def test_jobs_start_in_the_kernel_kept_warm_and_another_takes_its_place(
            self, jp_fetch, jp_root_dir, tmp_path):
        warm = tmp_path / "jobs" / "warm"

        def ready() -> list[dict[str, Any]]:
            docs = []
            for d in warm.glob("warm-*"):
                try:
                    docs.append(json.loads((d / "status.json").read_text()))
                except (OSError, ValueError):
                    pass
            return [d for d in docs if d.get("state") == "ready"]

        deadline = time.monotonic() + 60
        while not ready() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        first = ready()
        assert len(first) == 1
        write_notebook(jp_root_dir, "w/nb.ipynb", [
            code("x", "import os\nprint('pid', os.getpid(), 'cwd', os.getcwd(), "
                      "'job', os.environ['COSTGUARD_JOB_ID'])")])
        doc = await submit(jp_fetch, "w/nb.ipynb", ["x"])
        done = await wait_job(jp_fetch, doc["id"])
        assert done["state"] == "succeeded", done
        log = await full_log(jp_fetch, doc["id"])
        # it ran in the kernel started ahead of time, in the notebook's directory
        assert f"pid {first[0]['kernel_pid']} cwd {jp_root_dir / 'w'} job {doc['id']}" in log
        # a fresh warm kernel replaces the one used
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            now = ready()
            if now and now[0]["kernel_pid"] != first[0]["kernel_pid"]:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("no new warm kernel")
        assert not alive(first[0]["kernel_pid"])  # the used kernel went with its job
        # a job asking for a GPU selection starts cold (CUDA_VISIBLE_DEVICES is set first)
        doc = await submit(jp_fetch, "w/nb.ipynb", ["x"], resources={"gpus": 1})
        done = await wait_job(jp_fetch, doc["id"])
        assert done["state"] == "succeeded", done
        assert f"pid {now[0]['kernel_pid']} " not in await full_log(jp_fetch, doc["id"])


async def test_a_jobs_spend_is_in_the_ledger_under_its_notebook(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir, "spend.ipynb", [
        code("burn", "import time\nend = time.time() + 3\nwhile time.time() < end:\n    pass")])
    doc = await submit(jp_fetch, "spend.ipynb", ["burn"])
    done = await wait_job(jp_fetch, doc["id"])
    assert done["state"] == "succeeded"
    assert done["spend"] > 0 and done["currency"] == "USD"
    running = next(p for p in done["timeline"] if p["phase"] == "running")
    assert running["spend"] > 0  # the CPU it burnt was paid for while it ran
    # the replayed trace puts kernel 0 (here: the job's) on GPU 0 at 2%
    assert done["gpu_utilization_percent"] == 2.0
    assert done["record"]["gpu"]["mean_utilization_percent"] == 2.0
    nb = await get_json(jp_fetch, "costguard", "api", "notebooks", "spend.ipynb")
    assert nb["kernels_seen"] == 1  # the job's kernel, sampled as job-<id> (now ended)
    assert nb["spend"] >= done["spend"] - 1e-9


class TestSendLimit:
    @pytest.fixture
    def costguard_config(self, costguard_config: dict[str, Any]) -> dict[str, Any]:
        return {**costguard_config, "Offload.max_send_bytes": 1000}

    async def test_oversized_variables_are_refused_with_their_sizes(self, jp_fetch,
                                                                    jp_root_dir, jp_serverapp):
        write_notebook(jp_root_dir, "big.ipynb", [code("use", "n = len(big)")])
        session = await start_session(jp_fetch, "big.ipynb")
        kid = session["kernel"]["id"]
        client = jp_serverapp.kernel_manager.get_kernel(kid).client()
        client.start_channels(hb=False)
        try:
            await client.wait_for_ready(timeout=60)
            await client.execute_interactive("big = b'x' * 5000\nsmall = 1", timeout=30)
        finally:
            client.stop_channels()
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("costguard", "api", "jobs", method="POST", body=json.dumps({
                "notebook": "big.ipynb", "selected": ["use"], "kernel_id": kid,
                "send": ["big", "small"]}))
        assert e.value.code == 413
        message = json.loads(e.value.response.body)["message"]
        assert "over the limit of 1,000" in message and "big (5,0" in message
        with pytest.raises(HTTPClientError) as e:  # a name the kernel does not have
            await jp_fetch("costguard", "api", "jobs", method="POST", body=json.dumps({
                "notebook": "big.ipynb", "selected": ["use"], "kernel_id": kid,
                "send": ["nothere"]}))
        assert e.value.code == 400 and "nothere" in json.loads(e.value.response.body)[
            "message"]
        assert (await get_json(jp_fetch, "costguard", "api", "jobs"))["jobs"] == []


class TestBudgetRefusal:
    @pytest.fixture
    def costguard_config(self, costguard_config: dict[str, Any]) -> dict[str, Any]:
        return {**costguard_config, "Guard.server_budget": 0.0001, "Guard.budget_enforce": True}

    async def test_a_spent_budget_refuses_new_jobs(self, jp_fetch, jp_root_dir):
        write_notebook(jp_root_dir, "p.ipynb", PRODUCT)
        # the server spends its tiny budget within a few samples
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                await jp_fetch("costguard", "api", "jobs", "slice", method="POST",
                               body=json.dumps({"notebook": "p.ipynb", "selected": ["c"]}))
                resp = await jp_fetch("costguard", "api", "jobs", method="POST",
                                      body=json.dumps({"notebook": "p.ipynb",
                                                       "selected": ["a"]}))
            except HTTPClientError as e:
                assert e.code == 409, e.response.body
                message = json.loads(e.response.body)["message"]
                assert "budget" in message
                validate("/jobs", 409, json.loads(e.response.body), method="post")
                return
            await wait_job(jp_fetch, json.loads(resp.body)["id"])
            await asyncio.sleep(0.3)
        raise AssertionError("the spent budget never refused a job")


async def test_the_example_notebook_offloads_its_training_cell(jp_fetch, jp_root_dir):
    example = Path(__file__).resolve().parent.parent / "examples" / "offload.ipynb"
    (jp_root_dir / "offload.ipynb").write_bytes(example.read_bytes())
    doc = await submit(jp_fetch, "offload.ipynb", ["train"])
    assert [c["cell_id"] for c in doc["slice"]["cells"]] == ["setup", "data", "features",
                                                             "train"]
    done = await wait_job(jp_fetch, doc["id"])
    assert done["state"] == "succeeded", done
    results = await get_json(jp_fetch, "costguard", "api", "jobs", str(doc["id"]), "results")
    namespace: dict[str, Any] = {}
    exec(results["load_code"], namespace)
    intercept, slope = namespace["weights"]
    assert abs(intercept - 2) < 0.3 and abs(slope - 3) < 0.3
    names = {r["name"] for r in results["results"]}
    assert "weights" in names and "checkpoint" not in names  # a module: code, not data


async def test_deleting_job_metrics_needs_a_pushgateway(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir, "p.ipynb", PRODUCT)
    doc = await submit(jp_fetch, "p.ipynb", ["a"])
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", "jobs", str(doc["id"]), "metrics", method="DELETE")
    assert e.value.code == 409 and "Pushgateway.url" in json.loads(e.value.response.body)[
        "message"]
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", "jobs", str(doc["id"]), "metrics", method="DELETE",
                       headers={"Authorization": ""})
    assert e.value.code == 403
    await wait_job(jp_fetch, doc["id"])


async def test_a_backend_that_cannot_start_a_job_fails_it_with_the_reason(jp_fetch, jp_root_dir,
                                                                          jp_serverapp):
    class Broken(Backend):
        name = "broken"

        def launch(self, job, job_dir, environment):
            raise RuntimeError("the cluster is on fire")

        def reconcile(self, job, job_dir):
            return False

        def cancel(self, job, job_dir, force=False):
            pass

    jp_serverapp.web_app.settings["costguard_jobs"].backends["broken"] = Broken()
    write_notebook(jp_root_dir, "p.ipynb", PRODUCT)
    doc = await submit(jp_fetch, "p.ipynb", ["a"], backend="broken")
    assert doc["state"] == "failed"
    assert "could not start on broken: RuntimeError: the cluster is on fire" in doc[
        "exit_reason"]
    assert doc["backend_detail"] is None


class TestLocalQueue:
    @pytest.fixture
    def costguard_config(self, costguard_config: dict[str, Any]) -> dict[str, Any]:
        return {**costguard_config, "LocalBackend.max_jobs": 1}

    async def test_local_jobs_beyond_the_limit_wait_their_turn(self, jp_fetch, jp_root_dir):
        write_notebook(jp_root_dir, "q.ipynb", [
            code("slow", "import time\nprint('slow starts', flush=True)\ntime.sleep(2)"),
            code("fast", "print('fast ran')")])
        first = await submit(jp_fetch, "q.ipynb", ["slow"])
        second = await submit(jp_fetch, "q.ipynb", ["fast"])
        third = await submit(jp_fetch, "q.ipynb", ["fast"])
        assert (second["state"], second["phase"]) == ("queued", "queued")
        assert second["label"].startswith(f"job {second['id']} queued on local")
        # cancelling a waiting job ends it at once; it never runs
        await post(jp_fetch, "jobs", str(third["id"]), "cancel", code=202)
        gone = await wait_job(jp_fetch, third["id"], timeout=10)
        assert gone["state"] == "cancelled" and gone["attempts"] == 0
        assert "before it started" in gone["exit_reason"]

        await wait_job(jp_fetch, first["id"], lambda d: "slow starts" in d["log_tail"])
        assert (await job(jp_fetch, second["id"]))["state"] == "queued"  # still its turn to wait
        a = await wait_job(jp_fetch, first["id"])
        b = await wait_job(jp_fetch, second["id"])
        assert a["state"] == b["state"] == "succeeded"
        # the second started only once the first had ended, and its timeline says how long
        # it waited
        assert b["started"] >= a["ended"]
        queued = next(p for p in b["timeline"] if p["phase"] == "queued")
        assert queued["end"] >= a["ended"]
        assert "fast ran" in await full_log(jp_fetch, second["id"])
        assert await full_log(jp_fetch, third["id"]) == ""

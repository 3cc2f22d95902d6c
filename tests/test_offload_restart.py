"""A running job outlives its server: kill -9 the server, start it again, the job finishes."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.support.notebooks import code, write_notebook
from tests.support.processes import alive
from tests.support.server_proc import ServerProcess

pytestmark = pytest.mark.usefixtures("no_leftover_jobs")

STEPS = ("import time\nfor i in range(10):\n    print('step', i, flush=True)\n"
         "    time.sleep(0.5)\nfinished = True")


def test_a_job_keeps_running_while_the_server_is_killed_and_restarted(tmp_path: Path):
    config = {"db_path": str(tmp_path / "ledger.sqlite"),
              "Offload.jobs_dir": str(tmp_path / "jobs"),
              "sample_interval": 0.25, "hourly_rate": 36.0, "Offload.poll_interval": 0.1,
              "LocalBackend.warm_kernels": 1}
    write_notebook(tmp_path / "srv" / "root", "train.ipynb", [code("t", STEPS)])
    first = ServerProcess(tmp_path / "srv", config).start()
    second = None
    try:
        code_, body = first.request("costguard/api/jobs", "POST",
                                    {"notebook": "train.ipynb", "selected": ["t"]})
        assert code_ == 201, body
        job_id = json.loads(body)["id"]
        first.wait_for(f"costguard/api/jobs/{job_id}", lambda d: "step 2" in d["log_tail"])
        warm = [json.loads(p.read_text())
                for p in (tmp_path / "jobs" / "warm").glob("warm-*/status.json")]
        first.kill9()
        status = json.loads((tmp_path / "jobs" / str(job_id) / "status.json").read_text())
        assert alive(status["runner_pid"])  # the job did not go down with the server

        second = ServerProcess(tmp_path / "srv", config).start()
        done = second.wait_for(f"costguard/api/jobs/{job_id}",
                               lambda d: d["state"] not in ("queued", "running"), timeout=90)
        assert done["state"] == "succeeded", done
        assert done["attempts"] == 1  # the same run went on; it was not started again
        code_, body = second.request(f"costguard/api/jobs/{job_id}/log?limit=100000")
        log = json.loads(body)["text"]
        assert [f"step {i}" in log for i in range(10)] == [True] * 10
        assert log.count("step 0") == 1
        code_, body = second.request(f"costguard/api/jobs/{job_id}/results")
        assert "finished" in [r["name"] for r in json.loads(body)["results"]]
        # the killed server's warm runner noticed and went away with its kernel
        deadline = time.monotonic() + 15
        while any(alive(w["pid"]) for w in warm) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert warm and not any(alive(w["pid"]) or alive(w["kernel_pid"]) for w in warm
                                if w.get("kernel_pid"))
    finally:
        first.stop()
        if second is not None:
            second.stop()

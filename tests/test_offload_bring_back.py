"""What a job brings back, and what the server logs of it.

A job brings back the names the user chose (`bring_back`), else the names the selected cells
define that later cells read: a training loop's leftovers (``err``, ``f``, ``grad``, ``y``,
``epoch``, ``ckpt``) stay in the job. The results document says which names those are and how
they were chosen, and its `load_code` loads all of them or only the `names` asked for. Each
job's submit and end are in the server's own log, the end with the job's spend.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_costguard.common.apischema import DOCUMENT
from jupyter_costguard.offload.requests import (
    BRING_BACK_ALL,
    BRING_BACK_ASKED,
    BRING_BACK_LATER,
    default_bring_back,
)
from jupyter_costguard.offload.slicing import slice_cells
from jupyter_costguard.offload.slicing.later import follows, used_later
from jupyter_costguard.offload.variables import load_code
from tests.support.jobs import post, submit, wait_job
from tests.support.notebooks import code, markdown, write_notebook
from tests.support.openapi_check import validate
from tests.support.rest import get_json

pytestmark = pytest.mark.usefixtures("no_leftover_jobs")

LOOP = """\
ckpt = None
weights = [0.0, 0.0]
for epoch in range(3):
    grad = [0.0, 0.0]
    for f, y in rows:
        err = sum(w * v for w, v in zip(weights, f)) - y
        grad = [g + err * v for g, v in zip(grad, f)]
    weights = [w - 0.5 * g / len(rows) for w, g in zip(weights, grad)]
"""

TRAINING = [
    code("data", "rows = [([1.0, x / 10], 3 * x / 10 + 2) for x in range(20)]"),
    code("train", LOOP),
    markdown("m", "## after the job"),
    code("plot", "print('fitted', [round(w, 2) for w in weights])"),
]


def names(cells: list[dict[str, Any]], selected: list[str]) -> tuple[tuple[str, ...], str]:
    return default_bring_back(cells, selected, slice_cells(cells, selected))


# -- choosing the names ---------------------------------------------------------------------

def test_a_loops_leftovers_stay_in_the_job():
    sl = slice_cells(TRAINING, ["train"])
    assert set(sl.defines) >= {"ckpt", "weights", "epoch", "grad", "f", "y", "err"}
    assert names(TRAINING, ["train"]) == (("weights",), "later_cells")


def test_a_name_a_later_cell_rebinds_first_is_not_brought_back():
    cells = [code("a", "x = 1\ny = 2\nz = 3"), code("b", "y = 10\nprint(x, y)"),
             code("c", "print(y, z)")]
    # b reads x; y is b's own (bound before it is read), so c's y is b's too; c reads z
    assert used_later(cells, ["a"], ["x", "y", "z"]) == ("x", "z")
    assert used_later(cells, ["a"], ["x", "y"]) == ("x",)


def test_changes_calls_and_branches_count_as_reads():
    cells = [
        code("f", "def report():\n    return err * 2"),
        code("a", "err = 1\nhist = []\nlast = 0\nscratch = 5"),
        code("b", "hist.append(1)"),  # a change reads it
        code("c", "print(report())"),  # report's body reads err
        code("d", "if flag:\n    last = 1\nprint(last)"),  # may not rebind: a's last is read
    ]
    assert used_later(cells, ["a"], ["err", "hist", "last", "scratch"]) == (
        "err", "hist", "last")


def test_magics_and_a_half_written_cell_count_too():
    cells = [code("a", "out_dir = 'x'\nmodel = 1\nunused = 2"), code("b", "!ls $out_dir"),
             code("c", "print(model.  # still typing")]
    assert used_later(cells, ["a"], ["out_dir", "model", "unused"]) == ("model", "out_dir")


def test_cells_before_the_selection_and_selected_cells_do_not_count():
    cells = [code("early", "print(w)"), code("a", "w = 1\nv = 2"), code("b", "u = w + v"),
             code("after", "print(u)")]
    assert used_later(cells, ["a", "b"], ["w", "v", "u"]) == ("u",)


def test_with_nothing_after_the_selection_everything_it_defines_comes_back():
    cells = [code("a", "rows = [1]"), code("t", "total = sum(rows)\ni = 0"),
             code("blank", "  \n"), code("note", "# just a comment")]
    assert not follows(cells, ["t"])
    assert names(cells, ["t"]) == (("i", "total"), "selected_cells")
    assert follows([*cells, code("use", "print(total)")], ["t"])


def test_load_code_names_only_python_names():
    code_ = load_code(3, "/jobs/3/results.pkl", "ab" * 32, ["weights", "weights"])
    assert "['weights']" in code_
    with pytest.raises(ValueError, match="not Python names"):
        load_code(3, "/jobs/3/results.pkl", "ab" * 32, ["x); import os; (y"])


# -- through the server ---------------------------------------------------------------------

@pytest.fixture
def costguard_config(costguard_config: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    return {**costguard_config, "Offload.jobs_dir": str(tmp_path / "jobs"),
            "Offload.poll_interval": 0.1, "Offload.retry_backoff_seconds": 0.2}


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def about(self, job_id: int) -> list[logging.LogRecord]:
        return [r for r in self.records if f"costguard: job {job_id} " in r.getMessage()]


@pytest.fixture
def server_log(jp_serverapp: Any) -> Iterator[Lines]:
    """What the Jupyter server's own log gets (where its operator reads it)."""
    lines = Lines()
    logger = jp_serverapp.log
    old = logger.level
    logger.addHandler(lines)
    logger.setLevel(logging.INFO)
    try:
        yield lines
    finally:
        logger.removeHandler(lines)
        logger.setLevel(old)


async def test_the_job_brings_back_what_later_cells_read(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir, "train.ipynb", TRAINING)
    doc = await submit(jp_fetch, "train.ipynb", ["train"])
    assert doc["bring_back"] == ["weights"] and doc["bring_back_from"] == "later_cells"
    done = await wait_job(jp_fetch, doc["id"])
    assert done["state"] == "succeeded", done
    assert done["spec"]["bring_back"] == ["weights"]
    assert done["record"]["bring_back_from"] == "later_cells"
    listed = await get_json(jp_fetch, "costguard", "api", "jobs")
    validate("/jobs", 200, listed)
    assert listed["jobs"][0]["bring_back"] == ["weights"]

    results = await get_json(jp_fetch, "costguard", "api", "jobs", str(doc["id"]), "results")
    validate(f"/jobs/{doc['id']}/results", 200, results)
    assert results["bring_back"] == ["weights"]
    assert [r["name"] for r in results["results"]] == ["weights"]  # only it was pickled
    ns: dict[str, Any] = {"err": "the user's own"}
    exec(results["load_code"], ns)
    assert [round(w, 1) for w in ns["weights"]] != [0.0, 0.0]
    assert ns["err"] == "the user's own" and "grad" not in ns and "epoch" not in ns

    # only some names: what the user let replace
    some = await get_json(jp_fetch, "costguard", "api", "jobs", str(doc["id"]), "results",
                          params={"names": ""})
    validate(f"/jobs/{doc['id']}/results", 200, some)
    ns = {"weights": "kept"}
    exec(some["load_code"], ns)
    assert ns["weights"] == "kept"
    for bad, message in (("err", "brought back no err"), ("os.system", "Python names")):
        with pytest.raises(HTTPClientError) as e:
            await get_json(jp_fetch, "costguard", "api", "jobs", str(doc["id"]), "results",
                           params={"names": bad})
        assert e.value.code == 400 and message in e.value.response.body.decode()


async def test_named_bring_back_wins(jp_fetch, jp_root_dir):
    write_notebook(jp_root_dir, "train.ipynb", TRAINING)
    doc = await submit(jp_fetch, "train.ipynb", ["train"], bring_back=["weights", "epoch"])
    assert doc["bring_back"] == ["weights", "epoch"] and doc["bring_back_from"] == "request"
    done = await wait_job(jp_fetch, doc["id"])
    results = await get_json(jp_fetch, "costguard", "api", "jobs", str(done["id"]), "results")
    assert sorted(r["name"] for r in results["results"]) == ["epoch", "weights"]


async def test_the_server_logs_each_jobs_submit_and_end(jp_fetch, jp_root_dir, server_log):
    write_notebook(jp_root_dir, "work/burn.ipynb", [
        code("setup", "import time"),
        code("burn", "end = time.time() + 1\nwhile time.time() < end:\n    pass\ndone = 1"),
        code("bad", "1 / 0")])
    doc = await submit(jp_fetch, "work/burn.ipynb", ["burn"], retries=1,
                       resources={"cpus": 1, "time_limit_seconds": 600})
    done = await wait_job(jp_fetch, doc["id"])
    assert done["state"] == "succeeded", done
    lines = server_log.about(doc["id"])
    submitted = [r for r in lines if "submitted" in r.getMessage()]
    assert len(submitted) == 1 and submitted[0].levelno == logging.INFO
    text = submitted[0].getMessage()
    assert f"job {doc['id']} submitted from work/burn.ipynb: selected cell(s) burn " in text
    assert "backend local" in text and "cpus 1, time limit 600 s" in text and "1 retry" in text
    ended = [r for r in lines if "after" in r.getMessage()]
    assert len(ended) == 1 and ended[0].levelno == logging.INFO
    end = ended[0].getMessage()
    assert f"job {doc['id']} from work/burn.ipynb succeeded after " in end
    assert done["spend"] > 0
    m = re.search(r"spend (\d+\.\d+) (\w{3}), 1 of 2 attempt\(s\)$", end)
    assert m, end
    assert float(m.group(1)) == pytest.approx(done["spend"], abs=1e-6)
    assert m.group(2) == done["currency"] == "USD"
    elapsed = float(re.search(r"after (\d+\.\d) s", end).group(1))  # type: ignore[union-attr]
    assert elapsed == pytest.approx(done["elapsed_seconds"], abs=0.06)

    failed = await submit(jp_fetch, "work/burn.ipynb", ["bad"])
    assert (await wait_job(jp_fetch, failed["id"]))["state"] == "failed"
    end_failed = [r for r in server_log.about(failed["id"]) if "after" in r.getMessage()]
    assert len(end_failed) == 1 and end_failed[0].levelno == logging.WARNING
    assert "failed after" in end_failed[0].getMessage()
    assert "ZeroDivisionError" in end_failed[0].getMessage()


# -- what the confirm dialog is told --------------------------------------------------------

def test_how_bring_back_was_chosen_is_named_as_the_document_names_it():
    schemas = DOCUMENT["components"]["schemas"]
    assert [BRING_BACK_ASKED, BRING_BACK_LATER, BRING_BACK_ALL] == \
        schemas["BringBackFrom"]["enum"]


@pytest.mark.parametrize(("cells", "extra", "expected"), [
    (TRAINING, {}, (["weights"], "later_cells")),
    (TRAINING[:2], {}, (["ckpt", "epoch", "err", "f", "grad", "weights", "y"],
                        "selected_cells")),
    (TRAINING, {"bring_back": ["weights", "epoch"]}, (["weights", "epoch"], "request")),
])
async def test_the_slice_preview_says_what_the_submit_brings_back(jp_fetch, jp_root_dir,
                                                                   cells, extra, expected):
    """The dialog's "Brings back" is the preview's, which must be what the job then does."""
    write_notebook(jp_root_dir, "train.ipynb", cells)
    body = {"notebook": "train.ipynb", "selected": ["train"], **extra}
    preview = await post(jp_fetch, "jobs", "slice", body=body)  # held to the document
    assert (preview["bring_back"], preview["bring_back_from"]) == expected
    assert (await get_json(jp_fetch, "costguard", "api", "jobs"))["jobs"] == []
    doc = await submit(jp_fetch, "train.ipynb", ["train"], **extra)
    assert (doc["bring_back"], doc["bring_back_from"]) == expected
    assert (await wait_job(jp_fetch, doc["id"]))["state"] == "succeeded"


async def test_the_demo_training_cell_brings_back_only_weights(jp_fetch, jp_root_dir):
    example = Path(__file__).resolve().parent.parent / "examples" / "offload.ipynb"
    (jp_root_dir / "offload.ipynb").write_bytes(example.read_bytes())
    preview = await post(jp_fetch, "jobs", "slice",
                         body={"notebook": "offload.ipynb", "selected": ["train"]})
    assert preview["bring_back"] == ["weights"]
    assert preview["bring_back_from"] == "later_cells"
    assert set(preview["slice"]["defines"]) - {"weights"} == {
        "ckpt", "epoch", "err", "f", "grad", "start", "y"}


async def test_a_bad_bring_back_is_refused_by_the_preview_as_by_the_submit(jp_fetch,
                                                                           jp_root_dir):
    write_notebook(jp_root_dir, "train.ipynb", TRAINING)
    for parts in (("jobs", "slice"), ("jobs",)):
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("costguard", "api", *parts, method="POST", body=json.dumps(
                {"notebook": "train.ipynb", "selected": ["train"], "bring_back": ["os.path"]}))
        assert e.value.code == 400 and "bring_back" in e.value.response.body.decode()


def test_the_job_list_shows_bring_back_also_for_a_store_from_before_it(tmp_path: Path):
    from jupyter_costguard.offload.spec import JobSpec, SpecCell
    from jupyter_costguard.offload.store import JobStore

    spec = JobSpec(notebook="n.ipynb", cwd=str(tmp_path), kernel_name="python3",
                   cells=(SpecCell("t", 0, True, "w = 1", "w = 1"),), bring_back=("w",))
    store = JobStore(tmp_path / "jobs.sqlite")
    job = store.create(spec, 1.0, {}, {"bring_back_from": "later_cells"})
    listed = store.list_page()[0][0]
    assert listed.spec.bring_back == ("w",) and listed.record["bring_back_from"] == "later_cells"
    # a summary written before bring_back was in it: filled in when the store opens
    with store._lock:
        store._db.execute("UPDATE job SET summary=? WHERE id=?",
                          ('{"kernel_name": "python3", "selected": [["t", 0]]}', job.id))
        store._db.execute("PRAGMA user_version = 0")  # which kept no schema version
    assert store.list_page()[0][0].spec.bring_back == ()
    store.close()
    store = JobStore(tmp_path / "jobs.sqlite")
    try:
        listed = store.list_page()[0][0]
        assert listed.spec.bring_back == ("w",) and listed.spec.selected == ("t",)
    finally:
        store.close()

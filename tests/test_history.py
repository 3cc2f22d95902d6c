"""`GET costguard/api/history` on a real server whose ledger holds three hours of seeded
history (written by the ledger's own writer before the server starts) and keeps sampling a
real kernel that holds a GPU (replayed)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_costguard.cost import timeline
from tests.support.history import seed_history
from tests.support.openapi_check import validate
from tests.support.rest import get_json, start_session, wait_for

RATE = 36.0
SEEDED_MINUTES = 180
#: documents round money to 1e-6 per figure
ROUNDING = 1e-5


@pytest.fixture
def seeded(tmp_path: Path) -> dict[tuple[int, str], tuple[float, float]]:
    return seed_history(tmp_path / "ledger.sqlite", now=time.time(), minutes=SEEDED_MINUTES,
                        rate_per_hour=RATE)


@pytest.fixture
def costguard_config(costguard_config: dict[str, Any], seeded: Any) -> dict[str, Any]:
    """The shared configuration, on the seeded ledger (the fixture above wrote it first)."""
    return costguard_config


async def history(jp_fetch: Any, **params: str) -> dict[str, Any]:
    doc: dict[str, Any] = await get_json(jp_fetch, "costguard", "api", "history",
                                         params=params or None)
    validate("/history", 200, doc)
    return doc


def by_path(doc: dict[str, Any]) -> dict[str | None, dict[str, Any]]:
    return {s["path"]: s for s in doc["series"]}


def seeded_total(seeded: dict[tuple[int, str], tuple[float, float]], path: str) -> float:
    return sum(spend for (_, p), (spend, _) in seeded.items() if p == path)


async def test_stack_adds_up_to_the_servers_spend(jp_fetch, seeded):
    await start_session(jp_fetch, "live.ipynb")
    await wait_for(jp_fetch, lambda d: any(n["path"] == "live.ipynb" and n["spend"] > 0
                                           for n in d["notebooks"]), endpoint="notebooks")
    before = (await get_json(jp_fetch, "costguard", "api", "status"))["totals"]["spend"]
    doc = await history(jp_fetch, minutes="10080")
    after = (await get_json(jp_fetch, "costguard", "api", "status"))["totals"]["spend"]

    assert doc["notebook"] is None
    kinds = [s["kind"] for s in doc["series"]]
    assert kinds[-1] == "unattributed" and set(kinds[:-1]) == {"notebook"}
    assert set(by_path(doc)) == {"train.ipynb", "explore.ipynb", "live.ipynb", None}
    # every bucket's stack is the server's spend in it
    total = doc["total"]
    for i in range(len(doc["times"])):
        stack = sum(s["spend"][i] for s in doc["series"])
        assert stack == pytest.approx(total["spend"][i], abs=ROUNDING)
        assert sum(s["waste"][i] for s in doc["series"]) == pytest.approx(
            total["waste"][i], abs=ROUNDING)
    # the window holds the ledger's whole life: its total is the server's, as of the read
    assert before - ROUNDING <= total["total_spend"] <= after + ROUNDING
    assert sum(s["total_spend"] for s in doc["series"]) == pytest.approx(
        total["total_spend"], abs=ROUNDING * len(doc["series"]))
    # notebooks that no longer run keep exactly what they spent
    nbs = {n["path"]: n for n in (await get_json(jp_fetch, "costguard", "api",
                                                 "notebooks"))["notebooks"]}
    for path in ("train.ipynb", "explore.ipynb"):
        assert by_path(doc)[path]["total_spend"] == pytest.approx(nbs[path]["spend"],
                                                                  abs=ROUNDING)
        assert by_path(doc)[path]["total_waste"] == pytest.approx(nbs[path]["waste"],
                                                                  abs=ROUNDING)
    assert by_path(doc)["live.ipynb"]["total_spend"] > 0
    assert doc["notebooks"][0] == "train.ipynb", "most spent first"
    assert set(doc["notebooks"]) == {"train.ipynb", "explore.ipynb", "live.ipynb"}


async def test_minute_buckets_hold_what_was_recorded(jp_fetch, seeded):
    doc = await history(jp_fetch, minutes="360")
    assert doc["bucket_seconds"] == 60 and len(doc["times"]) == 360
    series = by_path(doc)
    index = {int(t // 60): i for i, t in enumerate(doc["times"])}
    for (bucket, path), (spend, waste) in seeded.items():
        row = doc["total"] if path == "" else series[path]
        assert row["spend"][index[bucket]] == pytest.approx(spend, abs=1e-6)
        assert row["waste"][index[bucket]] == pytest.approx(waste, abs=1e-6)
    # a shorter window ends at the same (current) bucket and holds only its part
    short = await history(jp_fetch, minutes="60")
    assert len(short["times"]) == 60 and short["times"][-1] >= doc["times"][-1]
    assert "train.ipynb" in short["notebooks"]
    assert by_path(short)["train.ipynb"]["total_spend"] < series["train.ipynb"]["total_spend"]


@pytest.mark.parametrize(("minutes", "bucket"), [("360", 60), ("1440", 300), ("4320", 900),
                                                 ("10080", 3600)])
async def test_longer_windows_have_coarser_buckets(jp_fetch, seeded, minutes, bucket):
    doc = await history(jp_fetch, minutes=minutes)
    assert doc["minutes"] == int(minutes)
    assert doc["bucket_seconds"] == bucket
    times = doc["times"]
    assert all(t % bucket == 0 for t in times), "buckets are aligned on their length"
    assert all(b - a == bucket for a, b in zip(times, times[1:]))
    assert doc["start"] == times[0] and doc["end"] == times[-1] + bucket
    assert doc["end"] > time.time() - 60, "the last bucket is the current one"
    assert (doc["end"] - doc["start"]) / 60 >= int(minutes)
    assert len(times) <= 361
    for s in [*doc["series"], doc["total"]]:
        assert len(s["spend"]) == len(s["waste"]) == len(times)
    # the seeded notebook stopped spending: every window that holds all of it says the same
    assert by_path(doc)["train.ipynb"]["total_spend"] == pytest.approx(
        seeded_total(seeded, "train.ipynb"), abs=ROUNDING)


async def test_one_notebook(jp_fetch, seeded):
    everything = await history(jp_fetch, minutes="1440")
    doc = await history(jp_fetch, minutes="1440", notebook="explore.ipynb")
    assert doc["notebook"] == "explore.ipynb"
    assert [s["path"] for s in doc["series"]] == ["explore.ipynb"]
    only = doc["series"][0]
    assert only["total_spend"] == by_path(everything)["explore.ipynb"]["total_spend"]
    assert only["total_spend"] == pytest.approx(seeded_total(seeded, "explore.ipynb"),
                                                abs=ROUNDING)
    assert only["total_waste"] == pytest.approx(
        sum(w for (_, p), (_, w) in seeded.items() if p == "explore.ipynb"), abs=ROUNDING)
    assert 0 < only["total_waste"] <= only["total_spend"]
    assert doc["notebooks"] == everything["notebooks"], "the selector's choices come along"
    assert doc["total"]["total_spend"] >= only["total_spend"]
    # a leading or trailing slash names the same notebook
    again = await history(jp_fetch, minutes="1440", notebook="/explore.ipynb")
    assert again["series"][0]["total_spend"] == only["total_spend"]


async def test_fit_starts_at_the_ledgers_first_minute(jp_fetch, seeded):
    """Three hours of ledger: a fitted window of any maximum is those hours in minutes."""
    first = min(bucket for bucket, _ in seeded) * 60
    week = await history(jp_fetch, minutes="10080")
    for minutes in ("360", "1440", "10080"):
        doc = await history(jp_fetch, minutes=minutes, fit="true")
        assert doc["minutes"] == int(minutes) and doc["since"] == first
        assert doc["bucket_seconds"] == 60 and doc["times"][0] == first
        assert SEEDED_MINUTES < len(doc["times"]) <= SEEDED_MINUTES + 4
        assert by_path(doc)["train.ipynb"]["total_spend"] == pytest.approx(
            by_path(week)["train.ipynb"]["total_spend"], abs=ROUNDING)
        # `time` is the last sample the buckets hold
        assert doc["time"] is not None and doc["start"] <= doc["time"] < doc["end"]
    assert week["since"] is None and (await history(jp_fetch, fit="false"))["since"] is None


@pytest.mark.parametrize(
    ("params", "code", "needle"),
    [
        ({"minutes": "0"}, 400, "between"),
        ({"minutes": "10081"}, 400, "between"),
        ({"minutes": "abc"}, 400, "whole number"),
        ({"minutes": "1.5"}, 400, "whole number"),
        ({"minutes": "-5"}, 400, "whole number"),
        ({"minutes": ""}, 400, "whole number"),
        ({"notebook": ""}, 400, "notebook"),
        ({"notebook": "/"}, 400, "notebook"),
        ({"notebook": "nowhere.ipynb"}, 404, "nowhere.ipynb"),
        ({"hours": "6"}, 400, "hours"),
        ({"fit": "yes"}, 400, "fit must be true or false"),
    ],
)
async def test_bad_parameters_get_a_json_4xx(jp_fetch, params, code, needle):
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", "history", params=params)
    assert e.value.code == code
    body = json.loads(e.value.response.body)
    assert needle in body["message"]
    assert "Traceback" not in e.value.response.body.decode()
    validate("/history", code, body)


async def test_defaults_to_six_hours(jp_fetch):
    doc = await history(jp_fetch)
    assert doc["minutes"] == timeline.DEFAULT_MINUTES == 360
    assert doc["bucket_seconds"] == 60


async def test_needs_a_token(jp_fetch):
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("costguard", "api", "history", headers={"Authorization": ""})
    assert e.value.code == 403


def test_window_ends_with_the_current_bucket():
    now = 1_800_000_000.0 + 37.0  # an epoch minute boundary plus 37 s
    minute = int(now // 60)
    w = timeline.window(now, 360)
    assert (w.step, w.last, w.count) == (1, minute, 360)
    w = timeline.window(now, 1440)
    assert w.step == 5 and w.last <= minute <= w.end == w.last + 4
    assert w.first % 5 == 0 and (w.last - w.first + 5) >= 1440
    assert timeline.window(now, 10080).count in (168, 169)
    assert [timeline.bucket_minutes(m) for m in (1, 360, 361, 1440, 1441, 4320, 4321, 10080)] \
        == [1, 1, 5, 5, 15, 15, 60, 60]

"""Hibernate through the REST API of a real server, with real kernels (issue 37 items 2 and 6).

A notebook's kernel is hibernated (its variables saved, then the kernel shut down) and its
variables come back in a new kernel of the same notebook; what the server did not write, or
wrote for another notebook or owner, is refused and loads nothing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from jupyter_costguard.hibernate.errors import HibernateError
from jupyter_costguard.hibernate.service import HibernateService
from jupyter_costguard.hibernate.settings import Hibernate
from jupyter_costguard.kernel.hibernate.records import MANIFEST
from tests.support.notebooks import code, write_notebook
from tests.support.openapi_check import validate
from tests.support.rest import start_session, wait_for

NOTEBOOK = "work/model.ipynb"

SETUP = """
settings = {"lr": 0.1, "layers": [64, 32]}
def score(x):
    return x * 3 + len(settings)
class Model:
    def __init__(self, w):
        self.w = w
    def predict(self, x):
        return self.w * x
model = Model(2.5)
items = list(range(100_000))
gen = (i for i in range(3))
"""

CHECK = ("import json as _j; print(_j.dumps({'settings': settings, 'score': score(2), "
         "'model': [type(model).__name__, model.predict(2)], 'n': len(items), "
         "'last': items[-1]}))")


@pytest.fixture
def costguard_config(costguard_config: dict[str, Any]) -> dict[str, Any]:
    """Resume on use off: these tests restore by hand (the banner's Restore) into a new
    kernel, and look into it empty first (`test_hibernate_resume.py` covers the automatic
    restore)."""
    return {**costguard_config, "Hibernate.resume": False}


def service(serverapp: Any) -> HibernateService:
    svc: HibernateService = serverapp.web_app.settings["costguard_hibernate"]
    return svc


async def run(serverapp: Any, kernel_id: str, source: str) -> str:
    """`source` run in the server's kernel `kernel_id`; its stdout (errors included)."""
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream":
            out.append(msg["content"]["text"])
        elif msg["msg_type"] == "error":
            out.append(f"{msg['content']['ename']}: {msg['content']['evalue']}")

    kernel = serverapp.kernel_manager.get_kernel(kernel_id)
    client = kernel.client()
    client.start_channels(hb=False)
    try:
        await client.wait_for_ready(timeout=60)
        await client.execute_interactive(source, output_hook=hook, timeout=60)
    finally:
        client.stop_channels()
    # the server hears the kernel's "idle" on its own channel, a moment after we do; until
    # then it counts the kernel busy (and hibernate refuses a busy kernel)
    for _ in range(600):
        if kernel.execution_state != "busy":
            break
        await asyncio.sleep(0.05)
    return "".join(out)


async def new_kernel(jp_fetch: Any, jp_root_dir: Path, path: str = NOTEBOOK) -> str:
    if not (jp_root_dir / path).exists():
        write_notebook(jp_root_dir, path, [code("a", "x = 1")])
    session = await start_session(jp_fetch, path)
    kernel_id: str = session["kernel"]["id"]
    return kernel_id


async def api(jp_fetch: Any, *parts: str, method: str = "GET", body: Any = None,
              raw: str | None = None, expect: int = 200, **kw: Any) -> Any:
    """A costguard API call that must answer `expect`; its JSON (None for 204)."""
    data = raw if raw is not None else (json.dumps(body) if body is not None else
                                        ("" if method == "POST" else None))
    try:
        resp = await jp_fetch("costguard", "api", *parts, method=method, body=data,
                              allow_nonstandard_methods=True, **kw)
    except HTTPClientError as e:
        assert e.code == expect, e.response.body if e.response else e
        doc = json.loads(e.response.body)
        assert doc["message"] and "Traceback" not in doc["message"]
        return doc
    assert resp.code == expect, resp.body
    return json.loads(resp.body) if resp.body else None


async def hibernated(jp_fetch: Any, jp_root_dir: Path, serverapp: Any,
                     path: str = NOTEBOOK, holding_gpu: bool = False) -> dict[str, Any]:
    kernel_id = await new_kernel(jp_fetch, jp_root_dir, path)
    assert "Error" not in await run(serverapp, kernel_id, SETUP)
    if holding_gpu:  # the replayed trace gives the first kernel 4 GiB of GPU 0
        await wait_for(jp_fetch, lambda d: any(k["kernel_id"] == kernel_id and k["gpus"]
                                               for k in d["kernels"]), "kernels")
    doc = await api(jp_fetch, "kernels", kernel_id, "hibernate", method="POST")
    validate(f"/kernels/{kernel_id}/hibernate", 200, doc, method="post")
    return {**doc, "kernel_id": kernel_id}


def folder(tmp_path: Path, snapshot_id: str) -> Path:
    return tmp_path / "snapshots" / snapshot_id


async def test_variables_come_back_in_a_new_kernel_of_the_same_notebook(
        jp_fetch, jp_root_dir, jp_serverapp, tmp_path):
    snap = await hibernated(jp_fetch, jp_root_dir, jp_serverapp, holding_gpu=True)
    assert snap["notebook"] == NOTEBOOK and snap["store"] == "local"
    assert {"settings", "score", "Model", "model", "items"} <= set(snap["saved"])
    assert [s["name"] for s in snap["skipped"]] == ["gen"] and snap["skipped"][0]["reason"]
    assert snap["bytes"] > 0 and snap["gpus_freed"] == 1
    # the kernel is gone, and with it its hold on the GPU
    with pytest.raises(HTTPClientError) as e:
        await jp_fetch("api", "kernels", snap["kernel_id"])
    assert e.value.code == 404
    # private on disk
    where = folder(tmp_path, snap["id"])
    assert (where / MANIFEST).is_file() and (where.parent.stat().st_mode & 0o777) == 0o700
    assert ((tmp_path / "hibernate.key").stat().st_mode & 0o777) == 0o600

    listed = await api(jp_fetch, "snapshots", params={"notebook": NOTEBOOK})
    validate("/snapshots", 200, listed)
    assert [s["id"] for s in listed["snapshots"]] == [snap["id"]]
    assert listed["snapshots"][0]["saved"] == snap["saved"]
    other = await api(jp_fetch, "snapshots", params={"notebook": "elsewhere.ipynb"})
    assert other["snapshots"] == [] and other["waste_avoided"] == 0

    told: list[str] = []  # what listens for restored snapshots (the idle rule's notice)

    async def listener(snapshot_id: str) -> None:
        told.append(snapshot_id)

    service(jp_serverapp).listeners.append(listener)
    kernel_id = await new_kernel(jp_fetch, jp_root_dir)
    assert kernel_id != snap["kernel_id"]
    restored = await api(jp_fetch, "snapshots", snap["id"], "restore", method="POST",
                         body={"kernel_id": kernel_id})
    validate(f"/snapshots/{snap['id']}/restore", 200, restored, method="post")
    assert told == [snap["id"]]
    assert set(restored["restored"]) == set(snap["saved"])
    assert "gen" in [s["name"] for s in restored["skipped"]]
    values = json.loads(await run(jp_serverapp, kernel_id, CHECK))
    assert values == {"settings": {"lr": 0.1, "layers": [64, 32]}, "score": 8,
                      "model": ["Model", 5.0], "n": 100_000, "last": 99_999}

    # the waste avoided: the rate the kernel held, for the time it stayed hibernated
    listed = await api(jp_fetch, "snapshots")
    validate("/snapshots", 200, listed)
    (doc,) = listed["snapshots"]
    assert doc["gpus_held"] == 1 and doc["rate_per_hour_held"] > 0
    assert doc["restored"] >= doc["created"] and doc["hibernated_seconds"] > 0
    assert doc["waste_avoided"] == pytest.approx(
        doc["rate_per_hour_held"] * doc["hibernated_seconds"] / 3600, abs=1e-5)
    assert listed["waste_avoided"] == doc["waste_avoided"] and listed["currency"] == "USD"
    again = await api(jp_fetch, "snapshots")  # restored: the figure stops growing
    assert again["snapshots"][0]["hibernated_seconds"] == doc["hibernated_seconds"]
    metrics = (await jp_fetch("metrics")).body.decode()
    assert "costguard_snapshots 1.0" in metrics
    assert f'costguard_hibernate_waste_avoided{{currency="USD"}} {doc["waste_avoided"]}' \
        in metrics, [m for m in metrics.splitlines() if "hibernate" in m]

    await api(jp_fetch, "snapshots", snap["id"], method="DELETE", expect=204)
    assert not folder(tmp_path, snap["id"]).exists()
    assert (await api(jp_fetch, "snapshots"))["snapshots"] == []
    await api(jp_fetch, "snapshots", snap["id"], method="DELETE", expect=404)


async def test_a_failed_save_keeps_the_kernel_running(jp_fetch, jp_root_dir, jp_serverapp,
                                                      tmp_path):
    svc = service(jp_serverapp)
    svc.settings = Hibernate(timeout_seconds=60, max_bytes=1000).service_settings(90)
    kernel_id = await new_kernel(jp_fetch, jp_root_dir)
    await run(jp_serverapp, kernel_id, SETUP)
    doc = await api(jp_fetch, "kernels", kernel_id, "hibernate", method="POST", expect=409)
    assert "keeps running" in doc["message"] and "items" in doc["message"], doc
    validate(f"/kernels/{kernel_id}/hibernate", 409, doc, method="post")
    assert "100000" in await run(jp_serverapp, kernel_id, "print(len(items))")
    assert (await api(jp_fetch, "snapshots"))["snapshots"] == []
    assert left_on_disk(tmp_path) == []


def left_on_disk(tmp_path: Path) -> list[str]:
    """What the snapshot root holds besides its index and the server's own lock: snapshot
    folders, partial ones, markers of abandoned saves."""
    return sorted(p.name for p in (tmp_path / "snapshots").iterdir()
                  if not p.name.startswith(("index.sqlite", ".server-"))
                  and not p.name.endswith(".abandoned"))


#: send one cell to a kernel at once (no wait for the kernel to be ready: it is busy saving)
#: and print its reply's status
SEND_CELL = """
import sys
from jupyter_client import BlockingKernelClient
client = BlockingKernelClient(connection_file=sys.argv[1])
client.load_connection_file()
client.start_channels(hb=False)
msg_id = client.execute(sys.argv[2])
print("sent", flush=True)
while True:
    reply = client.get_shell_msg(timeout=120)
    if reply["parent_header"].get("msg_id") == msg_id:
        break
client.stop_channels()
print(reply["content"]["status"])
"""

SLOW = ("class Slow:\n    def __reduce__(self):\n"
        "        import time; time.sleep({seconds}); return (int, ())\n")


async def test_an_automatic_hibernation_keeps_a_kernel_whose_every_variable_is_not_saved(
        jp_fetch, jp_root_dir, jp_serverapp, tmp_path):
    """Issue 44: an automatic hibernation shuts a kernel down only when every variable was
    saved; otherwise it keeps running and the error names what blocks it. A hand-made one
    leaves behind only what cannot live outside the process."""
    svc = service(jp_serverapp)
    kernel_id = await new_kernel(jp_fetch, jp_root_dir)
    assert "Error" not in await run(jp_serverapp, kernel_id, SETUP)  # `gen`: a generator
    with pytest.raises(HibernateError) as e:
        await svc.hibernate(kernel_id, automatic=True)
    assert e.value.status == 409 and "keeps running" in str(e.value)
    assert "gen (a generator" in str(e.value) and "every variable must be saved" in str(e.value)
    assert "100000" in await run(jp_serverapp, kernel_id, "print(len(items))")
    assert (await api(jp_fetch, "snapshots"))["snapshots"] == [] and left_on_disk(tmp_path) == []

    # a value whose pickling fails unexpectedly blocks even a hand-made hibernation
    await run(jp_serverapp, kernel_id, "class Odd:\n    def __reduce__(self):\n"
                                       "        raise ValueError('no reduce')\nodd = Odd()")
    doc = await api(jp_fetch, "kernels", kernel_id, "hibernate", method="POST", expect=409)
    assert "odd (cannot be pickled: ValueError: no reduce)" in doc["message"], doc
    assert "keeps running" in doc["message"]
    validate(f"/kernels/{kernel_id}/hibernate", 409, doc, method="post")
    assert "100000" in await run(jp_serverapp, kernel_id, "print(len(items))")

    # the admin's setting lets an automatic one leave the generator, as a user may
    await run(jp_serverapp, kernel_id, "del odd")
    svc.settings = dataclasses.replace(svc.settings, may_leave_behind=True)
    snap = await svc.hibernate(kernel_id, automatic=True)
    assert [s["name"] for s in snap["skipped"]] == ["gen"] and "items" in snap["saved"]


async def test_a_cell_sent_while_the_snapshot_is_written_keeps_the_kernel(
        jp_fetch, jp_root_dir, jp_serverapp, tmp_path):
    """Issue 44: a cell sent during the save ran after it, then the kernel was shut down and
    its work lost. Now the kernel keeps running (409, saying why), the cell's work is there,
    and the snapshot, which would miss it, is discarded."""
    kernel_id = await new_kernel(jp_fetch, jp_root_dir)
    started, sent = tmp_path / "saving", tmp_path / "sent"
    # the save writes `slow` until the user's cell is sent (and a moment more)
    await run(jp_serverapp, kernel_id, "class Slow:\n    def __reduce__(self):\n"
              "        import os, time\n"
              f"        open({str(started)!r}, 'w').close()\n"
              f"        while not os.path.exists({str(sent)!r}): time.sleep(0.05)\n"
              "        time.sleep(0.5); return (int, ())\n"
              "slow = Slow()\nkept = 1")
    kernel = jp_serverapp.kernel_manager.get_kernel(kernel_id)
    task = asyncio.ensure_future(service(jp_serverapp).hibernate(kernel_id))
    for _ in range(1200):  # the save is writing the snapshot
        if started.exists() or task.done():
            break
        await asyncio.sleep(0.025)
    assert started.exists() and not task.done()
    # a user's cell, sent by another client (as JupyterLab's, through the server) while
    # the save runs: it waits in the kernel's queue
    user = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SEND_CELL, kernel.connection_file,
        "work = 'done after the save'", stdout=asyncio.subprocess.PIPE)
    assert user.stdout is not None
    assert await asyncio.wait_for(user.stdout.readline(), 120) == b"sent\n"
    sent.touch()
    with pytest.raises(HibernateError) as e:
        await task
    out, _ = await user.communicate()
    assert out == b"ok\n", out
    assert e.value.status == 409 and "keeps running" in str(e.value), e.value
    assert "after its variables were saved" in str(e.value) or "still running" in str(e.value)
    assert "done after the save" in await run(jp_serverapp, kernel_id, "print(work)")
    assert (await api(jp_fetch, "snapshots"))["snapshots"] == [] and left_on_disk(tmp_path) == []


async def test_a_save_given_up_at_its_timeout_leaves_nothing_on_disk(
        jp_fetch, jp_root_dir, jp_serverapp, tmp_path):
    """Issue 44: a save that outlived its timeout left a full copy of the variables on disk
    (the kernel finished it later) until a restart. What it wrote is removed when it is
    given up, and the kernel, finishing later, keeps nothing."""
    service(jp_serverapp).settings = Hibernate(
        timeout_seconds=2, max_bytes=10**9).service_settings(90)
    kernel_id = await new_kernel(jp_fetch, jp_root_dir)
    # `big` is written first (names in order), then the save sleeps in `zslow`
    await run(jp_serverapp, kernel_id, SLOW.format(seconds=5) +
              "big = bytes(50_000_000)\nzslow = Slow()\nkept = 42")
    doc = await api(jp_fetch, "kernels", kernel_id, "hibernate", method="POST", expect=409)
    assert "did not finish" in doc["message"], doc
    assert left_on_disk(tmp_path) == []
    assert "42" in await run(jp_serverapp, kernel_id, "print(kept)")  # after the late save
    assert left_on_disk(tmp_path) == []
    assert (await api(jp_fetch, "snapshots"))["snapshots"] == []


async def test_a_restore_says_which_newer_values_it_replaced(jp_fetch, jp_root_dir,
                                                             jp_serverapp):
    """Issue 44: a restore overwrote newer values of the same names without a word."""
    snap = await hibernated(jp_fetch, jp_root_dir, jp_serverapp)
    kernel_id = await new_kernel(jp_fetch, jp_root_dir)
    await run(jp_serverapp, kernel_id, "settings = 'set in the new kernel'\nfresh = 1")
    restored = await api(jp_fetch, "snapshots", snap["id"], "restore", method="POST",
                         body={"kernel_id": kernel_id})
    validate(f"/snapshots/{snap['id']}/restore", 200, restored, method="post")
    assert restored["replaced"] == ["settings"], restored


def _nothing_loaded(out: str) -> None:
    assert "NameError" in out, out


async def test_a_changed_snapshot_is_refused_and_loads_nothing(jp_fetch, jp_root_dir,
                                                               jp_serverapp, tmp_path):
    first = await hibernated(jp_fetch, jp_root_dir, jp_serverapp)
    second = await hibernated(jp_fetch, jp_root_dir, jp_serverapp)
    kernel_id = await new_kernel(jp_fetch, jp_root_dir)
    a, b = folder(tmp_path, first["id"]), folder(tmp_path, second["id"])

    # a value's file altered: the manifest (MACed) no longer matches it; the kernel refuses
    data = sorted(p for p in a.iterdir() if p.name != MANIFEST)[0]
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0xFF
    data.write_bytes(bytes(raw))
    doc = await api(jp_fetch, "snapshots", first["id"], "restore", method="POST",
                    body={"kernel_id": kernel_id}, expect=409)
    assert "nothing was loaded" in doc["message"], doc
    _nothing_loaded(await run(jp_serverapp, kernel_id, "print(settings)"))

    # the manifest edited to match altered files: the MAC does not check
    manifest = json.loads((a / MANIFEST).read_text())
    for entry in manifest["entries"]:
        if entry.get("file") == data.name:
            from jupyter_costguard.kernel.hibernate.digest import ChunkedHash, Scheme

            digest = ChunkedHash(Scheme(manifest["format"], manifest["chunk"]))
            digest.update(raw)
            entry["digest"] = digest.hexdigest()
    (a / MANIFEST).write_text(json.dumps(manifest))
    doc = await api(jp_fetch, "snapshots", first["id"], "restore", method="POST",
                    body={"kernel_id": kernel_id}, expect=409)
    assert "MAC" in doc["message"], doc
    _nothing_loaded(await run(jp_serverapp, kernel_id, "print(settings)"))

    # another snapshot's (genuine) files and manifest swapped in: bound to its own id
    shutil.rmtree(a)
    shutil.copytree(b, a)
    doc = await api(jp_fetch, "snapshots", first["id"], "restore", method="POST",
                    body={"kernel_id": kernel_id}, expect=409)
    assert "MAC" in doc["message"], doc

    # the files gone altogether
    shutil.rmtree(b)
    doc = await api(jp_fetch, "snapshots", second["id"], "restore", method="POST",
                    body={"kernel_id": kernel_id}, expect=409)
    assert "cannot be restored" in doc["message"], doc
    _nothing_loaded(await run(jp_serverapp, kernel_id, "print(settings)"))


async def test_another_notebooks_or_owners_kernel_is_refused(jp_fetch, jp_root_dir,
                                                             jp_serverapp):
    snap = await hibernated(jp_fetch, jp_root_dir, jp_serverapp)
    other = await new_kernel(jp_fetch, jp_root_dir, "work/other.ipynb")
    doc = await api(jp_fetch, "snapshots", snap["id"], "restore", method="POST",
                    body={"kernel_id": other}, expect=409)
    assert NOTEBOOK in doc["message"] and "own notebook" in doc["message"], doc
    _nothing_loaded(await run(jp_serverapp, other, "print(settings)"))

    same = await new_kernel(jp_fetch, jp_root_dir)
    mine = service(jp_serverapp).owner
    service(jp_serverapp).owner = "someone-else"  # as if another user's server read the index
    try:
        # another's snapshot does not exist for this server: 404 as an unknown id, not 403
        doc = await api(jp_fetch, "snapshots", snap["id"], "restore", method="POST",
                        body={"kernel_id": same}, expect=404)
        assert doc["message"] == f"no snapshot {snap['id']}", doc
        _nothing_loaded(await run(jp_serverapp, same, "print(settings)"))
        assert (await api(jp_fetch, "snapshots"))["snapshots"] == []
        doc = await api(jp_fetch, "snapshots", snap["id"], method="DELETE", expect=404)
        assert doc["message"] == f"no snapshot {snap['id']}", doc
    finally:
        service(jp_serverapp).owner = mine
    assert [s["id"] for s in (await api(jp_fetch, "snapshots"))["snapshots"]] == [snap["id"]]


async def test_requests_without_a_token_are_refused(jp_fetch):
    sid = "0" * 32
    for parts, method in ((("kernels", "k", "hibernate"), "POST"), (("snapshots",), "GET"),
                          (("snapshots", sid, "restore"), "POST"),
                          (("snapshots", sid), "DELETE")):
        with pytest.raises(HTTPClientError) as e:
            await jp_fetch("costguard", "api", *parts, method=method,
                           body="{}" if method == "POST" else None,
                           headers={"Authorization": ""})
        assert e.value.code in (401, 403), parts


@pytest.mark.parametrize(("raw", "needle"), [
    ("", "kernel_id"),
    ("not json", "JSON"),
    ("[]", "kernel_id"),
    ('{"kernel_id": 5}', "kernel_id must be a string"),
    ('{"kernel_id": ""}', "kernel_id must not be empty"),
    ('{"kernel_id": "k", "extra": 1}', "unknown field"),
    ('{"kernel_id": ' + "[" * 100 + "]" * 100 + "}", "32 levels"),
    ('{"kernel_id": "k\\u0000"}', "NUL"),
])
async def test_a_bad_restore_body_is_a_400(jp_fetch, raw, needle):
    doc = await api(jp_fetch, "snapshots", "0" * 32, "restore", method="POST", raw=raw,
                    expect=400)
    assert needle in doc["message"], doc
    validate(f"/snapshots/{'0' * 32}/restore", 400, doc, method="post")


async def test_unknown_kernels_and_snapshots_are_404(jp_fetch, jp_root_dir):
    doc = await api(jp_fetch, "kernels", "no-such-kernel", "hibernate", method="POST",
                    expect=404)
    assert "no-such-kernel" in doc["message"]
    kernel_id = await new_kernel(jp_fetch, jp_root_dir)
    for sid in ("0" * 32, "not-an-id"):
        await api(jp_fetch, "snapshots", sid, "restore", method="POST",
                  body={"kernel_id": kernel_id}, expect=404)
        await api(jp_fetch, "snapshots", sid, method="DELETE", expect=404)
    await api(jp_fetch, "kernels", kernel_id, "hibernate", method="POST", raw='{"x": 1}',
              expect=400)
    await api(jp_fetch, "snapshots", params={"bogus": "1"}, expect=400)


async def test_a_kernel_without_a_notebook_is_not_hibernated(jp_fetch):
    kernel = json.loads((await jp_fetch("api", "kernels", method="POST",
                                        body=json.dumps({"name": "python3"}))).body)
    doc = await api(jp_fetch, "kernels", kernel["id"], "hibernate", method="POST",
                    expect=409)
    assert "no notebook session" in doc["message"]
    await jp_fetch("api", "kernels", kernel["id"])  # still running


async def test_one_hibernate_at_a_time_per_kernel(jp_fetch, jp_root_dir, jp_serverapp):
    kernel_id = await new_kernel(jp_fetch, jp_root_dir)
    await run(jp_serverapp, kernel_id, SETUP)

    async def status() -> tuple[int, str]:
        try:
            resp = await jp_fetch("costguard", "api", "kernels", kernel_id, "hibernate",
                                  method="POST", body="")
            return resp.code, ""
        except HTTPClientError as e:
            return e.code, json.loads(e.response.body)["message"]

    answers = sorted(await asyncio.gather(status(), status()))
    assert [code for code, _ in answers] == [200, 409], answers
    assert "already being hibernated" in answers[1][1]
    assert len((await api(jp_fetch, "snapshots"))["snapshots"]) == 1


async def test_a_save_past_the_timeout_is_refused_and_the_kernel_keeps_running(
        jp_fetch, jp_root_dir, jp_serverapp):
    service(jp_serverapp).settings = Hibernate(
        timeout_seconds=1, max_bytes=10**9).service_settings(90)
    kernel_id = await new_kernel(jp_fetch, jp_root_dir)
    await run(jp_serverapp, kernel_id, "class Slow:\n    def __reduce__(self):\n"
                                       "        import time; time.sleep(4); return (int, ())\n"
                                       "slow = Slow()\nkept = 42")
    doc = await api(jp_fetch, "kernels", kernel_id, "hibernate", method="POST", expect=409)
    assert "did not finish" in doc["message"] and "keeps running" in doc["message"], doc
    assert "42" in await run(jp_serverapp, kernel_id, "print(kept)")  # after the late save
    assert (await api(jp_fetch, "snapshots"))["snapshots"] == []


async def test_the_stop_budget_is_held_and_what_is_not_done_keeps_running(
        jp_fetch, jp_root_dir, jp_serverapp):
    """`hibernate_on_stop` gives up on a kernel not saved within its budget (the server then
    shuts it down as before) and says so; one that is done is hibernated."""
    quick = await new_kernel(jp_fetch, jp_root_dir)
    slow = await new_kernel(jp_fetch, jp_root_dir, "work/slow.ipynb")
    await run(jp_serverapp, quick, "kept = 1")
    await run(jp_serverapp, slow, "class Slow:\n    def __reduce__(self):\n"
                                  "        import time; time.sleep(120); return (int, ())\n"
                                  "slow = Slow()")
    outcome = await service(jp_serverapp).hibernate_on_stop([quick, slow], 15.0)
    assert outcome[slow].startswith("not hibernated: not done within 15 s"), outcome
    listed = (await api(jp_fetch, "snapshots"))["snapshots"]
    assert [s["id"] for s in listed] == [outcome[quick]]
    await jp_fetch("api", "kernels", slow)  # still running; the server's own stop ends it


async def test_a_busy_kernel_is_not_hibernated(jp_fetch, jp_root_dir, jp_serverapp):
    kernel_id = await new_kernel(jp_fetch, jp_root_dir)
    client = jp_serverapp.kernel_manager.get_kernel(kernel_id).client()
    client.start_channels(hb=False)
    try:
        await client.wait_for_ready(timeout=60)
        client.execute("import time; time.sleep(60)")
        for _ in range(200):
            state = json.loads((await jp_fetch("api", "kernels", kernel_id)).body)
            if state["execution_state"] == "busy":
                break
            await asyncio.sleep(0.05)
        doc = await api(jp_fetch, "kernels", kernel_id, "hibernate", method="POST",
                        expect=409)
        assert "busy running a cell" in doc["message"], doc
    finally:
        client.stop_channels()
        await jp_fetch("api", "kernels", kernel_id, "interrupt", method="POST", body="")
    assert (await api(jp_fetch, "snapshots"))["snapshots"] == []


async def _busy(jp_fetch: Any, client: Any, kernel_id: str, seconds: float) -> None:
    """Run `time.sleep(seconds)` in the kernel and return once the server calls it busy."""
    client.execute(f"import time; time.sleep({seconds})")
    for _ in range(400):
        state = json.loads((await jp_fetch("api", "kernels", kernel_id)).body)
        if state["execution_state"] == "busy":
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"kernel {kernel_id} never became busy")


async def test_a_restore_waits_a_moment_for_a_busy_kernel(jp_fetch, jp_root_dir, jp_serverapp):
    """A kernel JupyterLab has just started is busy a moment with the page's own requests: the
    restore waits for it (up to `restore_wait_seconds`) rather than answering 409 at once;
    past that it answers 409, saying how long it waited."""
    snap = await hibernated(jp_fetch, jp_root_dir, jp_serverapp)
    kernel_id = await new_kernel(jp_fetch, jp_root_dir)
    svc = service(jp_serverapp)
    client = jp_serverapp.kernel_manager.get_kernel(kernel_id).client()
    client.start_channels(hb=False)
    try:
        await client.wait_for_ready(timeout=60)
        svc.settings = dataclasses.replace(svc.settings, restore_wait_seconds=0.5)
        await _busy(jp_fetch, client, kernel_id, 60)
        doc = await api(jp_fetch, "snapshots", snap["id"], "restore", method="POST",
                        body={"kernel_id": kernel_id}, expect=409)
        assert "busy running a cell (waited 0.5 s" in doc["message"], doc
        await jp_fetch("api", "kernels", kernel_id, "interrupt", method="POST", body="")

        svc.settings = dataclasses.replace(svc.settings, restore_wait_seconds=30)
        await _busy(jp_fetch, client, kernel_id, 1.5)
        restored = await api(jp_fetch, "snapshots", snap["id"], "restore", method="POST",
                             body={"kernel_id": kernel_id})
        assert set(restored["restored"]) == set(snap["saved"])
    finally:
        client.stop_channels()
    assert "100000" in await run(jp_serverapp, kernel_id, "print(len(items))")


async def test_a_missing_module_is_named_with_the_variables_that_need_it(
        jp_fetch, jp_root_dir, jp_serverapp):
    helper = jp_root_dir / "work" / "helpers.py"
    helper.parent.mkdir(parents=True, exist_ok=True)
    helper.write_text("class Thing:\n    def __init__(self, n):\n        self.n = n\n")
    kernel_id = await new_kernel(jp_fetch, jp_root_dir)
    out = await run(jp_serverapp, kernel_id, "from helpers import Thing\nthing = Thing(3)\n"
                                             "plain = [1, 2]\nprint('ok')")
    assert "ok" in out, out
    snap = await api(jp_fetch, "kernels", kernel_id, "hibernate", method="POST")
    helper.unlink()
    fresh = await new_kernel(jp_fetch, jp_root_dir)
    restored = await api(jp_fetch, "snapshots", snap["id"], "restore", method="POST",
                         body={"kernel_id": fresh})
    assert "plain" in restored["restored"] and "thing" not in restored["restored"]
    skipped = {s["name"]: s for s in restored["skipped"]}
    assert skipped["Thing"]["module"] == "helpers", skipped  # the class, imported from it
    assert "not installed" in skipped["Thing"]["reason"]
    assert "Thing" in skipped["thing"]["reason"], skipped  # and the instance of it
    assert "[1, 2]" in await run(jp_serverapp, fresh, "print(plain)")


async def test_rest_and_metrics_show_the_same_waste_removed_by_the_one_rule(
        jp_fetch: Any, jp_serverapp: Any) -> None:
    """`GET snapshots` and `/metrics` say the same waste removed, by the rule: one snapshot
    restored after 10 minutes counts 10 minutes, one abandoned two days ago counts the 12 h
    horizon, not two days (before the horizon it counted for ever), one an hour old counts
    its hour."""
    import time

    from jupyter_costguard.hibernate.store import SnapshotRecord, new_id

    svc = service(jp_serverapp)
    now = time.time()

    def record(created: float, restored: float | None = None) -> SnapshotRecord:
        return SnapshotRecord(id=new_id(), notebook=NOTEBOOK, created=created, bytes=1,
                              saved=["x"], skipped=[], kernel_name="python3", user=svc.owner,
                              gpus_held=1, digest="d", mac="m", rate_per_hour_held=3.6,
                              restored=restored)

    for r in (record(now - 86400, now - 86400 + 600), record(now - 2 * 86400),
              record(now - 3600)):
        svc.store.add(r)
    svc._records = svc.store.list()  # the index as the service last read it
    listed = await api(jp_fetch, "snapshots")
    validate("/snapshots", 200, listed)
    rule = 0.6 + 12 * 3.6 + 3.6  # 10 min, the horizon, the hour (3.6 an hour)
    assert listed["waste_avoided"] == pytest.approx(rule, abs=0.02)
    assert listed["waste_avoided"] == pytest.approx(
        sum(s["waste_avoided"] for s in listed["snapshots"]), abs=1e-5)
    metrics = (await jp_fetch("metrics")).body.decode()
    (line,) = [m for m in metrics.splitlines()
               if m.startswith("costguard_hibernate_waste_avoided{")]
    # the hour-old one grew between the two reads by at most a few seconds' worth
    assert float(line.rsplit(" ", 1)[1]) == pytest.approx(listed["waste_avoided"], abs=0.01)
    # named by Prometheus's conventions (promtool's checks)
    from tests.support.exposition import promtool_complaints

    ours = "".join(m + "\n" for m in metrics.splitlines()
                   if "costguard_hibernate_waste_avoided" in m)
    complaints = promtool_complaints(ours)
    assert complaints == "", f"{complaints}\n{ours}"

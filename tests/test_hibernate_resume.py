"""Resume on use through a real server with real kernels (issue 44 item 2): the next kernel a
hibernated notebook gets starts with its variables, restored by the server before any cell
runs (a cell sent at once waits behind the restore; while it loads the snapshot says
`restoring`); a restore that fails makes the first cell say why instead of running in the
empty kernel."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.session import Session

from jupyter_costguard.kernel.hibernate.records import MANIFEST
from tests.support.gated import GATED
from tests.support.openapi_check import validate
from tests.support.rest import start_session
from tests.test_hibernate_api import (
    CHECK,
    NOTEBOOK,
    SETUP,
    api,
    folder,
    hibernated,
    new_kernel,
    run,
    service,
)

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def costguard_config(costguard_config: dict[str, Any], request: Any) -> dict[str, Any]:
    """The suite's, with what a test asks for (`indirect` parameters)."""
    return {**costguard_config, **getattr(request, "param", {})}


async def cell(serverapp: Any, kernel_id: str, source: str, before_reply: Any = None,
               managers: bool = False) -> str:
    """`source` run in the kernel; its stdout and errors. With `before_reply`, it is sent at
    once (no kernel_info first, which would queue behind a restore too) and `before_reply()`
    is awaited after sending. A session of its own, as each browser tab has, or (`managers`)
    the kernel manager's, as the server's other clients of the kernel use."""
    kernel = serverapp.kernel_manager.get_kernel(kernel_id)
    client = kernel.client() if managers else kernel.client(
        session=Session(key=kernel.session.key,
                        signature_scheme=kernel.session.signature_scheme))
    client.start_channels()
    out: list[str] = []
    try:
        if before_reply is None:  # and the kernel's output is not missed
            await client.wait_for_ready(timeout=60)
        msg_id = client.execute(source)
        if before_reply is not None:
            await before_reply()
        while True:
            msg = await client.get_iopub_msg(timeout=120)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "error":
                out.append(f"{content['ename']}: {content['evalue']}")
            elif kind == "status" and content["execution_state"] == "idle":
                break
    finally:
        client.stop_channels()
    return "".join(out)


async def snapshot_doc(jp_fetch: Any, snapshot_id: str) -> dict[str, Any]:
    listed = await api(jp_fetch, "snapshots", params={"notebook": NOTEBOOK})
    validate("/snapshots", 200, listed)
    return next(s for s in listed["snapshots"] if s["id"] == snapshot_id)


async def test_the_next_kernel_of_a_hibernated_notebook_runs_the_next_cell_with_its_variables(
        jp_fetch, jp_root_dir, jp_serverapp, tmp_path):
    gate = tmp_path / "gate"
    kernel_id = await new_kernel(jp_fetch, jp_root_dir)
    assert "Error" not in await run(jp_serverapp, kernel_id,
                                    SETUP + GATED.format(gate=str(gate)))
    snap = await api(jp_fetch, "kernels", kernel_id, "hibernate", method="POST")
    assert "gated" in snap["saved"]
    doc = await snapshot_doc(jp_fetch, snap["id"])
    assert doc["restoring"] is None and doc["restore_error"] is None and doc["restored"] is None

    # the notebook's next kernel: the session's answer comes once the restore has begun
    session = await start_session(jp_fetch, NOTEBOOK)
    fresh = session["kernel"]["id"]
    assert fresh != kernel_id

    async def while_restoring() -> None:
        doc = await snapshot_doc(jp_fetch, snap["id"])  # the restore waits for the gate
        assert doc["restoring"]["kernel_id"] == fresh, doc
        assert doc["restoring"]["variables"] == len(snap["saved"])
        assert doc["restoring"]["bytes"] == snap["bytes"] and doc["restored"] is None
        gate.touch()

    # a cell sent right away runs after the restore, with the variables; sent as the server's
    # other clients of a kernel send (an offload's look at its variables), it does not take
    # the restore's replies either
    out = await cell(jp_serverapp, fresh, CHECK + "; print('gated', gated)", while_restoring,
                     managers=True)
    assert "NameError" not in out, out
    values, gated = out.strip().splitlines()
    assert json.loads(values) == {"settings": {"lr": 0.1, "layers": [64, 32]}, "score": 8,
                                  "model": ["Model", 5.0], "n": 100_000, "last": 99_999}
    assert gated == "gated 42"
    for _ in range(200):  # the server records it a moment after the kernel's reply
        doc = await snapshot_doc(jp_fetch, snap["id"])
        if doc["restored"] is not None:
            break
        await asyncio.sleep(0.05)
    assert doc["restored"] is not None and doc["restoring"] is None, doc
    assert doc["restore_error"] is None

    # restored once: the notebook's kernel after that starts empty (the snapshot is kept, for
    # the banner's Discard), and a kernel of another notebook is never restored into
    await jp_fetch("api", "sessions", session["id"], method="DELETE")
    again = await new_kernel(jp_fetch, jp_root_dir)
    assert again != fresh
    assert "NameError" in await cell(jp_serverapp, again, "print(settings)")
    other = await new_kernel(jp_fetch, jp_root_dir, "work/other.ipynb")
    assert "NameError" in await cell(jp_serverapp, other, "print(settings)")
    assert [s["id"] for s in (await api(jp_fetch, "snapshots"))["snapshots"]] == [snap["id"]]


def _alter_a_value(where: Path) -> None:
    """A value's file changed: the kernel's check against the MACed manifest refuses it."""
    data = sorted(p for p in where.iterdir() if p.name != MANIFEST)[0]
    raw = bytearray(data.read_bytes())
    raw[-1] ^= 0xFF
    data.write_bytes(bytes(raw))


def _alter_the_manifest(where: Path) -> None:
    """The manifest changed: the server's MAC check refuses it before the kernel loads."""
    manifest = json.loads((where / MANIFEST).read_text())
    manifest["created"] += 1
    (where / MANIFEST).write_text(json.dumps(manifest))


@pytest.mark.parametrize(("tamper", "why"), [(_alter_a_value, "nothing was loaded"),
                                             (_alter_the_manifest, "MAC")])
async def test_a_restore_that_fails_says_why_before_the_first_cell_runs(
        jp_fetch, jp_root_dir, jp_serverapp, tmp_path, tamper, why):
    snap = await hibernated(jp_fetch, jp_root_dir, jp_serverapp)
    tamper(folder(tmp_path, snap["id"]))

    session = await start_session(jp_fetch, NOTEBOOK)
    fresh = session["kernel"]["id"]
    out = await cell(jp_serverapp, fresh, "marker = 1\nprint(settings)")
    assert "NameError" not in out, out  # it did not run against the empty namespace
    assert out.startswith("RuntimeError: costguard: the variables of work/model.ipynb were "
                          f"not restored: snapshot {snap['id']}"), out
    assert why in out and "This cell did not run" in out, out
    doc = await snapshot_doc(jp_fetch, snap["id"])
    assert why in doc["restore_error"] and doc["restored"] is None, doc
    assert doc["restoring"] is None

    # said once: the next cell runs (in the empty kernel), and the first did not run at all
    assert "NameError: name 'marker'" in await cell(jp_serverapp, fresh, "print(marker)")
    assert "ok" in await cell(jp_serverapp, fresh, "print('ok')")
    # the server's own silent calls are not what the error stops: hibernate still works
    assert "hello" in await run(jp_serverapp, fresh, "hello = 'hello'; print(hello)")
    await api(jp_fetch, "kernels", fresh, "hibernate", method="POST")


@pytest.mark.parametrize("costguard_config", [{"Hibernate.resume": False}], indirect=True)
async def test_resume_on_use_can_be_turned_off(jp_fetch, jp_root_dir, jp_serverapp):
    assert service(jp_serverapp) is not None
    await hibernated(jp_fetch, jp_root_dir, jp_serverapp)
    fresh = await new_kernel(jp_fetch, jp_root_dir)
    assert "NameError" in await cell(jp_serverapp, fresh, "print(settings)")


async def test_a_session_started_as_jupyterlab_starts_one_is_restored_when_named(
        jp_fetch, jp_root_dir, jp_serverapp):
    """JupyterLab and Notebook 7 start a session under a random placeholder path in the
    notebook's folder, then PATCH the notebook's path before they send a cell: the restore
    begins before that PATCH answers."""
    snap = await hibernated(jp_fetch, jp_root_dir, jp_serverapp)
    body = json.dumps({"path": f"work/{uuid.uuid4()}", "type": "notebook",
                       "name": "model.ipynb", "kernel": {"name": "python3"}})
    session = json.loads((await jp_fetch("api", "sessions", method="POST", body=body)).body)
    fresh = session["kernel"]["id"]
    assert (await snapshot_doc(jp_fetch, snap["id"]))["restoring"] is None  # no notebook yet
    await jp_fetch("api", "sessions", session["id"], method="PATCH",
                   body=json.dumps({"path": NOTEBOOK}))
    values = json.loads(await cell(jp_serverapp, fresh, CHECK))
    assert values["settings"] == {"lr": 0.1, "layers": [64, 32]} and values["n"] == 100_000


async def test_a_restore_by_hand_after_a_failed_one_lets_the_first_cell_run(
        jp_fetch, jp_root_dir, jp_serverapp, tmp_path):
    """The banner still offers Restore after the server's restore failed: once that has
    brought the variables back, the first cell runs with them, unwarned."""
    older = await hibernated(jp_fetch, jp_root_dir, jp_serverapp)
    second = (await start_session(jp_fetch, NOTEBOOK))["kernel"]["id"]  # gets `older`
    for _ in range(200):
        if (await snapshot_doc(jp_fetch, older["id"]))["restored"] is not None:
            break
        await asyncio.sleep(0.05)
    newer = await api(jp_fetch, "kernels", second, "hibernate", method="POST")
    assert set(newer["saved"]) == set(older["saved"])
    _alter_the_manifest(folder(tmp_path, newer["id"]))
    fresh = (await start_session(jp_fetch, NOTEBOOK))["kernel"]["id"]
    assert "MAC" in (await snapshot_doc(jp_fetch, newer["id"]))["restore_error"]
    restored = await api(jp_fetch, "snapshots", older["id"], "restore", method="POST",
                         body={"kernel_id": fresh})
    assert "settings" in restored["restored"]
    out = await cell(jp_serverapp, fresh, CHECK)
    assert json.loads(out)["settings"] == {"lr": 0.1, "layers": [64, 32]}, out
    # discarded, the failed one's reason goes with it
    await api(jp_fetch, "snapshots", newer["id"], method="DELETE", expect=204)
    assert newer["id"] not in service(jp_serverapp).resuming

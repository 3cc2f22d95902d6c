"""Hibernate, kernel side (issue 37 items 1 and 6): a namespace saved in one real kernel comes
back in a new one; what cannot be saved is named; a damaged snapshot loads nothing; a missing
module is named with the variables that need it; the size cap and free-space check leave
nothing behind."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import stat
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.kernel.hibernate import (
    LEAVE_ANY,
    LEAVE_LIVE,
    LEAVE_NOTHING,
    CorruptSnapshot,
    NotEnoughSpace,
    SnapshotError,
    SnapshotTooLarge,
    Unsaved,
    canonical_bytes,
    manifest_digest,
    parse_reply,
    read_manifest,
    restore,
    restore_code,
    save,
    save_code,
)
from jupyter_costguard.kernel.hibernate import snapshot as snapshot_module

ROOT = Path(__file__).resolve().parents[1]
GB = 10**9
#: the names of the hibernate threads still alive, as a kernel expression
_HASH_THREADS = ("[t.name for t in __import__('threading').enumerate() "
                 "if t.name.startswith('costguard-hibernate')]")


class Kernel:
    """A real python3 kernel started with this checkout on its path."""

    def __init__(self, runtime: Path) -> None:
        from jupyter_client.manager import KernelManager

        kernel_id = str(uuid.uuid4())
        self.km = KernelManager(kernel_name="python3",
                                connection_file=str(runtime / f"kernel-{kernel_id}.json"))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        self.km.start_kernel(kernel_id=kernel_id, env=env, cwd=str(runtime))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=60)

    def run(self, code: str, timeout: float = 120) -> str:
        """Run `code`; its stdout (after checking it ran without error)."""
        out: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream" and msg["content"]["name"] == "stdout":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                out.append("\n".join(msg["content"]["traceback"]))

        reply = self.kc.execute_interactive(code, output_hook=hook, timeout=timeout,
                                            allow_stdin=False)
        assert reply["content"]["status"] == "ok", "".join(out)
        return "".join(out)

    def reply(self, code: str) -> dict[str, Any]:
        """The hibernate answer of a `save_code`/`restore_code` cell."""
        out = self.run(code)
        doc = parse_reply(out)
        assert doc is not None, out
        return doc

    def value(self, expression: str) -> Any:
        return json.loads(self.run(f"import json as _j; print(_j.dumps({expression}))"))

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=True)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Kernel, Kernel]]:
    """Kernel A (the notebook before hibernating) and B (the new kernel it comes back in),
    shared by the module's kernel tests: each test uses names of its own."""
    a = Kernel(tmp_path_factory.mktemp("kernel-a"))
    try:
        b = Kernel(tmp_path_factory.mktemp("kernel-b"))
        try:
            yield a, b
        finally:
            b.close()
    finally:
        a.close()


NOTEBOOK = """
import numpy as np
import pandas as pd
import os.path as osp
settings = {"lr": 0.1, "layers": [64, 32], "name": "run-7"}
def score(x):
    return x * scale + len(settings)
scale = 3
class Model:
    def __init__(self, w):
        self.w = w
    def predict(self, x):
        return self.w * x
    def clone(self):
        return Model(self.w)
model = Model(2.5)
square = lambda x: x * x
items = list(range(100_000))
weights = np.arange(12, dtype=np.float32).reshape(3, 4)
frame = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]}, index=[10, 20, 30])
same = {"weights": weights, "model": model}
squares = (i * i for i in range(10))
handle = open(osp.join(osp.dirname(osp.abspath(np.__file__)), "__init__.py"))
"""


def test_a_namespace_comes_back_in_a_new_kernel(kernels: tuple[Kernel, Kernel],
                                                tmp_path: Path):
    a, b = kernels
    a.run(NOTEBOOK)
    dest = tmp_path / "state" / "snap-1"
    before = a.value("[len(Out), sorted(k for k in globals() if not k.startswith('_'))]")
    saved = a.reply(save_code(dest, GB))
    # the server's cell binds no name and leaves nothing in Out
    assert a.value("[len(Out), sorted(k for k in globals() if not k.startswith('_'))]") == before
    # nor a thread: the hashing threads end with the save
    assert a.value(_HASH_THREADS) == []
    assert "error" not in saved, saved
    assert {"settings", "score", "scale", "Model", "model", "square", "items", "weights",
            "frame", "np", "pd", "osp", "same"} <= set(saved["saved"])
    # IPython's own names are neither saved nor listed
    for own in ("In", "Out", "get_ipython", "exit", "quit", "_", "_i1", "_oh", "_dh"):
        assert own not in saved["saved"]
    skipped = {s["name"]: s["reason"] for s in saved["skipped"]}
    assert set(skipped) == {"squares", "handle"}, skipped
    assert skipped["squares"].startswith("a generator")
    assert skipped["handle"].startswith("an open file") and "__init__.py" in skipped["handle"]
    kinds = {e["name"]: e["kind"] for e in saved["entries"]}
    assert kinds["weights"] == "numpy" and kinds["frame"] == "pandas"
    assert kinds["np"] == kinds["osp"] == "module" and kinds["model"] == "pickle"
    assert saved["bytes"] == sum(e["bytes"] for e in saved["entries"]) > 300_000
    assert {"numpy", "pandas", "cloudpickle"} <= set(saved["modules"])

    # private: the folder 0700, every file 0600; no temporary folder left beside it
    assert stat.S_IMODE(dest.stat().st_mode) == 0o700
    files = sorted(p.name for p in dest.iterdir())
    assert "manifest.json" in files and len(files) > 5
    for p in dest.iterdir():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
    assert [p.name for p in dest.parent.iterdir()] == ["snap-1"]

    digest = manifest_digest(read_manifest(dest))
    back = b.reply(restore_code(dest, digest))
    assert "error" not in back, back
    assert set(back["restored"]) == set(saved["saved"])
    assert {s["name"] for s in back["skipped"]} == {"squares", "handle"}

    assert b.value("settings") == {"lr": 0.1, "layers": [64, 32], "name": "run-7"}
    assert b.value("[score(2), square(7), len(items), items[-1], items[:3]]") == [
        9, 49, 100_000, 99_999, [0, 1, 2]]
    # the instance's class is the restored class, and its methods work
    assert b.value("[model.predict(2), isinstance(model, Model), "
                   "type(model.clone()) is Model, Model.__module__]") == [
        5.0, True, True, "__main__"]
    assert b.value("[str(weights.dtype), weights.shape, float(weights.sum())]") == [
        "float32", [3, 4], 66.0]
    assert b.value("[frame.index.tolist(), frame['b'].tolist(), str(frame['a'].dtype)]") == [
        [10, 20, 30], ["x", "y", "z"], "int64"]
    assert b.value("[np.ones(3).sum(), osp.join('a', 'b'), pd.__name__]") == [
        3.0, "a/b", "pandas"]
    # one object stays one object; a notebook function reads the notebook's globals
    assert b.value("[same['weights'] is weights, same['model'] is model]") == [True, True]
    b.run("scale = 10")
    assert b.value("score(2)") == 23
    assert b.value("[type(__builtins__).__name__, 'squares' in globals()]") == [
        "module", False]


def test_a_truncated_or_altered_snapshot_loads_nothing(kernels: tuple[Kernel, Kernel],
                                                       tmp_path: Path):
    a, b = kernels
    a.run("only_in_damaged = [1, 2, 3]\nsecond_in_damaged = {'k': 'v'}")
    dest = tmp_path / "snap"
    assert "error" not in a.reply(save_code(dest, GB))
    manifest = read_manifest(dest)
    entry = next(e for e in manifest.entries if e.name == "second_in_damaged")
    path = dest / str(entry.file)
    data = path.read_bytes()
    path.write_bytes(data[:-5])

    back = b.reply(restore_code(dest))
    assert back["error_type"] == "CorruptSnapshot", back
    assert entry.file in back["error"] and "second_in_damaged" in back["error"]
    assert "nothing was loaded" in back["error"]
    assert b.value("['only_in_damaged' in globals(), 'second_in_damaged' in globals()]") == [
        False, False]

    # the same size, one byte changed: refused too
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    assert b.reply(restore_code(dest))["error_type"] == "CorruptSnapshot"
    assert b.value("'only_in_damaged' in globals()") is False


def test_a_missing_module_names_the_variables_that_need_it(kernels: tuple[Kernel, Kernel],
                                                           tmp_path: Path):
    a, b = kernels
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "hib_only_in_a.py").write_text(
        "class Thing:\n    def __init__(self, n):\n        self.n = n\n")
    a.run(f"import sys; sys.path.insert(0, {str(lib)!r})\n"
          "import hib_only_in_a as only_a\n"
          "thing = only_a.Thing(5)\n"
          "thing_box = [thing]\n"
          "kept_beside_thing = 'still here'\n"
          f"sys.path.remove({str(lib)!r})")
    dest = tmp_path / "snap"
    assert "error" not in a.reply(save_code(dest, GB))

    back = b.reply(restore_code(dest))
    assert "error" not in back, back
    failed = {s["name"]: s for s in back["skipped"] if s["module"]}
    assert set(failed) == {"thing", "only_a"}, back["skipped"]
    for s in failed.values():
        assert s["module"] == "hib_only_in_a" and "hib_only_in_a" in s["reason"]
        assert "not installed here" in s["reason"]
    # a value holding the missing one refers to it by name: named too, with the reason
    box = next(s for s in back["skipped"] if s["name"] == "thing_box")
    assert box["reason"] == "refers to thing, which did not come back"
    assert "kept_beside_thing" in back["restored"]
    assert b.value("[kept_beside_thing, 'thing' in globals()]") == ["still here", False]


def test_over_the_cap_is_refused_and_leaves_nothing(kernels: tuple[Kernel, Kernel],
                                                    tmp_path: Path):
    a, _ = kernels
    a.run("import numpy as np\nbig_for_cap = np.zeros(1_000_000)")
    dest = tmp_path / "state" / "snap"
    dest.parent.mkdir()
    answer = a.reply(save_code(dest, 1_000_000))
    assert answer["error_type"] == "SnapshotTooLarge", answer
    assert "big_for_cap" in answer["error"]
    assert answer["largest"][0]["name"] == "big_for_cap"
    assert not dest.exists() and list(dest.parent.iterdir()) == []
    assert a.value("big_for_cap.shape") == [1_000_000]  # the kernel keeps its work


# --- in this process: the cases that need no second kernel ------------------------------


def _namespace(**values: Any) -> dict[str, Any]:
    return {"__name__": "__main__", **values}


def test_the_cap_is_held_while_streaming_and_nothing_is_left(tmp_path: Path):
    # the cheap estimate looks one level deep: the write itself stops at the cap
    ns = _namespace(small=1, texts=[{"t": "x" * 10_000} for _ in range(100)])
    with pytest.raises(SnapshotTooLarge) as info:
        save(ns, tmp_path / "snap", 100_000)
    assert "texts (over" in str(info.value) and info.value.largest[0][0] == "texts"
    assert list(tmp_path.iterdir()) == []


def test_a_save_that_fails_midway_leaves_no_partial_folder(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch):
    from jupyter_costguard.kernel.hibernate import partial_folders
    from jupyter_costguard.kernel.hibernate import sink as sink_module

    seen: list[list[Path]] = []

    def disk_full(self: Any, data: Any) -> int:
        seen.append(partial_folders(tmp_path))
        raise sink_module.WriteFailed(OSError(28, "No space left on device"))

    monkeypatch.setattr(sink_module.Sink, "write", disk_full)
    with pytest.raises(NotEnoughSpace, match="filled up"):
        save(_namespace(x=[1, 2, 3]), tmp_path / "snap", GB)
    assert len(seen[0]) == 1 and seen[0][0].name.startswith(".snap.")  # it was there
    assert list(tmp_path.iterdir()) == [] and partial_folders(tmp_path) == []


def test_too_little_free_space_is_refused_before_writing(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch):
    np = pytest.importorskip("numpy")
    real = snapshot_module.shutil.disk_usage

    def nearly_full(path: Any) -> Any:
        usage = real(path)
        return type(usage)(usage.total, usage.total - 1000, 1000)

    monkeypatch.setattr(snapshot_module.shutil, "disk_usage", nearly_full)
    with pytest.raises(NotEnoughSpace, match="not enough free space"):
        save(_namespace(a=np.zeros(1000)), tmp_path / "snap", GB)
    assert list(tmp_path.iterdir()) == []


def test_live_resources_and_unpicklable_values_are_named_with_reasons(tmp_path: Path):
    sock = socket.socket()
    db = sqlite3.connect(":memory:")
    worker = threading.Thread(target=lambda: None)
    try:
        ns = _namespace(sock=sock, db=db, lock=threading.Lock(), worker=worker,
                        holds_lock={"lock": threading.RLock()}, fine=[1, 2])
        manifest = save(ns, tmp_path / "snap", GB)
    finally:
        sock.close()
        db.close()
    reasons = {s.name: s.reason for s in manifest.skipped}
    assert manifest.saved == ["fine"]
    assert reasons["sock"].startswith("a socket")
    assert reasons["db"].startswith("a database connection")
    assert reasons["lock"].startswith("a lock") and reasons["worker"].startswith("a thread")
    # a live resource found inside a value is named as what it is
    assert reasons["holds_lock"].startswith("holds a lock"), reasons
    # the failed value's file was removed: only the saved ones and the manifest remain
    assert sorted(p.name for p in (tmp_path / "snap").iterdir()) == [
        manifest.entries[0].file, "manifest.json"]


class _Refuses:
    """A value whose pickling fails unexpectedly (its `__reduce__` raises)."""

    def __reduce__(self) -> Any:
        raise ValueError("cannot reduce this one")


def _too_deep() -> list[Any]:
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    return deep


@pytest.mark.parametrize("leave", [LEAVE_LIVE, LEAVE_NOTHING])
@pytest.mark.parametrize("value, why", [(_Refuses(), "ValueError: cannot reduce this one"),
                                        (_too_deep(), "PicklingError: .*excessively deep")])
def test_an_unexpected_failure_to_save_a_value_fails_the_save(tmp_path: Path, leave: str,
                                                              value: Any, why: str):
    """Only what cannot live outside the process may be left behind: a value that fails to
    pickle for any other reason (its __reduce__ raises, it is too deep) fails the save,
    naming it, and leaves nothing on disk. Issue 44: it was skipped and the kernel shut down
    anyway."""
    ns = _namespace(model=value, fine=[1, 2])
    with pytest.raises(Unsaved, match=f"model \\(cannot be pickled: {why}") as e:
        save(ns, tmp_path / "snap", GB, leave=leave)
    assert [b.name for b in e.value.blocking] == ["model"]
    assert list(tmp_path.iterdir()) == []
    # the server stopping (the kernel ends anyway) keeps what can be kept
    manifest = save(ns, tmp_path / "snap", GB, leave=LEAVE_ANY)
    assert manifest.saved == ["fine"] and [s.name for s in manifest.skipped] == ["model"]


def test_an_automatic_save_leaves_nothing_behind_or_fails_naming_each(tmp_path: Path):
    """`LEAVE_NOTHING` (an automatic hibernation): a generator, an open file or a value that
    holds a lock fails the save before anything is written, naming every one of them."""
    with open(__file__) as handle:
        ns = _namespace(gen=(i for i in range(3)), handle=handle, fine=[1, 2])
        with pytest.raises(Unsaved) as e:
            save(ns, tmp_path / "snap", GB, leave=LEAVE_NOTHING)
    assert {b.name for b in e.value.blocking} == {"gen", "handle"}
    assert "every variable must be saved" in str(e.value) and "gen (a generator" in str(e.value)
    assert "A hand-made Hibernate leaves such values behind" in str(e.value)
    assert list(tmp_path.iterdir()) == []
    inside = _namespace(box={"lock": threading.Lock()}, fine=1)
    with pytest.raises(Unsaved, match=r"box \(holds a lock"):
        save(inside, tmp_path / "snap", GB, leave=LEAVE_NOTHING)
    assert list(tmp_path.iterdir()) == []
    # the user asked (`LEAVE_LIVE`): those may stay behind, named
    manifest = save(inside, tmp_path / "snap", GB, leave=LEAVE_LIVE)
    assert manifest.saved == ["fine"] and [s.name for s in manifest.skipped] == ["box"]


def test_a_save_the_server_gave_up_on_keeps_nothing(tmp_path: Path):
    """The server marks a save it stopped waiting for; a kernel that finishes it later keeps
    nothing (issue 44: it stayed on disk until a restart)."""
    marker = tmp_path / ".abandoned"
    marker.touch()
    with pytest.raises(SnapshotError, match="gave up"):
        save(_namespace(x=[1]), tmp_path / "snap", GB, abandoned=marker)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".abandoned"]


def test_a_restore_says_which_of_the_kernels_values_it_replaced(tmp_path: Path):
    """Issue 44: a restore overwrote newer values of the same names without a word."""
    import math

    save(_namespace(x=1, y=[2], m=math), tmp_path / "snap", GB)
    target = _namespace(x="newer", m=math, z=3)
    result = restore(target, tmp_path / "snap")
    assert target["x"] == 1 and target["z"] == 3
    assert result.replaced == ["x"]  # `m` is the same module: nothing was lost
    assert result.to_dict()["replaced"] == ["x"]


class _Broken:
    """A proxy that fails when asked what it is."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        raise RuntimeError("the proxy's target is gone")


def test_a_value_that_cannot_even_be_inspected_is_named(tmp_path: Path):
    with pytest.raises(Unsaved, match=r"proxy \(cannot be inspected"):
        save(_namespace(proxy=_Broken(), fine=1), tmp_path / "snap", GB)
    manifest = save(_namespace(proxy=_Broken(), fine=1), tmp_path / "snap", GB,
                    leave=LEAVE_ANY)
    assert manifest.saved == ["fine"]
    assert [(s.name, s.reason) for s in manifest.skipped] == [
        ("proxy", "cannot be inspected: RuntimeError: the proxy's target is gone")]


def test_in_memory_files_and_unusual_arrays_round_trip(tmp_path: Path):
    import io

    np = pytest.importorskip("numpy")
    ns = _namespace(buf=io.BytesIO(b"abc"), text=io.StringIO("hello"),
                    objects=np.array([{"a": 1}, None], dtype=object),
                    fortran=np.asfortranarray(np.arange(6).reshape(2, 3)),
                    strided=np.arange(10)[::3])
    manifest = save(ns, tmp_path / "snap", GB)
    assert {e.name: e.kind for e in manifest.entries} == {
        "buf": "pickle", "text": "pickle", "objects": "pickle", "fortran": "numpy",
        "strided": "numpy"}
    target = _namespace()
    assert sorted(restore(target, tmp_path / "snap").restored) == sorted(manifest.saved)
    assert target["buf"].getvalue() == b"abc" and target["text"].getvalue() == "hello"
    assert target["objects"][0] == {"a": 1} and target["objects"][1] is None
    assert np.array_equal(target["fortran"], ns["fortran"])
    assert target["strided"].tolist() == [0, 3, 6, 9]


def test_a_manifest_other_than_the_checked_one_is_refused(tmp_path: Path):
    save(_namespace(x=[1, 2]), tmp_path / "snap", GB)
    manifest = read_manifest(tmp_path / "snap")
    assert canonical_bytes(manifest) == canonical_bytes(read_manifest(tmp_path / "snap"))
    target: dict[str, Any] = {}
    with pytest.raises(CorruptSnapshot, match="not the one that was checked"):
        restore(target, tmp_path / "snap", expect_digest="0" * 64)
    assert target == {}
    assert restore(target, tmp_path / "snap",
                   expect_digest=manifest_digest(manifest)).restored == ["x"]

    (tmp_path / "snap" / "manifest.json").write_text("{not json")
    with pytest.raises(CorruptSnapshot, match="not valid JSON"):
        restore({}, tmp_path / "snap")
    with pytest.raises(CorruptSnapshot, match="no readable manifest"):
        restore({}, tmp_path / "absent")


def test_an_existing_destination_is_not_overwritten(tmp_path: Path):
    (tmp_path / "snap").mkdir()
    with pytest.raises(Exception, match="already exists"):
        save(_namespace(x=1), tmp_path / "snap", GB)


def test_torch_tensors_and_modules_round_trip(tmp_path: Path):
    torch = pytest.importorskip("torch")
    layer = torch.nn.Linear(3, 2)
    ns = _namespace(t=torch.arange(6.0).reshape(2, 3), layer=layer)
    manifest = save(ns, tmp_path / "snap", GB)
    assert {e.name: e.kind for e in manifest.entries} == {"t": "torch", "layer": "torch"}
    assert {e.name: e.devices for e in manifest.entries} == {"t": ["cpu"], "layer": ["cpu"]}
    target: dict[str, Any] = _namespace()
    result = restore(target, tmp_path / "snap")
    assert sorted(result.restored) == ["layer", "t"] and result.notes == []
    assert torch.equal(target["t"], ns["t"])
    assert torch.equal(target["layer"].weight, layer.weight)


def _unusual_arrays(np: Any) -> dict[str, Any]:
    return {"plain": np.arange(100_000, dtype=np.float64).reshape(1000, 100),
            "fortran": np.asfortranarray(np.arange(12, dtype=np.int32).reshape(3, 4)),
            "strided": np.arange(20)[::3], "scalar": np.array(2.5), "empty": np.zeros((0, 7)),
            "big_endian": np.arange(5, dtype=">u4"), "flags": np.array([True, False]),
            "when": np.array(["2026-12-06T11:00"], dtype="datetime64[m]"),
            "records": np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")]),
            "unicode_field": np.array([(1,)], dtype=[("größe", "i4")])}


def test_arrays_are_written_as_numpy_save_writes_them_and_come_back(tmp_path: Path):
    # arrays are streamed from their own memory, not through numpy.save: the files must still
    # be the .npy files numpy.save writes, and come back equal, dtype and order included
    import io

    np = pytest.importorskip("numpy")
    arrays = _unusual_arrays(np)
    manifest = save(_namespace(**arrays), tmp_path / "snap", GB)
    for e in manifest.entries:
        expected = io.BytesIO()
        np.save(expected, arrays[e.name], allow_pickle=False)
        assert (tmp_path / "snap" / str(e.file)).read_bytes() == expected.getvalue(), e.name
    target = _namespace()
    assert sorted(restore(target, tmp_path / "snap").restored) == sorted(arrays)
    for name, array in arrays.items():
        back = target[name]
        assert back.dtype == array.dtype and back.shape == array.shape, name
        assert np.array_equal(back, array), name
    assert target["fortran"].flags.f_contiguous and not target["fortran"].flags.c_contiguous


def test_arrays_are_read_once_and_a_damaged_one_loads_nothing(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch):
    np = pytest.importorskip("numpy")
    ns = _namespace(big=np.arange(3 << 20, dtype=np.float64), notes=["kept", "together"])
    manifest = save(ns, tmp_path / "snap", GB)
    big = next(e for e in manifest.entries if e.name == "big")
    path = tmp_path / "snap" / str(big.file)

    read_as_bytes: list[str] = []
    real_read_bytes = snapshot_module._read_bytes

    def as_bytes(src: Path, e: Any, scheme: Any, executor: Any) -> memoryview:
        read_as_bytes.append(e.name)
        return real_read_bytes(src, e, scheme, executor)

    read = [0]
    real_preadv = os.preadv

    def counting(fd: int, buffers: Any, offset: int) -> int:
        got = real_preadv(fd, buffers, offset)
        read[0] += got
        return got

    monkeypatch.setattr(snapshot_module, "_read_bytes", as_bytes)
    monkeypatch.setattr(os, "preadv", counting)
    target = _namespace()
    restore(target, tmp_path / "snap")
    monkeypatch.undo()
    # read into the array (not as bytes to load from), and once: every byte read at most once
    assert read_as_bytes == ["notes"] and 0 < read[0] <= manifest.bytes
    assert np.array_equal(target["big"], ns["big"]) and target["notes"] == ["kept", "together"]

    data = path.read_bytes()
    middle = len(data) // 2
    damaged = {"a data byte": data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1:],
               "a header byte": data[:20] + bytes([data[20] ^ 1]) + data[21:],
               "the last chunk cut": data[:-8]}
    for what, content in damaged.items():
        path.write_bytes(content)
        target = _namespace()
        with pytest.raises(CorruptSnapshot, match="nothing was loaded"):
            restore(target, tmp_path / "snap")
        assert target == _namespace(), what


def test_chunks_swapped_within_or_between_files_load_nothing(tmp_path: Path):
    # each file's digest is over its chunks in order, bound to its size: moving whole chunks
    # (same bytes, same sizes) is caught as surely as changing a byte
    from jupyter_costguard.kernel.hibernate.digest import CHUNK

    np = pytest.importorskip("numpy")
    n = 3 * CHUNK // 8
    ns = _namespace(first=np.arange(n, dtype=np.float64), second=-np.arange(n, dtype=np.float64),
                    text={"k": "v"})
    manifest = save(ns, tmp_path / "snap", GB)
    paths = {e.name: tmp_path / "snap" / str(e.file) for e in manifest.entries}
    first, second = paths["first"].read_bytes(), paths["second"].read_bytes()
    assert len(first) == len(second) > 2 * CHUNK

    def chunk(data: bytes, i: int) -> bytes:
        return data[i * CHUNK:(i + 1) * CHUNK]

    cases = {
        "two chunks of one file swapped": (
            {"first": chunk(first, 1) + chunk(first, 0) + first[2 * CHUNK:]}),
        "a chunk swapped between files": (
            {"first": chunk(first, 0) + chunk(second, 1) + first[2 * CHUNK:],
             "second": chunk(second, 0) + chunk(first, 1) + second[2 * CHUNK:]}),
        "the files swapped": {"first": second, "second": first},
    }
    for what, contents in cases.items():
        for name, content in contents.items():
            paths[name].write_bytes(content)
        target = _namespace()
        with pytest.raises(CorruptSnapshot, match="nothing was loaded"):
            restore(target, tmp_path / "snap")
        assert target == _namespace(), what
        paths["first"].write_bytes(first)
        paths["second"].write_bytes(second)
    target = _namespace()
    assert sorted(restore(target, tmp_path / "snap").restored) == ["first", "second", "text"]
    assert np.array_equal(target["second"], ns["second"])


def test_a_damaged_pickle_after_loaded_ones_puts_the_namespace_back(tmp_path: Path):
    # pickles are loaded one at a time, each from its verified bytes: an altered later one
    # takes out the names loaded before it and leaves what the namespace held
    ns = _namespace(early=[1, 2], late={"k": "v"})
    manifest = save(ns, tmp_path / "snap", GB)
    late = next(e for e in manifest.entries if e.name == "late")
    path = tmp_path / "snap" / str(late.file)
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    target = _namespace(early="the user's own")
    with pytest.raises(CorruptSnapshot, match="late"):
        restore(target, tmp_path / "snap")
    assert target == _namespace(early="the user's own")


def test_a_format_1_snapshot_still_restores(tmp_path: Path):
    # format 1 recorded each file's plain sha256; those snapshots (and their MACs, which cover
    # the manifest as it was written) still work, and are still checked
    import hashlib

    np = pytest.importorskip("numpy")
    ns = _namespace(arr=np.arange(10), obj={"k": [1, 2]})
    save(ns, tmp_path / "snap", GB)
    doc = json.loads((tmp_path / "snap" / "manifest.json").read_text())
    doc["format"] = 1
    del doc["chunk"]
    for e in doc["entries"]:  # as 0fc387b wrote them
        del e["buffers"]
        digest = e.pop("digest")
        if e["file"]:
            digest = hashlib.sha256((tmp_path / "snap" / e["file"]).read_bytes()).hexdigest()
        e["sha256"] = digest
    (tmp_path / "snap" / "manifest.json").write_text(json.dumps(doc))
    manifest = read_manifest(tmp_path / "snap")
    assert manifest.format == 1 and json.loads(canonical_bytes(manifest)) == doc
    target = _namespace()
    assert sorted(restore(target, tmp_path / "snap").restored) == ["arr", "obj"]
    assert target["arr"].tolist() == list(range(10)) and target["obj"] == {"k": [1, 2]}

    obj = next(e for e in manifest.entries if e.name == "obj")
    path = tmp_path / "snap" / str(obj.file)
    data = path.read_bytes()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(CorruptSnapshot, match="nothing was loaded"):
        restore(_namespace(), tmp_path / "snap")


def _chunked(data: bytes, chunk: int, new: Any, prefix: bytes) -> str:
    """A file's digest as formats 2 and 3 define it, written out here independently of
    digest.py: the hash of the prefix, the chunk size, the file size and each chunk's hash."""
    digests = b"".join(new(data[i:i + chunk]).digest()
                       for i in range(0, max(len(data), 1), chunk))
    return str(new(prefix + f"{chunk} {len(data)}\n".encode() + digests).hexdigest())


_SHA256_V2 = b"costguard-hibernate chunked sha256 v2\n"
_BLAKE3_V3 = b"costguard-hibernate chunked blake3 v3\n"


def _damage_each_file(snap: Path, manifest: Any) -> None:
    """One byte changed in each file in turn (the others intact): every one is refused."""
    for e in manifest.entries:
        if e.file is None:
            continue
        path = snap / str(e.file)
        data = path.read_bytes()
        middle = len(data) // 2
        path.write_bytes(data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1:])
        target = _namespace(kept="as it was")
        with pytest.raises(CorruptSnapshot, match=f"{e.file}.*{e.name}.*nothing was loaded"):
            restore(target, snap)
        assert target == _namespace(kept="as it was"), e.name
        path.write_bytes(data)


def test_new_snapshots_are_format_3_each_file_a_blake3_over_its_chunks(tmp_path: Path):
    # format 3: a file's digest is BLAKE3 over its 8 MiB chunks' BLAKE3 (and their size and
    # the file's); a round trip restores it, and a changed byte in any file loads nothing
    import blake3

    from jupyter_costguard.kernel.hibernate.digest import CHUNK

    np = pytest.importorskip("numpy")
    ns = _namespace(big=np.arange(2 * CHUNK // 8 + 1000, dtype=np.float64),
                    obj={"k": [1, 2], "raw": bytearray(b"xyz" * 100_000)}, empty=b"")
    manifest = save(ns, tmp_path / "snap", GB)
    doc = json.loads((tmp_path / "snap" / "manifest.json").read_text())
    assert doc["format"] == manifest.format == 3 and doc["chunk"] == CHUNK
    for e in doc["entries"]:
        data = (tmp_path / "snap" / e["file"]).read_bytes()
        assert e["digest"] == _chunked(data, CHUNK, blake3.blake3, _BLAKE3_V3), e["name"]
    assert os.path.getsize(tmp_path / "snap" / next(
        e.file for e in manifest.entries if e.name == "big")) > 2 * CHUNK  # three chunks
    target = _namespace()
    assert sorted(restore(target, tmp_path / "snap").restored) == ["big", "empty", "obj"]
    assert np.array_equal(target["big"], ns["big"]) and target["obj"] == ns["obj"]
    assert target["empty"] == b""
    _damage_each_file(tmp_path / "snap", manifest)


def test_a_format_2_snapshot_still_restores(tmp_path: Path):
    # format 2 (main before BLAKE3) recorded each file's chunked sha256: those snapshots (and
    # their MACs, which cover the manifest as it was written) still restore, still checked
    import hashlib

    np = pytest.importorskip("numpy")
    ns = _namespace(arr=np.arange(3000), obj={"k": [1, 2], "s": "x" * 10_000})
    save(ns, tmp_path / "snap", GB)
    doc = json.loads((tmp_path / "snap" / "manifest.json").read_text())
    doc["format"] = 2
    doc["chunk"] = 4096  # the size is recorded: small chunks, so each file has several
    for e in doc["entries"]:
        data = (tmp_path / "snap" / e["file"]).read_bytes()
        assert len(data) > 2 * 4096
        e["digest"] = _chunked(data, 4096, hashlib.sha256, _SHA256_V2)
    (tmp_path / "snap" / "manifest.json").write_text(json.dumps(doc))
    manifest = read_manifest(tmp_path / "snap")
    assert manifest.format == 2 and json.loads(canonical_bytes(manifest)) == doc
    target = _namespace()
    assert sorted(restore(target, tmp_path / "snap").restored) == ["arr", "obj"]
    assert target["arr"].tolist() == list(range(3000)) and target["obj"] == ns["obj"]
    _damage_each_file(tmp_path / "snap", manifest)


def test_a_snapshot_relabelled_with_another_format_loads_nothing(tmp_path: Path):
    # the format says which hash checks the files: format 3 digests read as format 2 (or a
    # format 2 snapshot read as 3) do not check, whatever the bytes
    np = pytest.importorskip("numpy")
    save(_namespace(arr=np.arange(10), obj=[1]), tmp_path / "snap", GB)
    path = tmp_path / "snap" / "manifest.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "format": 2}))
    target = _namespace()
    with pytest.raises(CorruptSnapshot, match="nothing was loaded"):
        restore(target, tmp_path / "snap")
    assert target == _namespace()


def test_without_blake3_saves_write_format_2_and_format_3_is_refused_with_the_reason(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    # a kernel environment without the blake3 package still hibernates (format 2, sha256)
    # and names what is missing when asked to restore a format 3 snapshot, loading nothing
    from jupyter_costguard.kernel.hibernate import SnapshotError, digest

    np = pytest.importorskip("numpy")
    ns = _namespace(arr=np.arange(10), obj={"k": 1})
    save(ns, tmp_path / "new", GB)
    monkeypatch.setattr(digest, "blake3", None)
    assert save(ns, tmp_path / "old", GB).format == 2
    assert json.loads((tmp_path / "old" / "manifest.json").read_text())["format"] == 2
    target = _namespace()
    assert sorted(restore(target, tmp_path / "old").restored) == ["arr", "obj"]
    target = _namespace()
    with pytest.raises(SnapshotError, match=r"blake3.*nothing was loaded"):
        restore(target, tmp_path / "new")
    assert target == _namespace()
    monkeypatch.undo()
    assert sorted(restore(target, tmp_path / "old").restored) == ["arr", "obj"]


def test_no_hibernate_thread_is_left_running(tmp_path: Path):
    # a kernel is left as it was: the threads that hash beside the reads and writes end
    np = pytest.importorskip("numpy")
    save(_namespace(big=np.zeros(1 << 20), small=[1]), tmp_path / "snap", GB)
    assert [t.name for t in threading.enumerate() if t.name.startswith("costguard-hib")] == []
    restore(_namespace(), tmp_path / "snap")
    assert [t.name for t in threading.enumerate() if t.name.startswith("costguard-hib")] == []


def test_a_frames_columns_come_back_in_place_writable_and_aligned(tmp_path: Path):
    # a pickle's out-of-band buffers (the frame's columns, a bytearray) are written after it
    # and become the restored arrays' memory: equal, writable, aligned, and saved again fine
    np = pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"x": np.arange(100_000, dtype=np.float64),
                          "n": np.arange(100_000, dtype=np.int32),
                          "g": pd.Categorical.from_codes(np.arange(100_000) % 3, ["a", "b", "c"])})
    ns = _namespace(frame=frame, blob={"raw": bytearray(b"abc" * 1000), "arr": np.ones(7)})
    manifest = save(ns, tmp_path / "snap", GB)
    entry = next(e for e in manifest.entries if e.name == "frame")
    assert entry.buffers and all(offset % 64 == 0 for offset, _ in entry.buffers)
    target = _namespace()
    restore(target, tmp_path / "snap")
    back = target["frame"]
    pd.testing.assert_frame_equal(back, frame)
    for block in back._mgr.blocks:  # the arrays themselves (to_numpy's views are read-only)
        values = getattr(block.values, "_ndarray", block.values)  # a categorical's codes
        assert values.flags.writeable and values.flags.aligned, block
    back.loc[0, "x"] = -1.0
    assert back.loc[0, "x"] == -1.0 and frame.loc[0, "x"] == 0.0
    assert target["blob"]["raw"] == bytearray(b"abc" * 1000)
    assert np.array_equal(target["blob"]["arr"], np.ones(7))
    save(target, tmp_path / "again", GB)
    again = _namespace()
    restore(again, tmp_path / "again")
    assert again["frame"].loc[0, "x"] == -1.0

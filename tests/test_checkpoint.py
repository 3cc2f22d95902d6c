"""Checkpoints for batch jobs: atomic saves, keep-K pruning, resume from the newest complete one,
including after a real SIGKILL mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from jupyter_costguard import checkpoint
from jupyter_costguard.checkpoint import Checkpoint, CheckpointError, CheckpointWarning
from jupyter_costguard.kernel.checkpoint import signals
from tests.support.final_save import FINAL, run_until_final_save

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (checkpoint.ENV_DIR, checkpoint.ENV_KEEP, checkpoint.ENV_JOB_DIR,
                 checkpoint.ENV_STAGING):
        monkeypatch.delenv(name, raising=False)
    # what earlier tests asked `every=` to remember must not be final-saved by a later one
    monkeypatch.setattr(signals, "_newest", {})
    monkeypatch.setattr(signals, "_calls", {})


@pytest.fixture
def ckdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "ckpt"
    monkeypatch.setenv(checkpoint.ENV_DIR, str(d))
    return d


def data_file(d: Path, step: int) -> Path:
    return d / f"step-{step:012d}.pkl"


def marker_file(d: Path, step: int) -> Path:
    return d / f"step-{step:012d}.done"


def test_round_trip_nested_state(ckdir: Path) -> None:
    state = {"weights": [[0.5, 1.5], [2.5]], "meta": {"name": "run", "tags": ("a", "b")},
             "blob": b"\x00\x01" * 100, "seen": {1, 2, 3}, "none": None}
    saved = checkpoint.save(state, 7)
    assert saved.step == 7 and saved.state is state
    assert saved.path == str(data_file(ckdir, 7))
    got = checkpoint.latest()
    assert isinstance(got, Checkpoint)
    assert got.step == 7
    assert got.state == state and got.state is not state
    assert got.path == str(data_file(ckdir, 7))
    assert got.saved_at == pytest.approx(saved.saved_at)
    assert abs(got.saved_at - time.time()) < 60
    marker = json.loads(marker_file(ckdir, 7).read_text())
    assert marker["size"] == data_file(ckdir, 7).stat().st_size
    assert checkpoint.list_checkpoints() == [7]
    assert checkpoint.list_checkpoints(verify=True) == [7]
    assert checkpoint.location() == str(ckdir)


def test_fresh_start_returns_none(ckdir: Path) -> None:
    assert checkpoint.latest() is None  # directory doesn't exist yet
    ckdir.mkdir()
    assert checkpoint.latest() is None
    assert checkpoint.list_checkpoints() == []


def test_no_location_configured() -> None:
    assert checkpoint.location() is None
    assert checkpoint.latest() is None
    assert checkpoint.list_checkpoints() == []
    with pytest.raises(CheckpointError, match="COSTGUARD_CHECKPOINT_DIR"):
        checkpoint.save({"x": 1}, 0)


def test_keep_prunes_oldest(ckdir: Path) -> None:
    for step in range(6):
        checkpoint.save(step, step)
    assert checkpoint.list_checkpoints() == [3, 4, 5]
    assert sorted(p.name for p in ckdir.iterdir()) == sorted(
        f"step-{s:012d}.{ext}" for s in (3, 4, 5) for ext in ("pkl", "done"))
    checkpoint.save(6, 6, keep=1)
    assert checkpoint.list_checkpoints() == [6]


def test_keep_from_env_and_validation(ckdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(checkpoint.ENV_KEEP, "2")
    for step in range(5):
        checkpoint.save(step, step)
    assert checkpoint.list_checkpoints() == [3, 4]
    with pytest.raises(ValueError, match="keep"):
        checkpoint.save(0, 5, keep=0)
    monkeypatch.setenv(checkpoint.ENV_KEEP, "lots")
    with pytest.raises(CheckpointError, match=checkpoint.ENV_KEEP):
        checkpoint.save(0, 5)


def test_highest_step_wins_and_lower_saves_allowed(ckdir: Path) -> None:
    checkpoint.save("five", 5)
    checkpoint.save("two", 2)  # lower step: allowed, kept, but not the latest
    latest = checkpoint.latest()
    assert latest is not None and (latest.step, latest.state) == (5, "five")
    assert checkpoint.list_checkpoints() == [2, 5]
    checkpoint.save("five again", 5)  # same step: overwrites
    latest = checkpoint.latest()
    assert latest is not None and (latest.step, latest.state) == (5, "five again")


def test_saving_lower_step_never_deletes_it(ckdir: Path) -> None:
    for step in (5, 6, 7):
        checkpoint.save(step, step)
    checkpoint.save(2, 2)
    assert checkpoint.list_checkpoints() == [2, 5, 6, 7]


def test_truncated_newest_data_is_skipped(ckdir: Path) -> None:
    checkpoint.save({"step": 1}, 1)
    checkpoint.save({"step": 2}, 2)
    data = data_file(ckdir, 2)
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # crash mid-write
    assert checkpoint.list_checkpoints() == [1]
    with pytest.warns(CheckpointWarning, match="step 2"):
        latest = checkpoint.latest()
    assert latest is not None and latest.step == 1 and latest.state == {"step": 1}


def test_same_size_corruption_caught_by_hash(ckdir: Path) -> None:
    checkpoint.save({"step": 1}, 1)
    checkpoint.save({"step": 2}, 2)
    data = data_file(ckdir, 2)
    raw = bytearray(data.read_bytes())
    raw[-3] ^= 0xFF
    data.write_bytes(bytes(raw))
    assert checkpoint.list_checkpoints() == [1, 2]  # cheap check: marker and size only
    assert checkpoint.list_checkpoints(verify=True) == [1]
    with pytest.warns(CheckpointWarning, match="sha256"):
        latest = checkpoint.latest()
    assert latest is not None and latest.step == 1


def test_data_without_marker_is_skipped(ckdir: Path) -> None:
    checkpoint.save("one", 1)
    data_file(ckdir, 2).write_bytes(b"complete-looking data but the marker never got written")
    with pytest.warns(CheckpointWarning, match="marker"):
        latest = checkpoint.latest()
    assert latest is not None and latest.state == "one"


def test_unpicklable_data_is_skipped(ckdir: Path) -> None:
    import hashlib

    checkpoint.save("one", 1)
    junk = b"definitely not a pickle"
    data_file(ckdir, 2).write_bytes(junk)
    marker_file(ckdir, 2).write_text(json.dumps({
        "size": len(junk), "sha256": hashlib.sha256(junk).hexdigest(), "saved_at": time.time()}))
    with pytest.warns(CheckpointWarning, match="step 2"):
        latest = checkpoint.latest()
    assert latest is not None and latest.state == "one"


def test_malformed_marker_is_skipped(ckdir: Path) -> None:
    checkpoint.save("one", 1)
    checkpoint.save("two", 2)
    marker_file(ckdir, 2).write_text("{not json")
    with pytest.warns(CheckpointWarning):
        latest = checkpoint.latest()
    assert latest is not None and latest.step == 1


def test_all_corrupt_returns_none(ckdir: Path) -> None:
    checkpoint.save("one", 1)
    data_file(ckdir, 1).write_bytes(b"")
    with pytest.warns(CheckpointWarning):
        assert checkpoint.latest() is None


def test_leftover_tmp_files_ignored_and_pruned(ckdir: Path, recwarn: pytest.WarningsRecorder
                                               ) -> None:
    checkpoint.save("zero", 0)
    checkpoint.save("one", 1)
    (ckdir / f"{data_file(ckdir, 2).name}.tmp-deadbeef").write_bytes(b"half a pick")
    (ckdir / f"{data_file(ckdir, 0).name}.tmp-0123abcd").write_bytes(b"older crash")
    latest = checkpoint.latest()
    assert latest is not None and latest.step == 1
    assert not [w for w in recwarn if issubclass(w.category, CheckpointWarning)]
    assert checkpoint.list_checkpoints() == [0, 1]
    # resuming overwrites step 2; once pruned past them, old leftovers are gone
    for step in (2, 3, 4):
        checkpoint.save(step, step)
    assert sorted(p.name for p in ckdir.iterdir() if ".tmp-" in p.name) == []
    assert checkpoint.list_checkpoints() == [2, 3, 4]


def test_no_tmp_left_after_save(ckdir: Path) -> None:
    checkpoint.save(list(range(1000)), 0)
    assert not [p for p in ckdir.iterdir() if ".tmp-" in p.name]


@pytest.mark.parametrize("bad", [-1, True, False, 1.0, "3", None])
def test_invalid_step_rejected(ckdir: Path, bad: object) -> None:
    with pytest.raises(ValueError, match="step"):
        checkpoint.save("x", bad)  # type: ignore[arg-type]
    assert not ckdir.exists()


def test_location_overrides_env(ckdir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    checkpoint.save("env", 1)
    checkpoint.save("explicit", 2, location=str(other))
    assert checkpoint.list_checkpoints() == [1]
    assert checkpoint.list_checkpoints(str(other)) == [2]
    env_latest = checkpoint.latest()
    other_latest = checkpoint.latest(location=str(other))
    assert env_latest is not None and env_latest.state == "env"
    assert other_latest is not None and other_latest.state == "explicit"


def test_file_url_is_local(tmp_path: Path) -> None:
    url = (tmp_path / "viaurl").as_uri()
    assert url.startswith("file://")
    saved = checkpoint.save({"k": 1}, 4, location=url)
    assert saved.path == str(data_file(tmp_path / "viaurl", 4))
    latest = checkpoint.latest(location=url)
    assert latest is not None and latest.state == {"k": 1}


def test_import_is_light() -> None:
    code = textwrap.dedent("""
        import sys, tempfile
        from jupyter_costguard import checkpoint
        d = tempfile.mkdtemp()
        checkpoint.save({"a": 1}, 0, location=d)
        assert checkpoint.latest(location=d).state == {"a": 1}
        heavy = [m for m in ("jupyter_server", "tornado", "fsspec", "ipywidgets", "traitlets")
                 if m in sys.modules]
        assert not heavy, heavy
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_fsspec_missing_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fsspec", None)  # makes `import fsspec` fail
    monkeypatch.setitem(sys.modules, "fsspec.core", None)
    with pytest.raises(CheckpointError, match="pip install fsspec"):
        checkpoint.save("x", 0, location="s3://bucket/prefix")


# --- fsspec --------------------------------------------------------------------------------


@pytest.fixture
def memory_url() -> Iterator[str]:
    fsspec = pytest.importorskip("fsspec")
    name = f"ckpt-test-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    fs = fsspec.filesystem("memory")
    if fs.exists(f"/{name}"):
        fs.rm(f"/{name}", recursive=True)


def test_fsspec_memory_round_trip_and_prune(memory_url: str, monkeypatch: pytest.MonkeyPatch
                                            ) -> None:
    monkeypatch.setenv(checkpoint.ENV_DIR, memory_url)
    assert checkpoint.latest() is None
    for step in range(5):
        checkpoint.save({"step": step, "nested": [step, {"x": step}]}, step)
    assert checkpoint.list_checkpoints() == [2, 3, 4]
    latest = checkpoint.latest()
    assert latest is not None
    assert latest.step == 4 and latest.state == {"step": 4, "nested": [4, {"x": 4}]}
    assert latest.path.startswith("memory://") and latest.path.endswith("step-000000000004.pkl")
    import fsspec

    fs = fsspec.filesystem("memory")
    root = memory_url[len("memory://"):]
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"/{root}", detail=False))
    assert names == sorted(f"step-{s:012d}.{e}" for s in (2, 3, 4) for e in ("pkl", "done"))


def test_fsspec_memory_incomplete_skipped(memory_url: str) -> None:
    import fsspec

    checkpoint.save("three", 3, location=memory_url)
    fs = fsspec.filesystem("memory")
    root = "/" + memory_url[len("memory://"):]
    fs.pipe_file(f"{root}/step-000000000004.pkl", b"data whose marker never arrived")
    checkpoint.save("five", 5, location=memory_url)
    fs.pipe_file(f"{root}/step-000000000005.pkl", b"truncat")  # marker now mismatches
    with pytest.warns(CheckpointWarning):
        latest = checkpoint.latest(location=memory_url)
    assert latest is not None and latest.state == "three"
    assert checkpoint.list_checkpoints(memory_url) == [3]


# --- a real crash ----------------------------------------------------------------------------

JOB = textwrap.dedent("""
    import os, sys, time
    from jupyter_costguard import checkpoint

    last = int(sys.argv[1])
    at_least = int(sys.argv[2])
    ckpt = checkpoint.latest()
    if at_least >= 0:
        assert ckpt is not None and ckpt.step >= at_least, (ckpt, at_least)
    start = ckpt.step + 1 if ckpt else 0
    state = ckpt.state if ckpt else {"runs": [], "blob": os.urandom(1 << 20)}
    state["runs"].append([])
    print("start", start, flush=True)
    for step in range(start, last + 1):
        state["runs"][-1].append(step)
        checkpoint.save(state, step)
        time.sleep(0.15)
""")


def test_sigkill_then_resume(tmp_path: Path) -> None:
    ckdir = tmp_path / "job-ckpt"
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = {**os.environ, checkpoint.ENV_DIR: str(ckdir),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}

    first = subprocess.Popen([sys.executable, str(script), "1000000", "-1"], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        seen: list[int] = []
        while len(seen) < 3 or max(seen) < 3:
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "first run saved no checkpoints"
            seen = checkpoint.list_checkpoints(str(ckdir))
            time.sleep(0.02)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=30)
        first.communicate()
    assert first.returncode == -signal.SIGKILL
    last_seen = max(seen)
    assert last_seen < 10, "first run went too far before it was killed"

    resume_from = checkpoint.latest(location=str(ckdir))
    assert resume_from is not None and resume_from.step >= last_seen

    second = subprocess.run([sys.executable, str(script), "10", str(last_seen)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert f"start {resume_from.step + 1}\n" in second.stdout

    final = checkpoint.latest(location=str(ckdir))
    assert final is not None and final.step == 10
    first_run, second_run = final.state["runs"]
    assert first_run == list(range(resume_from.step + 1))
    assert second_run[0] == resume_from.step + 1 > 0  # resumed, didn't restart from 0
    assert first_run + second_run == list(range(11))
    assert checkpoint.list_checkpoints(str(ckdir)) == [8, 9, 10]


# --- every=N and the final save on SIGUSR1 ---------------------------------------------------


def test_every_writes_each_nth_call_and_remembers_the_rest(ckdir: Path) -> None:
    statuses = [checkpoint.save({"step": step}, step, every=3).status for step in range(7)]
    assert statuses == ["in-memory", "in-memory", "complete"] * 2 + ["in-memory"]
    assert checkpoint.list_checkpoints() == [2, 5]
    latest = checkpoint.latest()
    assert latest is not None and latest.step == 5  # step 6 is only in memory
    with pytest.raises(ValueError, match="every"):
        checkpoint.save("x", 7, every=0)


def test_no_handler_outside_a_job(ckdir: Path) -> None:
    code = textwrap.dedent("""
        import signal
        from jupyter_costguard import checkpoint
        checkpoint.save("x", 0, every=5)
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    """)
    env = {**os.environ, checkpoint.ENV_DIR: str(ckdir)}
    env.pop(checkpoint.ENV_JOB_DIR, None)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_handler_chains_to_the_one_before(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import os, signal
        from jupyter_costguard import checkpoint
        seen = []
        signal.signal(signal.SIGUSR1, lambda s, f: seen.append(s))
        checkpoint.save({"step": 3}, 3, every=10)   # first save in a job: installs the handler
        os.kill(os.getpid(), signal.SIGUSR1)
        for _ in range(100):  # the handler runs between bytecodes
            if seen:
                break
        assert seen == [signal.SIGUSR1], seen
        assert checkpoint.list_checkpoints() == [3]
        print("pid", os.getpid())
    """)
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    env = {**os.environ, checkpoint.ENV_DIR: str(tmp_path / "ckpt"),
           checkpoint.ENV_JOB_DIR: str(job_dir)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "SIGUSR1: final checkpoint: step 3" in proc.stderr
    pid = proc.stdout.split()[-1]
    assert (job_dir / checkpoint.SIGNAL_OK).read_text().strip() == pid


def test_sigusr1_persists_the_latest_state(tmp_path: Path) -> None:
    script = tmp_path / "final.py"
    script.write_text(FINAL)
    job_dir, ckdir = tmp_path / "job", tmp_path / "ckpt"
    job_dir.mkdir()
    env = {**os.environ, checkpoint.ENV_DIR: str(ckdir), checkpoint.ENV_JOB_DIR: str(job_dir),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    before, final, _ = run_until_final_save(script, env, job_dir, str(ckdir), tmp_path)
    assert before <= final < before + 5  # the step it was at, not a periodic save
    assert checkpoint.list_checkpoints(str(ckdir)) == [final]
    latest = checkpoint.latest(location=str(ckdir))
    assert latest is not None and latest.step == final and latest.state["step"] == final

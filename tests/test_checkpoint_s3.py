"""Checkpoints in object storage, against a real S3-compatible server on loopback (moto's).

The helper stages locally and uploads on a thread; these tests check the result in the bucket
(with boto3, not through the helper), resume in new processes, a real SIGKILL in the middle of
an upload (through a throttling TCP proxy, so "the middle" is certain), the final save on
SIGUSR1 waiting for its upload, and the runner flushing uploads before it kills the kernel.
Only `test_save_does_not_wait_for_the_upload` holds an upload back by patching the helper's
one call into fsspec, to see `save` return while it is pending without relying on timing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard import checkpoint
from jupyter_costguard.kernel.checkpoint import signals, stores, upload
from tests.support.final_save import run_until_final_save
from tests.support.server_proc import free_port
from tests.support.services import stop

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20


def require_modules(*names: str) -> None:
    """Skipped where the S3 stand-in isn't installed; on CI (where `.[test]` has it) a failure."""
    missing = [n for n in names if importlib.util.find_spec(n) is None]
    if missing:
        if os.environ.get("CI"):
            pytest.fail(f"{', '.join(missing)} not installed, but CI installs .[test]")
        pytest.skip(f"{', '.join(missing)} not installed (pip install -e '.[test]')")


AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1"}


@pytest.fixture(scope="module")
def s3_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server, started for this module on a free loopback port."""
    require_modules("moto", "s3fs", "boto3", "flask")
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                 "-p", str(port)], stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text(errors="replace")
            try:
                with urllib.request.urlopen(endpoint + "/moto-api/", timeout=2):
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
        yield endpoint
    finally:
        stop(proc)


@pytest.fixture
def s3(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A boto3 client on the server; fsspec/s3fs find it through the standard AWS_* variables
    (`AWS_ENDPOINT_URL` included), exactly as a job would be configured."""
    import boto3
    import s3fs

    for name, value in AWS_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    for name in (checkpoint.ENV_DIR, checkpoint.ENV_KEEP, checkpoint.ENV_JOB_DIR):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(signals, "_newest", {})
    monkeypatch.setattr(signals, "_calls", {})
    s3fs.S3FileSystem.clear_instance_cache()  # made under other settings, maybe
    if upload._UPLOADER is not None:
        upload._UPLOADER.errors.clear()
    return boto3.client("s3", endpoint_url=s3_endpoint, **{
        "aws_access_key_id": "testing", "aws_secret_access_key": "testing",
        "region_name": "us-east-1"})


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"ckpt-{uuid.uuid4().hex[:16]}"
    s3.create_bucket(Bucket=name)
    return name


def objects(s3: Any, bucket: str, prefix: str = "run/") -> dict[str, int]:
    """Key (without the prefix) -> size, as the bucket has it."""
    doc = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return {o["Key"][len(prefix):]: o["Size"] for o in doc.get("Contents", [])}


def names(*steps: int) -> set[str]:
    return {f"step-{s:012d}.{e}" for s in steps for e in ("pkl", "done")}


def child_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, **AWS_ENV, **extra,
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return env


def run_child(code: str, env: dict[str, str], timeout: float = 120) -> str:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


# --- the round trip ----------------------------------------------------------------------


def test_round_trip_through_the_bucket(s3: Any, bucket: str,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"s3://{bucket}/run"
    monkeypatch.setenv(checkpoint.ENV_DIR, url)
    state = {"weights": [0.5, 1.5], "blob": os.urandom(3 * MiB), "name": "run"}
    saved = checkpoint.save(state, 0)
    assert saved.status == "uploading"
    assert saved.path == f"{url}/step-000000000000.pkl"
    assert checkpoint.wait(60)
    assert checkpoint.pending() == []
    got = objects(s3, bucket)
    assert set(got) == names(0)
    marker = json.loads(s3.get_object(Bucket=bucket, Key="run/step-000000000000.done")
                        ["Body"].read())
    assert marker["size"] == got["step-000000000000.pkl"] and marker["step"] == 0

    latest = checkpoint.latest()
    assert latest is not None and latest.status == "complete"
    assert latest.step == 0 and latest.state == state and latest.path == saved.path
    assert checkpoint.list_checkpoints(verify=True) == [0]


def test_keep_k_prunes_the_bucket(s3: Any, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"s3://{bucket}/run"
    monkeypatch.setenv(checkpoint.ENV_KEEP, "2")
    for step in range(5):
        checkpoint.save({"step": step}, step, location=url)
        assert checkpoint.wait(60)
    assert set(objects(s3, bucket)) == names(3, 4)
    assert checkpoint.list_checkpoints(url) == [3, 4]


def test_save_does_not_wait_for_the_upload(s3: Any, bucket: str, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """An upload held back at the fsspec boundary: `save` has returned, this process resumes
    from the staged checkpoint, a new process doesn't see it, and newer saves supersede the
    waiting one without ever leaving a marker for it."""
    url = f"s3://{bucket}/run"
    staging = tmp_path / "staging"
    monkeypatch.setenv(checkpoint.ENV_STAGING, str(staging))
    monkeypatch.setattr(upload, "_staging_dir", None)
    gate, started = threading.Event(), threading.Event()
    put = stores.FsspecStore.put
    uploaded: list[str] = []

    def held_put(self: Any, name: str, local_path: str) -> None:
        started.set()
        assert gate.wait(60)
        put(self, name, local_path)
        uploaded.append(name)

    monkeypatch.setattr(stores.FsspecStore, "put", held_put)
    try:
        saved = checkpoint.save({"step": 1}, 1, location=url)
        assert saved.status == "uploading"
        assert started.wait(30)
        assert checkpoint.pending(url) == [1]
        assert objects(s3, bucket) == {}

        here = checkpoint.latest(location=url)
        assert here is not None and (here.step, here.state, here.status) == \
            (1, {"step": 1}, "uploading")
        elsewhere = run_child(f"""
            from jupyter_costguard import checkpoint
            print(checkpoint.latest(location={url!r}))
        """, child_env(AWS_ENDPOINT_URL=os.environ["AWS_ENDPOINT_URL"]))
        assert elsewhere.strip() == "None"

        checkpoint.save({"step": 2}, 2, location=url)
        checkpoint.save({"step": 3}, 3, location=url)  # step 2 never started: superseded
        assert checkpoint.pending(url) == [1, 3]
        staged = sorted(p.name for p in staging.rglob("*") if p.is_file())
        assert len(staged) == 2 and all("step-000000000002" not in n for n in staged), staged
        latest = checkpoint.latest(location=url)
        assert latest is not None and latest.step == 3
    finally:
        gate.set()
    assert checkpoint.wait(60)
    assert uploaded == ["step-000000000001.pkl", "step-000000000003.pkl"]
    assert set(objects(s3, bucket)) == names(1, 3)
    assert [p for p in staging.rglob("*") if p.is_file()] == []
    latest = checkpoint.latest(location=url)
    assert latest is not None and (latest.step, latest.status) == (3, "complete")


def test_failed_upload_is_logged_not_raised(s3: Any, monkeypatch: pytest.MonkeyPatch,
                                            caplog: pytest.LogCaptureFixture) -> None:
    """Nothing listens at the endpoint: the save still returns, the failure is a log line."""
    import s3fs

    monkeypatch.setattr(upload, "UPLOAD_TRIES", 1)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    s3fs.S3FileSystem.clear_instance_cache()
    url = f"s3://ckpt-{uuid.uuid4().hex[:12]}/run"
    saved = checkpoint.save({"x": 1}, 0, location=url)
    assert saved.status == "uploading"
    with caplog.at_level("WARNING", logger="jupyter_costguard.checkpoint"):
        assert checkpoint.wait(60) is False
    assert "could not be uploaded" in caplog.text
    assert checkpoint.pending(url) == []
    upload._uploader().errors.clear()
    s3fs.S3FileSystem.clear_instance_cache()


# --- new processes -------------------------------------------------------------------------


def test_exit_flushes_and_a_new_process_resumes_from_the_newest_complete(
        s3: Any, bucket: str) -> None:
    url = f"s3://{bucket}/run"
    env = child_env(AWS_ENDPOINT_URL=os.environ["AWS_ENDPOINT_URL"],
                    **{checkpoint.ENV_DIR: url})
    # saves in the background and exits without wait(): atexit flushes
    run_child("""
        from jupyter_costguard import checkpoint
        for step in range(5):
            assert checkpoint.save({"step": step}, step).status == "uploading"
    """, env)
    assert set(objects(s3, bucket)) >= names(4)
    assert checkpoint.list_checkpoints(url)[-1] == 4
    # newer leftovers that never completed: data without a marker, a marker that lies
    s3.put_object(Bucket=bucket, Key="run/step-000000000005.pkl", Body=b"half")
    s3.put_object(Bucket=bucket, Key="run/step-000000000006.pkl", Body=b"x" * 10)
    s3.put_object(Bucket=bucket, Key="run/step-000000000006.done", Body=json.dumps(
        {"size": 99, "sha256": "0" * 64, "saved_at": time.time()}).encode())
    out = run_child("""
        import warnings
        from jupyter_costguard import checkpoint
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ckpt = checkpoint.latest()
        print(ckpt.step, ckpt.state["step"], len(caught))
    """, env)
    assert out.split() == ["4", "4", "2"]


class ThrottledProxy:
    """A TCP proxy on loopback that passes client->server bytes at `rate` bytes/s and counts
    them, so a test knows an upload is under way, and how far, when it kills the uploader."""

    def __init__(self, target: int, rate: float) -> None:
        self.target, self.rate = target, rate
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port: int = self.sock.getsockname()[1]
        self.lock = threading.Lock()
        self.upstream = 0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False),
                             daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, up: bool) -> None:
        try:
            while True:
                data = src.recv(64 * 1024)
                if not data:
                    break
                if up:
                    time.sleep(len(data) / self.rate)
                dst.sendall(data)
                if up:
                    with self.lock:
                        self.upstream += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def sent(self) -> int:
        with self.lock:
            return self.upstream

    def close(self) -> None:
        self.sock.close()


UPLOADER = textwrap.dedent("""
    import os, sys, time
    from jupyter_costguard import checkpoint

    checkpoint.save({"step": 1, "blob": b"small"}, 1)
    assert checkpoint.wait(60)
    print("uploaded 1", flush=True)
    checkpoint.save({"step": 2, "blob": os.urandom(int(sys.argv[1]))}, 2)
    print("staged 2", flush=True)
    time.sleep(600)
""")


def test_upload_killed_midway_leaves_the_previous_checkpoint(s3: Any, bucket: str,
                                                             tmp_path: Path) -> None:
    url = f"s3://{bucket}/run"
    size = 24 * MiB
    endpoint = os.environ["AWS_ENDPOINT_URL"]
    proxy = ThrottledProxy(int(endpoint.rsplit(":", 1)[1]), rate=8 * MiB)
    script = tmp_path / "uploader.py"
    script.write_text(UPLOADER)
    staging = tmp_path / "staging"
    env = child_env(AWS_ENDPOINT_URL=f"http://127.0.0.1:{proxy.port}",
                    **{checkpoint.ENV_DIR: url, checkpoint.ENV_STAGING: str(staging)})
    out = tmp_path / "stdout"
    with open(out, "wb") as f:
        proc = subprocess.Popen([sys.executable, str(script), str(size)], env=env, stdout=f,
                                stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while "uploaded 1" not in out.read_text():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline
            time.sleep(0.02)
        base = proc_sent = proxy.sent()
        while "staged 2" not in out.read_text():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline
            time.sleep(0.02)
        while proc_sent - base < 4 * MiB:  # step 2's data is on its way
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the upload didn't start"
            time.sleep(0.01)
            proc_sent = proxy.sent()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        at_kill = proxy.sent() - base
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        proc.communicate()
        proxy.close()
    assert proc.returncode == -signal.SIGKILL
    assert 4 * MiB <= at_kill < size, "killed in the middle of the upload"

    got = objects(s3, bucket)
    assert "step-000000000002.done" not in got  # never a marker for an unfinished upload
    assert got.get("step-000000000002.pkl", 0) < size
    assert set(got) - {"step-000000000002.pkl"} == names(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", checkpoint.CheckpointWarning)
        latest = checkpoint.latest(location=url)
    assert latest is not None and latest.step == 1 and latest.state["step"] == 1

    # the retry, in a new process, resumes from step 1 and completes step 2
    resumed = run_child("""
        from jupyter_costguard import checkpoint
        ckpt = checkpoint.latest()
        print(ckpt.step)
        checkpoint.save({"step": ckpt.step + 1}, ckpt.step + 1)
    """, child_env(AWS_ENDPOINT_URL=endpoint,
                   **{checkpoint.ENV_DIR: url, checkpoint.ENV_STAGING: str(staging)}))
    assert resumed.split() == ["1"]
    assert checkpoint.list_checkpoints(url, verify=True) == [1, 2]
    # the killed process's staged file was left behind, and the next one to stage removed it
    assert [p for p in staging.rglob("*") if p.is_file()] == []


# --- the final save on SIGUSR1 waits for its upload ----------------------------------------


def test_sigusr1_final_save_reaches_the_bucket(s3: Any, bucket: str, tmp_path: Path) -> None:
    from tests.support.final_save import FINAL

    url = f"s3://{bucket}/run"
    script = tmp_path / "final.py"
    script.write_text(FINAL)
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    env = child_env(AWS_ENDPOINT_URL=os.environ["AWS_ENDPOINT_URL"],
                    **{checkpoint.ENV_DIR: url, checkpoint.ENV_JOB_DIR: str(job_dir)})
    before, final, err = run_until_final_save(script, env, job_dir, url, tmp_path)
    assert "some uploads failed" not in err
    assert before <= final < before + 5
    # killed right after it said so: the upload had finished
    assert set(objects(s3, bucket)) == names(final)
    latest = checkpoint.latest(location=url)
    assert latest is not None and latest.step == final and latest.state["step"] == final
    assert list((job_dir / "checkpoint-staging").rglob("*.pkl*")) == []


# --- the runner flushes before it kills the kernel -----------------------------------------


def test_runner_flushes_uploads_before_the_kernel_is_killed(s3: Any, bucket: str,
                                                            tmp_path: Path) -> None:
    """A real job (runner, nbclient, ipykernel) whose last cell saves a large checkpoint and
    ends at once: the kernel is killed right after the cells, so without the runner's flush
    the upload would be lost. On the way the kernel gets SIGUSR1 (as the runner passes on a
    scheduler's warning): its handler, installed by the first save in the kernel's main
    thread, writes the state that `every=` had only remembered."""
    from jupyter_costguard.offload.spec import JobSpec, SpecCell

    url = f"s3://{bucket}/run"
    code = textwrap.dedent("""
        import os, signal
        from jupyter_costguard import checkpoint
        for step in range(5):
            checkpoint.save({'step': step}, step, every=1000)
        os.kill(os.getpid(), signal.SIGUSR1)
        saved = checkpoint.save({'blob': os.urandom(16 << 20)}, 7)
        print(saved.status)
    """)
    cell = SpecCell(cell_id="c1", index=0, selected=True, code=code, source=code)
    spec = JobSpec(notebook="nb.ipynb", cwd=str(tmp_path), kernel_name="python3",
                   cells=(cell,))
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "spec.json").write_text(json.dumps({
        "id": 41, "spec": spec.to_json(), "checkpoint_dir": url, "environment": {}}))
    env = child_env(AWS_ENDPOINT_URL=os.environ["AWS_ENDPOINT_URL"])
    proc = subprocess.run([sys.executable, "-m", "jupyter_costguard.offload.runner",
                           str(job_dir)], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    log = (job_dir / "log.txt").read_text()
    assert proc.returncode == 0, log + proc.stderr
    assert "uploading" in log  # save returned before its upload
    assert "SIGUSR1: final checkpoint: step 4" in log
    assert (job_dir / checkpoint.SIGNAL_OK).read_text().strip().isdigit()
    assert checkpoint.list_checkpoints(url, verify=True) == [4, 7], log

"""A job that checkpoints, is sent SIGUSR1 (a scheduler's warning) and then SIGKILL (its time
limit): the final save it makes in between, local or to object storage."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from jupyter_costguard import checkpoint

FINAL = textwrap.dedent("""
    import sys, time
    from jupyter_costguard import checkpoint

    for step in range(1000000):
        state = {"step": step, "blob": b"w" * 100000}
        checkpoint.save(state, step, every=int(sys.argv[1]))
        print("step", step, flush=True)
        time.sleep(0.02)
""")


def run_until_final_save(script: Path, env: dict[str, str], job_dir: Path, location: str,
                         out_dir: Path) -> tuple[int, int, str]:
    """Start a job that saves every 10000th call, send it SIGUSR1 once it runs, then SIGKILL it
    (the scheduler's time limit) as soon as it says its final save is done. Returns the step
    last printed before the signal, the step the final save wrote, and its stderr."""
    stdout, stderr = out_dir / "stdout", out_dir / "stderr"
    with open(stdout, "wb") as out, open(stderr, "wb") as err:
        proc = subprocess.Popen([sys.executable, str(script), "10000"], env=env, stdout=out,
                                stderr=err)
    try:
        deadline = time.monotonic() + 60
        printed: list[int] = []
        while not ((job_dir / checkpoint.SIGNAL_OK).exists() and len(printed) >= 5):
            assert proc.poll() is None, stderr.read_text()
            assert time.monotonic() < deadline, "the job didn't start saving"
            printed = [int(line.split()[1]) for line in stdout.read_text().splitlines()]
            time.sleep(0.02)
        assert (job_dir / checkpoint.SIGNAL_OK).read_text().strip() == str(proc.pid)
        assert checkpoint.list_checkpoints(location) == []  # nothing written yet: every=10000
        before = int(stdout.read_text().splitlines()[-1].split()[1])
        proc.send_signal(signal.SIGUSR1)
        while "final checkpoint" not in stderr.read_text():
            assert proc.poll() is None, stderr.read_text()
            assert time.monotonic() < deadline, stderr.read_text()
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    text = stderr.read_text()
    final = int(text.split("final checkpoint: step ")[1].split()[0])
    return before, final, text

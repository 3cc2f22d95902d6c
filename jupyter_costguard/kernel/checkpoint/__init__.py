"""Checkpoints for offloaded batch jobs, so a killed or preempted job resumes instead of restarting.

A job calls `save(state, step)` as it goes and `latest()` when it starts. The contract:

* Atomic: the pickled state is written first, then a small completion marker
  (`step-NNN.done`, JSON with size and sha256). Only a step whose marker matches its data counts,
  so a crash mid-write never leaves a checkpoint that `latest()` would pick. Local files are also
  written via a temporary file, fsync and `os.replace`.
* Keep-K: after a new checkpoint is complete, all but the `keep` highest steps are deleted
  (default `$COSTGUARD_CHECKPOINT_KEEP`, else 3); the one just saved is never deleted.
* Resume: `latest()` returns the complete checkpoint with the highest step; a corrupt or
  incomplete newer one is skipped with a warning.

The location comes from `$COSTGUARD_CHECKPOINT_DIR` (set by the backend) or `location=`: a local
path, a `file://` URL, or any fsspec URL (`s3://bucket/prefix`, `gs://...`, `memory://x`). Local
paths need only the standard library; fsspec is imported only for other URLs. This package
imports no server code, so a job can import it cheaply.

Object storage (any fsspec URL that isn't `file`/`local`/`memory`) is written in the background,
so the GPU doesn't wait on the network: `save` pickles into a local staging directory
(`$COSTGUARD_CHECKPOINT_STAGING`, else `$COSTGUARD_JOB_DIR/checkpoint-staging`, else a temporary
directory) and returns; one uploader thread sends the data, then the marker, then prunes the
bucket. A newer save supersedes one still waiting (only the newest matters). `wait()` flushes;
it runs at interpreter exit too, and the job runner calls it after the last cell (its kernel is
killed, not shut down). An upload killed midway leaves no marker, so it never counts. In the
saving process `latest()` also sees a staged checkpoint that is newer than anything uploaded; a
new process (the retry after a crash) only sees what reached the bucket. Credentials and
endpoints are fsspec's: `AWS_ACCESS_KEY_ID`, `AWS_ENDPOINT_URL` (S3-compatible servers) and so on.

Final save on a warning signal: `save(state, step, every=N)` writes only every N-th call but
remembers the newest state. Within a job (`$COSTGUARD_JOB_DIR` set) the first `save` installs a
SIGUSR1 handler (`enable_final_save`) that persists that newest state synchronously, waits for
its upload, and tells the runner it may forward the signal (`$COSTGUARD_JOB_DIR/signal-ok`,
holding this process's pid). Slurm sends SIGUSR1 ahead of a time limit with `--signal`. The
state is pickled when the signal comes: an object changed in place since that `save` is
pickled as it is then.

The modules, bottom up: `records` (what a call returns or raises), `settings` (location, keep),
`stores` (local disk or fsspec), `steps` (the step files and their markers on a store),
`upload` (staging and the uploader thread), `signals` (the final save), `saving` (the API).
"""

from jupyter_costguard.kernel.checkpoint.records import (
    Checkpoint,
    CheckpointError,
    CheckpointWarning,
)
from jupyter_costguard.kernel.checkpoint.saving import latest, list_checkpoints, save
from jupyter_costguard.kernel.checkpoint.settings import (
    ENV_DIR,
    ENV_JOB_DIR,
    ENV_KEEP,
    ENV_STAGING,
    location,
)
from jupyter_costguard.kernel.checkpoint.settings import SIGNAL_OK as SIGNAL_OK
from jupyter_costguard.kernel.checkpoint.signals import enable_final_save
from jupyter_costguard.kernel.checkpoint.upload import pending, wait

__all__ = [
    "ENV_DIR",
    "ENV_JOB_DIR",
    "ENV_KEEP",
    "ENV_STAGING",
    "Checkpoint",
    "CheckpointError",
    "CheckpointWarning",
    "enable_final_save",
    "latest",
    "list_checkpoints",
    "location",
    "pending",
    "save",
    "wait",
]

"""Hibernate, kernel side: save a kernel's variables to a snapshot folder and load them into
another kernel, so its GPU can be freed without losing the work (issue 37).

`save(namespace, dest, max_bytes)` writes the user's names (IPython's own are left out):
imported modules by name, notebook functions, classes and lambdas by value (cloudpickle),
numpy arrays, pandas frames and torch values in their own formats, the rest pickled; what
cannot be saved is listed with its reason. It checks free space and a size cap first, streams
one value at a time into a private temporary folder (0700/0600), writes `manifest.json` last
and renames the folder into place: a snapshot is complete or absent. `dest` may be an fsspec
URL (s3://...): each file then streams to its key and the manifest, written last, is the
commit mark (`where`).

`restore(namespace, src)` loads only what it has verified against the manifest (each file's
size and digest: BLAKE3 per chunk, every core hashing as it reads, `digest`), and a damaged
snapshot leaves the namespace as it was; a value needing a missing module is named with it.

Loading a pickle runs code. The server MACs `canonical_bytes(manifest)` with a key that never
reaches a kernel, and passes `manifest_digest` to the restore, so the kernel loads only the
manifest (and, through its hashes, the files) the server checked. `kernel_save` and
`kernel_restore` are the calls the server sends (`entry.save_code`, `entry.restore_code`).

Modules: `records` (manifest, results, errors), `digest` (a file's chunked hash), `names`
(whose names), `unsaveable` (live resources named with reasons), `sink` (private, hashed,
capped writes), `where` (a local folder or an object store), `pickling` (cloudpickle into a
namespace), `formats` (one writer and reader per kind), `snapshot` (save, restore), `entry`
(the kernel calls).
"""

from jupyter_costguard.kernel.hibernate.entry import (
    count_code,
    execution_count,
    kernel_restore,
    kernel_save,
    parse_reply,
    restore_code,
    save_code,
)
from jupyter_costguard.kernel.hibernate.records import (
    CorruptSnapshot,
    Entry,
    Manifest,
    Note,
    NotEnoughSpace,
    RestoreResult,
    Skipped,
    SnapshotError,
    SnapshotTooLarge,
    Unsaved,
    canonical_bytes,
    manifest_digest,
)
from jupyter_costguard.kernel.hibernate.snapshot import (
    LEAVE_ANY,
    LEAVE_LIVE,
    LEAVE_NOTHING,
    partial_folders,
    read_manifest,
    restore,
    save,
    verify,
)

__all__ = [
    "LEAVE_ANY",
    "LEAVE_LIVE",
    "LEAVE_NOTHING",
    "CorruptSnapshot",
    "Entry",
    "Manifest",
    "NotEnoughSpace",
    "Note",
    "RestoreResult",
    "Skipped",
    "SnapshotError",
    "SnapshotTooLarge",
    "Unsaved",
    "canonical_bytes",
    "count_code",
    "execution_count",
    "kernel_restore",
    "kernel_save",
    "manifest_digest",
    "parse_reply",
    "partial_folders",
    "read_manifest",
    "restore",
    "restore_code",
    "save",
    "save_code",
    "verify",
]

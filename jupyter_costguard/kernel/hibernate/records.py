"""What a snapshot is on disk and what save/restore answer: the manifest, its entries, the
names that were skipped and why, and the errors. JSON in and out, so the server reads the same
records the kernel writes."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from jupyter_costguard.kernel.hibernate.digest import CHUNK, Scheme, current

#: bumped when a reader of an older version could misread a newer snapshot. 3: each file's
#: `digest` is BLAKE3 over its chunks' BLAKE3 (digest.py), `chunk` says their size; 2 (still
#: read, and written where blake3 is not installed): the same with sha256; 1 (still read):
#: the whole file's sha256, in `sha256`
FORMAT = 3
FORMATS = (1, 2, 3)
MANIFEST = "manifest.json"


class SnapshotError(Exception):
    """A snapshot could not be written or read; the message says why, for the user."""


class NotEnoughSpace(SnapshotError):
    """The disk holding the snapshot has less free space than the namespace needs."""


class SnapshotTooLarge(SnapshotError):
    """The namespace is over the size cap; `largest` names the biggest values (name, bytes)."""

    def __init__(self, message: str, largest: list[tuple[str, int]]) -> None:
        super().__init__(message)
        self.largest = largest


class Unsaved(SnapshotError):
    """Values the save may not leave behind could not be saved (`blocking`: each name and
    why), so there is no snapshot and the kernel must keep running."""

    def __init__(self, message: str, blocking: list[Skipped]) -> None:
        super().__init__(message)
        self.blocking = blocking


class CorruptSnapshot(SnapshotError):
    """A file is missing, truncated or altered, or the manifest is unreadable: nothing was
    loaded."""


@dataclass
class Skipped:
    """A name that was not saved (or not restored), with the reason in words; `module` is the
    module it needs when that is the reason."""

    name: str
    reason: str
    module: str | None = None


@dataclass
class Note:
    """Something the user should know about a value that did come back (a tensor restored to
    the CPU because its GPU is not here)."""

    name: str
    note: str


@dataclass
class Entry:
    """One saved name. `kind` says how it was written (formats.KINDS); `file` is the file in the
    snapshot folder (None for a module, recorded by name); `needs` are the earlier names it
    refers to, restored first; `devices` are a torch value's devices; `digest` vouches for
    the file's bytes (`digest.combine`); `buffers` are where a pickle's out-of-band buffers
    lie in its file ([offset, bytes] each; the pickle itself ends before the first)."""

    name: str
    kind: str
    type: str
    file: str | None = None
    bytes: int = 0
    digest: str | None = None
    module: str | None = None
    needs: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    buffers: list[list[int]] = field(default_factory=list)


@dataclass
class Manifest:
    """The snapshot's table of contents, written last: a folder with a manifest is complete.
    `format` says how the files are hashed (FORMAT, or 2 where blake3 is not installed:
    `digest.current`); `chunk` is the bytes each chunk digest of a file covers (0: one digest
    per file, format 1)."""

    entries: list[Entry]
    skipped: list[Skipped]
    created: float
    python: str
    modules: dict[str, str]
    format: int = field(default_factory=lambda: current().format)
    chunk: int = CHUNK

    @property
    def scheme(self) -> Scheme:
        """How this snapshot's files are hashed and checked (`digest.read`)."""
        return Scheme(self.format, self.chunk)

    @property
    def saved(self) -> list[str]:
        return [e.name for e in self.entries]

    @property
    def bytes(self) -> int:
        return sum(e.bytes for e in self.entries)

    def to_dict(self) -> dict[str, Any]:
        """The manifest as written; a format 1 manifest as it was written then, so its MAC
        still checks."""
        doc = asdict(self)
        if self.format == 1:
            del doc["chunk"]
            for e in doc["entries"]:  # the fields format 1 had, no more
                e["sha256"] = e.pop("digest")
                del e["buffers"]
        return doc

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, doc: Any) -> Manifest:
        """The manifest in `doc`, or CorruptSnapshot if it is not one."""
        try:
            version = doc["format"]
            if version not in FORMATS or type(version) is not int:
                raise CorruptSnapshot(f"snapshot format {version!r} is not one this version "
                                      f"reads ({', '.join(map(str, FORMATS))})")
            if version == 1:
                entries = [Entry(**{"digest" if k == "sha256" else k: v for k, v in e.items()})
                           for e in doc["entries"]]
                chunk = 0
            else:
                entries = [Entry(**e) for e in doc["entries"]]
                chunk = doc["chunk"]
                if type(chunk) is not int or chunk <= 0:
                    raise ValueError(f"bad chunk size {chunk!r}")
            skipped = [Skipped(**s) for s in doc["skipped"]]
            manifest = cls(entries=entries, skipped=skipped, created=float(doc["created"]),
                           python=str(doc["python"]), modules=dict(doc["modules"]),
                           format=version, chunk=chunk)
        except CorruptSnapshot:
            raise
        except (KeyError, TypeError, ValueError) as e:
            raise CorruptSnapshot(f"the manifest is not a snapshot manifest ({e})") from e
        for entry in manifest.entries:
            if not isinstance(entry.name, str) or not entry.name.isidentifier():
                raise CorruptSnapshot(f"the manifest names {entry.name!r}, not a Python name")
        return manifest


def canonical_bytes(manifest: Manifest) -> bytes:
    """The bytes a MAC covers: the manifest as canonical JSON. It holds every file's size and
    digest, so one MAC over it vouches for the whole snapshot (the key stays with the server)."""
    return json.dumps(manifest.to_dict(), sort_keys=True, separators=(",", ":"),
                      ensure_ascii=True, allow_nan=False).encode("ascii")


def manifest_digest(manifest: Manifest) -> str:
    """sha256 of `canonical_bytes`: what the server passes to a restore, so the kernel loads the
    very manifest whose MAC the server checked."""
    return hashlib.sha256(canonical_bytes(manifest)).hexdigest()


@dataclass
class RestoreResult:
    """What came back: `restored` names; `skipped` names with reasons (those the snapshot never
    held, and those that failed here, such as a missing module); `notes` on restored values;
    `replaced`: restored names whose earlier value in the kernel the restore overwrote."""

    restored: list[str]
    skipped: list[Skipped]
    notes: list[Note] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

"""Save a namespace to a snapshot folder and restore it into another.

A snapshot is complete or absent: files are written into a private temporary folder beside
the destination, the manifest (every file's size and digest) last, then everything is fsynced
and the folder renamed into place.

A restore loads nothing it has not verified, and a damaged snapshot leaves the namespace as
it was. Every file's presence and size are checked first; each file is read once, straight
into memory (an array into the new array itself; reading one runs no code), and its digest
checked there, every core reading and hashing its own chunks (digest.py). A pickle is
unpickled only from its verified bytes, one file's bytes in memory at a time; if a later file
turns out altered, the names already loaded are taken out again.
"""

from __future__ import annotations

import contextlib
import errno
import importlib
import json
import mmap
import os
import platform
import re
import shutil
import stat
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from types import FunctionType
from typing import Any

from jupyter_costguard.common.files import PRIVATE_DIR, fsync_dir
from jupyter_costguard.kernel.hibernate import digest, formats, names, pickling, where
from jupyter_costguard.kernel.hibernate.records import (
    MANIFEST,
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
    manifest_digest,
)
from jupyter_costguard.kernel.hibernate.sink import (
    Budget,
    CapReached,
    WriteFailed,
    write_private,
)
from jupyter_costguard.kernel.hibernate.unsaveable import LiveResource, why_not

#: free space kept beyond the estimate, for the manifest and the estimate's error
SPACE_MARGIN = 16 << 20
#: a manifest larger than this is not one costguard wrote
MANIFEST_LIMIT = 64 << 20
#: the suffix of a snapshot still being written (or left by a kernel killed while saving)
PARTIAL = ".partial"
_FILE_NAME = re.compile(r"\A[0-9]{4,}\.(npy|pkl|pt)\Z")
_ABSENT = object()


#: what a save may leave behind and still make a snapshot (`save`'s `leave`): nothing (an
#: automatic hibernation: every variable is saved or there is no snapshot)
LEAVE_NOTHING = "nothing"
#: values that cannot live outside the process (`unsaveable`), named in `Manifest.skipped`;
#: any other value that fails to save fails the save (a hand-made hibernation)
LEAVE_LIVE = "live"
#: whatever cannot be saved, named with why (the server is stopping: the kernel ends anyway)
LEAVE_ANY = "any"
LEAVE = (LEAVE_NOTHING, LEAVE_LIVE, LEAVE_ANY)


def save(namespace: Mapping[str, Any], dest: str | os.PathLike[str], max_bytes: int, *,
         hidden: Mapping[str, Any] | None = None, leave: str = LEAVE_LIVE,
         abandoned: str | os.PathLike[str] | None = None) -> Manifest:
    """Write the user's names in `namespace` to the new folder `dest`, at most `max_bytes`.

    Raises SnapshotTooLarge (naming the largest values) or NotEnoughSpace before or while
    writing, leaving nothing behind. What may be left unsaved is `leave`'s (`LEAVE`): those
    are in `Manifest.skipped`; any other value that cannot be saved raises Unsaved naming it,
    and nothing is left behind. `abandoned` is a file whose presence says the server gave up
    waiting for this save: then nothing is kept (checked again after the folder is in place,
    so a save that ends as the server gives up is removed by one of the two).
    """
    if leave not in LEAVE:
        raise ValueError(f"leave must be one of {LEAVE}, not {leave!r}")
    if where.is_remote(dest):
        return _save_remote(namespace, os.fspath(dest), max_bytes, hidden, leave, abandoned)
    dest = where.local_path(dest)
    if os.path.lexists(dest):
        raise SnapshotError(f"{dest} already exists")
    plan, skipped, sizes, total = _planned(namespace, hidden, max_bytes, leave)
    os.makedirs(dest.parent, mode=PRIVATE_DIR, exist_ok=True)
    free = shutil.disk_usage(dest.parent).free
    if total + SPACE_MARGIN > free:
        raise NotEnoughSpace(f"not enough free space in {dest.parent}: the snapshot needs about "
                             f"{_human(total + SPACE_MARGIN)}, {_human(free)} is free")
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=PARTIAL, dir=dest.parent))
    try:
        with digest.pool() as executor:  # its threads end with the save
            manifest = _write(namespace, plan, skipped, where.LocalFolder(tmp),
                              Budget(max_bytes), sizes, max_bytes, executor, leave, abandoned)
        _check_abandoned(abandoned)
        os.replace(tmp, dest)
        fsync_dir(dest.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        _check_abandoned(abandoned)
    except SnapshotError:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    return manifest


def _check_abandoned(marker: str | os.PathLike[str] | None) -> None:
    if marker is not None and os.path.lexists(marker):
        raise SnapshotError("the server gave up waiting for this save; nothing was kept")


def _planned(namespace: Mapping[str, Any], hidden: Mapping[str, Any] | None, max_bytes: int,
             leave: str
             ) -> tuple[list[tuple[str, Any, str]], list[Skipped], dict[str, int], int]:
    """`_plan`, each value's estimated size and their total; SnapshotTooLarge over the cap,
    Unsaved (before anything is written) when a value `leave` may not leave behind cannot
    be saved."""
    plan, skipped, live = _plan(namespace, hidden)
    blocking = [s for s in skipped if not _may_leave(s.name in live, leave)]
    if blocking:
        raise _unsaved(blocking, leave, all(s.name in live for s in blocking))
    sizes = {name: formats.estimate(value, kind) for name, value, kind in plan}
    total = sum(sizes.values())
    if total > max_bytes:
        raise _too_large(max_bytes, sizes, "")
    return plan, skipped, sizes, total


def _may_leave(live: bool, leave: str) -> bool:
    """Whether a save with `leave` may leave a value behind (`live`: one that cannot live
    outside the process) and still make a snapshot."""
    return leave == LEAVE_ANY or (leave == LEAVE_LIVE and live)


def _unsaved(blocking: list[Skipped], leave: str, all_live: bool) -> Unsaved:
    named = "; ".join(f"{s.name} ({s.reason})" for s in blocking)
    what = ("every variable must be saved" if leave == LEAVE_NOTHING else
            "only values that cannot live outside the process may be left behind")
    hint = (". A hand-made Hibernate leaves such values behind; or delete them first"
            if leave == LEAVE_NOTHING and all_live else "")
    return Unsaved(f"{_plural(len(blocking), 'variable')} could not be saved, and {what}: "
                   f"{named}{hint}", blocking)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _save_remote(namespace: Mapping[str, Any], dest: str, max_bytes: int,
                 hidden: Mapping[str, Any] | None, leave: str,
                 abandoned: str | os.PathLike[str] | None) -> Manifest:
    """`save` to an object-store prefix: files stream to their keys, the manifest last (the
    commit marker); on any failure the prefix is removed. No free-space check: the size cap
    is the limit there."""
    folder = where.RemoteFolder(dest)
    if folder.exists():
        raise SnapshotError(f"{folder.shown} already exists")
    plan, skipped, sizes, _ = _planned(namespace, hidden, max_bytes, leave)
    try:
        with digest.pool() as executor:  # its threads end with the save
            return _write(namespace, plan, skipped, folder, Budget(max_bytes), sizes,
                          max_bytes, executor, leave, abandoned)
    except BaseException:
        with contextlib.suppress(Exception):
            folder.discard()
        raise


def partial_folders(parent: str | os.PathLike[str]) -> list[Path]:
    """The unfinished snapshots in `parent`: being written now, or left by a kernel that died
    while saving. Never loaded; whoever owns `parent` decides when to remove them."""
    try:
        found = [p for p in Path(parent).iterdir()
                 if p.name.startswith(".") and p.name.endswith(PARTIAL) and p.is_dir()]
    except OSError:
        return []
    return sorted(found)


def _plan(namespace: Mapping[str, Any], hidden: Mapping[str, Any] | None
          ) -> tuple[list[tuple[str, Any, str]], list[Skipped], set[str]]:
    """The names to write, in the order they are written and restored (what others refer to
    first), those skipped with their reasons, and which of those are live resources."""
    plan: list[tuple[str, Any, str]] = []
    skipped: list[Skipped] = []
    live: set[str] = set()
    for name in names.user_names(namespace, hidden):
        value = namespace[name]
        try:
            reason = why_not(value)
            kind = "live" if reason is not None else formats.kind_of(value)
        except Exception as e:  # an object that fails even to be looked at (a broken proxy)
            reason, kind = f"cannot be inspected: {_short(e)}", ""
        if reason is not None:
            skipped.append(Skipped(name, reason))
            if kind == "live":
                live.add(name)
        else:
            plan.append((name, value, kind))

    def rank(item: tuple[str, Any, str]) -> tuple[int, int, str]:
        name, value, kind = item
        within = 0 if isinstance(value, type) else 1 if isinstance(value, FunctionType) else 2
        return formats.ORDER[kind], within, name

    return sorted(plan, key=rank), skipped, live


def _write(namespace: Mapping[str, Any], plan: list[tuple[str, Any, str]],
           skipped: list[Skipped], folder: where.Folder, budget: Budget, sizes: dict[str, int],
           max_bytes: int, executor: ThreadPoolExecutor, leave: str,
           abandoned: str | os.PathLike[str] | None) -> Manifest:
    entries: list[Entry] = []
    earlier: dict[int, str] = {}  # id of a saved value -> its name, for references
    used: set[str] = {"cloudpickle"}
    for i, (name, value, kind) in enumerate(plan):
        if kind == "module":
            entries.append(Entry(name, kind, formats.type_name(value), module=value.__name__))
            used.add(value.__name__.partition(".")[0])
            continue
        file = f"{i:04d}.{formats.SUFFIX[kind]}"
        try:
            sink = folder.sink(file, budget, executor)
        except WriteFailed as e:
            raise SnapshotError(f"could not write the snapshot in {folder.shown}: "
                                f"{where.scrub(str(e), folder.shown)}") from None
        try:
            written = formats.write(value, kind, sink, namespace, earlier)
            file_digest = sink.finish()
        except CapReached:
            sink.abandon()
            sizes[name] = sink.bytes
            raise _too_large(max_bytes, sizes, name) from None
        except WriteFailed as e:
            sink.abandon()
            if e.error.errno in (errno.ENOSPC, errno.EDQUOT):
                raise NotEnoughSpace(f"the disk filled up while writing the snapshot in "
                                     f"{folder.shown} ({e.error.strerror})") from None
            raise SnapshotError(f"could not write the snapshot in {folder.shown}: {e}") from None
        except Exception as e:  # RecursionError (too deep to pickle) included
            sink.abandon()
            folder.drop(file)
            is_live = isinstance(e, LiveResource)
            left = Skipped(name, str(e) if is_live else f"cannot be pickled: {_short(e)}")
            if not _may_leave(is_live, leave):
                raise _unsaved([left], leave, is_live) from None
            skipped.append(left)
            continue
        sizes[name] = sink.bytes
        entries.append(Entry(name, kind, formats.type_name(value), file=file, bytes=sink.bytes,
                             digest=file_digest, needs=written.needs,
                             buffers=written.buffers,
                             devices=formats.devices(value) if kind == "torch" else []))
        used.add(kind if kind in ("numpy", "pandas", "torch") else "cloudpickle")
        if pickling.referable(value):
            earlier[id(value)] = name
    manifest = Manifest(entries=entries, skipped=sorted(skipped, key=lambda s: s.name),
                        created=time.time(), python=platform.python_version(),
                        modules=_versions(used))
    _check_abandoned(abandoned)  # before the manifest, which makes it a snapshot
    try:
        folder.seal(manifest.to_json().encode())
    except WriteFailed as e:
        raise SnapshotError(f"could not write the snapshot in {folder.shown}: {e}") from None
    return manifest


def _versions(modules: set[str]) -> dict[str, str]:
    """The versions of the (top-level) modules the snapshot uses, where they say."""
    found: dict[str, str] = {}
    for name in sorted(modules):
        version = getattr(sys.modules.get(name), "__version__", None)
        if isinstance(version, str):
            found[name] = version
    return found


def _too_large(max_bytes: int, sizes: dict[str, int], writing: str) -> SnapshotTooLarge:
    largest = sorted(sizes.items(), key=lambda kv: -kv[1])[:3]
    listed = ", ".join(f"{n} ({'over ' if n == writing else ''}{_human(b)})"
                       for n, b in largest)
    return SnapshotTooLarge(f"the snapshot would be over its cap of {_human(max_bytes)}; the "
                            f"largest values: {listed}", largest)


def read_manifest(src: str | os.PathLike[str]) -> Manifest:
    """The manifest of the snapshot in `src`; CorruptSnapshot if there is none or it is not
    one (what the server reads to list a snapshot and check its MAC)."""
    if where.is_remote(src):
        url = os.fspath(src)
        return _parse_manifest(where.read_manifest_bytes(url, MANIFEST_LIMIT),
                               where.child(where.shown(url), MANIFEST))
    path = where.local_path(src) / MANIFEST
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as e:
        raise CorruptSnapshot(f"{src} has no readable manifest: the snapshot is incomplete "
                              f"or not a snapshot ({e.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        data = f.read(MANIFEST_LIMIT + 1)
    return _parse_manifest(data, str(path))


def _parse_manifest(data: bytes, path: str) -> Manifest:
    if len(data) > MANIFEST_LIMIT:
        raise CorruptSnapshot(f"{path} is too large to be a snapshot manifest")
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise CorruptSnapshot(f"{path} is not valid JSON: {e}") from None
    return Manifest.from_dict(doc)


def verify(src: str | os.PathLike[str], manifest: Manifest) -> None:
    """Every file is there, a plain file, with the size and digest the manifest records; else
    CorruptSnapshot naming it. Reads through small buffers: keeps nothing."""
    src = Path(src)
    _check_entries(src, manifest)
    with digest.pool() as executor:
        for e in manifest.entries:
            if e.file is not None:
                with _open(src, e) as fd:
                    try:
                        found = digest.read(fd, e.bytes, manifest.scheme, executor)
                    except digest.ShortRead:
                        raise _damaged(src, e) from None
                if found != e.digest:
                    raise _damaged(src, e)


def _check_entries(src: Path, manifest: Manifest) -> None:
    """What can be checked without reading: kinds, file names, and that every file is there,
    a plain file (not a link) of the recorded size. A missing or cut file is refused here,
    before anything is read, as is a snapshot whose hash cannot be computed here."""
    try:
        manifest.scheme.new()
    except digest.NoHash as why:
        raise SnapshotError(f"{why}; nothing was loaded") from None
    for e in manifest.entries:
        if e.kind not in formats.KINDS:
            raise CorruptSnapshot(f"{e.name}: unknown kind {e.kind!r}; nothing was loaded")
        if e.kind == "module":
            if not isinstance(e.module, str) or not e.module:
                raise CorruptSnapshot(f"{e.name}: no module recorded; nothing was loaded")
            continue
        if not isinstance(e.file, str) or not _FILE_NAME.match(e.file):
            raise CorruptSnapshot(f"{e.name}: bad file name {e.file!r}; nothing was loaded")
        if type(e.bytes) is not int or not isinstance(e.digest, str):
            raise _damaged(src, e)
        try:
            info = os.lstat(src / e.file)
        except OSError:
            raise _damaged(src, e) from None
        if not stat.S_ISREG(info.st_mode) or info.st_size != e.bytes:
            raise _damaged(src, e)


@contextmanager
def _open(src: Path, e: Entry) -> Iterator[int]:
    """The entry's file descriptor, opened without following links and checked again to be a
    plain file of the recorded size (it may have changed since `_check_entries`)."""
    try:
        fd = os.open(src / str(e.file), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        raise _damaged(src, e) from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size != e.bytes:
            raise _damaged(src, e)
        yield fd
    finally:
        os.close(fd)


def _read_array(src: Path, e: Entry, scheme: digest.Scheme, executor: ThreadPoolExecutor
                ) -> Any:
    """The verified array of a numpy entry, read straight into place; None where the file is
    not one `formats.read_numpy` reads (it is then read as bytes and loaded with numpy.load)."""
    with _open(src, e) as fd:
        try:
            read = formats.read_numpy(fd, e.bytes, scheme, executor)
        except digest.ShortRead:
            raise _damaged(src, e) from None
    if read is None:
        return None
    if read[1] != e.digest:
        raise _damaged(src, e)
    return read[0]


def _read_bytes(src: Path, e: Entry, scheme: digest.Scheme, executor: ThreadPoolExecutor
                ) -> memoryview:
    """The entry's file, in memory and verified: the only bytes a pickle is loaded from.
    Anonymous memory rather than a bytearray, which the main thread would first fill with
    zeros: its pages are touched first by the threads that read into them."""
    # private: a forked process (a data loader's worker) gets its own copy, as of any memory
    data = memoryview(mmap.mmap(-1, e.bytes, flags=mmap.MAP_PRIVATE) if e.bytes
                      else bytearray())
    with _open(src, e) as fd:
        try:
            found = digest.read(fd, e.bytes, scheme, executor, body=data)
        except digest.ShortRead:
            raise _damaged(src, e) from None
    if found != e.digest:
        raise _damaged(src, e)
    return data


def _damaged(src: Path, e: Entry) -> CorruptSnapshot:
    return CorruptSnapshot(f"the snapshot in {src} is damaged: {e.file} (the value of "
                           f"{e.name}) is missing, truncated or altered; nothing was loaded")


class _NotBack(Exception):
    """A value refers to an earlier name that did not come back."""


def restore(namespace: MutableMapping[str, Any], src: str | os.PathLike[str], *,
            expect_digest: str | None = None, staging: str | os.PathLike[str] | None = None
            ) -> RestoreResult:
    """Load the snapshot in `src` into `namespace`.

    Nothing unverified is loaded, and a damaged file anywhere leaves `namespace` as it was
    (CorruptSnapshot). `expect_digest` is the `manifest_digest` the server checked the MAC
    of; a different manifest is refused. A value that needs a module this environment lacks
    is named with it; the others come back.
    A snapshot in an object store is first fetched into a private folder in `staging`.
    """
    if where.is_remote(src):
        return _restore_remote(namespace, os.fspath(src), expect_digest, staging)
    src = where.local_path(src)
    manifest = read_manifest(src)
    if expect_digest is not None and manifest_digest(manifest) != expect_digest:
        raise CorruptSnapshot(f"the manifest in {src} is not the one that was checked; "
                              "nothing was loaded")
    _check_entries(src, manifest)
    with digest.pool() as executor:  # its threads end with the restore
        arrays: dict[str, Any] = {}
        for e in manifest.entries:  # arrays first: all read and verified before any pickle
            if e.kind == "numpy":
                array = _read_array(src, e, manifest.scheme, executor)
                if array is not None:
                    arrays[e.name] = array
        before = {e.name: namespace.get(e.name, _ABSENT) for e in manifest.entries}
        try:
            result = _load(namespace, src, manifest, arrays, executor)
        except BaseException:  # a file found altered midway: put the namespace back
            for name, value in before.items():
                if value is _ABSENT:
                    namespace.pop(name, None)
                else:
                    namespace[name] = value
            raise
    # what the kernel held under a restored name before (newer than the snapshot, perhaps)
    # is gone now: the answer says which, so no value is replaced without a word
    result.replaced = [name for name in result.restored
                       if before[name] is not _ABSENT and before[name] is not namespace[name]]
    return result


def _load(namespace: MutableMapping[str, Any], src: Path, manifest: Manifest,
          arrays: dict[str, Any], executor: ThreadPoolExecutor) -> RestoreResult:
    restored: list[str] = []
    failed: list[Skipped] = []
    notes: list[Note] = []

    def resolve(name: str) -> Any:
        if name not in restored:
            raise _NotBack(name)
        return namespace[name]

    builtins = namespace.get("__builtins__", _ABSENT)
    token = pickling.loading_into(namespace)  # type: ignore[arg-type]
    try:
        for e in manifest.entries:
            data = None
            if e.kind != "module" and e.name not in arrays:
                # outside the try below: an altered file stops the whole restore
                data = _read_bytes(src, e, manifest.scheme, executor)
            try:
                if e.kind == "module":
                    value = importlib.import_module(str(e.module))
                elif data is None:
                    value = arrays.pop(e.name)
                else:
                    value, more = formats.load(e, data, resolve)
                    notes.extend(more)
            except ModuleNotFoundError as err:
                needed = err.name or str(e.module)
                failed.append(Skipped(e.name, f"needs the module {needed!r}, which is not "
                                      "installed here", module=needed))
            except _NotBack as err:
                failed.append(Skipped(e.name, f"refers to {err}, which did not come back"))
            except Exception as err:
                module = e.module if e.kind == "module" else None
                failed.append(Skipped(e.name, f"could not be loaded: {_short(err)}", module))
            else:
                namespace[e.name] = value
                restored.append(e.name)
            del data  # one file's bytes in memory at a time
    finally:
        pickling.done_loading(token)
        # cloudpickle sets a restored function's __builtins__; keep the kernel's own
        if builtins is _ABSENT:
            namespace.pop("__builtins__", None)
        else:
            namespace["__builtins__"] = builtins
    return RestoreResult(restored=restored, skipped=[*manifest.skipped, *failed], notes=notes)


def _restore_remote(namespace: MutableMapping[str, Any], url: str, expect_digest: str | None,
                    staging: str | os.PathLike[str] | None) -> RestoreResult:
    """`restore` from an object store: the manifest is read and checked against
    `expect_digest` before any file is fetched; then the files it names stream into a private
    folder in `staging` (default: the temporary folder), after a free-space check, and that
    folder is restored as a local snapshot (verified there) and removed."""
    data = where.read_manifest_bytes(url, MANIFEST_LIMIT)
    manifest = _parse_manifest(data, where.child(where.shown(url), MANIFEST))
    if expect_digest is not None and manifest_digest(manifest) != expect_digest:
        raise CorruptSnapshot(f"the manifest in {where.shown(url)} is not the one that was "
                              "checked; nothing was loaded")
    files = [(e.file, e.bytes) for e in manifest.entries
             if isinstance(e.file, str) and _FILE_NAME.match(e.file) and isinstance(e.bytes, int)
             and e.bytes >= 0]
    parent = Path(staging) if staging is not None else Path(tempfile.gettempdir())
    os.makedirs(parent, mode=PRIVATE_DIR, exist_ok=True)
    need = sum(size for _, size in files) + SPACE_MARGIN
    free = shutil.disk_usage(parent).free
    if need > free:
        raise NotEnoughSpace(f"not enough free space in {parent} to fetch the snapshot: it "
                             f"needs about {_human(need)}, {_human(free)} is free")
    tmp = Path(tempfile.mkdtemp(prefix=".fetch.", suffix=PARTIAL, dir=parent))
    try:
        where.download(url, files, tmp)
        write_private(tmp / MANIFEST, data)
        return restore(namespace, tmp, expect_digest=expect_digest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _short(error: BaseException, limit: int = 200) -> str:
    text = f"{type(error).__name__}: {error}".replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _human(n: float) -> str:
    if n < 1000:
        return f"{n:,.0f} bytes"
    for unit in ("KB", "MB", "GB"):
        n /= 1000
        if n < 1000 or unit == "GB":
            break
    return f"{n:,.1f} {unit}"

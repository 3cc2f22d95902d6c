"""The server's word that it wrote a snapshot: HMAC-SHA256 with a key that never leaves the
server's data folder.

Loading a pickle runs code, so a kernel loads only a snapshot whose MAC checks. The MAC covers
`canonical_bytes(manifest)` (every file's size and digest, so the whole snapshot) together with
the index fields that say whose it is (id, notebook, user, kernel name): a manifest swapped in
from another snapshot, or an index row edited to name another notebook, does not check. The
key is 32 random bytes in a 0600 file made on first use; if it is lost, older snapshots are
refused, never loaded unchecked.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

from jupyter_costguard.common.files import PRIVATE_DIR, open_private
from jupyter_costguard.kernel.hibernate import Manifest, canonical_bytes

KEY_BYTES = 32
_CONTEXT = b"costguard-hibernate-mac-v1\n"


def load_key(path: Path) -> bytes:
    """The key in `path`, made (0600, atomically: two servers starting at once agree) when there
    is none. A file that is not a key is an error, not silently replaced."""
    path = Path(path)
    if not path.parent.exists():
        path.parent.mkdir(mode=PRIVATE_DIR, parents=True, exist_ok=True)
    try:
        fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "wb") as f:
            f.write(secrets.token_bytes(KEY_BYTES))
            f.flush()
            os.fsync(f.fileno())
    fd = open_private(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        key = f.read(KEY_BYTES + 1)
    if len(key) != KEY_BYTES:
        raise ValueError(f"{path} is not a costguard hibernate key ({len(key)} bytes); move it "
                         "away to make a new one (snapshots made with the old key are then "
                         "refused)")
    return key


def _message(binding: dict[str, Any], manifest: Manifest) -> bytes:
    head = json.dumps(binding, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return _CONTEXT + head.encode("ascii") + b"\n" + canonical_bytes(manifest)


def binding(snapshot_id: str, notebook: str, user: str | None, kernel_name: str
            ) -> dict[str, Any]:
    """The fields the MAC binds the manifest to."""
    return {"id": snapshot_id, "notebook": notebook, "user": user, "kernel_name": kernel_name}


def sign(key: bytes, bound: dict[str, Any], manifest: Manifest) -> str:
    return hmac.new(key, _message(bound, manifest), hashlib.sha256).hexdigest()


def verify(key: bytes, bound: dict[str, Any], manifest: Manifest, mac: str) -> bool:
    """Whether `mac` is this server's MAC of `manifest` for `bound` (constant time)."""
    return hmac.compare_digest(sign(key, bound, manifest), mac)

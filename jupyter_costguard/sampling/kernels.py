"""What the Jupyter server knows about its kernels, read without sending them a message.

Runs on the IO loop once per sample: attribute reads on the kernel manager and one query of
the session table, so gathering never blocks the loop and never resets a kernel's idle timer.
"""

from __future__ import annotations

import re
import time
from typing import Any

from jupyter_costguard.sampling.records import KernelInfo

#: JupyterLab starts a notebook's session under a placeholder path, a UUID (in the notebook's
#: folder), and sets the real path once the kernel is up (jupyter_server issue 1059).
_PLACEHOLDER = re.compile(r"(?:.*/)?[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def session_paths(session_manager: Any) -> dict[str, str]:
    """kernel id -> the notebook path of its session (one SELECT on the session table; the
    manager's own async listing also builds every kernel's model, which is slower).

    A placeholder path is no notebook yet: spend sampled then would otherwise go to a
    "notebook" named by a UUID, beside the real one."""
    try:
        rows = session_manager.cursor.execute("SELECT kernel_id, path FROM session").fetchall()
    except Exception:
        return {}
    return {
        kid: path for kid, path in rows
        if kid and not (isinstance(path, str) and _PLACEHOLDER.fullmatch(path))
    }


def gather_kernels(kernel_manager: Any, session_manager: Any) -> list[KernelInfo]:
    """One `KernelInfo` per running kernel of the server."""
    paths = session_paths(session_manager)
    counts = _connection_counts(kernel_manager)
    infos = []
    for kid in list(kernel_manager.list_kernel_ids()):
        try:
            kernel = kernel_manager.get_kernel(kid)
        except KeyError:
            continue
        provisioner = getattr(kernel, "provisioner", None)
        pid = getattr(provisioner, "pid", None)
        last = getattr(kernel, "last_activity", None)
        infos.append(KernelInfo(
            kernel_id=kid,
            name=getattr(kernel, "kernel_name", "") or "",
            pid=pid if isinstance(pid, int) else None,
            execution_state=getattr(kernel, "execution_state", "unknown") or "unknown",
            last_activity=last.timestamp() if last is not None else time.time(),
            connections=(int(counts.get(kid, 0)) if counts is not None
                         else _connections(kernel_manager, kid)),
            path=paths.get(kid),
        ))
    return infos


def _connection_counts(kernel_manager: Any) -> dict[str, int] | None:
    """kernel id -> open websocket connections: the table `kernel_model` reads its
    "connections" from (jupyter_server's MappingKernelManager), read once per sample
    instead of building every kernel's whole REST model; None where a manager has none."""
    counts = getattr(kernel_manager, "_kernel_connections", None)
    return counts if isinstance(counts, dict) else None


def _connections(kernel_manager: Any, kernel_id: str) -> int:
    """Open websocket connections, as the kernels REST model reports them."""
    try:
        return int(kernel_manager.kernel_model(kernel_id).get("connections", 0))
    except Exception:
        return 0

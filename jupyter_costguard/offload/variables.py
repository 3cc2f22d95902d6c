"""Variables in and results out: the code that runs in the user's interactive kernel.

Sending: at submit the server asks the notebook's kernel to pickle the named variables into
the job's ``inputs.pkl`` (plain pickle, no costguard import, so any Python kernel can), with a
size limit checked before anything is written. Loading results back is the reverse: a snippet
(`load_code`) that the UI runs in the kernel, or ``%costguard fetch JOB``. A results pickle is
loaded only when costguard recorded that the job produced it, from a directory and file owned
by the user that group and others cannot write, and only if its sha256 is the one the server
recorded when the job ended.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

SEND = """\
def _costguard_send(names, path, limit):
    import json, os, pickle
    g = globals()
    missing = [n for n in names if n not in g]
    if missing:
        return json.dumps({"error": "not defined in the kernel: " + ", ".join(missing)})
    data = pickle.dumps({n: g[n] for n in names}, protocol=pickle.HIGHEST_PROTOCOL)
    if len(data) > limit:
        sizes = sorted(((len(pickle.dumps(g[n], protocol=pickle.HIGHEST_PROTOCOL)), n)
                        for n in names), reverse=True)
        big = ", ".join(f"{n} ({s:,} bytes)" for s, n in sizes[:3])
        return json.dumps({"error": "too large", "size": len(data), "largest": big})
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)
    return json.dumps({"size": len(data)})
"""

LOAD = """\
def _costguard_load(path, digest, names):
    import hashlib, os, pickle, stat
    for p in (os.path.dirname(path), path):
        st = os.stat(p)
        if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
            raise ValueError("costguard: not loading job {job}'s results: " + p + " is not "
                             "owned by you, or is writable by group or others")
    with open(path, "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != digest:
        raise ValueError("costguard: not loading job {job}'s results: " + path + " does not "
                         "match the sha256 recorded when the job ended")
    values = pickle.loads(data)
    if names is not None:
        values = {{n: values[n] for n in names if n in values}}
    globals().update(values)
    print("costguard: loaded " + (", ".join(sorted(values)) or "nothing") + " from job {job}")
try:
    _costguard_load({path!r}, {digest!r}, {names!r})
finally:
    del _costguard_load
"""


class SendError(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


def load_code(job_id: int, path: str, digest: str, names: list[str] | None = None) -> str:
    """What loads job `job_id`'s results from `path` in the user's kernel, if the file is
    still the one whose sha256 the server recorded (`digest`): every name in it, or only
    `names` (Python identifiers, so that the code names nothing else)."""
    if names is not None:
        bad = [n for n in names if not isinstance(n, str) or not n.isidentifier()]
        if bad:
            raise ValueError(f"not Python names: {bad!r}")
        names = list(dict.fromkeys(names))
    return LOAD.format(job=job_id, path=path, digest=digest, names=names)


async def send_variables(kernel_manager: Any, kernel_id: str, names: list[str], path: str,
                         limit: int, timeout: float = 30.0) -> int:
    """Pickle `names` from the kernel into `path`; returns the size. The request waits in the
    kernel's queue like any cell, so a busy kernel answers late: after `timeout`, 409."""
    try:
        kernel = kernel_manager.get_kernel(kernel_id)
    except KeyError:
        raise SendError(f"kernel {kernel_id} is not running", 404) from None
    client = kernel.client()
    client.start_channels()
    try:
        await asyncio.wait_for(client.wait_for_ready(timeout=timeout), timeout)
        expr = f"_costguard_send({names!r}, {path!r}, {limit!r})"
        reply = await asyncio.wait_for(client.execute_interactive(
            SEND + "\n", silent=True, store_history=False,
            user_expressions={"r": expr}, timeout=timeout, output_hook=lambda msg: None),
            timeout + 1)
    except (asyncio.TimeoutError, TimeoutError):
        raise SendError(f"kernel {kernel_id} did not answer within {timeout:g} s (is a cell "
                        "still running?); send the variables when it is idle", 409) from None
    finally:
        client.stop_channels()
    content = reply.get("content", {})
    if content.get("status") != "ok":
        raise SendError(f"the kernel could not pickle the variables: "
                        f"{content.get('ename')}: {content.get('evalue')}")
    result = content.get("user_expressions", {}).get("r", {})
    if result.get("status") != "ok":
        raise SendError(f"the kernel could not pickle the variables: "
                        f"{result.get('ename')}: {result.get('evalue')}")
    try:
        doc = json.loads(_literal(result["data"]["text/plain"]))
    except (KeyError, ValueError):
        raise SendError("the kernel sent an unreadable answer") from None
    if doc.get("error") == "too large":
        raise SendError(f"the variables to send pickle to {doc['size']:,} bytes, over the limit "
                        f"of {limit:,} (c.Offload.max_send_bytes); largest: "
                        f"{doc['largest']}. Save big data to a file and declare it as an "
                        "input instead.", 413)
    if "error" in doc:
        raise SendError(str(doc["error"]))
    return int(doc["size"])


def _literal(text: str) -> str:
    """The repr of a str, as text/plain shows it, back to the str."""
    import ast

    value = ast.literal_eval(text)
    if not isinstance(value, str):
        raise ValueError(text)
    return value

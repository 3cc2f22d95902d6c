"""One hibernate call run in a live kernel of the server, and its answer.

A client of the server's kernel manager sends the cell with `store_history=False` and
`silent=True` (no execution count, no `Out`, nothing in the user's history) and reads the
reply line `kernel/hibernate/entry` prints on stdout. It waits in the kernel's queue like any
cell, so the service refuses a busy kernel first; past `timeout` the call is given up and says
so (the kernel is left running).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from jupyter_client.session import Session

from jupyter_costguard.hibernate.errors import HibernateError
from jupyter_costguard.kernel.hibernate import parse_reply


def own_session(kernel: Any) -> Session:
    """A session of the call's own (the kernel's key, a new id): clients made from the
    kernel's manager share its session, whose id names their shell socket, so two at once (a
    restore at a kernel's start and an offload's look at its variables) would get each
    other's replies."""
    base = kernel.session
    return Session(key=base.key, signature_scheme=base.signature_scheme,
                   username=base.username)


async def call(kernel: Any, kernel_id: str, code: str, timeout: float, doing: str,
               started: Callable[[], None] | None = None) -> dict[str, Any]:
    """The answer of `code` (a `save_code`/`restore_code` cell) in `kernel`; HibernateError
    (409) when the kernel does not answer in time, fails to run it, or prints no answer.
    `started` is called once the kernel has begun running it (its first message about it):
    from then on whatever else reaches the kernel's shell channel runs after it."""
    out: list[str] = []

    tell = [started] if started is not None else []

    def hook(msg: dict[str, Any]) -> None:
        while tell:
            tell.pop()()
        if msg.get("msg_type") == "stream" and msg["content"].get("name") == "stdout":
            out.append(msg["content"].get("text", ""))

    client = kernel.client(session=own_session(kernel))

    async def run() -> dict[str, Any]:
        await client.wait_for_ready(timeout=timeout)
        reply: dict[str, Any] = await client.execute_interactive(
            code, silent=True, store_history=False, allow_stdin=False, output_hook=hook,
            timeout=timeout)
        return reply

    client.start_channels()
    try:  # one deadline for the whole call, waiting for the kernel included
        reply = await asyncio.wait_for(run(), timeout)
    except (asyncio.TimeoutError, TimeoutError):
        raise HibernateError(f"kernel {kernel_id} did not finish {doing} within {timeout:g} s "
                             "(c.Hibernate.timeout_seconds); it keeps running",
                             409) from None
    except RuntimeError as e:  # the kernel died while we waited
        raise HibernateError(f"kernel {kernel_id} stopped answering while {doing}: {e}",
                             409) from None
    finally:
        client.stop_channels()
    content = reply.get("content", {})
    if content.get("status") != "ok":
        raise HibernateError(
            f"kernel {kernel_id} could not run costguard's {doing}: {content.get('ename')}: "
            f"{content.get('evalue')} (is jupyter-costguard installed in the kernel's "
            "environment?)", 409)
    try:
        doc = parse_reply("".join(out))
    except ValueError:
        doc = None
    if doc is None:
        raise HibernateError(f"kernel {kernel_id} gave no answer while {doing}", 409)
    return doc

"""A client on a kernel's own ZMQ channels, as `jupyter console --existing` attaches, that
returns only once the Jupyter server hears the kernel's status messages.

jupyter_server learns a kernel's execution state from the status messages that reach its own
iopub subscription, made when the kernel starts. ZMQ drops whatever a publisher sends before a
subscription is in force (its "slow joiner"), and a status lost that way is never sent again:
on a loaded machine a cell run at once by a directly attached client can stay "starting" in
the server's eyes until the cell ends (tests/test_guard_budget.py sat 60 s so). JupyterLab never
meets this, because the server's websocket nudges a kernel with kernel_info requests until
iopub answers before it passes a message on; a directly attached client nudges the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from jupyter_client import BlockingKernelClient


def attach(connection_file: Path, server_state: Callable[[], str],
           timeout: float = 120.0) -> BlockingKernelClient:
    """Channels started on the kernel of `connection_file`; `server_state()` reads the
    server's execution state of that kernel. One kernel_info request at a time, its own reply
    read (not `wait_for_ready`, which asks again every second and calls a kernel whose
    heartbeat is late dead), until the server reads anything but "starting"."""
    client = BlockingKernelClient(connection_file=str(connection_file))
    client.load_connection_file()
    client.start_channels(hb=False)
    deadline = time.monotonic() + timeout
    try:
        while True:
            request = client.kernel_info()
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no kernel_info reply within {timeout} s")
                reply = client.get_shell_msg(timeout=left)
                if reply["parent_header"].get("msg_id") == request:
                    break
            # the reply's status messages went out before it: give the server a moment to
            # read them, then ask again (its subscription may have missed them)
            heard = time.monotonic() + 2.0
            while time.monotonic() < heard:
                if server_state() != "starting":
                    return client
                time.sleep(0.1)
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server did not hear the kernel within {timeout} s")
    except BaseException:
        client.stop_channels()
        raise


#: a client in a process of its own (jupyter_client's blocking client wants a thread with no
#: event loop of the caller's): runs argv[2] in the kernel of connection file argv[1] and
#: prints its stream output, then the reply's status
KERNEL_CLIENT = """
import sys
from jupyter_client import BlockingKernelClient
client = BlockingKernelClient(connection_file=sys.argv[1])
client.load_connection_file()
client.start_channels(hb=False)
client.wait_for_ready(timeout=60)
out = []
reply = client.execute_interactive(sys.argv[2], timeout=60, output_hook=lambda m: out.append(
    m["content"].get("text", "") if m["msg_type"] == "stream" else ""))
client.stop_channels()
print("".join(out), reply["content"]["status"])
"""

"""The notebook client a job's cells run through: nbclient's, streaming each output into the
job's log as it arrives (the log is what the user follows while the job runs)."""

from __future__ import annotations

import re
from typing import Any, Protocol

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


class LogSink(Protocol):
    def write(self, text: str) -> None: ...


def _client_class() -> Any:
    from nbclient import NotebookClient

    class Client(NotebookClient):
        """Streams each output into the job's log as it arrives."""

        def __init__(self, runner: LogSink | None, nb: Any, **kw: Any) -> None:
            super().__init__(nb, **kw)
            #: where outputs go; None while a warm kernel waits for its job
            self.runner = runner

        def output(self, outs: Any, msg: dict[str, Any], display_id: Any,
                   cell_index: int) -> Any:
            out = super().output(outs, msg, display_id, cell_index)
            if self.runner is None:
                return out
            content = msg.get("content", {})
            kind = msg.get("msg_type")
            if kind == "stream":
                self.runner.write(content.get("text", ""))
            elif kind == "error":
                self.runner.write(ANSI.sub("", "\n".join(content.get("traceback", []))) + "\n")
            elif kind in ("execute_result", "display_data"):
                text = content.get("data", {}).get("text/plain")
                if text:
                    self.runner.write(f"{text}\n")
            return out

    return Client


def job_client(runner: LogSink | None, nb: Any, kernel_name: str) -> Any:
    """A client for `nb` in a new `kernel_name` kernel (nbclient imported only here: the
    runner's module loads without it)."""
    return _client_class()(runner, nb, kernel_name=kernel_name, timeout=None,
                           startup_timeout=120, shutdown_kernel="immediate")

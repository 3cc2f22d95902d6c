"""What IPython does to a cell before Python sees it: the transformation of magics, `!shell`
and `?help` into calls, and which magics run their body as Python."""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable

#: Magics whose body is Python run in the user's namespace: it defines names.
EXEC_MAGICS = frozenset({"time", "prun", "capture"})
#: Magics whose body is Python run in a scope of its own (timeit wraps it in a function).
SCOPED_MAGICS = frozenset({"timeit"})
#: Options (those taking a value, plain flags) to skip before the Python statement of a magic.
_MAGIC_OPTIONS = {"timeit": ("nrp", "tcqo"), "prun": ("DlsT", "rq")}


def transformer() -> Callable[[str], str]:
    """A cell's source as IPython would run it (`get_ipython().run_line_magic(...)` etc.)."""
    # IPython is there wherever ipykernel is; imported here as it is slow to import and untyped.
    manager = importlib.import_module("IPython.core.inputtransformer2").TransformerManager()

    def transform(source: str) -> str:
        return str(manager.transform_cell(source))

    return transform


def strip_options(arg: str, magic: str) -> str:
    """Drop `-n 3`-style options before a magic's Python statement."""
    with_value, flags = _MAGIC_OPTIONS.get(magic, ("", ""))
    rest = arg
    while True:
        m = re.match(r"\s*-(\S+)", rest)
        if m is None:
            return rest.lstrip()
        cluster, tail = m.group(1), rest[m.end() :]
        for i, char in enumerate(cluster):
            if char in flags:
                continue
            if char in with_value:
                if i == len(cluster) - 1:  # the value is the next word
                    tail = re.sub(r"^\s*\S+", "", tail, count=1)
                break
            return rest.lstrip()  # not an option: the statement starts here (e.g. `-x`)
        rest = tail

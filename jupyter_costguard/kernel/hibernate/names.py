"""Which names of a kernel's namespace are the user's: IPython's own (the history, `exit`,
`get_ipython`, `_`-names) are neither saved nor listed as skipped."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

#: names IPython binds in every kernel; restoring them would clobber the new kernel's own
IPYTHON_NAMES = frozenset({"In", "Out", "exit", "quit", "get_ipython"})

_ABSENT = object()


def user_names(namespace: Mapping[str, Any],
               hidden: Mapping[str, Any] | None = None) -> Iterator[str]:
    """The user's names in `namespace`, sorted. `hidden` is IPython's `user_ns_hidden`: a name
    still bound to the object IPython put there is IPython's, as `%who` decides."""
    hidden = hidden or {}
    for name in sorted(n for n in namespace if isinstance(n, str)):
        if name.startswith("_") or name in IPYTHON_NAMES:
            continue
        if hidden.get(name, _ABSENT) is namespace[name]:
            continue
        yield name

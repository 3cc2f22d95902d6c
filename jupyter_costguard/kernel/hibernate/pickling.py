"""Pickling one name of a namespace, so it comes back *into* a namespace.

Three differences from plain cloudpickle, all for values that live in a notebook:

* A function defined in the notebook keeps the notebook as its globals: its `__globals__` is
  written as a reference to "the namespace being restored" (`_namespace`), not as a copy of
  the globals it uses. So restored functions see later assignments, and saving one does not
  copy the big arrays it reads (nor fail because it reads an open file).
* An object that is also the value of an earlier saved name is written as a reference to that
  name (a persistent id), so `data = {"X": X}` stays one X, and an instance's class is the
  restored class. Only earlier names are referred to, so the references never form a cycle.
* Modules are pickled by name (cloudpickle's default), never referred to.
"""

from __future__ import annotations

import contextvars
import io
import pickle
from collections.abc import Callable, Mapping
from typing import IO, Any

import cloudpickle

from jupyter_costguard.kernel.hibernate.unsaveable import LiveResource, why_not

#: the namespace a restore is loading into; notebook functions' globals resolve to it
_target: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("hibernate_target")

#: values that are equal when they are the same, and cheap: never referred to by name
_ATOMIC = (int, float, complex, str, bytes, bool, type(None), tuple, frozenset, range,
           type(Ellipsis), type(NotImplemented))

PROTOCOL = 5

#: whether values of a type are live resources (`unsaveable.why_not`), as found so far
_live_types: dict[type, bool] = {}
_LIVE_TYPES_KEPT = 4096


def _reason(obj: Any) -> str | None:
    try:
        return why_not(obj)
    except Exception:  # an object that fails to be looked at: pickling says what next
        return None


def referable(value: Any) -> bool:
    """Whether another value holding `value` refers to it by name rather than copying it:
    not for small immutable values, whose identity means nothing (`x = 5; y = [5]`)."""
    return not isinstance(value, _ATOMIC)


def _namespace() -> dict[str, Any]:
    """The namespace being restored into (an unpickled function's globals)."""
    return _target.get()


class _NamespaceToken(dict[str, Any]):
    """Stands for the notebook's namespace where a function's globals would be written."""

    def __reduce__(self) -> tuple[Callable[[], dict[str, Any]], tuple[()]]:
        return (_namespace, ())


class Pickler(cloudpickle.Pickler):
    """cloudpickle, with the notebook's globals as a reference and earlier names referred to."""

    def __init__(self, file: IO[bytes], namespace: Mapping[str, Any],
                 earlier: Mapping[int, str] | None = None,
                 buffer_callback: Callable[[pickle.PickleBuffer], Any] | None = None) -> None:
        super().__init__(file, protocol=PROTOCOL, buffer_callback=buffer_callback)
        self._namespace_dict = namespace
        self._earlier = earlier or {}
        self.needs: set[str] = set()
        # functions whose globals are the namespace get this (empty) dict as theirs
        self.globals_ref[id(namespace)] = _NamespaceToken()

    def _dynamic_function_reduce(self, func: Any) -> Any:
        reduced = super()._dynamic_function_reduce(func)
        if func.__globals__ is self._namespace_dict:
            make, args, (state, slotstate), *rest = reduced
            slotstate = {**slotstate, "__globals__": {}}
            reduced = (make, args, (state, slotstate), *rest)
        return reduced

    def reducer_override(self, obj: Any) -> Any:
        # called for every object but the plain builtins: a live resource inside a value
        # (an object holding a lock, a socket, an open file) is named as what it is, so the
        # save can tell it from an unexpected failure. Whether a value is one depends on its
        # type alone: asked once per type
        cls = type(obj)
        live = _live_types.get(cls)
        if live is None:
            live = _reason(obj) is not None
            if len(_live_types) >= _LIVE_TYPES_KEPT:  # classes made on the fly: bounded
                _live_types.clear()
            _live_types[cls] = live
        if live:
            reason = _reason(obj)
            if reason is not None:
                raise LiveResource(f"holds {reason}")
        return super().reducer_override(obj)

    def persistent_id(self, obj: Any) -> Any:
        # called for every object pickled: the id lookup first, which misses for nearly all
        name = self._earlier.get(id(obj))
        if name is None or not referable(obj):
            return None
        self.needs.add(name)
        return ("name", name)


class Unpickler(pickle.Unpickler):
    """Reads what `Pickler` wrote; a reference to an earlier name is that name's restored
    value, looked up with `resolve` (which raises if it did not come back)."""

    def __init__(self, file: IO[bytes] | io.RawIOBase, resolve: Callable[[str], Any],
                 buffers: list[memoryview] | None = None) -> None:
        super().__init__(file, buffers=buffers)
        self._resolve = resolve

    def persistent_load(self, pid: Any) -> Any:
        if isinstance(pid, tuple) and len(pid) == 2 and pid[0] == "name":
            return self._resolve(str(pid[1]))
        raise pickle.UnpicklingError(f"unknown reference {pid!r}")


def loading_into(namespace: dict[str, Any]) -> contextvars.Token[dict[str, Any]]:
    """Make `namespace` the globals of the notebook functions about to be unpickled; pass the
    token to `_target.reset` afterwards (see `snapshot.restore`)."""
    return _target.set(namespace)


def done_loading(token: contextvars.Token[dict[str, Any]]) -> None:
    _target.reset(token)

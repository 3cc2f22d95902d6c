"""How each kind of value is written and read back.

* ``module``: recorded by name (the module's own, so ``import os.path as osp`` records
  ``posixpath`` bound to ``osp``) and imported again on restore; no file.
* ``numpy``: an exact ``ndarray`` without Python objects inside, ``numpy.save`` /
  ``numpy.load(allow_pickle=False)``: the array's bytes go straight to the file, and reading
  runs no code.
* ``pandas``: an exact ``DataFrame``/``Series``, pickle protocol 5 (the column buffers stream
  to the file without a copy; every dtype, index and attribute comes back exactly, and it needs
  no pyarrow). Same pickler as ``pickle``, its own kind for the listing and the size estimate.
* ``torch``: a tensor or ``nn.Module``, ``torch.save`` (only when torch is already imported).
  torch copies each GPU storage to host memory as it writes it and records its device; the
  value comes back on that device when it exists here, else on the CPU with a note.
* ``pickle``: everything else, cloudpickle (notebook functions, classes and lambdas by value),
  through `pickling.Pickler`.
"""

from __future__ import annotations

import importlib
import itertools
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import cloudpickle

from jupyter_costguard.kernel.hibernate import pickling
from jupyter_costguard.kernel.hibernate.records import Entry, Note
from jupyter_costguard.kernel.hibernate.sink import Sink

KINDS = ("module", "numpy", "pandas", "torch", "pickle")
SUFFIX = {"numpy": "npy", "pandas": "pkl", "torch": "pt", "pickle": "pkl"}
#: restore order: what others refer to first (a class before its instances)
ORDER = {"module": 0, "numpy": 1, "pandas": 1, "torch": 1, "pickle": 2}


def type_name(value: Any) -> str:
    cls = type(value)
    return f"{cls.__module__}.{cls.__qualname__}"


def kind_of(value: Any) -> str:
    """Which format writes `value`. Only libraries the kernel already imported are asked."""
    if isinstance(value, ModuleType):
        return "module" if sys.modules.get(value.__name__) is value else "pickle"
    np = sys.modules.get("numpy")
    if np is not None and type(value) is np.ndarray and not value.dtype.hasobject:
        return "numpy"
    pd = sys.modules.get("pandas")
    if pd is not None and type(value) in (pd.DataFrame, pd.Series):
        return "pandas"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, (torch.Tensor, torch.nn.Module)):
        return "torch"
    return "pickle"


def estimate(value: Any, kind: str) -> int:
    """Bytes `value` will take, cheaply: exact for arrays and tensors, close for frames, a
    floor for the rest (the write itself holds the cap)."""
    if kind == "module":
        return 0
    if kind == "numpy":
        return int(value.nbytes) + 128
    if kind == "pandas":
        usage = value.memory_usage(deep=True)
        return int(usage.sum() if hasattr(usage, "sum") else usage)
    if kind == "torch":
        torch = sys.modules["torch"]
        if isinstance(value, torch.Tensor):
            return int(value.nelement() * value.element_size())
        tensors = [*value.parameters(), *value.buffers()]
        return sum(int(t.nelement() * t.element_size()) for t in tensors)
    return _shallow_size(value)


def _shallow_size(value: Any) -> int:
    """The container and (from a sample of up to 1,000) its items, one level deep."""
    try:
        size = sys.getsizeof(value)
        if isinstance(value, (list, tuple, set, frozenset, dict)):
            items = value.items() if isinstance(value, dict) else value
            sample = list(itertools.islice(items, 1000))
            each = sum(_getsizeof(v) for v in sample) / max(1, len(sample))
            size += int(each * len(value))
    except Exception:  # an estimate: a strange __len__ or __sizeof__ only makes it lower
        return 0
    return int(size)


def _getsizeof(item: Any) -> int:
    if isinstance(item, tuple):  # a dict's (key, value)
        return sum(sys.getsizeof(v) for v in item)
    return sys.getsizeof(item)


def devices(value: Any) -> list[str]:
    """The devices a torch value's tensors are on."""
    torch = sys.modules["torch"]
    if isinstance(value, torch.Tensor):
        return [str(value.device)]
    return sorted({str(t.device) for t in (*value.parameters(), *value.buffers())})


def write(value: Any, kind: str, sink: Sink, namespace: Mapping[str, Any],
          earlier: Mapping[int, str]) -> list[str]:
    """Stream `value` into `sink`; the earlier names it refers to."""
    if kind == "numpy":
        np = sys.modules["numpy"]
        np.save(sink, value, allow_pickle=False)
        return []
    if kind == "torch":
        torch = sys.modules["torch"]
        # cloudpickle: a model class defined in the notebook is written by value too
        torch.save(value, sink, pickle_module=cloudpickle)
        return []
    pickler = pickling.Pickler(sink, namespace, earlier)  # type: ignore[arg-type]
    pickler.dump(value)
    return sorted(pickler.needs)


def read(entry: Entry, path: Path, resolve: Callable[[str], Any]) -> tuple[Any, list[Note]]:
    """The value `entry` saved in `path`, and notes on how it came back."""
    if entry.kind == "numpy":
        np = importlib.import_module("numpy")
        with open(path, "rb") as f:
            return np.load(f, allow_pickle=False), []
    if entry.kind == "torch":
        return _read_torch(entry, path)
    with open(path, "rb") as f:
        return pickling.Unpickler(f, resolve).load(), []


def _read_torch(entry: Entry, path: Path) -> tuple[Any, list[Note]]:
    torch = importlib.import_module("torch")
    missing = [d for d in entry.devices if not _device_here(torch, d)]
    notes: list[Note] = []
    map_location = None
    if missing:
        map_location = "cpu"
        notes.append(Note(entry.name, f"was on {', '.join(missing)}, which this machine does "
                                      "not have: restored to the CPU"))
    with open(path, "rb") as f:
        # the file's sha256 was checked against the manifest first (and the manifest by the
        # server's MAC): loading it whole, classes and all, is what saving it meant
        value = torch.load(f, map_location=map_location, weights_only=False)
    return value, notes


def _device_here(torch: Any, device: str) -> bool:
    kind, _, index = device.partition(":")
    if kind == "cpu" or kind == "meta":
        return True
    backend = getattr(torch, kind, None)
    available = getattr(backend, "is_available", None)
    if backend is None or available is None or not available():
        return False
    count = getattr(backend, "device_count", None)
    return not index or count is None or int(index) < int(count())

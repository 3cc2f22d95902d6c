"""How each kind of value is written and read back.

* ``module``: recorded by name (the module's own, so ``import os.path as osp`` records
  ``posixpath`` bound to ``osp``) and imported again on restore; no file.
* ``numpy``: an exact ``ndarray`` without Python objects inside, in ``.npy`` format: the
  header, then the array's own memory handed to the sink chunk by chunk (``numpy.save`` would
  copy each chunk with ``tobytes``, as the sink is not a real file). Read back in one pass
  straight into a new array, hashed there (`read_numpy`), or from verified bytes with
  ``numpy.load(allow_pickle=False)``; reading runs no code.
* ``pandas``: an exact ``DataFrame``/``Series``, pickle protocol 5 (every dtype, index and
  attribute comes back exactly, and it needs no pyarrow). Same pickler as ``pickle``, its own
  kind for the listing and the size estimate.
* ``torch``: a tensor or ``nn.Module``, ``torch.save`` (only when torch is already imported).
  torch copies each GPU storage to host memory as it writes it and records its device; the
  value comes back on that device when it exists here, else on the CPU with a note.
* ``pickle``: everything else, cloudpickle (notebook functions, classes and lambdas by value),
  through `pickling.Pickler`.

A pickle's protocol-5 out-of-band buffers (the columns of a frame, arrays inside a dict, a
bytearray) are written after the pickle stream, each from the value's own memory, 64-byte
aligned; on restore the file's verified bytes are those values' memory, so they are not
copied again.
"""

from __future__ import annotations

import importlib
import io
import itertools
import pickle
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import cloudpickle

from jupyter_costguard.kernel.hibernate import digest, pickling
from jupyter_costguard.kernel.hibernate.records import Entry, Note
from jupyter_costguard.kernel.hibernate.sink import Sink

KINDS = ("module", "numpy", "pandas", "torch", "pickle")
SUFFIX = {"numpy": "npy", "pandas": "pkl", "torch": "pt", "pickle": "pkl"}
#: restore order: what others refer to first (a class before its instances)
ORDER = {"module": 0, "numpy": 1, "pandas": 1, "torch": 1, "pickle": 2}
#: an array's bytes are handed to the sink this many at a time: small enough to stay in the
#: CPU's cache between the hash and the copy
CHUNK = 4 << 20
#: the file offset of each out-of-band buffer is a multiple of this (the file is read into
#: page-aligned memory), so the arrays built on them are aligned
BUFFER_ALIGN = 64


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


@dataclass
class Written:
    """What `write` tells the manifest: the earlier names the value refers to, and where in
    the file the pickle's out-of-band buffers lie ([offset, bytes] each)."""

    needs: list[str] = field(default_factory=list)
    buffers: list[list[int]] = field(default_factory=list)


def write(value: Any, kind: str, sink: Sink, namespace: Mapping[str, Any],
          earlier: Mapping[int, str]) -> Written:
    """Stream `value` into `sink`."""
    if kind == "numpy":
        _write_numpy(sys.modules["numpy"], value, sink)
        return Written()
    if kind == "torch":
        torch = sys.modules["torch"]
        # cloudpickle: a model class defined in the notebook is written by value too
        torch.save(value, sink, pickle_module=cloudpickle)
        return Written()
    # protocol 5's out-of-band buffers (the arrays inside a frame, bytearrays) are written
    # after the pickle, each from its own memory, and on restore become the arrays' memory
    # without a copy (`load`)
    buffers: list[pickle.PickleBuffer] = []
    pickler = pickling.Pickler(sink, namespace, earlier,  # type: ignore[arg-type]
                               buffer_callback=buffers.append)
    pickler.dump(value)
    placed: list[list[int]] = []
    for buffer in buffers:
        raw = buffer.raw()  # the pickler takes only contiguous buffers
        pad = -sink.bytes % BUFFER_ALIGN  # aligned, as numpy allocates
        if pad:
            sink.write(bytes(pad))
        placed.append([sink.bytes, raw.nbytes])
        for start in range(0, raw.nbytes, CHUNK):
            sink.write(raw[start:start + CHUNK])
        buffer.release()
    return Written(sorted(pickler.needs), placed)


def _write_numpy(np: Any, value: Any, sink: Sink) -> None:
    """The `.npy` header, then the array's memory itself: no copy of the data. An array that
    is not contiguous, or whose header needs format 3.0, goes through `numpy.save`."""
    fmt = np.lib.format
    data = _bytes_of(np, value)
    header = io.BytesIO()
    try:
        if data is None:
            raise ValueError("not contiguous")
        meta = fmt.header_data_from_array_1_0(value)
        try:
            fmt.write_array_header_1_0(header, meta)
        except ValueError:  # a header over 64 KiB
            header = io.BytesIO()
            fmt.write_array_header_2_0(header, meta)
    except ValueError:  # a strided array, or field names only format 3.0 can hold
        np.save(sink, value, allow_pickle=False)
        return
    sink.write(header.getbuffer())
    for start in range(0, data.nbytes, CHUNK):
        sink.write(data[start:start + CHUNK])


def _bytes_of(np: Any, array: Any) -> memoryview | None:
    """The array's memory as bytes, in the order `.npy` stores it (C order, or Fortran order
    for an array that is only Fortran-contiguous); None if it is neither."""
    if array.flags.c_contiguous:
        ordered = array
    elif array.flags.f_contiguous:
        ordered = array.T
    else:
        return None
    try:
        return memoryview(ordered.reshape(-1).view(np.uint8))
    except (ValueError, TypeError):  # an itemsize-0 dtype and the like
        return None


class _RecordingReader:
    """Reads a file for numpy's header parser, keeping what it hands over: the header bytes
    that are hashed are the ones that were parsed."""

    def __init__(self, f: io.RawIOBase) -> None:
        self.f = f
        self.seen = bytearray()

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n) or b""
        self.seen += data
        return data


def read_numpy(fd: int, size: int, scheme: digest.Scheme, executor: ThreadPoolExecutor
               ) -> tuple[Any, str] | None:
    """The array in the `.npy` file `fd` (`size` bytes, checked by the caller) and the file's
    digest under `scheme`, read in one pass: the bytes go straight into the new array, and
    are hashed there, on `executor`'s threads. The caller compares the digest and drops the
    array if it differs; reading an array runs no code.

    None where this path does not apply (a header it does not read, object arrays): the
    caller then reads the file as bytes (`digest.read`), checks them, and loads them with
    `load`, which names what is wrong. Raises digest.ShortRead if the file shrinks."""
    np = importlib.import_module("numpy")
    reader = _RecordingReader(io.FileIO(fd, "rb", closefd=False))
    fmt = np.lib.format
    try:
        version = fmt.read_magic(reader)
        if version == (1, 0):
            shape, fortran, dtype = fmt.read_array_header_1_0(reader)
        elif version == (2, 0):
            shape, fortran, dtype = fmt.read_array_header_2_0(reader)
        else:
            return None
        count = 1
        for n in shape:
            count *= int(n)
        head = bytes(reader.seen)
        if dtype.hasobject or len(head) + count * dtype.itemsize != size:
            return None
        array = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
    except Exception:  # a damaged header, an absurd shape: the usual path says which
        return None
    data = _bytes_of(np, array)
    if data is None or len(head) + data.nbytes != size:
        return None
    return array, digest.read(fd, size, scheme, executor, head=head, body=data)


class MemoryFile(io.RawIOBase):
    """A read-only, seekable file over bytes already in memory (verified ones), without
    copying them: pickle and torch read from it as from a file."""

    def __init__(self, data: memoryview) -> None:
        super().__init__()
        self._data = data
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        out = memoryview(b).cast("B")
        piece = self._data[self._pos:self._pos + out.nbytes]
        out[:piece.nbytes] = piece
        self._pos += piece.nbytes
        return piece.nbytes

    def read(self, n: int | None = -1) -> bytes:
        end = self._data.nbytes if n is None or n < 0 else self._pos + n
        piece = bytes(self._data[self._pos:end])
        self._pos += len(piece)
        return piece

    def readline(self, limit: int | None = -1) -> bytes:
        end = self._data.nbytes if limit is None or limit < 0 else self._pos + limit
        rest = self._data[self._pos:end]
        for start in range(0, rest.nbytes, 4096):  # pickle's text opcodes: short lines
            found = bytes(rest[start:start + 4096]).find(b"\n")
            if found >= 0:
                return self.read(start + found + 1)
        return self.read(rest.nbytes)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._data.nbytes}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos


def load(entry: Entry, data: memoryview, resolve: Callable[[str], Any]
         ) -> tuple[Any, list[Note]]:
    """The value `entry` saved, from its file's verified bytes `data`, and notes on how it
    came back."""
    f = MemoryFile(data)
    if entry.kind == "numpy":
        np = importlib.import_module("numpy")
        return np.load(f, allow_pickle=False), []
    if entry.kind == "torch":
        return _read_torch(entry, f)
    if not entry.buffers:
        return pickling.Unpickler(f, resolve).load(), []
    stream = MemoryFile(data[:entry.buffers[0][0]])
    buffers = [data[offset:offset + n] for offset, n in entry.buffers]
    return pickling.Unpickler(stream, resolve, buffers).load(), []


def _read_torch(entry: Entry, f: MemoryFile) -> tuple[Any, list[Note]]:
    torch = importlib.import_module("torch")
    missing = [d for d in entry.devices if not _device_here(torch, d)]
    notes: list[Note] = []
    map_location = None
    if missing:
        map_location = "cpu"
        notes.append(Note(entry.name, f"was on {', '.join(missing)}, which this machine does "
                                      "not have: restored to the CPU"))
    # the bytes were checked against the manifest first (and the manifest by the server's
    # MAC): loading them whole, classes and all, is what saving it meant
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

"""A stand-in libnvidia-ml.so.1 for tests: build it, describe GPUs to it, point processes at it.

The C library (tests/support/nvml_stub/fake_nvml.c) is compiled against NVML's own header from the
`nvidia-nvml-dev` wheel and loaded by the real `pynvml` bindings, so everything above the C
boundary (pynvml, jupyter_costguard.sampling.nvml, the server) runs unmodified.

Typical use::

    lib_dir = nvmlstub.build()                     # once per session; cached
    scenario = nvmlstub.Scenario(gpus=[nvmlstub.Gpu(util=37, procs=[nvmlstub.Proc(pid, 2**30)])])
    scenario.write(path)                           # rewrite any time: the library reloads it
    env = nvmlstub.subprocess_env(path)            # for a Jupyter server / any subprocess
    fake = nvmlstub.preload()                      # or: this process, via pynvml
    os.environ[nvmlstub.SCENARIO_ENV] = str(path)  # (monkeypatch.setenv in tests)
    fake.reset()                                   # between tests

Scenario file format
--------------------
Plain text, one directive per line, then ``key=value`` tokens; a value with spaces is written
``key="a value"`` (no escapes; values cannot contain ``"``).  ``#`` starts a comment line.
Unknown directives or keys are errors (the library then answers NVML_ERROR_UNKNOWN to
everything and prints why on stderr).  The file is re-read whenever its path, inode, size or
mtime changes; `Scenario.write` replaces it atomically, so a reader never sees half a file.

``driver version=550.54.15 cuda=12040``
    nvmlSystemGetDriverVersion / nvmlSystemGetCudaDriverVersion (these are the defaults).
``init error=DRIVER_NOT_LOADED``
    nvmlInit* returns this NVML error (name with or without ``NVML_ERROR_``).
``gpu index=0 uuid=GPU-… name="NVIDIA A100-SXM4-80GB" mem_total=N [mem_used=N]
[mem_reserved=N] [util=N] [mem_util=N] [power_mw=N] [mig=0|1] [max_mig=N] [lost=0|1]
[fail=call:ERROR,…]``
    One GPU; indices must be 0..n-1.  ``lost=1``: every query on it returns
    NVML_ERROR_GPU_IS_LOST (its handle can still be had).  ``fail`` makes single queries fail;
    calls are handle, uuid, name, index, memory, util, power, compute, graphics, mig_mode,
    mig_count, mig_handle.  Memory: v2 ``used`` = mem_used, v1 ``used`` = mem_used +
    mem_reserved.  With ``mig=1`` utilisation is NOT_SUPPORTED (as on real MIG GPUs) and
    max_mig defaults to 7.
``mig gpu=0 slot=S uuid=MIG-… name="…" mem_total=N [mem_used=N] [mem_reserved=N] [fail=…]``
    A MIG instance of GPU 0 at MIG device index S (needs ``mig=1`` on the GPU; empty slots
    answer NVML_ERROR_NOT_FOUND).  Utilisation and power are NOT_SUPPORTED on it.
``proc gpu=0 [mig=S] pid=N [mem=N|na] [type=compute|graphics]``
    A process on the GPU (or on its MIG instance S).  ``mem=na`` reports
    NVML_VALUE_NOT_AVAILABLE.  The parent handle of a MIG GPU lists all its instances'
    processes, as NVML does for a privileged caller.

With $COSTGUARD_FAKE_NVML_SCENARIO unset, or naming a missing file, nvmlInit* returns
NVML_ERROR_DRIVER_NOT_LOADED (a machine with the library but no loaded driver).  A file that
disappears after a successful init leaves the last scenario in force.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.metadata
import os
import shutil
import subprocess
import tempfile
import threading
import uuid as uuidlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.units import GiB

#: Environment variable naming the scenario file.
SCENARIO_ENV = "COSTGUARD_FAKE_NVML_SCENARIO"
#: The library's file name and soname, as pynvml asks for it.
SONAME = "libnvidia-ml.so.1"
#: Build with this define to leave out the _v3 process queries (a driver older than R510).
NO_V3_PROCESSES = "FAKE_NVML_NO_V3_PROCESSES"

SOURCE = Path(__file__).parent / "nvml_stub" / "fake_nvml.c"
BUILD_ROOT = Path(__file__).parent / "nvml_stub" / "build"

_build_lock = threading.Lock()
_built: dict[tuple[str, ...], Path] = {}


# --------------------------------------------------------------------------- building


def nvml_header() -> Path:
    """nvml.h from the installed nvidia-nvml-dev wheel (found through package metadata)."""
    try:
        dist = importlib.metadata.distribution("nvidia-nvml-dev")
    except importlib.metadata.PackageNotFoundError as exc:
        raise RuntimeError("the nvidia-nvml-dev wheel is not installed (test extra)") from exc
    for f in dist.files or ():
        if f.name == "nvml.h":
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                return path
    raise RuntimeError("nvidia-nvml-dev is installed but holds no nvml.h")


def build(defines: Iterable[str] = ()) -> Path:
    """Compile the stub and return the directory that holds `libnvidia-ml.so.1`.

    The result is cached per source, header and defines under tests/support/nvml_stub/build/, so
    it is compiled once however many sessions or processes ask; a finished build is moved
    into place atomically, so concurrent test processes are safe.
    """
    key = tuple(sorted(defines))
    with _build_lock:
        if key in _built:
            return _built[key]
        header = nvml_header()
        gcc = shutil.which("gcc") or shutil.which("cc")
        if gcc is None:
            raise RuntimeError("a C compiler (gcc) is needed to build the fake NVML library")
        digest = hashlib.sha256()
        for part in (SOURCE.read_bytes(), header.read_bytes(), "\0".join(key).encode()):
            digest.update(part)
            digest.update(b"\0")
        out_dir = BUILD_ROOT / digest.hexdigest()[:16]
        target = out_dir / SONAME
        if not target.is_file():
            out_dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".build-", suffix=".so")
            os.close(fd)
            cmd = [
                gcc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-pthread",
                f"-Wl,-soname,{SONAME}", f"-I{header.parent}",
                *(f"-D{d}" for d in key), "-o", tmp, str(SOURCE),
            ]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                os.unlink(tmp)
                raise RuntimeError(f"building the fake NVML failed:\n{' '.join(cmd)}\n"
                                   f"{proc.stderr}")
            os.replace(tmp, target)
        _built[key] = out_dir
        return out_dir


# --------------------------------------------------------------------------- scenarios


def _fake_uuid(prefix: str) -> str:
    return f"{prefix}-{uuidlib.uuid4()}"


@dataclass
class Proc:
    """A process holding a context on a GPU or MIG instance (`mem` None: "not available")."""

    pid: int
    mem: int | None = GiB
    type: str = "compute"  # or "graphics"


@dataclass
class Mig:
    """A MIG instance; its slot is its position in `Gpu.migs` (None leaves a slot empty)."""

    uuid: str = field(default_factory=lambda: _fake_uuid("MIG"))
    name: str = "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    mem_total: int = 40 * GiB
    mem_used: int = 0
    mem_reserved: int = 0
    procs: list[Proc] = field(default_factory=list)
    fail: dict[str, str] = field(default_factory=dict)  # call -> NVML error name


@dataclass
class Gpu:
    """One GPU; its NVML index is its position in `Scenario.gpus`.

    `util` / `power_mw` None make those queries answer NOT_SUPPORTED.  Giving `migs` puts it
    in MIG mode unless `mig` says otherwise.
    """

    uuid: str = field(default_factory=lambda: _fake_uuid("GPU"))
    name: str = "NVIDIA A100-SXM4-80GB"
    mem_total: int = 80 * GiB
    mem_used: int = 0
    mem_reserved: int = 0
    util: int | None = 0
    mem_util: int = 0
    power_mw: int | None = 60_000
    lost: bool = False
    mig: bool | None = None
    max_mig: int | None = None
    procs: list[Proc] = field(default_factory=list)
    migs: list[Mig | None] = field(default_factory=list)
    fail: dict[str, str] = field(default_factory=dict)  # call -> NVML error name


def _quote(value: str) -> str:
    if '"' in value or "\n" in value:
        raise ValueError(f"scenario strings cannot hold quotes or newlines: {value!r}")
    return f'"{value}"' if (" " in value or "\t" in value or not value) else value


def _fail_text(fail: Mapping[str, str]) -> str:
    return ",".join(f"{call}:{err}" for call, err in fail.items())


def _proc_line(gpu: int, proc: Proc, mig: int | None = None) -> str:
    if proc.type not in ("compute", "graphics"):
        raise ValueError(f"process type must be compute or graphics, not {proc.type!r}")
    mem = "na" if proc.mem is None else str(proc.mem)
    where = f"gpu={gpu}" + ("" if mig is None else f" mig={mig}")
    return f"proc {where} pid={proc.pid} mem={mem} type={proc.type}"


@dataclass
class Scenario:
    """What the fake driver reports; `write()` it, rewrite it to change the GPUs live."""

    gpus: list[Gpu] = field(default_factory=list)
    driver: str = "550.54.15"
    cuda: int = 12040
    init_error: str | None = None  # e.g. "DRIVER_NOT_LOADED"

    def text(self) -> str:
        lines = [
            "# fake libnvidia-ml scenario (tests/support/nvmlstub.py)",
            f"driver version={_quote(self.driver)} cuda={self.cuda}",
        ]
        if self.init_error:
            lines.append(f"init error={self.init_error}")
        for i, g in enumerate(self.gpus):
            parts_to_check: list[Gpu | Mig] = [g, *(m for m in g.migs if m is not None)]
            for what in parts_to_check:
                if what.mem_used + what.mem_reserved > what.mem_total:
                    raise ValueError(f"{what.uuid}: mem_used + mem_reserved > mem_total")
            fail = dict(g.fail)
            if g.util is None:
                fail.setdefault("util", "NOT_SUPPORTED")
            if g.power_mw is None:
                fail.setdefault("power", "NOT_SUPPORTED")
            mig_mode = bool(g.migs) if g.mig is None else g.mig
            parts = [
                f"gpu index={i} uuid={_quote(g.uuid)} name={_quote(g.name)}",
                f"mem_total={g.mem_total} mem_used={g.mem_used} mem_reserved={g.mem_reserved}",
                f"util={g.util or 0} mem_util={g.mem_util} power_mw={g.power_mw or 0}",
                f"mig={int(mig_mode)} lost={int(g.lost)}",
            ]
            if g.max_mig is not None:
                parts.append(f"max_mig={g.max_mig}")
            if fail:
                parts.append(f"fail={_fail_text(fail)}")
            lines.append(" ".join(parts))
            for slot, m in enumerate(g.migs):
                if m is None:
                    continue
                line = (f"mig gpu={i} slot={slot} uuid={_quote(m.uuid)} name={_quote(m.name)} "
                        f"mem_total={m.mem_total} mem_used={m.mem_used} "
                        f"mem_reserved={m.mem_reserved}")
                if m.fail:
                    line += f" fail={_fail_text(m.fail)}"
                lines.append(line)
            lines.extend(_proc_line(i, p) for p in g.procs)
            for slot, m in enumerate(g.migs):
                if m is not None:
                    lines.extend(_proc_line(i, p, slot) for p in m.procs)
        return "\n".join(lines) + "\n"

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Replace the file atomically (a new inode, so the library always notices)."""
        path = Path(path)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as f:
            f.write(self.text())
        os.replace(tmp, path)
        return path


# --------------------------------------------------------------------------- using it


def subprocess_env(
    scenario_path: str | os.PathLike[str],
    base: Mapping[str, str] | None = None,
    lib_dir: Path | None = None,
) -> dict[str, str]:
    """Environment for a subprocess (e.g. a Jupyter server) whose pynvml should load the stub.

    `base` defaults to os.environ; the stub's directory goes first on LD_LIBRARY_PATH.
    """
    env = dict(os.environ if base is None else base)
    lib_dir = build() if lib_dir is None else lib_dir
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = str(lib_dir) + (f"{os.pathsep}{old}" if old else "")
    env[SCENARIO_ENV] = str(scenario_path)
    return env


class FakeNvml:
    """The stub loaded into this process, with its test-only controls."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lib = ctypes.CDLL(str(path))
        self.lib.fake_nvml_call_count.argtypes = [ctypes.c_char_p]
        self.lib.fake_nvml_call_count.restype = ctypes.c_long
        self.lib.fake_nvml_refcount.restype = ctypes.c_int

    def reset(self) -> Any:
        """Forget init count, loaded scenario and call counts, and make pynvml use the stub
        from a clean state.  Returns the library pynvml used before (for `reset_pynvml`)."""
        self.lib.fake_nvml_reset()
        return reset_pynvml(self.lib)

    def call_count(self, function: str) -> int:
        """How often an NVML function (e.g. "nvmlDeviceGetName") was called since reset."""
        n = int(self.lib.fake_nvml_call_count(function.encode()))
        if n < 0:
            raise KeyError(f"the stub does not count {function}")
        return n

    def refcount(self) -> int:
        """nvmlInit calls not yet matched by nvmlShutdown."""
        return int(self.lib.fake_nvml_refcount())


_preloaded: dict[Path, FakeNvml] = {}


def preload(lib_dir: Path | None = None) -> FakeNvml:
    """Load the stub into this process and point pynvml at it (call `.reset()` per test).

    Loaded by full path, the stub also answers later `CDLL("libnvidia-ml.so.1")` calls by
    soname, so pynvml's own loading finds it too, unless a real libnvidia-ml was loaded into
    the process first; `reset()` hands the stub to pynvml directly, so either way pynvml uses
    it.  This cannot be undone: tests that need the real driver should use a subprocess.
    Point $COSTGUARD_FAKE_NVML_SCENARIO at a scenario (monkeypatch.setenv) before nvmlInit.
    """
    lib_dir = build() if lib_dir is None else lib_dir
    path = lib_dir / SONAME
    fake = _preloaded.get(path)
    if fake is None:
        fake = _preloaded[path] = FakeNvml(path)
    fake.reset()
    return fake


def reset_pynvml(lib: Any = None) -> Any:
    """Make pynvml use `lib` from a clean state (None: load libnvidia-ml.so.1 again at the
    next nvmlInit); returns the library it used before."""
    import pynvml

    with pynvml.libLoadLock:
        previous = pynvml.nvmlLib
        pynvml.nvmlLib = lib
        pynvml._nvmlLib_refcount = 0
        pynvml._nvmlGetFunctionPointer_cache.clear()
    return previous

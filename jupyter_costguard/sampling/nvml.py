"""Reads the GPUs through NVML (`pynvml`, from nvidia-ml-py) for the telemetry sampler.

`NvmlReader.read()` answers a `GpuReading` and never raises: a machine without a driver, a
driver that is not loaded yet, a GPU that fell off the bus or an NVML bug all become a status
and a reason that the API can show, so that one bad GPU (or none at all) never stops the
sampler.  It runs on the sampler's worker thread, never on the IO loop; it keeps NVML
initialised between reads and caches what does not change (handles, UUIDs, names, memory
totals), so a read is a handful of driver queries per GPU.

What the server "sees" follows CUDA: `CUDA_VISIBLE_DEVICES` of the server process selects and
orders the GPUs (indices, `GPU-…` UUIDs or unique prefixes of them, `MIG-…` UUIDs; the first
entry that names nothing, or repeats one, ends the list).  Indices are NVML's, i.e. PCI bus
order, which is CUDA's order under CUDA_DEVICE_ORDER=PCI_BUS_ID or when all GPUs are the same
model.  The legacy `MIG-GPU-<uuid>/<gi>/<ci>` form (drivers before R470) is not understood.

A GPU in MIG mode is reported as its MIG instances, each a `GpuSample` of its own with
`mig_parent_uuid` set, because processes, memory and therefore cost belong to the instance;
NVML gives them no utilisation or power (None).  A GPU in MIG mode with no instance is
reported as itself, so that its cost still shows up as unattributed.
"""

from __future__ import annotations

import enum
import logging
import os
import threading
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Callable

from jupyter_costguard.sampling.records import GpuProcess, GpuReading, GpuSample

log = logging.getLogger("jupyter_costguard")

__all__ = ["FROM_ENVIRON", "NvmlReader", "parse_visible_devices"]


class _Default(enum.Enum):
    FROM_ENVIRON = "from-environ"


#: Default for `NvmlReader(visible_devices=...)`: use this process's CUDA_VISIBLE_DEVICES.
FROM_ENVIRON = _Default.FROM_ENVIRON

# NVML return codes this module treats specially (values from nvml.h, stable across releases).
_NOT_SUPPORTED = 3
_NO_PERMISSION = 4
_NOT_FOUND = 6
_DRIVER_NOT_LOADED = 9
_LIBRARY_NOT_FOUND = 12
_FUNCTION_NOT_FOUND = 13
_ARGUMENT_VERSION_MISMATCH = 25
_GPU_NOT_FOUND = 28
_UNINITIALIZED = 1
_MIG_ENABLE = 1


def parse_visible_devices(value: str | None) -> list[str] | None:
    """Split a CUDA_VISIBLE_DEVICES value into entries; None means "not set: all GPUs".

    "" and "NoDevFiles" (what some batch systems set) hide every GPU; other invalid entries
    such as "-1" are kept here and stop the list where they appear, as CUDA does.
    """
    if value is None:
        return None
    value = value.strip()
    if value in ("", "NoDevFiles"):
        return []
    return [entry.strip() for entry in value.split(",")]


_Errors = list[tuple[str, str]]  # (what was asked, NVML's answer)


class _Reinit(Exception):
    """NVML answered UNINITIALIZED mid-read: someone shut it down; initialise again."""


@dataclass
class _Mig:
    handle: Any
    uuid: str
    name: str
    memory_total: int | None = None


@dataclass
class _Device:
    """One GPU as NVML enumerates it, with the facts that do not change between reads."""

    nvml_index: int
    handle: Any = None
    uuid: str | None = None
    name: str | None = None
    memory_total: int | None = None
    mig_capable: bool = True  # False once NVML said MIG is not supported on it
    mig_enabled: bool = False
    migs: list[_Mig] = field(default_factory=list)
    static_errors: _Errors = field(default_factory=list)  # handle/UUID/name failures
    layout_errors: _Errors = field(default_factory=list)  # MIG layout failures


@dataclass
class _Target:
    """One entry of the reading: a whole GPU, or one MIG instance of it."""

    device: _Device
    mig: _Mig | None = None


class NvmlReader:
    """Takes `GpuReading`s from NVML; thread-safe, never raises from `read()`.

    `visible_devices` is a CUDA_VISIBLE_DEVICES value (None: all GPUs); by default it is taken
    from this process's environment.  `retry_interval` is how long to wait before trying
    `nvmlInit` again after it failed, so a driver that loads later is picked up without
    hammering a broken one.
    """

    def __init__(
        self,
        visible_devices: str | _Default | None = FROM_ENVIRON,
        *,
        retry_interval: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if visible_devices is FROM_ENVIRON:
            visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES")
        assert not isinstance(visible_devices, _Default)
        self.visible_devices: str | None = visible_devices
        self._entries = parse_visible_devices(visible_devices)
        self.retry_interval = retry_interval
        self._clock = clock
        self._lock = threading.Lock()
        self._nvml: Any = None  # the pynvml module, once imported
        self._initialised = False
        self._failure: GpuReading | None = None  # answer while init keeps failing
        self._last_attempt: float | None = None
        self._driver_version: str | None = None
        self._devices: list[_Device] = []
        self._mig_static: dict[str, tuple[str, int | None]] = {}  # MIG uuid -> name, total
        self._memory_v2 = True  # until the library says it lacks nvmlDeviceGetMemoryInfo_v2
        self._processes_v3 = True  # until it lacks the _v3 process queries (drivers < R510)
        self._logged: set[Hashable] = set()
        self._faulty: dict[str, str] = {}  # uuid -> reason last logged

    # ------------------------------------------------------------------ public

    def read(self) -> GpuReading:
        """One reading of every visible GPU; problems become statuses, never exceptions."""
        with self._lock:
            try:
                return self._read()
            except _Reinit:
                self._forget_init()
                detail = "NVML was shut down by another user in this process; re-initialising"
                self._log_once(("reinit",), logging.WARNING, detail)
                return GpuReading(status="error", detail=detail)
            except Exception as exc:
                detail = f"unexpected error reading GPUs: {type(exc).__name__}: {exc}"
                self._log_once(("unexpected", detail), logging.ERROR, detail, exc_info=True)
                return GpuReading(
                    status="error", detail=detail, driver_version=self._driver_version
                )

    def close(self) -> None:
        """Shut NVML down (it is reference counted, so other users in the process keep it)."""
        with self._lock:
            if self._initialised:
                try:
                    self._nvml.nvmlShutdown()
                except Exception as exc:  # shutting down must not fail the server's shutdown
                    log.debug("nvmlShutdown failed: %s", exc)
            self._forget_init()
            self._failure = None
            self._last_attempt = None

    # ------------------------------------------------------------------ init

    def _forget_init(self) -> None:
        self._initialised = False
        self._devices = []
        self._mig_static.clear()

    def _init(self) -> GpuReading | None:
        """Initialise NVML if needed; a `GpuReading` to answer when that is not possible."""
        if self._initialised:
            return None
        now = self._clock()
        if (
            self._failure is not None
            and self._last_attempt is not None
            and now - self._last_attempt < self.retry_interval
        ):
            return self._failure
        self._last_attempt = now
        failure = self._try_init()
        if failure is not None:
            self._failure = failure
            level = logging.INFO if failure.status == "no-gpu" else logging.WARNING
            self._log_once(("init", failure.status, failure.detail), level, failure.detail)
            return failure
        if self._failure is not None:
            log.info("NVML initialised after earlier failure (%s)", self._failure.detail)
            # A later failure is news again.
            self._logged = {k for k in self._logged if not _is_init_key(k)}
        self._failure = None
        return None

    def _try_init(self) -> GpuReading | None:
        try:
            import pynvml
        except ImportError as exc:
            return GpuReading(
                status="no-gpu", detail=f"pynvml (nvidia-ml-py) is not importable: {exc}"
            )
        self._nvml = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code == _LIBRARY_NOT_FOUND:
                detail = "NVML library not found (libnvidia-ml.so.1): no NVIDIA driver installed"
                return GpuReading(status="no-gpu", detail=detail)
            if code == _DRIVER_NOT_LOADED:
                detail = "NVIDIA driver not loaded (nvmlInit: Driver Not Loaded)"
                return GpuReading(status="no-gpu", detail=detail)
            if code == _GPU_NOT_FOUND:
                return GpuReading(status="no-gpu", detail="NVML found no GPUs")
            return GpuReading(status="error", detail=f"nvmlInit failed: {exc}")
        except Exception as exc:  # e.g. OSError from a broken library file
            return GpuReading(
                status="error", detail=f"nvmlInit failed: {type(exc).__name__}: {exc}"
            )
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            self._shutdown_quietly()
            return GpuReading(status="error", detail=f"nvmlDeviceGetCount failed: {exc}")
        try:
            self._driver_version = str(pynvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError as exc:
            self._driver_version = None
            self._log_once(("driver-version", str(exc)), logging.WARNING,
                           "cannot read the NVIDIA driver version: %s", exc)
        self._initialised = True
        self._devices = [_Device(i) for i in range(count)]
        self._mig_static.clear()
        log.info("NVML: driver %s, %d GPU(s)", self._driver_version, count)
        return None

    def _shutdown_quietly(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception as exc:
            log.debug("nvmlShutdown failed: %s", exc)

    # ------------------------------------------------------------------ reading

    def _read(self) -> GpuReading:
        failure = self._init()
        if failure is not None:
            return failure
        if not self._devices:
            return self._no_gpu("NVML reports no GPUs")
        for dev in self._devices:
            self._refresh_static(dev)
            self._refresh_mig(dev)
        targets = self._visible_targets()
        if not targets:
            return self._no_gpu(
                f"CUDA_VISIBLE_DEVICES={self.visible_devices!r} hides all "
                f"{len(self._devices)} GPU(s)"
            )
        gpus = tuple(self._sample(pos, t) for pos, t in enumerate(targets))
        return GpuReading(status="ok", driver_version=self._driver_version, gpus=gpus)

    def _no_gpu(self, detail: str) -> GpuReading:
        self._log_once(("no-gpu", detail), logging.INFO, detail)
        return GpuReading(status="no-gpu", detail=detail, driver_version=self._driver_version)

    def _code(self, exc: Exception) -> int | None:
        """The NVML return code of `exc`; UNINITIALIZED aborts the read to initialise again."""
        code = getattr(exc, "value", None)
        if code == _UNINITIALIZED:
            raise _Reinit() from exc
        return code if isinstance(code, int) else None

    def _call(self, errors: _Errors, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        """Call pynvml; None where unsupported, and (what, reason) in `errors` where it failed."""
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            code = self._code(exc)
            if code == _NOT_SUPPORTED:
                return None
            if code == _NO_PERMISSION:
                self._log_once(("no-permission", what), logging.WARNING,
                               "NVML denies %s to this user; reporting it as unknown", what)
                return None
            errors.append((what, str(exc)))
            return None

    def _refresh_static(self, dev: _Device) -> None:
        """Handle, UUID and name: read once, retried on later reads until they answer."""
        if dev.handle is not None and dev.uuid is not None and dev.name is not None:
            dev.static_errors = []
            return
        nvml = self._nvml
        errors: _Errors = []
        if dev.handle is None:
            dev.handle = self._call(errors, "handle", nvml.nvmlDeviceGetHandleByIndex,
                                    dev.nvml_index)
        if dev.handle is not None:
            if dev.uuid is None:
                dev.uuid = self._call(errors, "uuid", nvml.nvmlDeviceGetUUID, dev.handle)
            if dev.name is None:
                dev.name = self._call(errors, "name", nvml.nvmlDeviceGetName, dev.handle)
        dev.static_errors = errors

    def _refresh_mig(self, dev: _Device) -> None:
        """Current MIG layout (instances can be created and destroyed at any time).

        When NVML cannot tell, the last known layout stays and the reason is reported on
        the device's samples.
        """
        dev.layout_errors = []
        if dev.handle is None or not dev.mig_capable:
            return
        nvml = self._nvml
        try:
            mode = nvml.nvmlDeviceGetMigMode(dev.handle)[0]
        except nvml.NVMLError as exc:
            if self._code(exc) in (_NOT_SUPPORTED, _FUNCTION_NOT_FOUND):
                dev.mig_capable = False  # not an Ampere-or-newer data-centre GPU
            else:
                dev.layout_errors = [("MIG mode", str(exc))]
            return
        if mode != _MIG_ENABLE:
            dev.mig_enabled, dev.migs = False, []
            return
        dev.mig_enabled = True
        try:
            dev.migs = self._mig_instances(dev.handle)
        except nvml.NVMLError as exc:
            self._code(exc)
            dev.layout_errors = [("MIG instances", str(exc))]

    def _mig_instances(self, parent: Any) -> list[_Mig]:
        nvml = self._nvml
        migs: list[_Mig] = []
        for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(parent)):
            try:
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(parent, i)
            except nvml.NVMLError as exc:
                if self._code(exc) == _NOT_FOUND:  # no instance at this index
                    continue
                raise
            uuid = str(nvml.nvmlDeviceGetUUID(handle))
            static = self._mig_static.get(uuid)
            if static is None:
                static = (str(nvml.nvmlDeviceGetName(handle)), None)
                self._mig_static[uuid] = static
            migs.append(_Mig(handle=handle, uuid=uuid, name=static[0], memory_total=static[1]))
        return migs

    def _visible_targets(self) -> list[_Target]:
        """The GPUs and MIG instances this server sees, in CUDA_VISIBLE_DEVICES order."""
        if self._entries is None:
            chosen: list[tuple[_Device, _Mig | None]] = [(d, None) for d in self._devices]
        else:
            chosen = []
            seen: set[tuple[int, str | None]] = set()
            for entry in self._entries:
                match = self._match(entry)
                key = None if match is None else (
                    match[0].nvml_index, None if match[1] is None else match[1].uuid
                )
                if match is None or key in seen:
                    self._log_once(
                        ("cvd", self.visible_devices, entry), logging.WARNING,
                        "CUDA_VISIBLE_DEVICES=%r: entry %r %s; like CUDA, ignoring it and the "
                        "entries after it", self.visible_devices, entry,
                        "matches no GPU" if match is None else "repeats an earlier one",
                    )
                    break
                assert key is not None
                seen.add(key)
                chosen.append(match)
        targets: list[_Target] = []
        for dev, mig in chosen:
            if mig is not None:
                targets.append(_Target(dev, mig))
            elif dev.mig_enabled and dev.migs:
                targets.extend(_Target(dev, m) for m in dev.migs)
            else:
                targets.append(_Target(dev))
        return targets

    def _match(self, entry: str) -> tuple[_Device, _Mig | None] | None:
        """What one CUDA_VISIBLE_DEVICES entry names, as CUDA would resolve it."""
        if entry.isdigit():
            index = int(entry)
            return (self._devices[index], None) if index < len(self._devices) else None
        lowered = entry.lower()
        if lowered.startswith("gpu-"):
            found = [d for d in self._devices if d.uuid and d.uuid.lower().startswith(lowered)]
            return (found[0], None) if len(found) == 1 else None
        if lowered.startswith("mig-"):
            hits = [
                (d, m)
                for d in self._devices
                for m in d.migs
                if d.mig_enabled and m.uuid.lower().startswith(lowered)
            ]
            if len(hits) == 1:
                return hits[0][0], hits[0][1]
        return None

    def _sample(self, position: int, target: _Target) -> GpuSample:
        """Read the dynamic values of one target; failures mark it faulty, not the reading."""
        nvml = self._nvml
        dev, mig = target.device, target.mig
        errors: _Errors = list(dev.layout_errors)
        if mig is None:
            errors.extend(dev.static_errors)
        handle = dev.handle if mig is None else mig.handle
        total, used = 0, 0
        util: float | None = None
        power: float | None = None
        processes: tuple[GpuProcess, ...] = ()
        if handle is not None:
            total, used = self._memory(errors, handle, dev if mig is None else None, mig)
            # NVML has no utilisation per MIG instance, nor for a GPU in MIG mode.
            if mig is None and not dev.mig_enabled:
                rates = self._call(errors, "utilization", nvml.nvmlDeviceGetUtilizationRates,
                                   handle)
                util = None if rates is None else float(rates.gpu)
            if mig is None:
                mw = self._call(errors, "power", nvml.nvmlDeviceGetPowerUsage, handle)
                power = None if mw is None else mw / 1000.0
            processes = self._processes(errors, handle)
        if mig is not None:
            uuid, name, parent = mig.uuid, mig.name, dev.uuid
        else:
            uuid = dev.uuid or f"GPU-unknown-nvml-index-{dev.nvml_index}"
            name, parent = dev.name or "unknown GPU", None
        # The reason is NVML's own words ("GPU is lost"), once each; the log says which query.
        faulty = "; ".join(dict.fromkeys(reason for _, reason in errors)) or None
        self._note_fault(uuid, faulty, errors)
        return GpuSample(
            index=position,
            uuid=uuid,
            name=name,
            memory_total_bytes=total,
            memory_used_bytes=used,
            utilization_percent=util,
            power_watts=power,
            processes=processes,
            mig_parent_uuid=parent,
            faulty=faulty,
            nvml_index=dev.nvml_index,
        )

    def _memory(
        self, errors: _Errors, handle: Any, dev: _Device | None, mig: _Mig | None
    ) -> tuple[int, int]:
        """(total, used) bytes; the total is cached for when the device stops answering."""
        info = self._call(errors, "memory", self._query_memory, handle)
        cached = dev.memory_total if dev is not None else (mig.memory_total if mig else None)
        if info is None:
            return cached or 0, 0
        total, used = int(info.total), int(info.used)
        if cached is None:
            if dev is not None:
                dev.memory_total = total
            elif mig is not None:
                mig.memory_total = total
                self._mig_static[mig.uuid] = (mig.name, total)
        return total, used

    def _query_memory(self, handle: Any) -> Any:
        """The v2 query (its `used` leaves out driver-reserved memory, as nvidia-smi does);
        v1 on drivers that lack it."""
        nvml = self._nvml
        if self._memory_v2 and hasattr(nvml, "nvmlMemory_v2"):
            try:
                return nvml.nvmlDeviceGetMemoryInfo(handle, version=nvml.nvmlMemory_v2)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) not in (
                    _FUNCTION_NOT_FOUND, _ARGUMENT_VERSION_MISMATCH
                ):
                    raise
                self._memory_v2 = False
                log.info("NVML lacks nvmlDeviceGetMemoryInfo_v2; using the v1 query")
        return nvml.nvmlDeviceGetMemoryInfo(handle)

    def _processes(self, errors: _Errors, handle: Any) -> tuple[GpuProcess, ...]:
        """Compute and graphics processes, one entry per PID (the larger memory wins)."""
        found: dict[int, GpuProcess] = {}
        for kind in ("compute", "graphics"):
            procs = self._call(errors, f"{kind} processes", self._query_processes, handle, kind)
            for p in procs or ():
                pid = int(p.pid)
                # pynvml turns NVML_VALUE_NOT_AVAILABLE into None already.
                mem = None if p.usedGpuMemory is None else int(p.usedGpuMemory)
                old = found.get(pid)
                if old is None:
                    found[pid] = GpuProcess(pid=pid, used_memory_bytes=mem, kind=kind)
                elif mem is not None and (old.used_memory_bytes is None
                                          or old.used_memory_bytes < mem):
                    found[pid] = GpuProcess(pid=pid, used_memory_bytes=mem, kind=old.kind)
        return tuple(found[pid] for pid in sorted(found))

    def _query_processes(self, handle: Any, kind: str) -> Any:
        """The _v3 process query; _v2 on drivers before R510 that lack it."""
        nvml = self._nvml
        base = "nvmlDeviceGetComputeRunningProcesses" if kind == "compute" else (
            "nvmlDeviceGetGraphicsRunningProcesses"
        )
        if self._processes_v3:
            try:
                return getattr(nvml, base + "_v3")(handle)
            except nvml.NVMLError as exc:
                if getattr(exc, "value", None) != _FUNCTION_NOT_FOUND:
                    raise
                self._processes_v3 = False
                log.info("NVML lacks the _v3 process queries; using _v2")
        return getattr(nvml, base + "_v2")(handle)

    # ------------------------------------------------------------------ logging

    def _note_fault(self, uuid: str, faulty: str | None, errors: _Errors) -> None:
        """Log a device's trouble when it starts or changes, and when it ends."""
        before = self._faulty.get(uuid)
        if faulty == before:
            return
        if faulty is None:
            del self._faulty[uuid]
            log.info("GPU %s answers NVML again", uuid)
        else:
            self._faulty[uuid] = faulty
            log.warning("GPU %s does not answer NVML: %s", uuid,
                        ", ".join(f"{what}: {reason}" for what, reason in errors))

    def _log_once(self, key: Hashable, level: int, msg: str, *args: Any,
                  exc_info: bool = False) -> None:
        if key in self._logged:
            return
        self._logged.add(key)
        log.log(level, msg, *args, exc_info=exc_info)


def _is_init_key(key: Hashable) -> bool:
    return isinstance(key, tuple) and bool(key) and key[0] == "init"

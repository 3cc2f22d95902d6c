"""Does costguard's own sampling see a real GPU process? A check for a machine with an NVIDIA
driver and nothing but ``pynvml`` (or ``nvidia-ml-py``), ``psutil`` and this repository: no
jupyter_server, no ipykernel (``traitlets`` is not needed either: only the sampling modules
that import none of it are used).

It starts a child process that allocates GPU memory (with PyTorch when importable, else CuPy,
else a tiny ``cuMemAlloc`` through ``libcuda.so`` by ctypes; the output says which), samples
through costguard's own code (`sampling.nvml.NvmlReader` behind `sampling.telemetry.Telemetry`,
the child as a `KernelInfo`, exactly as the server samples a kernel), and prints what it
attributed (GPU, memory, utilisation, attribution method) next to
``nvidia-smi --query-compute-apps=pid,used_memory --format=csv``.

Exit status: 0 the child's memory was attributed to it; 1 it was not (or the child could not
allocate); 2 no NVIDIA driver (or no pynvml/psutil) on this machine.

    python bench/gpu_check.py                 # 512 MiB on CUDA device 0, allocator: auto
    python bench/gpu_check.py --mib 2048 --device 1 --allocator ctypes --json out.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

NO_DRIVER = 2
MiB = 1024 * 1024

#: the child: allocate, say so on stdout, hold the memory until stdin closes
CHILD = r'''
import ctypes, os, sys
method, device, nbytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
held = None
def try_torch():
    import torch
    if not torch.cuda.is_available():
        raise RuntimeError("torch.cuda.is_available() is False")
    t = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{device}")
    t.fill_(1)
    torch.cuda.synchronize(device)
    return t
def try_cupy():
    import cupy
    with cupy.cuda.Device(device):
        a = cupy.empty(nbytes, dtype=cupy.uint8)
        a.fill(1)
        cupy.cuda.Device(device).synchronize()
    return a
def try_ctypes():
    cuda = None
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            cuda = ctypes.CDLL(name)
            break
        except OSError:
            pass
    if cuda is None:
        raise RuntimeError("libcuda.so not found")
    def check(what, rc):
        if rc != 0:
            raise RuntimeError(f"{what} returned CUDA error {rc}")
    check("cuInit", cuda.cuInit(0))
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    check("cuDeviceGet", cuda.cuDeviceGet(ctypes.byref(dev), device))
    check("cuDevicePrimaryCtxRetain", cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev))
    check("cuCtxSetCurrent", cuda.cuCtxSetCurrent(ctx))
    check("cuMemAlloc_v2", cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(nbytes)))
    check("cuMemsetD8_v2", cuda.cuMemsetD8_v2(ptr, 1, ctypes.c_size_t(nbytes)))
    check("cuCtxSynchronize", cuda.cuCtxSynchronize())
    return ptr
order = {"auto": ["torch", "cupy", "ctypes"]}.get(method, [method])
errors = []
for name in order:
    try:
        held = {"torch": try_torch, "cupy": try_cupy, "ctypes": try_ctypes}[name]()
    except Exception as e:  # ImportError, no CUDA, an error code
        errors.append(f"{name}: {type(e).__name__}: {e}")
        continue
    print("ready", name, os.getpid(), flush=True)
    break
else:
    print("failed", "; ".join(errors), flush=True)
    sys.exit(1)
sys.stdin.read()  # hold the memory until the parent closes our stdin
'''


def no_driver(message: str) -> int:
    print(f"gpu_check: no NVIDIA driver: {message}", file=sys.stderr)
    return NO_DRIVER


def nvidia_smi() -> str:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return "(nvidia-smi is not on PATH)"
    try:
        out = subprocess.run([exe, "--query-compute-apps=pid,used_memory", "--format=csv"],
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"(nvidia-smi failed: {e})"
    return (out.stdout or out.stderr).strip()


def smi_memory_mib(text: str, pid: int) -> int | None:
    """The child's used_memory in nvidia-smi's CSV (MiB), where it lists the pid."""
    for line in text.splitlines()[1:]:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid) and parts[1].split()[0].isdigit():
            return int(parts[1].split()[0])
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=512, help="GPU memory the child allocates")
    ap.add_argument("--device", type=int, default=0, help="CUDA device index for the child")
    ap.add_argument("--allocator", choices=["auto", "torch", "cupy", "ctypes"], default="auto")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="seconds to wait for the allocation and for the attribution")
    ap.add_argument("--json", type=Path, help="also write what was seen as JSON here")
    args = ap.parse_args(argv)

    # the "pynvml" wheel now only redirects to nvidia-ml-py's module, and says so
    warnings.filterwarnings("ignore", "The pynvml package is deprecated", FutureWarning)
    try:
        import psutil  # noqa: F401  (telemetry needs it)
        import pynvml  # noqa: F401
    except ImportError as e:
        return no_driver(f"{e.name} is not installed (pip install nvidia-ml-py psutil)")
    from jupyter_costguard.sampling.nvml import NvmlReader
    from jupyter_costguard.sampling.records import KernelInfo
    from jupyter_costguard.sampling.telemetry import Telemetry

    reader = NvmlReader()  # as the server: the GPUs CUDA_VISIBLE_DEVICES leaves visible
    first = reader.read()
    if first.status != "ok" or not first.gpus:
        reader.close()
        return no_driver(f"NVML says {first.status}: {first.detail or 'no GPU visible'}")

    class Source:  # the server's NvmlSource, over this reader (that one reads the env)
        simulated = False

        def read(self, kernel_pids: Any, notebooks: Any = None) -> Any:
            return reader.read()

        def close(self) -> None:
            reader.close()

    telemetry = Telemetry(Source())
    child = subprocess.Popen([sys.executable, "-c", CHILD, args.allocator, str(args.device),
                              str(args.mib * MiB)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        said = child.stdout.readline().split()
        if not said or said[0] != "ready":
            print(f"gpu_check: the child could not allocate GPU memory: {' '.join(said[1:])}",
                  file=sys.stderr)
            return 1
        allocator = said[1]
        info = KernelInfo(kernel_id="gpu-check-child", name="gpu_check", pid=child.pid,
                          execution_state="busy", last_activity=time.time(), connections=0,
                          path=None)
        deadline = time.monotonic() + args.timeout
        while True:  # NVML can list a new context a moment late
            sample = telemetry.sample([info])
            ks = sample.kernels[0]
            if sum(ks.gpu_memory_bytes.values()) > 0 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        smi = nvidia_smi()
    finally:
        if child.stdin is not None:
            child.stdin.close()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
        telemetry.close()

    held = sum(ks.gpu_memory_bytes.values())
    smi_mib = smi_memory_mib(smi, child.pid)
    gpus = [{"index": g.index, "nvml_index": g.nvml_index, "uuid": g.uuid, "name": g.name,
             "memory_used_mib": g.memory_used_bytes // MiB,
             "memory_total_mib": g.memory_total_bytes // MiB,
             "utilization_percent": g.utilization_percent, "power_watts": g.power_watts,
             "processes": [[p.pid, None if p.used_memory_bytes is None
                            else p.used_memory_bytes // MiB] for p in g.processes],
             "attributed_to_child_mib": ks.gpu_memory_bytes.get(g.uuid, 0) // MiB}
            for g in sample.gpu.gpus]
    result = {"driver": sample.gpu.driver_version, "allocator": allocator,
              "child_pid": child.pid, "asked_mib": args.mib, "attributed_mib": held // MiB,
              "attribution": ks.attribution, "child_tree": list(ks.pids),
              "nvidia_smi_child_mib": smi_mib, "gpus": gpus, "nvidia_smi": smi,
              "attributed": held > 0}

    print(f"driver {result['driver']}; child pid {child.pid} allocated {args.mib} MiB on "
          f"CUDA device {args.device} with {allocator}")
    print(f"{'gpu':>3}  {'name':<28} {'used/total MiB':>17} {'util %':>6} {'child MiB':>9}  "
          "NVML processes (pid, MiB)")
    for g in gpus:
        util = "-" if g["utilization_percent"] is None else f"{g['utilization_percent']:.0f}"
        print(f"{g['index']:>3}  {g['name'][:28]:<28} "
              f"{g['memory_used_mib']:>8}/{g['memory_total_mib']:<8} {util:>6} "
              f"{g['attributed_to_child_mib']:>9}  {g['processes']}")
    print(f"costguard attributed {held // MiB} MiB to the child "
          f"(attribution: {ks.attribution}); nvidia-smi says "
          f"{'nothing for its pid' if smi_mib is None else f'{smi_mib} MiB'}")
    print("nvidia-smi --query-compute-apps=pid,used_memory --format=csv:")
    print("  " + smi.replace("\n", "\n  "))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if not result["attributed"]:
        print("gpu_check: FAIL: the child's GPU memory was not attributed to it",
              file=sys.stderr)
        return 1
    print("gpu_check: PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())

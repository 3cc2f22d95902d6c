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

Then (issue 37) it hibernates a real kernel that holds CUDA memory, as the server does: a
kernel (jupyter_client and ipykernel needed for this step) makes a 1 GiB tensor and a small
``nn.Module`` on the GPU, the server's save cell writes its snapshot, the kernel is shut
down, NVML must show its GPU memory freed; a new kernel restores the snapshot and the tensors
must come back on CUDA with equal values, and a kernel that sees no GPU
(``CUDA_VISIBLE_DEVICES=""``) gets them on the CPU with the device note. Without torch (with
CUDA), jupyter_client or a driver the step is skipped with a line saying why.

Exit status: 0 the child's memory was attributed to it (and the hibernate step passed or was
skipped); 1 it was not (or the child could not allocate, or the hibernate step failed); 2 no
NVIDIA driver (or no pynvml/psutil) on this machine.

    python bench/gpu_check.py                 # 512 MiB on CUDA device 0, allocator: auto
    python bench/gpu_check.py --mib 2048 --device 1 --allocator ctypes --json out.json
    python bench/gpu_check.py --hibernate-mib 256   # a smaller tensor for the hibernate step
    python bench/gpu_check.py --no-hibernate        # the attribution check only
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
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
    ap.add_argument("--hibernate-mib", type=int, default=1024,
                    help="the tensor the hibernate step's kernel holds on the GPU")
    ap.add_argument("--no-hibernate", dest="hibernate", action="store_false",
                    help="skip the hibernate step")
    args = ap.parse_args(argv)
    result: dict[str, Any] = {}
    status = attribution(args, result)
    if args.hibernate:
        step = hibernate_step(args, driver=status != NO_DRIVER)
        result["hibernate"] = step
        if step["status"] == "fail" and status == 0:
            status = 1
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    return status


def attribution(args: argparse.Namespace, result: dict[str, Any]) -> int:
    """Whether costguard's sampling attributes a child's GPU memory to it; fills `result`."""

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
    result.update({"driver": sample.gpu.driver_version, "allocator": allocator,
              "child_pid": child.pid, "asked_mib": args.mib, "attributed_mib": held // MiB,
              "attribution": ks.attribution, "child_tree": list(ks.pids),
              "nvidia_smi_child_mib": smi_mib, "gpus": gpus, "nvidia_smi": smi,
              "attributed": held > 0})

    print(f"driver {result['driver']}; child pid {child.pid} allocated {args.mib} MiB on "
          f"CUDA device {args.device} with {allocator}")
    print(f"{'gpu':>3}  {'name':<28} {'used/total MiB':>17} {'util %':>6} {'child MiB':>9}  "
          "NVML processes (pid, MiB)")
    for g in gpus:
        util = "-" if g["utilization_percent"] is None else f"{g['utilization_percent']:.0f}"
        print(f"{g['index']:>3}  {str(g['name'])[:28]:<28} "
              f"{g['memory_used_mib']:>8}/{g['memory_total_mib']:<8} {util:>6} "
              f"{g['attributed_to_child_mib']:>9}  {g['processes']}")
    print(f"costguard attributed {held // MiB} MiB to the child "
          f"(attribution: {ks.attribution}); nvidia-smi says "
          f"{'nothing for its pid' if smi_mib is None else f'{smi_mib} MiB'}")
    print("nvidia-smi --query-compute-apps=pid,used_memory --format=csv:")
    print("  " + smi.replace("\n", "\n  "))
    if not result["attributed"]:
        print("gpu_check: FAIL: the child's GPU memory was not attributed to it",
              file=sys.stderr)
        return 1
    print("gpu_check: PASS")
    return 0


# --- hibernate (issue 37): a kernel's CUDA memory freed, its tensors back on CUDA ------------

#: run in the first kernel: what it holds on the GPU (a tensor of `nbytes`, a small model)
HOLD = r'''
import torch
_n = {nbytes} // 4
gpu_tensor = torch.arange(_n, dtype=torch.float32, device="cuda").remainder_(9973.0)
gpu_model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 4)).cuda()
torch.cuda.synchronize()
'''

#: run in a kernel after the restore: the same fingerprints (on whatever device it came back)
FINGERPRINT = r'''
import hashlib as _h, json as _j, os as _os
print("fingerprint", _j.dumps({
    "pid": _os.getpid(),
    "tensor": [str(gpu_tensor.device), gpu_tensor.numel(),
               _h.sha256(gpu_tensor.cpu().numpy().tobytes()).hexdigest()],
    "model": sorted([k, str(v.device), v.cpu().numpy().tobytes().hex()]
                    for k, v in gpu_model.state_dict().items())}))
'''

#: a kernel's own check: is CUDA usable with torch there?
PROBE = r'''
import json as _j
try:
    import torch as _torch
    _ok = [_torch.cuda.is_available(), _torch.__version__]
except ImportError as _e:
    _ok = [None, str(_e)]
print("probe", _j.dumps(_ok))
'''


def hibernate_skip_reason(driver: bool) -> str | None:
    """Why the hibernate step cannot run here (before starting anything), or None."""
    if not driver:
        return "no NVIDIA driver"
    for module, why in (("torch", "torch is not installed"),
                        ("jupyter_client", "jupyter_client is not installed (a kernel is "
                                           "needed)"),
                        ("ipykernel", "ipykernel is not installed (a kernel is needed)")):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            return why
    return None


def hibernate_step(args: argparse.Namespace, driver: bool) -> dict[str, Any]:
    """Hibernate a kernel holding CUDA memory and restore it; {"status": "pass" | "fail" |
    "skipped", ...}. Prints one line per stage and a last line saying the outcome."""
    reason = hibernate_skip_reason(driver)
    if reason is None:
        try:
            return _hibernate(args)
        except _Skip as e:
            reason = str(e)
    print(f"gpu_check: hibernate step skipped: {reason}")
    return {"status": "skipped", "reason": reason}


class _Skip(Exception):
    """The hibernate step cannot run here; the message says why."""


class _Kernel:
    """A real python3 kernel with this repository on its path."""

    def __init__(self, runtime: Path, extra_env: dict[str, str] | None = None) -> None:
        from jupyter_client.manager import KernelManager

        kernel_id = str(uuid.uuid4())
        self.km = KernelManager(kernel_name="python3",
                                connection_file=str(runtime / f"kernel-{kernel_id}.json"))
        env = {**os.environ, **(extra_env or {})}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
        self.km.start_kernel(kernel_id=kernel_id, env=env, cwd=str(runtime))
        self.kc = self.km.client()
        self.kc.start_channels()
        self.kc.wait_for_ready(timeout=120)

    def run(self, code: str, timeout: float = 300) -> str:
        out: list[str] = []

        def hook(msg: dict[str, Any]) -> None:
            if msg["msg_type"] == "stream":
                out.append(msg["content"]["text"])
            elif msg["msg_type"] == "error":
                out.append("\n".join(msg["content"]["traceback"]))

        reply = self.kc.execute_interactive(code, output_hook=hook, timeout=timeout,
                                            allow_stdin=False)
        if reply["content"]["status"] != "ok":
            raise RuntimeError("the kernel raised:\n" + "".join(out))
        return "".join(out)

    def said(self, code: str, tag: str) -> Any:
        for line in self.run(code).splitlines():
            if line.startswith(tag + " "):
                return json.loads(line[len(tag) + 1:])
        raise RuntimeError(f"the kernel did not answer {tag!r}")

    def close(self) -> None:
        self.kc.stop_channels()
        self.km.shutdown_kernel(now=False)


def _gpu_memory_of(pid: int) -> int | None:
    """The GPU memory NVML lists for `pid` (bytes, summed over GPUs), None if it lists none."""
    from jupyter_costguard.sampling.nvml import NvmlReader

    reader = NvmlReader()
    try:
        found = [p.used_memory_bytes or 0 for g in reader.read().gpus for p in g.processes
                 if p.pid == pid]
    finally:
        reader.close()
    return sum(found) if found else None


def _hibernate(args: argparse.Namespace) -> dict[str, Any]:
    from jupyter_costguard.kernel.hibernate import parse_reply, restore_code, save_code

    work = Path(tempfile.mkdtemp(prefix="costguard-gpu-hibernate-"))
    kernels: list[_Kernel] = []
    out: dict[str, Any] = {"status": "fail"}

    def reply(kernel: _Kernel, code: str) -> dict[str, Any]:
        doc = parse_reply(kernel.run(code))
        if doc is None or "error" in doc:
            raise RuntimeError(f"the hibernate cell answered {doc}")
        return doc

    def fail(message: str) -> dict[str, Any]:
        print(f"gpu_check: hibernate FAIL: {message}", file=sys.stderr)
        out["error"] = message
        return out

    try:
        a = _Kernel(work)
        kernels.append(a)
        ok, detail = a.said(PROBE, "probe")
        if ok is None:
            raise _Skip(f"torch is not importable in the kernel ({detail})")
        if not ok:
            raise _Skip(f"torch {detail} sees no CUDA device (torch.cuda.is_available() is "
                        "False)")
        a.run(HOLD.format(nbytes=args.hibernate_mib * MiB))
        before = a.said(FINGERPRINT, "fingerprint")
        pid = before["pid"]
        time.sleep(1)  # NVML can list a context a moment late
        held = _gpu_memory_of(pid) or 0
        print(f"hibernate: kernel pid {pid} holds {held // MiB} MiB of GPU memory "
              f"({args.hibernate_mib} MiB tensor and a small nn.Module, {before['tensor'][0]})")
        out.update({"kernel_pid": pid, "held_mib": held // MiB})

        snap = work / "snapshot"
        started = time.monotonic()
        saved = reply(a, save_code(snap, 64 << 30))
        out["save_s"] = round(time.monotonic() - started, 2)
        out["bytes"] = saved["bytes"]
        if not {"gpu_tensor", "gpu_model"} <= set(saved["saved"]):
            return fail(f"the snapshot did not save the tensor and the model: {saved['saved']}")
        a.close()  # the server shuts the kernel down once its snapshot is written
        kernels.remove(a)
        deadline = time.monotonic() + args.timeout
        left = _gpu_memory_of(pid)
        while left is not None and time.monotonic() < deadline:
            time.sleep(0.5)
            left = _gpu_memory_of(pid)
        out["freed"] = left is None
        print(f"hibernate: saved {saved['bytes'] / 1e9:.2f} GB in {out['save_s']} s; the kernel "
              f"shut down; NVML lists {'nothing' if left is None else f'{left // MiB} MiB'} "
              f"for pid {pid}")
        if left is not None:
            return fail(f"pid {pid} still holds {left // MiB} MiB after the shutdown")

        b = _Kernel(work)
        kernels.append(b)
        started = time.monotonic()
        back = reply(b, restore_code(snap))
        out["restore_s"] = round(time.monotonic() - started, 2)
        after = b.said(FINGERPRINT, "fingerprint")
        print(f"hibernate: restored {len(back['restored'])} names in {out['restore_s']} s; "
              f"tensor on {after['tensor'][0]}, notes {back.get('notes')}")
        if after["tensor"] != before["tensor"] or after["model"] != before["model"]:
            return fail("the restored tensors differ from the saved ones (device or values): "
                        f"{after['tensor']} against {before['tensor']}")

        c = _Kernel(work, {"CUDA_VISIBLE_DEVICES": ""})
        kernels.append(c)
        cpu = reply(c, restore_code(snap))
        on_cpu = c.said(FINGERPRINT, "fingerprint")
        notes = {n["name"]: n["note"] for n in cpu.get("notes", [])}
        print(f"hibernate: in a kernel without a GPU: tensor on {on_cpu['tensor'][0]}, notes "
              f"{notes}")
        same_values = on_cpu["tensor"][1:] == before["tensor"][1:] and [
            m[::2] for m in on_cpu["model"]] == [m[::2] for m in before["model"]]
        noted = all("restored to the CPU" in notes.get(n, "")
                    for n in ("gpu_tensor", "gpu_model"))
        if on_cpu["tensor"][0] != "cpu" or not same_values or not noted:
            return fail("without a GPU the tensors should come back on the CPU, equal, with "
                        f"the device note; got {on_cpu['tensor'][0]}, notes {notes}")
        out["status"] = "pass"
        print("gpu_check: hibernate PASS: the kernel's GPU memory was freed and the tensors "
              "came back on CUDA, equal (and on the CPU with the note where no GPU is seen)")
        return out
    except _Skip:
        raise
    except Exception as e:  # a kernel that would not start, a cell that raised
        return fail(f"{type(e).__name__}: {e}")
    finally:
        for kernel in kernels:
            try:
                kernel.close()
            except Exception:
                pass
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

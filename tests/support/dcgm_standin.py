"""A loopback stand-in for NVIDIA's dcgm-exporter, for a real Prometheus to scrape.

A stand-in: no GPU exists where the tests run, so nothing here reads one. It serves, on
`/metrics`, the Prometheus text format dcgm-exporter writes for a node's GPUs: `# HELP` and
`# TYPE` lines, then one series per GPU labelled `gpu`, `UUID`, `pci_bus_id`, `device`,
`modelName`, `Hostname`, `DCGM_FI_DRIVER_VERSION`, and, with the kubelet's pod-resources
mapping, `container`, `namespace` and `pod` of the pod holding it. A GPU no pod holds has
those three empty (older exporters) or left out (newer ones); both are offered. Served:

- `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (gauge, ratio 0..1) for GPUs with profiling metrics;
- `DCGM_FI_DEV_GPU_UTIL` (gauge, percent 0..100) for every GPU.

Tests move GPUs between busy and idle (or any activity) from their own thread; every change
is taken under one lock, and each scrape renders one consistent snapshot.
"""

from __future__ import annotations

import math
import threading
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
HELP = {
    ENGINE_ACTIVE: "Ratio of time the graphics engine is active.",
    GPU_UTIL: "GPU utilization (in %).",
}
#: what busy and idle look like: a training loop keeps the engine mostly active; an idle
#: GPU with a context shows a trickle
BUSY_PERCENT = 87.0
IDLE_PERCENT = 0.4


def escape_label_value(value: str) -> str:
    """The text format's label-value escapes: backslash, double quote, newline."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def sample_value(metric: str, percent: float) -> str:
    """The profiling metric as a ratio, utilization in whole percent (as DCGM reports it);
    a non-finite value as the text format writes it (a test's broken GPU)."""
    if math.isnan(percent):
        return "NaN"
    if math.isinf(percent):
        return "+Inf" if percent > 0 else "-Inf"
    return f"{percent / 100:.6f}" if metric == ENGINE_ACTIVE else f"{round(percent):d}"


@dataclass
class StandInGpu:
    index: int
    uuid: str
    model: str
    namespace: str = ""
    pod: str = ""
    container: str = ""
    #: activity in percent; the profiling metric serves it as a ratio
    percent: float = 0.0
    #: whether DCGM_FI_PROF_* is exported for this GPU (not on every GPU model)
    profiling: bool = True
    #: for a GPU no pod holds: write the pod labels empty (True) or leave them out
    empty_pod_labels: bool = True


class DcgmStandIn:
    """One node's dcgm-exporter, stood in. Use as a context manager or start()/stop()."""

    def __init__(self, hostname: str = "gpu-node-1",
                 model: str = "NVIDIA A100-SXM4-80GB") -> None:
        self.hostname = hostname
        self.model = model
        self.driver = "550.54.15"
        self.gpus: list[StandInGpu] = []
        self.scrapes = 0
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- the GPUs ------------------------------------------------------------------------

    def add_gpu(self, namespace: str = "", pod: str = "", *, container: str = "notebook",
                busy: bool = False, percent: float | None = None, profiling: bool = True,
                empty_pod_labels: bool = True) -> int:
        """A GPU on this node, held by (namespace, pod) or by nobody (both empty); its index."""
        with self.lock:
            index = len(self.gpus)
            self.gpus.append(StandInGpu(
                index=index, uuid=f"GPU-{uuid.uuid4()}", model=self.model,
                namespace=namespace, pod=pod, container=container if pod else "",
                percent=(BUSY_PERCENT if busy else IDLE_PERCENT) if percent is None
                else percent,
                profiling=profiling, empty_pod_labels=empty_pod_labels))
            return index

    def set_activity(self, namespace: str, pod: str, percent: float,
                     gpu: int | None = None) -> None:
        """Every GPU the pod holds (or its GPU `gpu`, by node index) at `percent`."""
        with self.lock:
            held = [g for g in self.gpus if (g.namespace, g.pod) == (namespace, pod)
                    and (gpu is None or g.index == gpu)]
            if not held:
                raise KeyError(f"no GPU held by {namespace}/{pod}" +
                               (f" with index {gpu}" if gpu is not None else ""))
            for g in held:
                g.percent = percent

    def set_busy(self, namespace: str, pod: str, busy: bool, gpu: int | None = None) -> None:
        self.set_activity(namespace, pod, BUSY_PERCENT if busy else IDLE_PERCENT, gpu)

    def release(self, namespace: str, pod: str) -> None:
        """The pod is gone: its GPUs are held by nobody and idle."""
        with self.lock:
            for g in self.gpus:
                if (g.namespace, g.pod) == (namespace, pod):
                    g.namespace = g.pod = g.container = ""
                    g.percent = 0.0

    # --- the text format -----------------------------------------------------------------

    def _labels(self, g: StandInGpu) -> str:
        pairs: list[tuple[str, str]] = [
            ("gpu", str(g.index)), ("UUID", g.uuid),
            ("pci_bus_id", f"00000000:{0x10 + g.index:02X}:00.0"),
            ("device", f"nvidia{g.index}"), ("modelName", g.model),
            ("Hostname", self.hostname), ("DCGM_FI_DRIVER_VERSION", self.driver)]
        if g.pod or g.empty_pod_labels:
            pairs += [("container", g.container), ("namespace", g.namespace), ("pod", g.pod)]
        return ",".join(f'{k}="{escape_label_value(v)}"' for k, v in pairs)

    def render(self) -> str:
        """The /metrics body: one snapshot of every GPU."""
        with self.lock:
            gpus = [StandInGpu(**vars(g)) for g in self.gpus]
        lines: list[str] = []
        for metric in (ENGINE_ACTIVE, GPU_UTIL):
            lines += [f"# HELP {metric} {HELP[metric]}", f"# TYPE {metric} gauge"]
            for g in gpus:
                if metric == ENGINE_ACTIVE and not g.profiling:
                    continue
                lines.append(f"{metric}{{{self._labels(g)}}} {sample_value(metric, g.percent)}")
        return "\n".join(lines) + "\n"

    # --- the server ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self.server is not None, "not started"
        return int(self.server.server_address[1])

    @property
    def target(self) -> str:
        """host:port, as a Prometheus static_config wants it."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> DcgmStandIn:
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = standin.render().encode()
                with standin.lock:
                    standin.scrapes += 1
                self.send_response(200)
                # as the Go exporter answers (text format 0.0.4)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                        name="dcgm-standin")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    def __enter__(self) -> DcgmStandIn:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

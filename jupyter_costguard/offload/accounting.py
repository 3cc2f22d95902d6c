"""What a job costs and how it used its GPUs, as the follower sees it go.

A local job's kernel is sampled like any other (its spend is the ledger's, under
``job-<id>``); a cluster job's cannot be, so its spend is the time its allocation was held at
the configured rates. The GPUs a local job gets are picked from the latest sample.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jupyter_costguard.cost.pricing import MachinePrice
from jupyter_costguard.offload.errors import JobError
from jupyter_costguard.offload.estimate import allocation_rate
from jupyter_costguard.offload.spec import Job
from jupyter_costguard.sampling.records import Sample


class Accounting:
    """Spend and the time-weighted GPU utilisation of the jobs being followed."""

    def __init__(self, cluster_rates: Mapping[str, Mapping[str, float]],
                 job_spend: Callable[[str], float],
                 gpu_usage: Callable[[str], tuple[float, float, float] | None],
                 machine_price: Callable[[str, str, str | None, str], MachinePrice | None]
                 = lambda provider, instance_type, region, market: None) -> None:
        self.cluster_rates = {k: dict(v) for k, v in cluster_rates.items()}
        self.job_spend = job_spend
        self.gpu_usage = gpu_usage
        self.machine_price = machine_price
        #: job -> [last sample time counted, utilisation x seconds, seconds]
        self._gpu_seen: dict[int, list[float]] = {}

    def spend(self, job: Job, local: bool, phase_times: Mapping[str, float], now: float,
              machines: Sequence[Mapping[str, Any]] | None = None) -> float:
        if local:
            return self.job_spend(f"job-{job.id}")
        if machines:
            return sum(m["spend"] for m in self.priced_machines(job, machines))
        return self.allocation_spend(job, phase_times, now)

    def priced_machines(self, job: Job, machines: Sequence[Mapping[str, Any]]
                        ) -> list[dict[str, Any]]:
        """Each machine the job ran on (a SkyPilot job's, as its runner recorded them) with
        its time and spend: from its start to its end (or, still up or gone, the last time it
        was seen) at its own instance's catalog price; a machine with no cloud identity (or
        one the catalog lacks) at the site's `cluster_rates` for the backend."""
        out = []
        for m in machines:
            start, seen = _number(m.get("start")), _number(m.get("end", m.get("seen")))
            seconds = max(0.0, seen - start) if start is not None and seen is not None else 0.0
            price = None
            provider, instance_type = m.get("provider"), m.get("instance_type")
            if isinstance(provider, str) and isinstance(instance_type, str):
                region = m.get("region") if isinstance(m.get("region"), str) else None
                market = str(m.get("market") or "on-demand")
                price = self.machine_price(provider, instance_type, region, market)
            if price is not None:
                rate, source = price.rate_per_hour, price.detail
            else:
                rate = allocation_rate(self.cluster_rates.get(job.spec.backend) or {},
                                       job.spec.resources)
                source = (f"the site's rate for {job.spec.backend} (cluster_rates): "
                          + ("no cloud identity" if not provider
                             else f"{provider} {instance_type} is not in the catalog"))
            out.append({"provider": provider, "instance_type": instance_type,
                        "region": m.get("region"), "market": m.get("market"),
                        "seconds": round(seconds, 3), "rate_per_hour": rate,
                        "price_source": source, "spend": seconds * rate / 3600.0})
        return out

    def allocation_spend(self, job: Job, phase_times: Mapping[str, float], now: float) -> float:
        """A cluster job's spend: the time its allocation was held (from its runner's start
        to its end) at the configured rates of what it asked for (`cluster_rates`)."""
        rates = self.cluster_rates.get(job.spec.backend)
        start = phase_times.get("starting")
        if not rates or start is None:
            return 0.0
        end = phase_times.get("done", now)
        # the hourly figure the offload dialog showed before the submit (`estimate`)
        per_hour = allocation_rate(rates, job.spec.resources)
        return max(0.0, end - start) * per_hour / 3600.0

    def count_gpu(self, job_id: int) -> None:
        """Fold the latest sample's GPU utilisation of the job's kernel into its mean."""
        usage = self.gpu_usage(f"job-{job_id}")
        if usage is None:
            return
        when, interval, percent = usage
        seen = self._gpu_seen.setdefault(job_id, [0.0, 0.0, 0.0])
        if when > seen[0]:
            seen[0] = when
            seen[1] += percent * interval
            seen[2] += interval

    def gpu_mean(self, job: Job) -> float | None:
        """Time-weighted mean utilisation of the GPUs the job's kernel held (local jobs)."""
        seen = self._gpu_seen.get(job.id)
        if seen is not None and seen[2] > 0:
            return round(seen[1] / seen[2], 2)
        gpu = job.record.get("gpu")
        return gpu.get("mean_utilization_percent") if isinstance(gpu, dict) else None

    def gpu_record(self, job_id: int) -> dict[str, float] | None:
        """What the ended job's record keeps of its GPU use (and the count is dropped)."""
        seen = self._gpu_seen.pop(job_id, None)
        if seen is None or seen[2] <= 0:
            return None
        return {"mean_utilization_percent": round(seen[1] / seen[2], 2),
                "sampled_seconds": round(seen[2], 3)}


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def kernel_gpu_usage(sample: Sample | None, kernel_id: str) -> tuple[float, float, float] | None:
    """(sample time, interval, mean utilisation %) of the GPUs `kernel_id` holds in `sample`;
    None when it holds none whose utilisation is known."""
    if sample is None:
        return None
    kernel = next((k for k in sample.kernels if k.info.kernel_id == kernel_id), None)
    if kernel is None:
        return None
    utils = [g.utilization_percent for g in sample.gpu.gpus
             if g.uuid in kernel.gpu_memory_bytes and g.utilization_percent is not None]
    if not utils:
        return None
    return sample.time, sample.interval, sum(utils) / len(utils)


def pick_gpus(sample: Sample | None, n: int) -> list[str] | None:
    """The `n` least-used GPUs of the last sample, by UUID (CUDA_VISIBLE_DEVICES takes
    UUIDs, which do not depend on the server's own device numbering). None when the server
    sees no GPUs (nothing to select); JobError when it sees fewer than `n`."""
    if sample is None or not sample.gpu.gpus:
        if n == 0:
            return []
        return None
    gpus = [g for g in sample.gpu.gpus if g.faulty is None]
    if n > len(gpus):
        raise JobError(f"the job asks for {n} GPU(s); this machine has {len(gpus)} usable")
    gpus.sort(key=lambda g: (g.memory_used_bytes, g.utilization_percent or 0.0, g.index))
    return [g.uuid for g in gpus[:n]]

"""The spend model: conservation, proportional attribution, waste."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from jupyter_costguard.cost.allocation import cpu_capacity
from jupyter_costguard.cost.spend import machine_rates, split_interval
from jupyter_costguard.sampling.records import (
    GpuReading,
    GpuSample,
    HostSample,
    KernelInfo,
    KernelSample,
    Sample,
)


def kernel(kid: str, state: str = "idle", cpu: float = 0.0, gpu_mem: dict | None = None):
    info = KernelInfo(kid, "python3", 1, state, 0.0, 0, f"{kid}.ipynb")
    return KernelSample(info, (1,), cpu, 0, gpu_mem or {})


def gpu(uuid: str, util: float | None = 50.0, total: int = 80, parent: str | None = None):
    return GpuSample(0, uuid, "NVIDIA A100-SXM4-80GB", total, 10, util, 100.0, (),
                     mig_parent_uuid=parent)


def sample(gpus, kernels, interval=2.0, cpus=8):
    return Sample(100.0, interval, GpuReading("ok", gpus=tuple(gpus)),
                  HostSample(cpus, 10.0, 1 << 30, 1 << 29), tuple(kernels))


def test_gpu_cost_split_by_memory_and_host_by_cpu():
    # 2 GPUs, rate 36/h for 2 s -> 0.02 total; 90% GPU: 0.009 per GPU; 0.002 host.
    s = sample(
        [gpu("G0", util=80.0), gpu("G1", util=80.0)],
        [kernel("a", "busy", cpu=4.0, gpu_mem={"G0": 3}),
         kernel("b", "busy", cpu=0.0, gpu_mem={"G0": 1})],
    )
    cost = split_interval(s, 36.0, 0.9)
    assert math.isclose(cost.total, 0.02)
    a, b = cost.shares["a"], cost.shares["b"]
    assert math.isclose(a.gpu, 0.009 * 0.75)
    assert math.isclose(b.gpu, 0.009 * 0.25)
    # a used 4 CPU-seconds of 16 available in the interval: a quarter of the host part
    assert math.isclose(a.host, 0.002 * 0.25)
    assert b.host == 0.0
    # G1 is held by nobody: its whole cost is unattributed GPU
    assert math.isclose(cost.unattributed_gpu, 0.009)
    assert math.isclose(cost.unattributed + cost.attributed(), cost.total)
    assert a.waste == 0.0 and b.waste == 0.0


def test_waste_only_when_gpu_idle_and_kernel_not_busy():
    s = sample([gpu("G0", util=1.0)],
               [kernel("idle", "idle", gpu_mem={"G0": 1}),
                kernel("busy", "busy", gpu_mem={"G0": 1})])
    cost = split_interval(s, 36.0, 1.0, idle_threshold_percent=5.0)
    assert cost.shares["idle"].waste == cost.shares["idle"].gpu > 0
    assert cost.shares["busy"].waste == 0.0
    hot = sample([gpu("G0", util=90.0)], [kernel("idle", "idle", gpu_mem={"G0": 1})])
    assert split_interval(hot, 36.0, 1.0).shares["idle"].waste == 0.0


def test_a_gpu_of_unknown_activity_is_spend_but_never_waste():
    # A MIG instance reports no utilisation: an idle kernel on it pays its share, but what
    # cannot be seen is not booked as waste (it used to be, all of it)
    s = sample([gpu("MIG-1", util=None, total=40, parent="G0"),
                gpu("MIG-2", util=None, total=40, parent="G0")],
               [kernel("idle", "idle", gpu_mem={"MIG-1": 1})])
    cost = split_interval(s, 36.0, 1.0, idle_threshold_percent=5.0)
    assert cost.shares["idle"].gpu > 0
    assert cost.shares["idle"].waste == 0.0


def test_instance_gpus_not_visible_stay_unattributed():
    # An 8-GPU instance where CUDA_VISIBLE_DEVICES shows the server one GPU.
    s = sample([gpu("G0")], [kernel("a", "busy", gpu_mem={"G0": 5})])
    cost = split_interval(s, 80.0, 1.0, gpu_count=8)
    assert math.isclose(cost.shares["a"].gpu, cost.total / 8)
    assert math.isclose(cost.unattributed_gpu, cost.total * 7 / 8)


def test_mig_instances_share_parent_cost_by_memory():
    s = sample(
        [gpu("MIG-1", util=None, total=10, parent="G0"), gpu("MIG-2", util=None, total=30,
                                                              parent="G0")],
        [kernel("a", "busy", gpu_mem={"MIG-1": 1}), kernel("b", "busy", gpu_mem={"MIG-2": 1})],
    )
    cost = split_interval(s, 36.0, 1.0)
    assert math.isclose(cost.shares["a"].gpu, cost.total * 0.25)
    assert math.isclose(cost.shares["b"].gpu, cost.total * 0.75)


def test_unpriced_costs_nothing():
    s = sample([gpu("G0")], [kernel("a", gpu_mem={"G0": 1})])
    cost = split_interval(s, None, 0.9)
    assert cost.total == 0.0 and cost.shares["a"].spend == 0.0


def test_cpu_oversubscription_never_hands_out_more_than_the_host():
    s = sample([], [kernel("a", "busy", cpu=30.0), kernel("b", "busy", cpu=10.0)], cpus=2)
    cost = split_interval(s, 10.0, 0.0)
    assert math.isclose(cost.shares["a"].host + cost.shares["b"].host, cost.total)
    assert math.isclose(cost.shares["a"].host, 3 * cost.shares["b"].host)
    assert cost.unattributed >= -1e-12


gpu_ids = st.sampled_from(["G0", "G1", "G2", "MIG-a", "MIG-b"])


@st.composite
def samples(draw):
    n_gpu = draw(st.integers(0, 3))
    gpus = [gpu(f"G{i}", util=draw(st.one_of(st.none(), st.floats(0, 100))))
            for i in range(n_gpu)]
    if draw(st.booleans()):
        gpus += [gpu("MIG-a", None, 10, "P"), gpu("MIG-b", None, 20, "P")]
    uuids = [g.uuid for g in gpus]
    kernels = []
    for i in range(draw(st.integers(0, 6))):
        held = draw(st.dictionaries(st.sampled_from(uuids), st.integers(0, 1 << 34),
                                    max_size=len(uuids))) if uuids else {}
        kernels.append(kernel(f"k{i}", draw(st.sampled_from(["idle", "busy", "starting"])),
                              draw(st.floats(0, 50)), held))
    return sample(gpus, kernels, interval=draw(st.floats(0, 3600)), cpus=draw(st.integers(1, 96)))


@settings(max_examples=300, deadline=None)
@given(samples(), st.floats(0, 200), st.floats(0, 1), st.one_of(st.none(), st.integers(0, 16)))
def test_conservation(s, rate, share, gpu_count):
    """kernels + unattributed == rate × time, for any sample."""
    cost = split_interval(s, rate, share, gpu_count)
    expected = rate * s.interval / 3600
    assert math.isclose(cost.total, expected, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(cost.attributed() + cost.unattributed, expected,
                        rel_tol=1e-9, abs_tol=1e-9)
    for sh in cost.shares.values():
        assert sh.gpu >= 0 and sh.host >= 0 and 0 <= sh.waste <= sh.gpu + 1e-12
    assert cost.unattributed >= -1e-9


def job_kernel(kid: str, cpus_held: float, cpu: float = 0.0, gpu_mem: dict | None = None):
    info = KernelInfo(kid, "python3", 1, "busy", 0.0, 0, "nb.ipynb", cpus_held=cpus_held)
    return KernelSample(info, (1,), cpu, 0, gpu_mem or {})


def test_a_job_is_charged_at_least_the_cpus_it_holds():
    # rate 36/h for 2 s: 0.02; host part 0.002 over 8 CPUs x 2 s = 16 CPU-seconds
    s = sample([], [job_kernel("job-1", cpus_held=2.0, cpu=1.0),
                    job_kernel("job-2", cpus_held=1.0, cpu=5.0), kernel("k", cpu=1.0)])
    cost = split_interval(s, 36.0, 0.9)
    assert math.isclose(cost.shares["job-1"].host, 0.002 * 4 / 16)  # held 2 CPUs x 2 s
    assert math.isclose(cost.shares["job-2"].host, 0.002 * 5 / 16)  # used more than held
    assert math.isclose(cost.shares["k"].host, 0.002 * 1 / 16)  # a kernel holds none
    assert math.isclose(cost.unattributed + cost.attributed(), cost.total)


def test_the_estimates_rates_are_the_ledgers():
    """A job that holds exactly what it asked for is charged per hour what the allocation
    model's `hourly` says (the offload estimate's figure)."""
    s = sample([gpu("G0"), gpu("G1"), gpu("G2"), gpu("G3")],
               [job_kernel("job-1", cpus_held=2.0, cpu=1.0, gpu_mem={"G1": 5})],
               interval=3.0, cpus=16)
    cost = split_interval(s, 40.0, 0.8, gpu_count=4, cpu_capacity=32.0)
    rates = machine_rates(s, 40.0, 0.8, gpu_count=4, cpu_capacity=32.0)
    per_hour = cost.shares["job-1"].spend * 3600.0 / s.interval
    assert math.isclose(per_hour, rates.hourly(gpus=1, cpus=2.0))
    assert math.isclose(rates.hourly(1, 2.0), 40.0 * 0.8 / 4 + 2 * 40.0 * 0.2 / 32)


def test_the_host_part_is_split_over_the_cpus_the_price_pays_for():
    """A price of an instance (a configured or replayed one) pays for its vCPUs, whatever
    this host has (the demo replays a 96-vCPU p4d on a 2-core machine); a container's limit
    comes first; without either, this host's CPUs."""
    assert cpu_capacity(None, 96, 2) == 96.0
    assert cpu_capacity(4.0, 96, 2) == 4.0
    assert cpu_capacity(None, None, 2) == 2.0
    assert cpu_capacity(None, None, 0) == 1.0

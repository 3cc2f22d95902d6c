"""jupyter_costguard.sampling.nvml against the real pynvml bindings and the fake libnvidia-ml.so.1.

Most tests load the stub into this process (see tests/support/nvmlstub.py); the ones about a missing
library, an old driver or the environment a server gets run a child interpreter.
"""

from __future__ import annotations

import ctypes.util
import json
import logging
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from jupyter_costguard.sampling.nvml import NvmlReader, parse_visible_devices
from jupyter_costguard.sampling.records import GpuProcess, GpuReading
from tests.support import nvmlstub
from tests.support.nvmlstub import Gpu, Mig, Proc, Scenario
from tests.support.units import GiB

REPO = Path(__file__).resolve().parents[1]

UUID0 = "GPU-00000000-1111-2222-3333-444444444444"
UUID1 = "GPU-0000aaaa-1111-2222-3333-444444444444"
UUID2 = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
MIG_A = "MIG-aaaaaaaa-0000-0000-0000-000000000001"
MIG_B = "MIG-aaaaaaaa-0000-0000-0000-000000000002"


@dataclass
class Fake:
    nvml: nvmlstub.FakeNvml
    path: Path

    def write(self, scenario: Scenario) -> None:
        scenario.write(self.path)


@pytest.fixture(scope="session")
def stub_dir() -> Path:
    return nvmlstub.build()


@pytest.fixture
def fake(stub_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fake]:
    nvml = nvmlstub.preload(stub_dir)
    previous = nvml.reset()
    path = tmp_path / "scenario.txt"
    monkeypatch.setenv(nvmlstub.SCENARIO_ENV, str(path))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    yield Fake(nvml, path)
    nvml.reset()
    # Leave pynvml as it was (on a GPU machine: the real driver) for other tests.
    nvmlstub.reset_pynvml(previous if previous is not nvml.lib else None)


@pytest.fixture
def readers() -> Iterator[list[NvmlReader]]:
    """Readers made by a test are closed after it."""
    made: list[NvmlReader] = []
    yield made
    for r in made:
        r.close()


def reader(readers: list[NvmlReader], visible: str | None = None, **kw: Any) -> NvmlReader:
    r = NvmlReader(visible, retry_interval=kw.pop("retry_interval", 0.0), **kw)
    readers.append(r)
    return r


def three_gpus(**changes: Any) -> Scenario:
    """GPU 0 busy with two processes, GPU 1 idle, GPU 2 with a graphics client."""
    gpus = [
        Gpu(uuid=UUID0, name="NVIDIA A100-SXM4-80GB", mem_total=80 * GiB,
            mem_used=6 * GiB, mem_reserved=GiB // 2, util=37, power_mw=250_000,
            procs=[Proc(1001, 4 * GiB), Proc(1002, 2 * GiB),
                   Proc(1001, 5 * GiB, type="graphics"), Proc(1003, None)]),
        Gpu(uuid=UUID1, name="NVIDIA A100-SXM4-80GB", util=0, power_mw=55_500),
        Gpu(uuid=UUID2, name="NVIDIA L4", mem_total=24 * GiB, mem_used=GiB, util=3,
            procs=[Proc(2001, GiB, type="graphics")]),
    ]
    for key, value in changes.items():
        index, attr = key.split("__")
        setattr(gpus[int(index[1:])], attr, value)
    return Scenario(gpus=gpus, driver="550.54.15")


def uuids(reading: GpuReading) -> list[str]:
    return [g.uuid for g in reading.gpus]


# --------------------------------------------------------------------------- plain reading


def test_reads_every_gpu_and_its_processes(fake: Fake, readers: list[NvmlReader]) -> None:
    fake.write(three_gpus())
    reading = reader(readers).read()

    assert reading.status == "ok", reading.detail
    assert reading.driver_version == "550.54.15"
    assert [g.index for g in reading.gpus] == [0, 1, 2]
    assert uuids(reading) == [UUID0, UUID1, UUID2]
    g0, g1, g2 = reading.gpus
    assert g0.name == "NVIDIA A100-SXM4-80GB" and g2.name == "NVIDIA L4"
    assert g0.memory_total_bytes == 80 * GiB
    # The v2 query: "used" leaves out what the driver reserves for itself.
    assert g0.memory_used_bytes == 6 * GiB
    assert g0.utilization_percent == 37.0
    assert g0.power_watts == 250.0
    assert g1.power_watts == 55.5
    assert g0.faulty is None and g0.mig_parent_uuid is None
    # 1001 is both a compute and a graphics client: one entry, the larger memory.
    assert g0.processes == (
        GpuProcess(1001, 5 * GiB, "compute"),
        GpuProcess(1002, 2 * GiB, "compute"),
        GpuProcess(1003, None, "compute"),  # NVML_VALUE_NOT_AVAILABLE
    )
    assert g1.processes == ()
    assert g2.processes == (GpuProcess(2001, GiB, "graphics"),)


def test_static_facts_are_cached_and_dynamic_values_reread(
    fake: Fake, readers: list[NvmlReader]
) -> None:
    fake.write(three_gpus())
    r = reader(readers)
    for _ in range(3):
        assert r.read().status == "ok"
    assert fake.nvml.call_count("nvmlInitWithFlags") == 1
    assert fake.nvml.call_count("nvmlDeviceGetHandleByIndex_v2") == 3
    assert fake.nvml.call_count("nvmlDeviceGetName") == 3
    assert fake.nvml.call_count("nvmlDeviceGetUUID") == 3
    assert fake.nvml.call_count("nvmlDeviceGetUtilizationRates") == 9
    assert fake.nvml.call_count("nvmlDeviceGetComputeRunningProcesses_v3") >= 9


def test_values_follow_the_scenario_while_running(fake: Fake, readers: list[NvmlReader]) -> None:
    fake.write(three_gpus(g1__util=2))
    r = reader(readers)
    before = r.read()
    assert before.gpus[1].utilization_percent == 2.0
    assert before.gpus[1].processes == ()

    fake.write(three_gpus(g1__util=96, g1__mem_used=30 * GiB,
                          g1__procs=[Proc(4242, 30 * GiB)]))
    after = r.read()
    assert after.gpus[1].utilization_percent == 96.0
    assert after.gpus[1].memory_used_bytes == 30 * GiB
    assert after.gpus[1].processes == (GpuProcess(4242, 30 * GiB, "compute"),)
    assert after.gpus[0] == before.gpus[0]


def test_unsupported_queries_are_none_not_faults(fake: Fake, readers: list[NvmlReader]) -> None:
    fake.write(three_gpus(g2__util=None, g2__power_mw=None,
                          g2__fail={"graphics": "NOT_SUPPORTED"}))
    g2 = reader(readers).read().gpus[2]
    assert g2.utilization_percent is None
    assert g2.power_watts is None
    assert g2.processes == ()
    assert g2.faulty is None
    assert g2.memory_used_bytes == GiB


def test_reader_is_safe_from_several_threads(fake: Fake, readers: list[NvmlReader]) -> None:
    fake.write(three_gpus())
    r = reader(readers)
    results: list[GpuReading] = []

    def work() -> None:
        for _ in range(20):
            results.append(r.read())

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 80
    assert all(x.status == "ok" and uuids(x) == [UUID0, UUID1, UUID2] for x in results)
    assert fake.nvml.call_count("nvmlInitWithFlags") == 1


def test_pynvml_finds_the_preloaded_stub_by_soname(fake: Fake, readers: list[NvmlReader]) -> None:
    import pynvml

    if not hasattr(ctypes.CDLL(nvmlstub.SONAME), "fake_nvml_reset"):
        pytest.skip("a real libnvidia-ml was loaded into this process first")
    fake.write(three_gpus())
    nvmlstub.reset_pynvml(None)  # pynvml loads "libnvidia-ml.so.1" itself
    assert uuids(reader(readers).read()) == [UUID0, UUID1, UUID2]
    assert hasattr(pynvml.nvmlLib, "fake_nvml_reset")
    assert fake.nvml.call_count("nvmlInitWithFlags") == 1


def test_close_shuts_nvml_down_and_a_later_read_initialises_again(fake: Fake) -> None:
    fake.write(three_gpus())
    r = NvmlReader(None)
    assert r.read().status == "ok"
    assert fake.nvml.refcount() == 1
    r.close()
    assert fake.nvml.refcount() == 0
    r.close()  # twice is harmless
    assert fake.nvml.call_count("nvmlShutdown") == 1
    assert r.read().status == "ok"
    assert fake.nvml.refcount() == 1
    r.close()


# --------------------------------------------------------------------------- CUDA_VISIBLE_DEVICES


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (None, [UUID0, UUID1, UUID2]),
        ("1", [UUID1]),
        ("2,0", [UUID2, UUID0]),
        (" 2 , 0 ", [UUID2, UUID0]),
        (UUID2, [UUID2]),
        (f"{UUID1},{UUID0}", [UUID1, UUID0]),
        ("GPU-bbbb", [UUID2]),  # a unique prefix
        ("gpu-BBBB", [UUID2]),
        ("GPU-0000,2", []),  # ambiguous prefix: names nothing, so nothing after it counts
        ("0,7,1", [UUID0]),  # an invalid entry ends the list
        ("1,-1,0", [UUID1]),
        ("0,0,1", [UUID0]),  # a repeat ends the list too
        ("0,,1", [UUID0]),
        ("GPU-ffff,0", []),
    ],
)
def test_visible_devices_select_and_order(
    fake: Fake, readers: list[NvmlReader], visible: str | None, expected: list[str]
) -> None:
    fake.write(three_gpus())
    reading = reader(readers, visible).read()
    if expected:
        assert reading.status == "ok"
        assert uuids(reading) == expected
        assert [g.index for g in reading.gpus] == list(range(len(expected)))
    else:
        assert reading.status == "no-gpu"
        assert "CUDA_VISIBLE_DEVICES" in reading.detail
        assert reading.driver_version == "550.54.15"


@pytest.mark.parametrize("visible", ["", "  ", "-1", "NoDevFiles"])
def test_visible_devices_that_hide_everything(
    fake: Fake, readers: list[NvmlReader], visible: str
) -> None:
    fake.write(three_gpus())
    reading = reader(readers, visible).read()
    assert reading.status == "no-gpu"
    assert reading.gpus == ()


def test_visible_devices_default_to_the_process_environment(
    fake: Fake, readers: list[NvmlReader], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.write(three_gpus())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    r = NvmlReader(retry_interval=0)
    readers.append(r)
    assert uuids(r.read()) == [UUID2]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    r2 = NvmlReader(retry_interval=0)
    readers.append(r2)
    assert uuids(r2.read()) == [UUID0, UUID1, UUID2]


def test_parse_visible_devices() -> None:
    assert parse_visible_devices(None) is None
    assert parse_visible_devices("") == []
    assert parse_visible_devices("NoDevFiles") == []
    assert parse_visible_devices("0, GPU-ab ,MIG-x") == ["0", "GPU-ab", "MIG-x"]
    assert parse_visible_devices("-1") == ["-1"]


def test_invalid_visible_entry_is_logged_once(
    fake: Fake, readers: list[NvmlReader], caplog: pytest.LogCaptureFixture
) -> None:
    fake.write(three_gpus())
    r = reader(readers, "1,9,0")
    with caplog.at_level(logging.INFO, logger="jupyter_costguard"):
        for _ in range(4):
            assert uuids(r.read()) == [UUID1]
    warnings = [x for x in caplog.records if "'9'" in x.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].levelno == logging.WARNING


# --------------------------------------------------------------------------- MIG


def mig_scenario(**changes: Any) -> Scenario:
    """GPU 0 plain; GPU 1 in MIG mode with instances in slots 0 and 2 (slot 1 empty)."""
    migs: list[Mig | None] = [
        Mig(uuid=MIG_A, name="NVIDIA A100-SXM4-80GB MIG 3g.40gb", mem_total=40 * GiB,
            mem_used=10 * GiB, procs=[Proc(3001, 9 * GiB)]),
        None,
        Mig(uuid=MIG_B, name="NVIDIA A100-SXM4-80GB MIG 2g.20gb", mem_total=20 * GiB,
            mem_used=GiB, procs=[Proc(3002, GiB // 2), Proc(3003, None)]),
    ]
    gpus = [
        Gpu(uuid=UUID0, util=11, procs=[Proc(1001, GiB)]),
        Gpu(uuid=UUID1, mem_used=11 * GiB, migs=migs, power_mw=90_000),
    ]
    for key, value in changes.items():
        index, attr = key.split("__")
        setattr(gpus[int(index[1:])], attr, value)
    return Scenario(gpus=gpus)


def test_mig_instances_are_reported_as_their_own_gpus(
    fake: Fake, readers: list[NvmlReader]
) -> None:
    fake.write(mig_scenario())
    reading = reader(readers).read()
    assert reading.status == "ok"
    assert uuids(reading) == [UUID0, MIG_A, MIG_B]
    assert [g.index for g in reading.gpus] == [0, 1, 2]
    plain, a, b = reading.gpus
    assert plain.mig_parent_uuid is None and plain.utilization_percent == 11.0
    assert a.mig_parent_uuid == UUID1 and b.mig_parent_uuid == UUID1
    assert a.name == "NVIDIA A100-SXM4-80GB MIG 3g.40gb"
    assert (a.memory_total_bytes, a.memory_used_bytes) == (40 * GiB, 10 * GiB)
    assert (b.memory_total_bytes, b.memory_used_bytes) == (20 * GiB, GiB)
    # NVML has neither utilisation nor power per instance.
    assert a.utilization_percent is None and a.power_watts is None
    assert a.processes == (GpuProcess(3001, 9 * GiB, "compute"),)
    assert b.processes == (GpuProcess(3002, GiB // 2, "compute"), GpuProcess(3003, None))
    assert a.faulty is None and b.faulty is None


@pytest.mark.parametrize(
    ("visible", "expected"),
    [
        (MIG_B, [MIG_B]),
        (f"{MIG_B},{MIG_A}", [MIG_B, MIG_A]),
        ("MIG-aaaaaaaa-0000-0000-0000-000000000002", [MIG_B]),
        ("MIG-aaaaaaaa", []),  # ambiguous
        ("1", [MIG_A, MIG_B]),  # the MIG GPU by index: all its instances
        (f"{UUID1},0", [MIG_A, MIG_B, UUID0]),
        (f"0,{MIG_A}", [UUID0, MIG_A]),
    ],
)
def test_mig_instances_and_visible_devices(
    fake: Fake, readers: list[NvmlReader], visible: str, expected: list[str]
) -> None:
    fake.write(mig_scenario())
    assert uuids(reader(readers, visible).read()) == expected


def test_mig_layout_changes_are_picked_up(fake: Fake, readers: list[NvmlReader]) -> None:
    fake.write(mig_scenario())
    r = reader(readers)
    assert uuids(r.read()) == [UUID0, MIG_A, MIG_B]
    scenario = mig_scenario()
    scenario.gpus[1].migs[1] = Mig(uuid="MIG-cccc", name="NVIDIA A100-SXM4-80GB MIG 1g.10gb",
                                   mem_total=10 * GiB, procs=[Proc(3100, GiB)])
    scenario.gpus[1].migs[0] = None
    fake.write(scenario)
    reading = r.read()
    assert uuids(reading) == [UUID0, "MIG-cccc", MIG_B]
    assert reading.gpus[1].processes == (GpuProcess(3100, GiB, "compute"),)


def test_mig_gpu_without_instances_is_reported_as_itself(
    fake: Fake, readers: list[NvmlReader]
) -> None:
    fake.write(mig_scenario(g1__migs=[], g1__mig=True))
    reading = reader(readers).read()
    assert uuids(reading) == [UUID0, UUID1]
    parent = reading.gpus[1]
    assert parent.mig_parent_uuid is None
    assert parent.utilization_percent is None  # not supported in MIG mode
    assert parent.power_watts == 90.0
    assert parent.memory_used_bytes == 11 * GiB


# --------------------------------------------------------------------------- failures


def test_lost_gpu_is_faulty_and_the_others_still_report(
    fake: Fake, readers: list[NvmlReader], caplog: pytest.LogCaptureFixture
) -> None:
    fake.write(three_gpus())
    r = reader(readers)
    healthy = r.read()
    fake.write(three_gpus(g1__lost=True))
    with caplog.at_level(logging.INFO, logger="jupyter_costguard"):
        readings = [r.read() for _ in range(5)]
    for reading in readings:
        assert reading.status == "ok"
        g0, g1, g2 = reading.gpus
        assert g1.faulty == "GPU is lost"
        # What was read before (UUID, name, memory total) is still there.
        assert (g1.uuid, g1.name, g1.memory_total_bytes) == (
            UUID1, "NVIDIA A100-SXM4-80GB", 80 * GiB)
        assert g1.utilization_percent is None and g1.power_watts is None
        assert g0 == healthy.gpus[0] and g2 == healthy.gpus[2]
    lost_logs = [x for x in caplog.records if UUID1 in x.getMessage()]
    assert len(lost_logs) == 1
    assert lost_logs[0].levelno == logging.WARNING
    assert "GPU is lost" in lost_logs[0].getMessage()

    fake.write(three_gpus())
    with caplog.at_level(logging.INFO, logger="jupyter_costguard"):
        assert r.read().gpus[1].faulty is None
    assert any("again" in x.getMessage() and UUID1 in x.getMessage() for x in caplog.records)


def test_gpu_lost_before_its_handle_was_read(fake: Fake, readers: list[NvmlReader]) -> None:
    fake.write(three_gpus(g0__fail={"handle": "GPU_IS_LOST"}))
    r = reader(readers)
    reading = r.read()
    assert reading.status == "ok"
    assert [g.index for g in reading.gpus] == [0, 1, 2]
    assert reading.gpus[0].faulty == "GPU is lost"
    assert reading.gpus[0].uuid.startswith("GPU-unknown")
    assert uuids(reading)[1:] == [UUID1, UUID2]
    assert reading.gpus[1].faulty is None
    # Once it answers, its real identity appears.
    fake.write(three_gpus())
    assert uuids(r.read()) == [UUID0, UUID1, UUID2]


def test_a_single_failing_query_marks_the_device_but_keeps_the_rest(
    fake: Fake, readers: list[NvmlReader]
) -> None:
    fake.write(three_gpus(g0__fail={"power": "UNKNOWN"}))
    g0 = reader(readers).read().gpus[0]
    assert g0.faulty == "Unknown Error"
    assert g0.power_watts is None
    assert g0.utilization_percent == 37.0
    assert g0.memory_used_bytes == 6 * GiB
    assert len(g0.processes) == 3


def test_lost_mig_parent_marks_its_instances(fake: Fake, readers: list[NvmlReader]) -> None:
    fake.write(mig_scenario())
    r = reader(readers)
    assert r.read().status == "ok"
    fake.write(mig_scenario(g1__lost=True))
    reading = r.read()
    assert uuids(reading) == [UUID0, MIG_A, MIG_B]  # the last known layout
    assert reading.gpus[0].faulty is None
    assert reading.gpus[1].faulty == "GPU is lost"
    assert reading.gpus[2].faulty == "GPU is lost"
    assert reading.gpus[1].memory_total_bytes == 40 * GiB


def test_no_permission_for_processes_is_not_a_fault_and_logged_once(
    fake: Fake, readers: list[NvmlReader], caplog: pytest.LogCaptureFixture
) -> None:
    fake.write(three_gpus(g0__fail={"compute": "NO_PERMISSION"}))
    r = reader(readers)
    with caplog.at_level(logging.INFO, logger="jupyter_costguard"):
        for _ in range(3):
            g0 = r.read().gpus[0]
            assert g0.faulty is None
            assert g0.processes == (GpuProcess(1001, 5 * GiB, "graphics"),)
    assert len([x for x in caplog.records if "denies" in x.getMessage()]) == 1


def test_driver_not_loaded_is_no_gpu_and_picked_up_once_it_loads(
    fake: Fake, readers: list[NvmlReader], caplog: pytest.LogCaptureFixture
) -> None:
    scenario = three_gpus()
    scenario.init_error = "DRIVER_NOT_LOADED"
    fake.write(scenario)
    r = reader(readers, retry_interval=0)
    with caplog.at_level(logging.INFO, logger="jupyter_costguard"):
        readings = [r.read() for _ in range(3)]
    for reading in readings:
        assert reading.status == "no-gpu"
        assert "driver not loaded" in reading.detail.lower()
        assert reading.gpus == ()
    assert fake.nvml.call_count("nvmlInitWithFlags") == 3  # retried each time (interval 0)
    assert len([x for x in caplog.records if "not loaded" in x.getMessage()]) == 1

    fake.write(three_gpus())
    reading = r.read()
    assert reading.status == "ok"
    assert uuids(reading) == [UUID0, UUID1, UUID2]


def test_init_is_retried_at_most_once_per_interval(fake: Fake, readers: list[NvmlReader]) -> None:
    scenario = three_gpus()
    scenario.init_error = "DRIVER_NOT_LOADED"
    fake.write(scenario)
    now = [1000.0]
    r = reader(readers, retry_interval=60.0, clock=lambda: now[0])
    assert r.read().status == "no-gpu"
    fake.write(three_gpus())  # the driver loads
    now[0] += 59
    assert r.read().status == "no-gpu"  # not asked again yet
    assert fake.nvml.call_count("nvmlInitWithFlags") == 1
    now[0] += 2
    assert r.read().status == "ok"
    assert fake.nvml.call_count("nvmlInitWithFlags") == 2
    now[0] += 1000
    assert r.read().status == "ok"
    assert fake.nvml.call_count("nvmlInitWithFlags") == 2  # initialised once, kept


def test_no_scenario_means_driver_not_loaded(
    fake: Fake, readers: list[NvmlReader], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(nvmlstub.SCENARIO_ENV)
    reading = reader(readers).read()
    assert reading.status == "no-gpu"
    assert "driver" in reading.detail.lower()


def test_other_init_failures_are_errors(fake: Fake, readers: list[NvmlReader]) -> None:
    scenario = three_gpus()
    scenario.init_error = "NO_PERMISSION"
    fake.write(scenario)
    reading = reader(readers).read()
    assert reading.status == "error"
    assert "Insufficient Permissions" in reading.detail


def test_no_gpus_at_all(fake: Fake, readers: list[NvmlReader]) -> None:
    fake.write(Scenario(gpus=[]))
    reading = reader(readers).read()
    assert reading.status == "no-gpu"
    assert reading.driver_version == "550.54.15"


def test_unexpected_exceptions_become_error_status(
    fake: Fake, readers: list[NvmlReader], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import pynvml

    fake.write(three_gpus())
    r = reader(readers)
    assert r.read().status == "ok"

    def broken(handle: Any) -> Any:
        raise TypeError("bindings and library disagree")

    monkeypatch.setattr(pynvml, "nvmlDeviceGetPowerUsage", broken)
    with caplog.at_level(logging.INFO, logger="jupyter_costguard"):
        readings = [r.read() for _ in range(3)]
    assert all(x.status == "error" for x in readings)
    assert "TypeError" in readings[0].detail and "disagree" in readings[0].detail
    assert len([x for x in caplog.records if "disagree" in x.getMessage()]) == 1
    monkeypatch.undo()
    assert r.read().status == "ok"


def test_nvml_shut_down_underneath_is_recovered(fake: Fake, readers: list[NvmlReader]) -> None:
    import pynvml

    fake.write(three_gpus())
    r = reader(readers)
    assert r.read().status == "ok"
    pynvml.nvmlShutdown()  # another component in the process drops the last reference
    assert r.read().status == "error"
    assert r.read().status == "ok"


def test_broken_scenario_file_is_an_error_not_a_crash(
    fake: Fake, readers: list[NvmlReader]
) -> None:
    fake.path.write_text("gpu index=0 uuid=GPU-x name=x mem_total=oops\n")
    reading = reader(readers).read()
    assert reading.status == "error"
    assert "nvmlInit" in reading.detail


# --------------------------------------------------------------------------- other processes

CHILD = textwrap.dedent(
    """
    import dataclasses, json, sys
    from jupyter_costguard.sampling.nvml import NvmlReader
    r = NvmlReader(retry_interval=0)
    for line in sys.stdin:
        print(json.dumps(dataclasses.asdict(r.read())), flush=True)
    """
)


class Child:
    """A Python process holding one NvmlReader; `read()` asks it for a reading."""

    def __init__(self, env: dict[str, str]) -> None:
        env = dict(env)
        env["PYTHONPATH"] = str(REPO) + (
            os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else ""
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD], env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def read(self) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("read\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"child died: {self.proc.communicate()[1]}")
        result: dict[str, Any] = json.loads(line)
        return result

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        assert self.proc.returncode == 0, self.proc.stderr.read() if self.proc.stderr else ""


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("LD_LIBRARY_PATH", nvmlstub.SCENARIO_ENV, "CUDA_VISIBLE_DEVICES")}
    return env


def test_subprocess_env_makes_a_child_see_the_stub(stub_dir: Path, tmp_path: Path) -> None:
    path = three_gpus().write(tmp_path / "scenario.txt")
    child = Child(nvmlstub.subprocess_env(path, base=clean_env(), lib_dir=stub_dir))
    try:
        first = child.read()
        assert first["status"] == "ok"
        assert [g["uuid"] for g in first["gpus"]] == [UUID0, UUID1, UUID2]
        three_gpus(g0__util=99).write(path)
        assert child.read()["gpus"][0]["utilization_percent"] == 99.0
    finally:
        child.close()


def test_missing_library_is_no_gpu_until_it_appears(stub_dir: Path, tmp_path: Path) -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("a real libnvidia-ml is installed here")
    empty = tmp_path / "lib"
    empty.mkdir()
    path = three_gpus().write(tmp_path / "scenario.txt")
    child = Child(nvmlstub.subprocess_env(path, base=clean_env(), lib_dir=empty))
    try:
        for _ in range(2):
            reading = child.read()
            assert reading["status"] == "no-gpu"
            assert "NVML library not found" in reading["detail"]
            assert reading["gpus"] == []
        # The driver gets installed while the server runs.
        (empty / nvmlstub.SONAME).symlink_to(stub_dir / nvmlstub.SONAME)
        reading = child.read()
        assert reading["status"] == "ok"
        assert len(reading["gpus"]) == 3
    finally:
        child.close()


def test_drivers_without_v3_process_queries(tmp_path: Path) -> None:
    old = nvmlstub.build([nvmlstub.NO_V3_PROCESSES])
    path = three_gpus().write(tmp_path / "scenario.txt")
    child = Child(nvmlstub.subprocess_env(path, base=clean_env(), lib_dir=old))
    try:
        for _ in range(2):
            reading = child.read()
            assert reading["status"] == "ok"
            assert reading["gpus"][0]["faulty"] is None
            assert [p["pid"] for p in reading["gpus"][0]["processes"]] == [1001, 1002, 1003]
            assert reading["gpus"][2]["processes"][0]["kind"] == "graphics"
    finally:
        child.close()


def test_real_nvml_when_present() -> None:
    """On a machine with an NVIDIA driver: the reader against the real library."""
    if not ctypes.util.find_library("nvidia-ml"):
        pytest.skip("no real libnvidia-ml on this machine")
    env = clean_env()
    env.pop("CUDA_VISIBLE_DEVICES", None)
    child = Child(env)
    try:
        reading = child.read()
        again = child.read()
    finally:
        child.close()
    assert reading["status"] in ("ok", "no-gpu"), reading
    if reading["status"] == "no-gpu":
        pytest.skip(f"driver present but: {reading['detail']}")
    assert reading["driver_version"]
    for g in reading["gpus"] + again["gpus"]:
        assert g["faulty"] is None, g
        assert g["uuid"].startswith(("GPU-", "MIG-"))
        assert g["name"]
        assert 0 < g["memory_total_bytes"]
        assert 0 <= g["memory_used_bytes"] <= g["memory_total_bytes"]
        if g["mig_parent_uuid"] is None and g["utilization_percent"] is not None:
            assert 0 <= g["utilization_percent"] <= 100
    assert [g["uuid"] for g in reading["gpus"]] == [g["uuid"] for g in again["gpus"]]

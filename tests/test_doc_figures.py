"""The demo's figures in README.md, examples/README.md, the docs' alerts page and the example
notebooks' markdown,
computed from the code that produces them on screen.

A newcomer compares the docs with what the demo shows. So every figure those texts quote is
computed here from its source and compared with the text: the p4d.24xlarge's rate from the
shipped catalog (`Catalog.load`), the GPU story from `examples/gpu_trace.json` played by
`ReplaySource` (as the demo plays it), the warning's waste, suggestion and timing from the
guard's own rule run on that replay under the demo's server config, and the offload example's
prose from the slicer. A catalog refresh, a new trace or a changed rule that the docs do not
follow fails here. Figures that are measurements of a machine (how long the demo took to
start) cannot be computed: their claims check nothing but that the text still gives them with
their conditions (`measured`). The inventory test fails on any figure in those texts that no
claim covers, so a new figure comes with its check.
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from traitlets.config.loader import PyFileConfigLoader

from jupyter_costguard.alerts.store import Alert
from jupyter_costguard.cost.catalog import Catalog
from jupyter_costguard.cost.pricing import Pricing, resolve_pricing
from jupyter_costguard.cost.viewrecords import Views
from jupyter_costguard.guard import GuardConfig
from jupyter_costguard.guard.training import MIN_HELD_SHARE, TrainingSizedRule
from jupyter_costguard.offload.slicing import slice_cells
from jupyter_costguard.offload.slicing.later import used_later
from jupyter_costguard.sampling.records import KernelInfo, KernelSample
from jupyter_costguard.sampling.replay import ReplaySource
from jupyter_costguard.sampling.telemetry import attribute_gpus
from tests.support.guard_harness import T0, GuardHarness, host_sample, publish, sample
from tests.support.units import GiB

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
TRACE = EXAMPLES / "gpu_trace.json"
KIND = "training-sized-interactive"
EXPLORE, TRAIN = "explore.ipynb", "train.ipynb"


# --- the demo, computed ---------------------------------------------------------------------


@cache
def demo_file() -> Any:
    """The demo's `jupyter_server_config.py`, loaded."""
    return PyFileConfigLoader("jupyter_server_config.py", path=str(EXAMPLES)).load_config()


def demo_settings() -> Any:
    """`c.CostGuard` as the demo's `jupyter_server_config.py` sets it."""
    return demo_file().CostGuard


def test_the_demo_stays_on_this_machine() -> None:
    """The demo asks no cloud's metadata service and downloads no prices (the environment
    scripts/test.sh makes has gpuhunt, which the background refresh would use)."""
    settings = demo_settings()
    assert settings.cloud_metadata is False
    assert settings.catalog_refresh_hours == 0


@cache
def demo_config() -> GuardConfig:
    """The guard's settings in the demo."""
    return GuardConfig(config=demo_file())


@cache
def demo_pricing() -> Pricing:
    """The trace's instance priced from the shipped catalog, as the demo prices it."""
    instance = json.loads(TRACE.read_text())["instance_type"]
    return resolve_pricing(Catalog.load(), instance_type=instance, environ={}, gpu=None,
                           host=None, hourly_rate=None, market="on-demand")


def replay_read(source: ReplaySource, infos: list[KernelInfo], now: float
                ) -> tuple[Any, dict[str, dict[str, int]]]:
    """One reading of the trace for these kernels, and what each kernel holds (uuid -> bytes),
    attributed by PID as the server's telemetry attributes it."""
    reading = source.read([k.pid for k in infos if k.pid is not None],
                          notebooks={k.pid: k.path for k in infos if k.pid and k.path})
    trees: dict[str, tuple[int, ...]] = {k.kernel_id: (k.pid,) for k in infos
                                         if k.pid is not None}
    held = attribute_gpus(reading.gpus, infos, trees, None, now)
    return reading, {kid: memory for kid, (memory, _) in held.items()}


def kernels_open(opened: Mapping[str, float], t: float) -> list[KernelInfo]:
    """The kernels of the notebooks open `t` seconds after launch, oldest first."""
    order = sorted(opened, key=lambda path: (opened[path], path))
    return [KernelInfo(kernel_id=path, name="python3", pid=1000 + i, execution_state="idle",
                       last_activity=T0, connections=1, path=path)
            for i, path in enumerate(order) if opened[path] <= t]


@dataclass(frozen=True)
class Tick:
    """One sample of a demo run: seconds after launch, and the warning shown then."""

    t: float
    alert: Alert | None


@cache
def play(opened: tuple[tuple[str, float], ...], seconds: float) -> tuple[Tick, ...]:
    """The demo's server for `seconds` after launch: the trace replayed from launch, sampled
    every `sample_interval`, each notebook's kernel started at its time in `opened`, and the
    guard's training-sized rule judging every sample with the demo's config and pricing (host
    figures: 2.9 of 96 cores, 12 GiB RAM)."""
    rig = GuardHarness(lambda c: [TrainingSizedRule(c)], config=demo_config(),
                       catalog=Catalog.load(), pricing=demo_pricing())
    source = ReplaySource(TRACE, clock=lambda: rig.now)  # the replay starts with the server
    ticks: list[Tick] = []
    previous: float | None = None
    while rig.now - T0 <= seconds:
        infos = kernels_open(dict(opened), rig.now - T0)
        reading, held = replay_read(source, infos, rig.now)
        kernels = [KernelSample(info=k, pids=(k.pid,) if k.pid else (), cpu_seconds=0.0,
                                rss_bytes=GiB, gpu_memory_bytes=held[k.kernel_id])
                   for k in infos]
        interval = 0.0 if previous is None else rig.now - previous
        taken = sample(rig.now, interval, reading.gpus, kernels,
                       host_sample(96, 3.0, 1152 * GiB, 12 * GiB), simulated=True)
        rig.guard.evaluate(publish(taken, None, rig.pricing, Views(time=rig.now)))
        ticks.append(Tick(rig.now - T0, rig.shown(KIND, "instance")))
        previous = rig.now
        rig.now += float(demo_settings().sample_interval)
    return tuple(ticks)


def first_warning(explore_opened_at: float) -> Tick:
    """The first sample showing the warning when only `explore.ipynb` is opened, at the given
    time after launch."""
    ticks = play(((EXPLORE, explore_opened_at),), explore_opened_at + 300)
    found = next((tick for tick in ticks if tick.alert is not None), None)
    assert found is not None, f"no warning with explore.ipynb opened at {explore_opened_at} s"
    return found


def slack() -> float:
    """How far a doc's "about N s" may be from the simulated time: two samples (a kernel
    takes a moment to start; the guard judges once per sample)."""
    return 2 * float(demo_settings().sample_interval)


@dataclass(frozen=True)
class Story:
    """What the trace, replayed with both notebooks open, shows on each GPU."""

    gpu_memory_gib: float  # each GPU's size
    explore_gpus: tuple[int, ...]
    explore_gib: tuple[float, ...]  # what explore's kernel holds on each
    explore_util: float  # mean utilisation outside its bursts
    burst_util: float
    burst_seconds: float
    burst_every_seconds: float
    train_gpus: tuple[int, ...]
    train_gib: tuple[float, ...]
    train_util: float  # mean utilisation of its GPUs while they train
    train_seconds: float  # training per loop of the trace
    loop_seconds: float


@cache
def story() -> Story:
    """The trace's story, read second by second over one loop through `ReplaySource`."""
    now = [T0]
    source = ReplaySource(TRACE, clock=lambda: now[0])
    infos = kernels_open({EXPLORE: 0.0, TRAIN: 0.0}, 0.0)
    explore_util: list[float] = []
    train_util: list[float] = []
    busy_explore: list[float] = []
    explore_burst: list[float] = []
    training: list[float] = []
    holds: dict[str, dict[int, set[float]]] = {EXPLORE: {}, TRAIN: {}}
    limit = demo_config().interactive_max_utilization_percent
    for second in range(int(source.duration)):
        now[0] = T0 + second
        reading, held = replay_read(source, infos, now[0])
        by_uuid = {g.uuid: g for g in reading.gpus}
        for path, memory in held.items():
            for uuid, nbytes in memory.items():
                holds[path].setdefault(by_uuid[uuid].index, set()).add(nbytes / GiB)
        explore = [by_uuid[u].utilization_percent or 0.0 for u in held[EXPLORE]]
        train = [by_uuid[u].utilization_percent or 0.0 for u in held[TRAIN]]
        if max(explore) > limit:
            busy_explore.append(second)
            explore_burst.extend(explore)
        else:
            explore_util.extend(explore)
        if min(train) > limit:
            training.append(second)
            train_util.extend(train)
    starts = [s for s in busy_explore if s - 1 not in busy_explore]
    sizes = {g.memory_total_bytes / GiB for g in reading.gpus}
    assert len(sizes) == 1 and len(starts) >= 2
    return Story(
        gpu_memory_gib=sizes.pop(),
        explore_gpus=tuple(sorted(holds[EXPLORE])),
        explore_gib=tuple(v for i in sorted(holds[EXPLORE]) for v in holds[EXPLORE][i]),
        explore_util=statistics.mean(explore_util),
        burst_util=statistics.mean(explore_burst),
        burst_seconds=len(busy_explore) / len(starts),
        burst_every_seconds=starts[1] - starts[0],
        train_gpus=tuple(sorted(holds[TRAIN])),
        train_gib=tuple(v for i in sorted(holds[TRAIN]) for v in holds[TRAIN][i]),
        train_util=statistics.mean(train_util),
        train_seconds=float(len(training)),
        loop_seconds=source.duration,
    )


# --- the docs -------------------------------------------------------------------------------


def flat(text: str) -> str:
    """Whitespace collapsed, so a figure's phrase may wrap anywhere."""
    return " ".join(text.split())


def readme_section(heading: str) -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(f"\n## {heading}\n")
    end = text.index("\n## ", start + 1)
    return flat(text[start:end])


def markdown_cells(notebook: str) -> str:
    cells = json.loads((EXAMPLES / notebook).read_text())["cells"]
    return flat(" ".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown"))


def guard_demo_sentence() -> str:
    """The guard rules' one sentence about the demo, in the user's guide (the page's other
    figures are the rules' defaults, not the demo's)."""
    page = flat((ROOT / "docs" / "user" / "alerts.md").read_text())
    match = re.search(r"The demo \(`examples/`\).*?(?= !\[training-sized alert\])", page)
    assert match, "docs/user/alerts.md no longer says when the demo shows the warning"
    return match.group()


#: The texts a newcomer reads while running the demo.
DOCS: dict[str, Callable[[], str]] = {
    "README: Quick start": lambda: readme_section("Quick start"),
    "README: What you will see": lambda: readme_section("What you will see"),
    "docs/user/alerts.md: guard rules (the demo)": guard_demo_sentence,
    "examples/README.md": lambda: flat((EXAMPLES / "README.md").read_text()),
    "explore.ipynb": lambda: markdown_cells("explore.ipynb"),
    "train.ipynb": lambda: markdown_cells("train.ipynb"),
    "offload.ipynb": lambda: markdown_cells("offload.ipynb"),
}

WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
         "eight": 8, "nine": 9, "ten": 10, "half": 0.5}


def num(figure: str) -> float:
    """A figure as the docs write it: digits (with thousands commas) or a word."""
    return float(WORDS[figure]) if figure in WORDS else float(figure.replace(",", ""))


# --- the claims: each figure, where it is written and what the code says it is -------------


@dataclass(frozen=True)
class Claim:
    """Figures in one phrase of one doc: `pattern` finds the phrase (one group per figure) and
    `check` asserts the figures it captured against the code."""

    doc: str
    pattern: str
    check: Callable[..., None]


def money2(amount: float | None) -> str:
    """An amount as the docs and the warning write it."""
    assert amount is not None
    return f"{amount:.2f}"


def first_details() -> dict[str, Any]:
    alert = first_warning(0.0).alert
    assert alert is not None
    return alert.details


def check_rate(gpus: str, rate: str, memory: str | None = None) -> None:
    """The trace's instance in the shipped catalog: its GPUs and price."""
    pricing = demo_pricing()
    assert pricing.instance is not None
    assert int(gpus) == pricing.instance.gpu_count == len(
        json.loads(TRACE.read_text())["gpus"])
    assert rate == money2(pricing.rate_per_hour), "the catalog's p4d.24xlarge price changed"
    if memory is not None:
        assert num(memory) == pricing.instance.gpu_memory_gib == story().gpu_memory_gib


def check_explore(gpu: str, util: str, memory: str | None = None) -> None:
    s = story()
    assert s.explore_gpus == (int(gpu),)
    assert int(util) == round(s.explore_util)
    if memory is not None:
        assert s.explore_gib == (num(memory),)


def check_bursts(seconds: str, util: str, every_minutes: str) -> None:
    s = story()
    assert (num(seconds), num(util)) == (s.burst_seconds, round(s.burst_util))
    assert num(every_minutes) * 60 == s.burst_every_seconds


def check_train(first: str, last: str, util: str, minutes: str | None = None,
                loop: str | None = None, memory: str | None = None) -> None:
    s = story()
    assert s.train_gpus == tuple(range(int(first), int(last) + 1))
    assert num(util) == round(s.train_util, -1)  # "~90%"
    if minutes is not None and loop is not None:
        assert (num(minutes) * 60, num(loop) * 60) == (s.train_seconds, s.loop_seconds)
    if memory is not None:
        assert set(s.train_gib) == {num(memory)}


def check_first_warning(after_launch: str, open_within: str) -> None:
    """About N s after launch when explore.ipynb is opened at launch or within M s."""
    for opened in (0.0, num(open_within)):
        assert abs(first_warning(opened).t - num(after_launch)) <= slack(), opened


def check_waste(waste: str) -> None:
    """The warning's waste per hour, as the guard's rule computes it on the demo's replay."""
    assert waste == money2(first_details()["waste_per_hour"])


def check_window(window: str, *more: str) -> None:
    """The demo config's window; `more`: the same figure again (the config line quoted)."""
    assert num(window) == demo_config().interactive_window_seconds
    assert all(num(m) == num(window) for m in more)


def check_speaks_when(window: str, coverage: str, half_at: str, held: str) -> None:
    """The rule speaks once `coverage` of the window is sampled and kernels held GPUs for
    `held` of the sampled time."""
    cfg = demo_config()
    assert num(window) == cfg.interactive_window_seconds
    assert num(coverage) == cfg.interactive_min_coverage and num(held) == MIN_HELD_SHARE
    assert num(half_at) == cfg.interactive_window_seconds * cfg.interactive_min_coverage


def check_timings(within: str, at_launch: str, opened_at: str, comes_at: str, later: str,
                  after_open: str) -> None:
    """When the first warning comes, by when explore.ipynb is opened (simulated)."""
    check_first_warning(at_launch, within)
    assert abs(first_warning(num(opened_at)).t - num(comes_at)) <= slack()
    assert abs(first_warning(num(later)).t - num(later) - num(after_open)) <= slack()
    # "later still when explore's burst falls in the window": opened 30 s before a burst
    opened = _burst_offset() - 30.0
    assert first_warning(opened).t - opened > num(after_open) + slack()


def _burst_offset() -> int:
    """Seconds from a loop's start to explore's first burst."""
    now = [T0]
    source = ReplaySource(TRACE, clock=lambda: now[0])
    infos = kernels_open({EXPLORE: 0.0}, 0.0)
    limit = demo_config().interactive_max_utilization_percent
    for second in range(int(source.duration)):
        now[0] = T0 + second
        reading, _ = replay_read(source, infos, now[0])
        if (reading.gpus[story().explore_gpus[0]].utilization_percent or 0.0) > limit:
            return second
    raise AssertionError("explore.ipynb never bursts in the trace")


def check_guard_demo(window: str, at_launch: str, within: str) -> None:
    check_window(window)
    check_first_warning(at_launch, within)


def check_idle_and_waste(idle: str, waste: str, gpu_rate: str) -> None:
    d = first_details()
    assert int(idle) == round(d["idle_share"] * 100)
    assert waste == money2(d["waste_per_hour"])
    assert gpu_rate == money2(demo_pricing().gpu_rate_per_hour)
    # "a little less while a burst is in the window"
    shown = [t.alert.details["waste_per_hour"] for t in play(((EXPLORE, 0.0),), 600)
             if t.alert is not None]
    assert min(shown) < d["waste_per_hour"] and min(shown) > 0.9 * d["waste_per_hour"]


def check_suggestion(gpus: str, rate: str) -> None:
    s = first_details()["suggestion"]
    assert s is not None and s["instance_type"] == "g4dn.xlarge" and "T4" in s["gpu_model"]
    assert (int(gpus), rate) == (s["gpu_count"], money2(s["rate_per_hour"]))


def check_default_window(window: str, config_line: str, default_minutes: str) -> None:
    check_window(window, config_line)
    assert num(default_minutes) * 60 == GuardConfig().interactive_window_seconds


def check_demo_hibernation(warned_minutes: str, hibernated_minutes: str) -> None:
    """The demo's idle warning and hibernation: the defaults, which its config leaves."""
    cfg = demo_config()
    assert num(warned_minutes) * 60 == cfg.idle_kernel_seconds
    assert num(hibernated_minutes) * 60 == cfg.hibernate_idle_after_seconds


def check_training_resolves(limit: str) -> None:
    """While train.ipynb trains, the held GPUs average above the line and the warning goes."""
    assert num(limit) == demo_config().interactive_max_utilization_percent
    ticks = play(((EXPLORE, 0.0), (TRAIN, 100.0)), 600)
    assert any(t.alert for t in ticks if t.t < 100)
    training_ends = story().train_seconds
    assert not any(t.alert for t in ticks if 200 <= t.t < training_ends)


def check_after_training(gpus: str, of_them: str, memory: str) -> None:
    """Once training stops the warning comes back without a suggestion."""
    ticks = play(((EXPLORE, 0.0), (TRAIN, 100.0)), 600)
    back = [t.alert for t in ticks if t.t >= story().train_seconds and t.alert is not None]
    assert back, "no warning after the training stopped"
    details = back[-1].details
    assert details["suggestion"] is None
    assert num(gpus) == details["gpus_held"]
    assert num(of_them) == len(story().train_gpus)
    assert num(memory) * GiB == details["peak_gpu_memory_bytes"]


def check_python(version: str) -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert f'requires-python = ">={version}"' in text


def check_same(*figures: str) -> None:
    """The same figure twice in one phrase (e.g. a setting and its value in words)."""
    assert len({num(f) for f in figures}) == 1, figures


def check_schema_default(setting: str) -> Callable[..., None]:
    def check(*figures: str) -> None:
        schema = json.loads((ROOT / "labextension/schema/status.json").read_text())
        default = schema["properties"][setting]["default"]
        for f in figures:
            assert num(f) == default, (setting, f)
    return check


def check_snooze(hours: str, seconds: str) -> None:
    check_schema_default("snoozeSeconds")(seconds)
    assert num(hours) * 3600 == num(seconds)


def check_chart_ranges(h1: str, h2: str, days: str) -> None:
    source = (ROOT / "labextension/src/spendchart.ts").read_text()
    minutes = [int(m) for m in re.findall(r"\{ minutes: (\d+), label:", source)]
    assert minutes == [num(h1) * 60, num(h2) * 60, num(days) * 24 * 60]


def check_wide_sidebar(px: str) -> None:
    css = (ROOT / "labextension/style/panel.css").read_text()
    match = re.search(r"@container costguard-panel \(max-width: (\d+)px\)", css)
    assert match and abs(int(match.group(1)) - num(px)) <= 0.05 * num(px)


def check_toast_cut(chars: str) -> None:
    source = (ROOT / "labextension/src/alerttoasttext.ts").read_text()
    assert f"JUPYTERLAB_MAX_MESSAGE_LENGTH = {chars};" in source


def check_versions(lab: str, notebook: str) -> None:
    text = (ROOT / "pyproject.toml").read_text()
    assert f'"jupyterlab>={lab},<{int(lab) + 1}"' in text and f'"notebook>={notebook}"' in text


def check_test_workers(workers: str) -> None:
    """README's test command's default number of pytest-xdist workers."""
    source = (ROOT / "scripts/test.sh").read_text()
    assert f'-n "${{COSTGUARD_TEST_WORKERS:-{num(workers):.0f}}}"' in source


def check_one_process(value: str) -> None:
    """pytest-xdist's `-n 0` runs the tests in pytest's own process."""
    assert value == "0"
    assert '-n "${COSTGUARD_TEST_WORKERS:-' in (ROOT / "scripts/test.sh").read_text()


def check_screenshots_flag(value: str) -> None:
    """The value the browser tests take as "save the pictures"."""
    source = (ROOT / "tests/support/browser.py").read_text()
    assert f'os.environ.get("COSTGUARD_SCREENSHOTS") == "{value}"' in source


def measured(*figures: str) -> None:
    """A measurement of a machine, written with its conditions: nothing to compute it from."""


def first_job(*numbers: str) -> None:
    """The job number of the demo's first job (job ids count from 1)."""
    assert set(numbers) == {"1"}


def stated(*figures: str) -> None:
    """A requirement the project states, not a figure the code produces."""


CLAIMS: dict[str, Claim] = {
    "quick start: python": Claim(
        "README: Quick start", r"Python (\d+\.\d+)\+", check_python),
    "quick start: node": Claim("README: Quick start", r"Node\.js (\d+) \(npm\)", stated),
    "quick start: demo start-up (measured)": Claim(
        "README: Quick start",
        r"on a (\d+)-core machine with pip's cache warm, a fresh clone took (\d+) s when the "
        r"machine was otherwise idle and (\d+) s while other work kept both cores busy, and "
        r"with pip's cache cold on a loaded machine it took (\d+) s \(measured; the "
        r"environment it makes is about (\d+) MB\)", measured),
    "quick start: instance and price": Claim(
        "README: Quick start",
        r"p4d\.24xlarge \((\d+)× A100\), priced at the shipped catalog's current price, "
        r"USD (\d+\.\d\d)/h", check_rate),
    "quick start: explore": Claim(
        "README: Quick start", r"attributed GPU (\d+) of the trace, idling at ~(\d+)%",
        check_explore),
    "quick start: waste": Claim("README: Quick start", r"wasting ~USD (\d+\.\d\d)/h",
                                check_waste),
    "quick start: when the warning comes": Claim(
        "README: Quick start",
        r"follows about (\d+) s after launch if you open `explore\.ipynb` within the first "
        r"(\d+) s", check_first_warning),
    "quick start: train": Claim(
        "README: Quick start", r"`train\.ipynb` gets GPUs (\d+)–(\d+) training at ~(\d+)%",
        check_train),
    "quick start: test workers": Claim(
        "README: Quick start", r"pytest on (\w+) pytest-xdist\s+workers", check_test_workers),
    "quick start: one process": Claim(
        "README: Quick start", r"`COSTGUARD_TEST_WORKERS=(\d+)` runs one process",
        check_one_process),
    "quick start: screenshots": Claim(
        "README: Quick start", r"`COSTGUARD_SCREENSHOTS=(\d+) bash scripts/test\.sh",
        check_screenshots_flag),
    "see: refresh": Claim("README: What you will see", r"updated every (\d+) s",
                          check_schema_default("refreshInterval")),
    "see: refresh setting": Claim(
        "README: What you will see", r"`refreshInterval` \(seconds, default (\d+)\)",
        check_schema_default("refreshInterval")),
    "see: sidebar width": Claim(
        "README: What you will see", r"a sidebar wider than about (\d+) px", check_wide_sidebar),
    "see: chart ranges": Claim(
        "README: What you will see", r"over at most the last (\d+) h,\s+(\d+) h or (\d+) days",
        check_chart_ranges),
    "see: versions": Claim(
        "README: What you will see", r"in JupyterLab (\d+) and Notebook (\d+)", check_versions),
    "see: toast cut": Claim(
        "README: What you will see", r"cuts every message at (\d+) characters", check_toast_cut),
    "see: snooze": Claim(
        "README: What you will see",
        r"\"Snooze (\d+) h\" says how long .* `snoozeSeconds` \(default (\d+)\)", check_snooze),
    "guard rules: the demo": Claim(
        "docs/user/alerts.md: guard rules (the demo)",
        r"shortens the window to (\d+) s, so it shows the warning about (\d+) s after launch "
        r"when `explore\.ipynb` is opened within its first (\d+) s",
        check_guard_demo),
    "examples: instance and price": Claim(
        "examples/README.md",
        r"p4d\.24xlarge \((\d+)× A100 (\d+) GB\), priced at the shipped catalog's current "
        r"price, USD (\d+\.\d\d)/h",
        lambda gpus, memory, rate: check_rate(gpus, rate, memory)),
    "examples: explore": Claim(
        "examples/README.md",
        r"attributed GPU (\d+) of the trace, holding (\d+) GiB at ~(\d+)% utilisation",
        lambda gpu, memory, util: check_explore(gpu, util, memory)),
    "examples: bursts": Claim(
        "examples/README.md", r"with a (\d+) s burst to (\d+)% every (\d+) minutes",
        check_bursts),
    "examples: when the rule speaks": Claim(
        "examples/README.md",
        r"the rule speaks once (half) of its (\d+) s window is sampled \((\d+) s after launch\) "
        r"and notebook kernels have held GPUs for at least (half) of the time sampled",
        lambda coverage, window, at, held: check_speaks_when(window, coverage, at, held)),
    "examples: when the warning comes": Claim(
        "examples/README.md",
        r"Opened within about (\d+) s of launch, the warning comes about (\d+) s after launch; "
        r"opened at (\d+) s, at about (\d+) s; opened at (\d+) s or later, about (\d+) s after "
        r"it opens \(later still when explore's burst falls in the window\)", check_timings),
    "examples: idle and waste": Claim(
        "examples/README.md",
        r"GPUs are \((\d+)% at first\), what that wastes per hour \(~USD (\d+\.\d\d)/h: the GPU "
        r"part of the rate, USD (\d+\.\d\d)/h, times the unused share of GPU capacity; a little "
        r"less while a burst is in the window\)", check_idle_and_waste),
    "examples: suggestion": Claim(
        "examples/README.md", r"here a (\d+)× T4 `g4dn\.xlarge` at USD (\d+\.\d\d)/h",
        check_suggestion),
    "examples: hibernation": Claim(
        "examples/README.md",
        r"gets an idle-GPU alert after (\d+) minutes saying when it will be hibernated, and is\s+"
        r"hibernated after (\d+) \(", check_demo_hibernation),
    "examples: window": Claim(
        "examples/README.md",
        r"judges over a (\d+) s window \(`c\.Guard\.interactive_window_seconds = (\d+)` in "
        r"`jupyter_server_config\.py`\); the default is (\d+) minutes", check_default_window),
    "examples: train": Claim(
        "examples/README.md",
        r"its kernel gets GPUs (\d+)–(\d+) of the trace .{0,120}?training at ~(\d+)% during the "
        r"first (\w+) minutes of every (\w+) \(counted from the server's start\) and then "
        r"sitting on (\d+) GiB each", check_train),
    "examples: training resolves the warning": Claim(
        "examples/README.md",
        r"While it trains, the GPUs the notebooks hold average far above (\d+)%: the instance "
        r"is working, and the warning resolves", check_training_resolves),
    "examples: after training": Claim(
        "examples/README.md",
        r"now without a suggestion: (\w+) GPUs in use, (\w+) of them holding (\d+) GiB, fit no "
        r"cheaper AWS instance", check_after_training),
    "examples: the first job": Claim(
        "examples/README.md", r"\(\"ran as job (\d+) on local · \.\.\.\"\).{0,120}?"
                              r"`%costguard fetch (\d+)`", first_job),
    "explore.ipynb: its GPU": Claim(
        "explore.ipynb", r"holds (\d+) GiB on GPU (\d+) at ~(\d+)% utilisation",
        lambda memory, gpu, util: check_explore(gpu, util, memory)),
    "train.ipynb: its GPUs": Claim(
        "train.ipynb",
        r"gets GPUs (\d+)–(\d+), whatever you opened first .{0,120}?They train at ~(\d+)% during "
        r"the first (\w+) minutes of every (\w+) \(counted from the server's start\), then idle "
        r"while holding (\d+) GiB each", check_train),
}


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_figure_matches_the_code(name: str) -> None:
    claim = CLAIMS[name]
    match = re.search(claim.pattern, DOCS[claim.doc]())
    assert match, f"{claim.doc} no longer says this in these words: {claim.pattern}"
    claim.check(*match.groups())


FIGURE = re.compile(r"(?<![\w.\-/])\d+(?:[.,]\d+)*")


def figures_of(text: str) -> Iterator[re.Match[str]]:
    """Every number written in digits, not counting those inside names (p4d.24xlarge, A100)."""
    return FIGURE.finditer(text)


@pytest.mark.parametrize("doc", sorted(DOCS))
def test_every_figure_is_checked(doc: str) -> None:
    """A figure no claim covers would go stale unnoticed: each must be computed or measured."""
    text = DOCS[doc]()
    covered: set[int] = set()
    for claim in CLAIMS.values():
        if claim.doc == doc:
            for match in re.finditer(claim.pattern, text):
                for group in range(1, (match.re.groups or 0) + 1):
                    covered.update(range(match.start(group), match.end(group)))
    loose = [f"{m.group()!r} in …{text[max(0, m.start() - 40):m.end() + 20]}…"
             for m in figures_of(text) if m.start() not in covered]
    assert not loose, f"figures in {doc} that no test checks:\n" + "\n".join(loose)


# --- prose against behaviour ----------------------------------------------------------------


def offload_cells() -> list[dict[str, Any]]:
    cells = json.loads((EXAMPLES / "offload.ipynb").read_text())["cells"]
    return [{"id": c["id"], "cell_type": c["cell_type"], "source": "".join(c["source"])}
            for c in cells]


def test_offload_notebook_names_the_cells_the_slicer_selects() -> None:
    """offload.ipynb, examples/README.md and README say which earlier cells the job runs with
    the `train` cell and which it leaves out; the slicer decides it."""
    cells = offload_cells()
    selected = slice_cells(cells, ["train"])
    earlier = [c for c in cells if c["cell_type"] == "code"][:[c["id"] for c in cells
                                                             if c["cell_type"] == "code"]
                                                            .index("train")]
    needed = [c.cell_id for c in selected.cells if not c.selected]
    left_out = [c["id"] for c in earlier if c["id"] not in needed]
    assert needed and left_out, "the example should show both: cells taken and cells left"

    def names(text: str) -> list[str]:
        return re.findall(r"`(\w+)`", text)

    said = re.search(r"earlier cells it needs — (.*?), not (`\w+`(?: or `\w+`)*) —",
                     DOCS["offload.ipynb"]())
    assert said, "offload.ipynb no longer says which cells the job runs"
    assert [n for n in names(said.group(1)) if n in {c["id"] for c in cells}] == needed
    assert names(said.group(2)) == left_out
    said = re.search(r"The job runs (.*?) \(not (?:the )?(`\w+`(?: or `\w+`)*) cells?\)",
                     DOCS["examples/README.md"]())
    assert said and names(said.group(1)) == [*needed, "train"]
    assert names(said.group(2)) == left_out
    said = re.search(r"it runs with the cells it needs \((.*?), not (`\w+`(?: or `\w+`)*)\)",
                     DOCS["README: Quick start"]())
    assert said and names(said.group(1)) == needed and names(said.group(2)) == left_out


def test_the_cell_names_the_docs_use_are_what_the_notebook_shows() -> None:
    """JupyterLab never shows a cell's id: each code cell of offload.ipynb names itself on
    its first line (`# train: ...`), so the names the docs use are the ones a reader sees."""
    for cell in offload_cells():
        if cell["cell_type"] == "code":
            first = cell["source"].splitlines()[0]
            assert re.match(rf"# {cell['id']}\b", first), (cell["id"], first)
    assert "cell headed `# train`" in DOCS["README: Quick start"]()
    assert "its `# train` cell" in DOCS["examples/README.md"]()


def test_offload_notebook_names_what_comes_back() -> None:
    """The job brings back what later cells read: the notebook names it, and the cell that
    reads it."""
    cells = offload_cells()
    selected = slice_cells(cells, ["train"])
    back = used_later(cells, ["train"], selected.defines)
    said = re.search(r"the job brings back (`\w+`), the one name the cell after it \(`(\w+)`\)",
                     DOCS["offload.ipynb"]())
    assert said and (said.group(1).strip("`"),) == back
    reader = cells[[c["id"] for c in cells].index("train") + 1]
    assert reader["id"] == said.group(2) and back[0] in reader["source"]
    assert f"brings `{back[0]}` into your kernel" in DOCS["examples/README.md"]()


def test_the_first_code_cell_loads_the_widget() -> None:
    """README and examples/README.md send the reader to explore.ipynb's first code cell."""
    cells = json.loads((EXAMPLES / "explore.ipynb").read_text())["cells"]
    first = next(c for c in cells if c["cell_type"] == "code")
    assert "%load_ext jupyter_costguard" in "".join(first["source"])
    for doc in ("README: Quick start", "examples/README.md"):
        assert "first code cell (`%load_ext jupyter_costguard`)" in DOCS[doc](), doc


def test_the_trace_binds_gpus_to_notebooks_not_start_order() -> None:
    """The docs say train.ipynb gets its GPUs whatever is opened first: the replay agrees."""
    for opened in ({EXPLORE: 0.0, TRAIN: 1.0}, {TRAIN: 0.0, EXPLORE: 1.0}, {TRAIN: 0.0}):
        source = ReplaySource(TRACE, clock=lambda: T0)
        reading, held = replay_read(source, kernels_open(opened, 2.0), T0)
        by_uuid = {g.uuid: g.index for g in reading.gpus}
        assert tuple(sorted(by_uuid[u] for u in held[TRAIN])) == story().train_gpus
    for doc in ("train.ipynb", "README: Quick start"):
        assert "not to the order kernels start in" in DOCS[doc](), doc
    assert "second kernel" not in DOCS["train.ipynb"]()

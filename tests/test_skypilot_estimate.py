"""The SkyPilot backend's estimate without SkyPilot: the optimizer's answer (its plan table as
the API server's request log carries it, or a chosen ``Resources``) becomes the record the
offload dialog shows; a choice SkyPilot prices at 0 (its Slurm and Kubernetes infra) is priced
at the site's rates; the price cap is checked as the launch checks it. SkyPilot itself is
exercised by the end-to-end tests (tests/test_skypilot_e2e.py)."""

from __future__ import annotations

from typing import Any

import pytest

from jupyter_costguard.offload.backends.skypilot import estimate as est
from jupyter_costguard.offload.backends.skypilot.task import SkyPilotSettings
from jupyter_costguard.offload.estimate import Choice, EstimateContext
from jupyter_costguard.offload.spec import Resources

# SkyPilot 0.14.1's optimizer table (sky.optimizer, rendered by its own
# log_utils.create_table), as the request log streams it: colours on the chosen mark, and a
# second line of the log prefixed as SkyPilot's logger does when it shows prefixes
PLAN = (
    "Considered resources (1 node):\n"
    "-----------------------------------------------------------------------------------------\n"
    " INFRA               INSTANCE             vCPUs   Mem(GB)   GPUS     COST ($)   CHOSEN   \n"
    "-----------------------------------------------------------------------------------------\n"
    " GCP (us-central1)   a2-highgpu-1g[Spot]  12      85        A100:1   1.15       \x1b[32m   "
    "\u2714\x1b[0m     \n"
    "I 07-12 10:00:00.123 PID=4242 optimizer.py:987]  AWS (us-east-1)     p4d.24xlarge[Spot]   "
    "96      1152      A100:8   9.83                \n"
    "-----------------------------------------------------------------------------------------\n"
)
SLURM_PLAN = PLAN.replace(
    "GCP (us-central1)   a2-highgpu-1g[Spot]  12      85        A100:1   1.15",
    "Slurm (localcluster)   -                4       16        -        0.00")
CONTEXT = EstimateContext(cluster_rates={"skypilot": {"gpu_per_hour": 2.0, "cpu_per_hour": 0.5}},
                          currency="EUR")
TWO_HOURS = Resources(gpus=1, cpus=4, time_limit_seconds=7200)


def test_the_chosen_row_of_the_plan_table_is_the_choice() -> None:
    found = est.parse_plan(PLAN)
    assert found == (Choice("GCP", "us-central1", "a2-highgpu-1g", "A100:1", True), 1.15)


def test_a_log_without_a_table_gives_no_choice() -> None:
    assert est.parse_plan("I 07-12 nothing to see\nResourcesUnavailableError: no launchable"
                          " resource") is None


def test_a_priced_choice_is_dollars_per_hour_and_the_most_within_the_limit() -> None:
    found = est.parse_plan(PLAN)
    assert found is not None
    e = est.make_estimate("skypilot", found[0], found[1], TWO_HOURS,
                          SkyPilotSettings(max_price_per_hour=5.0), CONTEXT).to_json()
    assert e["priced"] and e["hourly_price"] == 1.15 and e["currency"] == "USD"
    assert e["max_cost"] == pytest.approx(2.30)
    assert e["source"] == "skypilot_optimizer"
    assert e["detail"] == "SkyPilot optimizer: GCP us-central1, a2-highgpu-1g (A100:1), spot"
    assert e["choice"] == {"cloud": "GCP", "region": "us-central1",
                           "instance_type": "a2-highgpu-1g", "accelerators": "A100:1",
                           "use_spot": True}
    assert e["price_cap"] == 5.0 and not e["above_cap"] and e["refusal"] is None


def test_a_choice_above_the_cap_says_it_would_be_refused() -> None:
    e = est.make_estimate("skypilot", Choice("AWS", "us-east-1", "p4d.24xlarge", "A100:8", True),
                          9.83, TWO_HOURS, SkyPilotSettings(max_price_per_hour=5.0), CONTEXT)
    doc = e.to_json()
    assert doc["above_cap"] and "above the cap of 5" in doc["refusal"]
    assert "SkyPilotBackend.max_price_per_hour" in doc["refusal"]


def test_slurm_infra_priced_at_zero_falls_back_to_the_site_rates() -> None:
    found = est.parse_plan(SLURM_PLAN)
    assert found is not None
    choice, hourly = found
    assert choice == Choice("Slurm", "localcluster", None, None, False) and hourly == 0.0
    e = est.make_estimate("skypilot", choice, hourly, TWO_HOURS, SkyPilotSettings(),
                          CONTEXT).to_json()
    # 1 GPU x 2.0 + 4 CPUs x 0.5, in the site's currency
    assert e["hourly_price"] == pytest.approx(4.0) and e["currency"] == "EUR"
    assert e["max_cost"] == pytest.approx(8.0) and e["source"] == "cluster_rates"
    assert "which SkyPilot prices it at 0" in e["detail"]
    assert "site rate for skypilot (c.Offload.cluster_rates)" in e["detail"]


def test_slurm_infra_without_site_rates_is_not_priced() -> None:
    e = est.make_estimate("skypilot", Choice("Slurm", "c", None, None, False), 0.0, TWO_HOURS,
                          SkyPilotSettings(), EstimateContext({}, "USD")).to_json()
    assert not e["priced"] and e["hourly_price"] is None and e["max_cost"] is None
    assert "no entry for 'skypilot': not priced" in e["detail"]


def test_no_time_limit_has_no_most() -> None:
    e = est.make_estimate("skypilot", Choice("AWS", None, "g5.xlarge", "A10G:1", False), 1.0,
                          Resources(gpus=1), SkyPilotSettings(), CONTEXT).to_json()
    assert e["hourly_price"] == 1.0 and e["max_cost"] is None and e["time_limit_seconds"] is None


class Best:
    """What ``dag.tasks[0].best_resources`` holds, as far as the estimate reads it."""

    cloud = "AWS"
    region = "us-east-1"
    instance_type = "g5.xlarge"
    accelerators = {"A10G": 1}
    use_spot = False

    def get_cost(self, seconds: float) -> float:
        return 1.006 * seconds / 3600


def test_a_chosen_resources_object_is_read_as_a_choice() -> None:
    assert est.choice_of(Best()) == (Choice("AWS", "us-east-1", "g5.xlarge", "A10G:1", False),
                                     pytest.approx(1.006))


def test_the_optimizer_is_asked_for_what_the_launch_asks_for() -> None:
    config = est.estimate_config(Resources(gpus=2, cpus=3.5, memory_gib=10),
                                 SkyPilotSettings(accelerator="H100", infra=("aws", "gcp")))
    r = config["resources"]
    assert r["accelerators"] == "H100:2" and r["cpus"] == "4+" and r["memory"] == "10+"
    assert r["use_spot"] is True and r["any_of"] == [{"infra": "aws"}, {"infra": "gcp"}]


def test_an_optimizer_failure_is_an_unpriced_answer_and_not_kept() -> None:
    calls: list[int] = []

    def failing() -> Any:
        calls.append(1)
        raise RuntimeError("could not reach the API server at http://127.0.0.1:46580")

    estimator = est.Estimator(clock=lambda: 100.0)
    e = estimator.estimate(failing, "skypilot", SkyPilotSettings(), TWO_HOURS, CONTEXT)
    assert e.hourly_price is None and "could not reach the API server" in e.detail
    estimator.estimate(failing, "skypilot", SkyPilotSettings(), TWO_HOURS, CONTEXT)
    assert len(calls) == 2


def test_a_choice_is_kept_a_minute_per_resources_and_the_limit_applied_each_time(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dict[str, Any]] = []

    def optimizer(sky: Any, config: dict[str, Any]) -> tuple[Choice, float]:
        asked.append(config)
        return Choice("AWS", "us-east-1", "g5.xlarge", "A10G:1", False), 1.0

    monkeypatch.setattr(est, "ask_optimizer", optimizer)
    now = [100.0]
    estimator = est.Estimator(clock=lambda: now[0])
    one = estimator.estimate(lambda: None, "skypilot", SkyPilotSettings(), TWO_HOURS, CONTEXT)
    four = estimator.estimate(lambda: None, "skypilot", SkyPilotSettings(),
                              Resources(gpus=1, cpus=4, time_limit_seconds=4 * 3600), CONTEXT)
    assert (one.max_cost, four.max_cost, len(asked)) == (2.0, 4.0, 1)
    estimator.estimate(lambda: None, "skypilot", SkyPilotSettings(), Resources(gpus=2), CONTEXT)
    assert len(asked) == 2  # other resources: asked again
    now[0] += est.CACHE_SECONDS
    estimator.estimate(lambda: None, "skypilot", SkyPilotSettings(), TWO_HOURS, CONTEXT)
    assert len(asked) == 3  # a minute later: asked again


def test_gpus_without_an_accelerator_type_say_what_to_set() -> None:
    e = est.Estimator().estimate(lambda: None, "skypilot", SkyPilotSettings(accelerator=""),
                                 TWO_HOURS, CONTEXT)
    assert e.hourly_price is None and "SkyPilotBackend.accelerator is empty" in e.detail

"""`jupyter costguard` commands on a real ledger file."""

from __future__ import annotations

from pathlib import Path

import pytest

from jupyter_costguard.cli import main
from jupyter_costguard.cost.ledger import Ledger
from jupyter_costguard.cost.spend import IntervalCost, Share


def test_report_lists_notebooks_by_spend(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    db = tmp_path / "ledger.sqlite"
    ledger = Ledger(db, now=0.0)
    cost = IntervalCost(total=3.0, unattributed=0.5, unattributed_gpu=0.5,
                        shares={"k1": Share(gpu=2.0, waste=1.5), "k2": Share(host=0.5)})
    ledger.record(2.0, 2.0, cost, {"k1": "big.ipynb", "k2": "small.ipynb"}, {})
    ledger.close()
    assert main(["report", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if ".ipynb" in line]
    assert lines[0].split()[:3] == ["big.ipynb", "2.0000", "1.5000"]
    assert lines[1].split()[:2] == ["small.ipynb", "0.5000"]
    assert "spent 3.00" in out


def test_report_without_ledger_is_a_clear_error(tmp_path: Path, capsys):
    assert main(["report", "--db", str(tmp_path / "none.sqlite")]) == 2
    assert "no ledger" in capsys.readouterr().err


def test_catalog_filters(capsys):
    assert main(["catalog", "--provider", "aws", "--gpu"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert rows and all(r.startswith("aws") for r in rows)
    assert any("p4d.24xlarge" in r for r in rows)
    assert not any("m5.xlarge" in r for r in rows)


def test_help_all_documents_every_option(capsys):
    assert main(["--help-all"]) == 0
    out = capsys.readouterr().out
    for option in ("instance_type", "hourly_rate", "sample_interval", "replay_trace", "db_path"):
        assert f"--CostGuard.{option}" in out


def test_help_all_lists_costguard_small_and_each_component_under_its_own_name(capsys):
    from jupyter_costguard.app import COMPONENTS

    assert main(["--help-all"]) == 0
    out = capsys.readouterr().out
    costguard = {line.split("=")[0] for line in out.splitlines()
                 if line.startswith("--CostGuard.")}
    assert 0 < len(costguard) <= 40
    for cls in COMPONENTS:
        assert f"c.{cls.__name__} options" in out
        for name in cls.class_trait_names(config=True):
            assert f"--{cls.__name__}.{name}" in out

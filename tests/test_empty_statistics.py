"""A statistic the world's set-up leaves empty in every row is refused before the first round, or not
written: evaluation.devices in a world where no device holds a local test split (every device statistic
would be empty to the end), a group column none of whose devices could ever fill it."""
from __future__ import annotations

import numpy as np
import pytest
import yaml
from conftest import small_scenario

from emulator.cli import main
from emulator.driver import run_scenario
from emulator.errors import ScenarioError
from emulator.evaluation.fleet import FleetEvaluation
from emulator.parts import validate_scenario

# small_scenario's devices hold at most 200 samples: a fifth of them is never 100
NO_SPLIT = {"data.local_test": {"fraction": 0.2, "min_samples": 100}}
SIMULATED = {"system.model": "simulated"}
# every way of scoring devices on their own splits
MODES = {"oracle": {}, "sampled": {"oracle": False, "sample": 5}, "fine-tuned": {"finetune": {"steps": 2}},
         "sampled and fine-tuned": {"sample": 5, "finetune": {"steps": 2}}}


@pytest.mark.parametrize("mode", list(MODES))
def test_device_evaluation_where_no_device_holds_a_local_test_split_is_refused_before_the_first_round(mode, tmp_path):
    scenario = validate_scenario(small_scenario(rounds=2, **NO_SPLIT, **SIMULATED,
                                                **{"evaluation.devices": MODES[mode]}))
    with pytest.raises(ScenarioError, match=r"data\.local_test: no device holds a local test split.*min_samples"):
        run_scenario(scenario, tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.csv").exists()


def test_the_command_line_exits_2_naming_the_field(tmp_path, capsys):
    config = tmp_path / "s.yaml"
    config.write_text(yaml.safe_dump(small_scenario(rounds=2, **NO_SPLIT, **{"evaluation.devices": {}})))
    assert main(["run", str(config), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    assert "data.local_test: no device holds a local test split" in capsys.readouterr().err


def test_a_local_test_split_nobody_evaluates_is_left_alone(tmp_path):
    """Without evaluation.devices no statistic reads the splits: nothing to refuse."""
    run_scenario(validate_scenario(small_scenario(rounds=1, **NO_SPLIT)), tmp_path / "run")


def test_a_group_none_of_whose_devices_holds_a_local_test_split_gets_no_column():
    local = np.array([3, 4, 0, 0, 5, 0])
    tier = np.array([0, 0, 1, 1, 2, 2])  # tier 1: no device with a split, ever
    fleet = FleetEvaluation(local, {"compute_tier": tier})
    grouped = [c for c in fleet.columns if c.startswith("device_acc_compute_tier_")]
    assert grouped == ["device_acc_compute_tier_0", "device_acc_compute_tier_2"]
    owner = fleet.owner(None)
    row, _ = fleet.score(None, np.zeros(len(owner)), np.ones(len(owner), bool), np.zeros(6, np.int64))
    assert [c for c in row if c.startswith("device_acc_compute_tier_")] == grouped
    assert all(row[c] == 1.0 for c in grouped)

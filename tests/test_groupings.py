"""Devices grouped by what the system says of them (compute tier, network tier, time zone, type): every group
has a name, the devices without a value (a device outside every diurnal entry has no time zone) included,
in the device-accuracy columns (evaluation/fleet.py) and the acceptance columns (evaluation/acceptance.py)
alike."""
from __future__ import annotations

import csv

import numpy as np
import pytest
from conftest import small_scenario

from emulator.driver import run_scenario
from emulator.evaluation.acceptance import acceptance_by_group, acceptance_columns
from emulator.evaluation.fleet import GROUPING, group_columns, group_means, groupings
from emulator.parts import validate_scenario

DEVICES = 6
MISSING = "none"  # the documented name of the group of devices without a value
# how a column of each kind says "no value": NaN in numbers, None among objects, an empty name among strings
PRESENT = {"float": [-5.0, -5.0, 8.0, 8.0], "int": [0, 0, 1, 1], "str": ["fast", "fast", "slow", "slow"]}
ABSENT = {"float": np.nan, "int": None, "str": ""}


def _column(kind: str) -> np.ndarray:
    values = PRESENT[kind] + [ABSENT[kind]] * 2  # devices 4 and 5 have no value
    return np.array(values, dtype=object if kind == "int" else None)


def _cases():
    return [(name, kind) for name in GROUPING for kind in PRESENT]


def _well_named(columns, prefix: str, name: str) -> None:
    for column in columns:
        label = column[len(f"{prefix}_{name}_"):]
        assert column.startswith(f"{prefix}_{name}_") and label and label.lower() != "nan", column


@pytest.mark.parametrize("name, kind", _cases())
def test_devices_without_a_value_form_a_named_group_of_their_own_in_every_statistic(name, kind):
    groups = groupings({name: _column(kind)})
    assert list(groups) == [name]  # two values and the devices without one: a grouping
    accuracy = np.array([0.1, 0.2, 0.3, 0.4, 0.8, 1.0])
    samples = np.full(DEVICES, 5)
    columns = group_columns(groups)
    _well_named(columns, "device_acc", name)
    assert len(columns) == 3 and columns[-1] == f"device_acc_{name}_{MISSING}"
    means = group_means(samples, accuracy, groups)
    assert list(means) == list(columns)
    assert means[columns[-1]] == pytest.approx(0.9)  # devices 4 and 5, never an empty group
    assert means[columns[0]] == pytest.approx(0.15)

    accepted_columns = acceptance_columns(groups)
    _well_named(accepted_columns, "accepted", name)
    row = acceptance_by_group(np.array([0, 2, 4, 5]), np.array([True, False, True, False]), groups)
    assert list(row) == list(accepted_columns)
    assert row[f"accepted_{name}_{MISSING}"] == 0.5


def test_a_group_none_of_whose_devices_is_honest_gets_no_acceptance_column():
    """Acceptance counts honest reports only: a group of attackers alone (their own type) would be an empty
    column in every row."""
    groups = {"type": np.array(["honest", "honest", "honest", "attacker"])}
    honest = np.array([True, True, True, False])
    assert acceptance_columns(groups, honest) == ("accepted_type_honest",)
    row = acceptance_by_group(np.array([0, 3]), np.array([True, True]), groups, honest)
    assert row == {"accepted_type_honest": 1.0}


def test_a_world_where_some_devices_have_no_time_zone_names_their_group_in_metrics(tmp_path):
    raw = small_scenario(rounds=2, **{
        "system.model": "simulated", "data.local_test": {"fraction": 0.25, "min_samples": 2},
        "evaluation.devices": {"csv": False},
        "population.availability": [{"kind": "always", "share": 0.5},
                                    {"kind": "diurnal", "share": 0.5, "hours": 24, "timezones": {"offsets_h": [-5, 8]}}]})
    raw["algorithm"]["aggregator"] = {"kind": "median"}
    path = run_scenario(validate_scenario(raw), tmp_path / "run").path
    with open(path / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    grouped = [c for c in rows[0] if c.startswith(("device_acc_timezone_h_", "accepted_timezone_h_"))]
    assert {"device_acc_timezone_h_none", "accepted_timezone_h_none"} <= set(grouped)
    for column in grouped:
        assert column.rsplit("_", 1)[1] not in ("", "nan"), column
        assert any(row[column] != "" for row in rows), f"{column} is empty in every row"

"""A robust rule is itself or nothing: every rule's parameters are checked against the updates it sees at once
(refused at validation), and a round with fewer reports than the rule needs keeps the model and says so,
never turning the rule silently into another (Multi-Krum with m above the reports is the mean)."""
from __future__ import annotations

import csv

import numpy as np
import pytest
from conftest import small_scenario

from emulator.aggregation.robust import build_aggregator
from emulator.driver import run_scenario
from emulator.errors import ScenarioError, is_plugin
from emulator.parts import validate_scenario
from emulator.registry import AGGREGATORS

# every parameter setting of every built-in rule, with the fewest updates it needs to be itself and the field
# that a cohort too small for it is refused at
NEEDS = [
    ({"kind": "median"}, 3, "algorithm.aggregator"),  # the median of two is their mean
    ({"kind": "trimmed_mean", "beta": 0.25}, 4, "algorithm.aggregator.beta"),  # floor(beta n) >= 1
    ({"kind": "trimmed_mean", "beta": 0.1}, 10, "algorithm.aggregator.beta"),
    ({"kind": "krum", "f": 1}, 5, "algorithm.aggregator.f"),  # n >= 2f + 3
    ({"kind": "krum", "f": 2, "m": 3}, 7, "algorithm.aggregator.f"),
    ({"kind": "krum", "f": 1, "m": 6}, 7, "algorithm.aggregator.m"),  # m of the n - f it may trust
    ({"kind": "norm_bound"}, 3, "algorithm.aggregator.bound"),  # the median norm of two is set by each
    ({"kind": "norm_bound", "bound": 1.0}, 1, None),  # a fixed bound holds for one update alone
]


def test_every_built_in_rule_is_in_the_table():
    ours = {name for name in AGGREGATORS.names() if not is_plugin(AGGREGATORS.get(name).origin)}
    assert {rule["kind"] for rule, _, _ in NEEDS} == ours


def _with(rule: dict, cohort: int, **changes) -> dict:
    raw = small_scenario(**changes)
    raw["algorithm"]["clients_per_round"] = cohort
    raw["algorithm"]["aggregator"] = rule
    return raw


@pytest.mark.parametrize("rule, need, field", NEEDS)
def test_a_cohort_smaller_than_the_rule_needs_is_refused_naming_the_field(rule, need, field):
    validate_scenario(_with(rule, need))
    if need == 1:
        return
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.") + r"\b.*" + str(need)):
        validate_scenario(_with(rule, need - 1))
    fedbuff = {"name": "fedbuff", "concurrency": 12, "buffer": need - 1, "aggregator": rule}
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.") + r"\b.*algorithm\.buffer"):
        validate_scenario(small_scenario(algorithm=fedbuff, **{"system.model": "simulated"}))


def _updates(n: int) -> np.ndarray:
    """n updates near (1, 1), the last far away: every rule answers otherwise than the mean."""
    rows = 1.0 + 0.01 * np.random.default_rng(n).standard_normal((n, 2))
    rows[-1] = [100.0, -100.0]
    return rows


@pytest.mark.parametrize("rule, need, field", NEEDS)
def test_fewer_updates_than_the_rule_needs_keep_the_model_and_say_so(rule, need, field):
    config = AGGREGATORS.get(rule["kind"]).config.model_validate(rule)
    aggregate = build_aggregator(config)
    rows = _updates(need)
    result = aggregate(rows, np.ones(need))
    assert not result.held
    assert not np.allclose(result.aggregate, rows.mean(axis=0))  # the rule itself, not the mean
    for n in range(1, need):
        short = aggregate(_updates(n), np.ones(n))
        assert short.held and not short.accepted.any() and not short.aggregate.any(), (n, short)
        assert str(need) in short.note


def test_a_round_with_fewer_reports_than_krum_needs_keeps_the_model(tmp_path):
    """4 devices in 10 are too slow for the deadline: rounds close with 5 reports of 8 asked, or fewer."""
    raw = small_scenario(rounds=10, **{
        "system": {"model": "simulated", "deadline_s": 30, "over_selection": 1.6, "min_report_fraction": 0.2},
        "population.compute": {"kind": "tiers", "tiers": [{"name": "fast", "share": 0.6, "s_per_sample": 0.001},
                                                          {"name": "slow", "share": 0.4, "s_per_sample": 10.0}]}})
    raw["algorithm"].update(clients_per_round=5, aggregator={"kind": "krum", "f": 1})  # needs 5
    with open(run_scenario(validate_scenario(raw), tmp_path / "run").path / "metrics.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    short = [(before, row) for before, row in zip(rows, rows[1:]) if 0 < int(row["participants"]) < 5]
    assert short and any(int(row["participants"]) == 5 for row in rows)
    for before, row in short:
        assert int(row["updates_accepted"]) == 0 and row["aggregator_held"] == "1"
        assert row["test_loss"] == before["test_loss"]  # the model as it was
    assert all(row["aggregator_held"] == "0" for row in rows if int(row["participants"]) == 5)

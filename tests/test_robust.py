"""Robust aggregation rules (emulator/aggregation/robust.py) against hand-computed aggregates, and
algorithm.aggregator in runs: its column, its refusals."""
from __future__ import annotations

import csv

import numpy as np
import pytest
from conftest import small_scenario

from emulator.aggregation.robust import (coordinate_median, extra_operations, krum_scores, multi_krum, norm_bound,
                                        trimmed_mean)
from emulator.aggregation.staleness import StalenessBuffer, robust_buffer_step
from emulator.driver import run_scenario
from emulator.errors import ScenarioError
from emulator.parts import validate_scenario

# four updates of two values; the last is an outlier
UPDATES = np.array([[1.0, 10.0], [2.0, 20.0], [3.0, 30.0], [100.0, -100.0]])


def test_the_median_of_an_even_count_is_the_mean_of_the_middle_two():
    assert coordinate_median(UPDATES).aggregate.tolist() == [2.5, 15.0]
    assert coordinate_median(UPDATES[:3]).aggregate.tolist() == [2.0, 20.0]


@pytest.mark.parametrize("n", [3, 6, 7])
def test_the_median_is_numpys_to_the_bit(n):
    rows = np.random.default_rng(n).standard_normal((n, 50))
    assert np.array_equal(coordinate_median(rows).aggregate, np.median(rows, axis=0))


def test_the_trimmed_mean_drops_floor_beta_n_from_each_end_per_coordinate():
    assert trimmed_mean(UPDATES, 0.25).aggregate.tolist() == [2.5, 15.0]  # floor(1): drop 1 and 100; -100 and 30
    assert trimmed_mean(UPDATES, 0.2).held  # floor(0.8) = 0 would trim nothing: the mean, another rule
    with pytest.raises(ValueError, match="beta"):
        trimmed_mean(UPDATES, 0.5)


def test_krum_scores_sum_the_squared_distances_to_the_nearest_n_minus_f_minus_2():
    rows = np.array([[0.0], [1.0], [3.0], [10.0], [11.0]])  # n = 5, f = 1: the 2 nearest others
    # 0: 1 + 9 = 10; 1: 1 + 4 = 5; 3: 4 + 9 = 13; 10: 1 + 49 = 50; 11: 1 + 64 = 65
    assert krum_scores(rows, 1).tolist() == [10.0, 5.0, 13.0, 50.0, 65.0]
    krum = multi_krum(rows, 1)
    assert krum.aggregate.tolist() == [1.0] and krum.accepted.tolist() == [False, True, False, False, False]
    assert krum.note == ""  # n = 5 >= 2f + 3
    multi = multi_krum(rows, 1, m=3)  # the three lowest scores: 1, 0, 3
    assert multi.aggregate.tolist() == pytest.approx([4 / 3]) and multi.accepted.sum() == 3


def test_krum_breaks_ties_by_arrival_and_holds_with_fewer_updates_than_it_needs():
    rows = np.array([[0.0], [1.0], [2.0], [3.0], [10.0]])  # n = 5, f = 1: 1 and 2 both score 1 + 1 = 2
    tied = multi_krum(rows, f=1)
    assert tied.accepted.tolist() == [True if i == 1 else False for i in range(5)] and tied.aggregate.tolist() == [1.0]
    short = multi_krum(UPDATES, f=1)  # n = 4 < 2f + 3
    assert short.held and not short.accepted.any() and "fewer than the 5 it needs" in short.note
    assert multi_krum(rows, f=1, m=5).held  # m above the n - f = 4 it may trust: it would be the mean


def test_norm_bounding_scales_long_updates_and_keeps_the_weights():
    rows = np.array([[3.0, 4.0], [0.0, 1.0], [30.0, 40.0]])  # norms 5, 1, 50
    fixed = norm_bound(rows, np.array([1.0, 1.0, 2.0]), bound=5.0)
    # (3, 4) + (0, 1) + 2 x (3, 4), over weight 4
    assert fixed.aggregate.tolist() == pytest.approx([9 / 4, 13 / 4])
    assert fixed.accepted.tolist() == [True, True, False]
    adaptive = norm_bound(rows, np.ones(3), factor=1.0)  # the median norm, 5
    assert adaptive.aggregate.tolist() == pytest.approx([2.0, 3.0])


def _last(path) -> dict:
    with open(path / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))[-1]


@pytest.mark.parametrize("aggregator, accepted", [({"kind": "krum", "f": 2, "m": 3}, 3),
                                                   ({"kind": "median"}, 8)])
def test_a_run_with_an_aggregator_records_how_many_updates_it_accepted(tmp_path, aggregator, accepted):
    raw = small_scenario(rounds=3)
    raw["algorithm"]["aggregator"] = aggregator
    row = _last(run_scenario(validate_scenario(raw), tmp_path / "run").path)
    assert int(row["participants"]) == 8 and int(row["updates_accepted"]) == accepted
    assert float(row["test_acc"]) > 0


@pytest.mark.parametrize("change, field", [
    ({"algorithm.aggregator": {"kind": "krum", "f": 4}}, "algorithm.aggregator.f"),  # 2 x 4 >= 8 reports
    ({"algorithm.aggregator": {"kind": "trimmed_mean", "beta": 0.5}}, "algorithm.aggregator.beta"),
    ({"algorithm": {"name": "fedasync", "concurrency": 10, "aggregator": {"kind": "median"}}}, "algorithm.aggregator"),
    ({"algorithm": {"name": "fedbuff", "concurrency": 10, "buffer": 6, "aggregator": {"kind": "krum", "f": 3}}},
     "algorithm.aggregator.f"),  # 2 x 3 >= a buffer of 6
    ({"algorithm.aggregator": {"kind": "median"}, "privacy": {"noise_multiplier": 1.0, "clip": 1.0}},
     "algorithm.aggregator"),
    ({"algorithm.aggregator": {"kind": "norm_bound"}, "privacy": {"noise_multiplier": 1.0, "clip": 1.0}},
     "algorithm.aggregator"),  # an adaptive bound is set by the other devices' updates
])
def test_an_aggregator_that_cannot_work_is_refused_naming_the_field(change, field):
    with pytest.raises(ScenarioError, match=field.replace(".", r"\.")):
        validate_scenario(small_scenario(**change))


def test_acceptance_by_group_counts_only_honest_reports_of_each_group():
    from emulator.evaluation.acceptance import acceptance_by_group, acceptance_columns

    tier = np.array(["fast", "fast", "slow", "slow", "slow"])
    honest = np.array([True, True, True, True, False])  # device 4 is an attacker
    # reports from devices 0, 2, 3, 4 (in arrival order); the rule kept 0 and 4
    row = acceptance_by_group(np.array([0, 2, 3, 4]), np.array([True, False, False, True]), {"tier": tier}, honest)
    assert row == {"accepted_tier_fast": 1.0, "accepted_tier_slow": 0.0}  # the attacker's acceptance not counted
    assert acceptance_columns({"tier": tier}) == ("accepted_tier_fast", "accepted_tier_slow")
    empty = acceptance_by_group(np.array([1]), np.array([True]), {"tier": tier}, honest)
    assert empty == {"accepted_tier_fast": 1.0, "accepted_tier_slow": None}


def test_a_run_with_an_aggregator_records_each_groups_acceptance(tmp_path):
    raw = small_scenario(rounds=3, **{"population.compute": {"kind": "tiers", "tiers": [
        {"name": "fast", "share": 0.5, "s_per_sample": 0.01}, {"name": "slow", "share": 0.5, "s_per_sample": 0.02}]}})
    raw["algorithm"]["aggregator"] = {"kind": "krum", "f": 2, "m": 3}
    rows = _rows_of(run_scenario(validate_scenario(raw), tmp_path / "run").path)
    for row in rows:
        shares = [float(row[c]) for c in ("accepted_compute_tier_0", "accepted_compute_tier_1") if row[c] != ""]
        assert shares and all(0.0 <= s <= 1.0 for s in shares)
    assert sum(int(r["updates_accepted"]) for r in rows) == 9


def _rows_of(path) -> list[dict]:
    with open(path / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def _weighted_mean(updates, weights):
    from emulator.aggregation.robust import RobustResult

    return RobustResult((updates * weights[:, None]).sum(axis=0) / weights.sum(), np.ones(len(updates), bool))


@pytest.mark.parametrize("normalisation", ["count", "weights", "none"])
def test_fedbuffs_robust_step_is_its_plain_step_when_the_rule_is_the_mean(normalisation):
    deltas, staleness = UPDATES[:3].astype(np.float32), np.array([1.0, 0.5, 0.25])
    buffer = StalenessBuffer(2)
    for delta, weight in zip(deltas, staleness):
        buffer.add(delta, weight)
    step, _ = robust_buffer_step(deltas, staleness, _weighted_mean, normalisation)
    assert step.tolist() == pytest.approx(buffer.flush(normalisation).tolist())


def test_fedbuffs_robust_step_takes_the_rule_over_the_staleness_weighted_buffer():
    # count: the median of s_i d_i = (1, 10), (1, 10), (0.75, 7.5), (25, -25) -> (1, 8.75)
    step, result = robust_buffer_step(UPDATES, np.array([1.0, 0.5, 0.25, 0.25]), lambda u, w: coordinate_median(u))
    assert step.tolist() == pytest.approx([1.0, 8.75]) and result.accepted.all()
    none, _ = robust_buffer_step(UPDATES, np.array([1.0, 0.5, 0.25, 0.25]), lambda u, w: coordinate_median(u), "none")
    assert none.tolist() == pytest.approx([4.0, 35.0])  # K = 4 times the median


def test_each_rule_counts_its_work_beyond_the_mean():
    rows = np.zeros((8, 100))  # n = 8, d = 100: the mean's 800 operations are not charged
    assert extra_operations(coordinate_median(rows), 8, 100) == 8 * 100 * 3 - 800  # a sort: n d log2 n
    assert extra_operations(multi_krum(rows, 1), 8, 100) == 800 * (2 + 8 / 16) - 800  # pairwise distances
    assert extra_operations(norm_bound(rows, np.ones(8), bound=1.0), 8, 100) == 1.5 * 800 - 800


def test_a_robust_rules_work_is_charged_on_the_servers_clock(tmp_path):
    times = {}
    for rate in (0.0, 1e-3):
        raw = small_scenario(rounds=2, **{"system.server": {"s_per_operation": rate}})
        raw["algorithm"]["aggregator"] = {"kind": "krum", "f": 2}
        times[rate] = _rows_of(run_scenario(validate_scenario(raw), tmp_path / str(rate)).path)
    free, charged = times[0.0], times[1e-3]
    assert all(float(r["server_compute_s"]) == 0.0 for r in free)
    for plain, priced in zip(free, charged):  # Krum over 8 updates of the model's parameters, at 1 ms an operation
        extra = float(priced["server_compute_s"])
        assert extra > 1.0
        assert float(priced["round_duration_s"]) == pytest.approx(float(plain["round_duration_s"]) + extra)
    assert float(charged[-1]["sim_time_s"]) > float(free[-1]["sim_time_s"])


def test_fedbuff_runs_a_robust_rule_over_each_buffer_and_records_what_it_took(tmp_path):
    raw = small_scenario(rounds=4, algorithm={"name": "fedbuff", "concurrency": 12, "buffer": 6, "client_lr": 0.05,
                                              "local_steps": 5, "batch_size": 16,
                                              "aggregator": {"kind": "krum", "f": 1, "m": 2}},
                         **{"system.model": "simulated"})
    rows = _rows_of(run_scenario(validate_scenario(raw), tmp_path / "run").path)
    assert [int(r["updates_accepted"]) for r in rows] == [2] * 4
    assert all(float(r["server_compute_s"]) > 0 for r in rows)
    assert float(rows[-1]["test_acc"]) > 0


def test_norm_bounding_with_a_fixed_bound_runs_under_dp(tmp_path):
    raw = small_scenario(rounds=2, privacy={"noise_multiplier": 0.5, "clip": 1.0})
    raw["algorithm"]["aggregator"] = {"kind": "norm_bound", "bound": 0.05}
    rows = _rows_of(run_scenario(validate_scenario(raw), tmp_path / "run").path)
    assert all(float(r["dp_noise_std"]) > 0 for r in rows)
    assert sum(int(r["updates_accepted"]) for r in rows) < sum(int(r["participants"]) for r in rows)  # bound < clip

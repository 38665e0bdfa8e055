"""Worlds where behaviour follows data: statistics, ties, latent types, the correlation knob, and errors."""
from __future__ import annotations

import numpy as np
import pytest
import yaml

from conftest import comparable, small_scenario
from emulator.algorithms.selection import Uniform
from emulator.cli import main
from emulator.data import build_federation, statistics
from emulator.data.partition import partition_types
from emulator.scenario import ScenarioError
from emulator.parts import validate_scenario
from emulator.seeding import rng
from emulator.system import CohortRequest, SimulatedSystem
from emulator.seeding import device_types
from emulator.system.ties import check_world, loosened, rank_source, scaled

COUNTS = np.array([[5, 5, 0, 0],  # two classes, evenly
                   [0, 0, 0, 8],  # one class
                   [1, 2, 3, 4],
                   [0, 6, 0, 2]])


# ----------------------------------------------------------------------------------------- statistics
def test_statistics_against_hand_computations():
    assert statistics.numeric_statistic(COUNTS, "samples").tolist() == [10, 8, 10, 8]
    entropy = statistics.label_entropy(COUNTS)
    assert entropy[0] == pytest.approx(np.log(2)) and entropy[1] == 0.0
    assert entropy[2] == pytest.approx(-sum(p * np.log(p) for p in (0.1, 0.2, 0.3, 0.4)))
    assert statistics.numeric_statistic(COUNTS, "label_count").tolist() == [2, 1, 4, 2]
    assert statistics.numeric_statistic(COUNTS, "min_label").tolist() == [0, 3, 0, 1]
    assert statistics.numeric_statistic(COUNTS, "max_label").tolist() == [1, 3, 3, 3]
    assert statistics.dominant_label(COUNTS).tolist() == [0, 3, 3, 1]
    assert statistics.class_share(COUNTS, [2, 3]).tolist() == pytest.approx([0.0, 1.0, 0.7, 0.25])
    assert statistics.label_group(COUNTS, [[0, 1], [2, 3]]).tolist() == [0, 1, 1, 0]
    assert statistics.group_of_dominant(COUNTS, [[0], [1, 2]]).tolist() == [0, -1, -1, 1]


def test_label_clusters_find_separated_groups_and_number_them_by_class():
    generator = np.random.default_rng(0)
    low = generator.multinomial(50, [0.45, 0.45, 0.05, 0.05], size=30)
    high = generator.multinomial(50, [0.05, 0.05, 0.45, 0.45], size=30)
    counts = np.vstack([high, low])
    clusters = statistics.label_clusters(counts, 2, np.random.default_rng(1))
    assert clusters[:30].tolist() == [1] * 30 and clusters[30:].tolist() == [0] * 30


# ------------------------------------------------------------------------------------------ the knob
def test_loosened_keeps_the_values_and_releases_a_share_that_nests_across_correlations():
    values = np.arange(1000)
    assert np.array_equal(loosened(values, 1.0, np.random.default_rng(0)), values)
    moved = {}
    for c in (0.0, 0.3, 0.7):
        out = loosened(values, c, np.random.default_rng(0))
        assert sorted(out.tolist()) == values.tolist()  # the fleet's make-up never changes
        moved[c] = set(np.flatnonzero(out != values).tolist())
        assert abs(len(moved[c]) - (1 - c) * 1000) < 40  # a shuffled share 1 - c (few land where they were)
    released = lambda c: set(np.argsort(np.random.default_rng(0).random(1000), kind="stable")[:round((1 - c) * 1000)])
    assert released(0.7) <= released(0.3) <= released(0.0)
    assert moved[0.7] <= released(0.7)


def test_rank_source_hands_the_highest_values_to_the_highest_statistic():
    statistic = np.array([3.0, 1.0, 2.0, 0.0])
    keys = np.array([10.0, 40.0, 20.0, 30.0])
    same = keys[rank_source(statistic, keys, "same", np.random.default_rng(0))]
    assert same.tolist() == [40.0, 20.0, 30.0, 10.0]
    opposite = keys[rank_source(statistic, keys, "opposite", np.random.default_rng(0))]
    assert opposite.tolist() == [10.0, 30.0, 20.0, 40.0]


def test_scale_reproduces_flgo_modes():
    beta, classes = 0.3, 10
    min_label = np.array([0.0, 3.0, 9.0])
    ymf = scaled(min_label, 1 - beta, 1.0, "linear", span=[0, classes - 1])  # FLGo YMaxFirst
    assert ymf.tolist() == pytest.approx([beta * m / (classes - 1) + 1 - beta for m in min_label])
    sizes = np.array([10.0, 40.0, 160.0])
    mdf = scaled(sizes, 0.0, 1.0, "power", exponent=0.5)  # FLGo MoreDataFirst: n^b / max n^b
    assert mdf.tolist() == pytest.approx((sizes ** 0.5 / 160 ** 0.5).tolist())
    ldf = scaled(sizes, 0.0, 1.0, "power", exponent=-0.5)  # LessDataFirst: n^-b / max n^-b
    assert ldf.tolist() == pytest.approx((sizes ** -0.5 / 10 ** -0.5).tolist())


# ------------------------------------------------------------------------------------------ worlds
def world_scenario(correlation=1.0, devices=600, partition=None, **population):
    raw = {"name": "world", "seed": 4, "rounds": 1,
           "data": {"dataset": "synthetic", "synthetic": {"classes": 10, "max_samples": 200},
                    "partition": partition or {"scheme": "dirichlet", "alpha": 0.2}},
           "model": "logreg",
           "algorithm": {"clients_per_round": 20, "local_steps": 5},
           "population": {"devices": devices, "correlation": correlation, **population},
           "system": {"deadline_s": 900}}
    return validate_scenario(raw)


@pytest.fixture(scope="module")
def counts():
    scenario = world_scenario()
    return build_federation(scenario.data, scenario.population.devices, scenario.seed).label_counts()


TIERS = {"kind": "tiers", "tiers": [{"name": "fast", "share": 0.5, "s_per_sample": 0.01},
                                    {"name": "mid", "share": 0.3, "s_per_sample": 0.05},
                                    {"name": "slow", "share": 0.2, "s_per_sample": 0.5}]}
SLOW_HOLDS_7_TO_9 = [{"by": "class_share", "classes": [7, 8, 9], "sets": "compute"}]


def test_a_rank_tie_puts_the_devices_richest_in_classes_on_the_slow_tier(counts):
    share = statistics.class_share(counts, [7, 8, 9])
    tiers = {}
    for c in (1.0, 0.5, 0.0):
        system = SimulatedSystem(world_scenario(c, compute=TIERS, ties=SLOW_HOLDS_7_TO_9), counts)
        tiers[c] = system.profiles.compute_tier
        assert np.bincount(tiers[c]).tolist() == [300, 180, 120]  # the fleet is the same at every correlation
    slowest = np.argsort(-share, kind="stable")[:120]
    assert np.all(tiers[1.0][share > share[slowest].max()] == 2) or share[tiers[1.0] == 2].min() >= np.sort(share)[-120]
    mean_share = {c: share[t == 2].mean() for c, t in tiers.items()}
    assert mean_share[1.0] > mean_share[0.5] > mean_share[0.0]
    assert mean_share[0.0] == pytest.approx(share.mean(), abs=0.06)  # independent at 0


def test_a_group_tie_puts_label_groups_in_time_zones_and_label_tv_rises_with_correlation(counts):
    groups = [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    tie = [{"by": "label_group", "groups": groups, "sets": "timezone", "values": [-5, 1, 8]}]
    night = [{"kind": "diurnal", "start_hour": 22, "hours": 6, "timezones": {"offsets_h": [-5, 1, 8]}}]
    population_mix = counts.sum(0) / counts.sum()
    tv = {}
    for c in (0.0, 0.5, 1.0):
        system = SimulatedSystem(world_scenario(c, availability=night, ties=tie), counts)
        zones = system.availability.timezone_h()
        if c == 1.0:
            expected = np.array([-5.0, 1.0, 8.0])[statistics.label_group(counts, groups)]
            assert np.array_equal(zones, expected)
        distances = []
        for r in range(1, 40):
            outcome = system.client_round(CohortRequest(r, 20, Uniform(), rng(0, "selection", r), 10 ** 5, 10 ** 5,
                                                        lambda d: np.full(len(d), 50)))
            mix = counts[outcome.reported].sum(0) / counts[outcome.reported].sum()
            distances.append(0.5 * np.abs(mix - population_mix).sum())
        tv[c] = np.mean(distances)
    assert tv[1.0] > tv[0.5] + 0.03 > tv[0.0] + 0.06


def test_scale_and_group_ties_set_dropout_and_online_share(counts):
    markov = [{"kind": "markov", "mean_on_s": 600, "mean_off_s": 600}]
    ties = [{"by": "samples", "sets": "dropout_per_hour", "scale": [0.0, 4.0]},
            {"by": "min_label", "sets": "online_share", "scale": [0.2, 1.0], "range": [0, 9]}]
    system = SimulatedSystem(world_scenario(availability=markov, ties=ties), counts)
    samples = counts.sum(1)
    expected = 4.0 * (samples - samples.min()) / (samples.max() - samples.min())
    assert system.dropout_per_hour == pytest.approx(expected)
    share = system.availability.models[0].online_share()
    min_label = statistics.numeric_statistic(counts, "min_label")
    assert share == pytest.approx(0.2 + 0.8 * min_label / 9)
    columns = system.describe_devices()
    assert columns["dropout_per_hour"] == pytest.approx(expected)


def test_a_group_tie_chooses_the_availability_entry(counts):
    entries = [{"kind": "always", "share": 0.5, "name": "home"}, {"kind": "never", "share": 0.5, "name": "away"}]
    tie = [{"by": "dominant_label", "groups": [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]], "sets": "availability",
            "values": ["home", "away"]}]
    system = SimulatedSystem(world_scenario(availability=entries, ties=tie), counts)
    dominant = statistics.dominant_label(counts)
    assert np.array_equal(system.availability.group, (dominant >= 5).astype(int))
    online = system.availability.online_devices(0.0)
    assert set(statistics.dominant_label(counts[online]).tolist()) <= {0, 1, 2, 3, 4}


def test_latent_types_draw_data_and_behaviour_from_the_type():
    types = [{"name": "night", "share": 0.5, "labels": [0, 1, 2, 3], "compute": "fast", "timezone": -5,
              "samples": 2.0},
             {"name": "day", "share": 0.3, "labels": [3, 4, 5, 6], "compute": "slow", "timezone": 8},
             {"name": "rare", "share": 0.2, "labels": [7, 8, 9], "compute": "mid", "dropout_per_hour": 3.0,
              "timezone": 1}]
    night = [{"kind": "diurnal", "timezones": {"offsets_h": [0]}}]

    def build(c):
        scenario = world_scenario(c, 300, {"scheme": "types", "min_samples": 5}, types=types, compute=TIERS,
                                  availability=night)
        federation = build_federation(scenario.data, 300, scenario.seed, scenario.population.types)
        return scenario, federation, SimulatedSystem(scenario, federation.label_counts())

    scenario, federation, system = build(1.0)
    kind = device_types([0.5, 0.3, 0.2], 300, scenario.seed)
    assert np.bincount(kind).tolist() == [150, 90, 60]
    counts = federation.label_counts()
    own = [counts[kind == k][:, t["labels"]].sum() / counts[kind == k].sum() for k, t in enumerate(types)]
    assert min(own) == 1.0  # each type's data comes from its own labels only
    shared = counts[:, 3]  # class 3 is shared by night (150 devices x samples 2.0 x 1/4) and day (90 x 1 x 1/4)
    assert shared[kind == 0].sum() / shared.sum() == pytest.approx(300 / 390, abs=0.05)
    assert np.array_equal(system.profiles.compute_tier, np.array([0, 2, 1])[kind])
    assert np.array_equal(system.availability.timezone_h(), np.array([-5.0, 8.0, 1.0])[kind])
    assert np.array_equal(system.dropout_per_hour, np.where(kind == 2, 3.0, 0.0))
    columns = system.describe_devices()
    assert columns["type"][:5].tolist() == [types[k]["name"] for k in kind[:5]]
    _, federation0, system0 = build(0.0)
    assert np.array_equal(federation0.device_indices, federation.device_indices)  # the data never moves
    agree = np.mean(system0.profiles.compute_tier == system.profiles.compute_tier)
    assert agree < 0.5  # at 0 the behaviour is dealt independently of the type
    assert np.bincount(system0.profiles.compute_tier).tolist() == np.bincount(system.profiles.compute_tier).tolist()


def test_partition_types_uses_every_sample_once():
    labels = np.repeat(np.arange(4), 50)
    kinds = np.array([0, 0, 1, 1, 1])
    types = validate_scenario({"name": "t", "rounds": 1, "algorithm": {"clients_per_round": 2}, "data": {"dataset": "synthetic",
                               "synthetic": {"classes": 4}, "partition": {"scheme": "types"}},
                               "population": {"devices": 5, "types": [
                                   {"name": "a", "share": 0.4, "labels": [0, 1]},
                                   {"name": "b", "share": 0.6, "prototype": [0, 0, 1, 3]}]}}).population.types
    parts = partition_types(labels, 4, types, kinds, 0.0, 1, np.random.default_rng(0))
    flat = np.concatenate(parts)
    assert len(flat) == len(np.unique(flat)) == 200 - 50 * 0  # every sample of a held class, none twice
    assert set(labels[np.concatenate(parts[:2])].tolist()) <= {0, 1}
    assert set(labels[np.concatenate(parts[2:])].tolist()) <= {2, 3}


def test_an_untied_world_draws_exactly_as_before(counts):
    plain = world_scenario(compute=TIERS)
    a, b = SimulatedSystem(plain), SimulatedSystem(plain, counts)
    assert np.array_equal(a.profiles.s_per_sample, b.profiles.s_per_sample) and a.world is None


# ------------------------------------------------------------------------------------ runs and errors
def test_a_tied_run_is_identical_with_one_runner_or_two(tmp_path, ray_session):
    from emulator.driver import run_scenario

    raw = small_scenario(**{"rounds": 3, "population.compute": TIERS, "population.ties": SLOW_HOLDS_7_TO_9,
                            "data.synthetic": {"iid": True, "max_samples": 200, "classes": 10},
                            "system.deadline_s": 200.0, "system.min_report_fraction": 0.25,
                            "population.correlation": 0.5})
    one = run_scenario(validate_scenario(raw), out=tmp_path / "one")
    two = run_scenario(validate_scenario({**raw, "runtime": {"runners": 2}}), out=tmp_path / "two")
    assert comparable(one.path) == comparable(two.path)
    participation = (one.path / "participation.csv").read_text().splitlines()
    assert "compute_tier" in participation[0] and "rank_compute" in participation[0]


def write(tmp_path, raw) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


BAD = [
    ({"population.correlation": 1.5}, "population.correlation"),
    ({"population.types": [{"name": "a", "share": 0.5}, {"name": "b", "share": 0.4}]},
     "population.types: shares add up to 0.9; they must add up to 1"),
    ({"population.ties": [{"by": "class_share", "classes": [7, 12], "sets": "compute"}]},
     "population.ties.0.classes: class(es) [12] do not exist"),
    ({"population.ties": [{"by": "label_group", "groups": [[0], [1]], "sets": "compute", "values": ["x", 0]}],
      "population.compute": TIERS}, "population.ties.0.values.0: no population.compute tier named 'x'"),
    ({"population.ties": [{"by": "samples", "sets": "timezone"}]},
     "population.ties.0.sets: timezone needs a diurnal or eligible availability entry"),
    ({"population.ties": [{"by": "samples", "sets": "dropout_per_hour"}]},
     "population.ties.0.sets: dropout_per_hour is the same for every device until a tie sets it"),
    ({"population.ties": [{"by": "dominant_label", "sets": "compute", "values": ["fast"]}],
      "population.compute": TIERS}, "population.ties.0.values: by: dominant_label puts devices in 10 groups"),
    ({"population.ties": [{"by": "samples", "sets": "compute"}, {"by": "label_entropy", "sets": "compute"}]},
     "population.ties.1.sets: compute is already tied by population.ties.0"),
    ({"population.types": [{"name": "a", "share": 1.0, "labels": [0]}]},
     "population.types.0.labels: a type's labels only shape the data with data.partition.scheme: types"),
]


@pytest.mark.parametrize("overrides, message", BAD, ids=[m.split(":")[0] + str(i) for i, (_, m) in enumerate(BAD)])
def test_bad_worlds_exit_2_naming_the_field(tmp_path, capsys, overrides, message):
    raw = small_scenario(**{"data.synthetic": {"iid": True, "max_samples": 200, "classes": 10}, **overrides})
    assert main(["validate", write(tmp_path, raw)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_tie_the_data_cannot_satisfy_is_refused_before_the_run(tmp_path):
    raw = small_scenario(**{"data.synthetic": {"iid": True, "max_samples": 200, "classes": 10},
                            "data.partition": {"scheme": "classes", "classes_per_client": 1},
                            "population.devices": 10,
                            "population.compute": TIERS,
                            "population.ties": [{"by": "label_entropy", "sets": "compute"}]})
    scenario = validate_scenario(raw)
    federation = build_federation(scenario.data, scenario.population.devices, scenario.seed)
    with pytest.raises(ScenarioError, match="population.ties.0.by: every device has the same label_entropy"):
        check_world(scenario, federation)
    raw["population"]["ties"] = [{"by": "label_group", "groups": [[0, 1, 2, 3, 4, 5, 6, 7, 8], [9]],
                                  "sets": "compute", "values": ["fast", "slow"]}]
    raw["data"]["partition"] = {"scheme": "dirichlet", "alpha": 100.0}
    scenario = validate_scenario(raw)
    federation = build_federation(scenario.data, scenario.population.devices, scenario.seed)
    with pytest.raises(ScenarioError, match=r"population.ties.0: group\(s\) \[1\] hold no device"):
        check_world(scenario, federation)


def test_a_rank_tie_on_the_network_moves_down_up_and_latency_together(counts):
    links = {"kind": "tiers", "tiers": [{"name": "wifi", "share": 0.6, "down_mbps": 50, "up_mbps": 20, "latency_s": 0.02},
                                        {"name": "3g", "share": 0.4, "down_mbps": 2, "up_mbps": 0.5, "latency_s": 0.3}]}
    tie = [{"by": "label_entropy", "sets": "network", "direction": "opposite"}]  # the most varied, the slowest link
    system = SimulatedSystem(world_scenario(network=links, ties=tie), counts)
    profiles = system.profiles
    entropy = statistics.label_entropy(counts)
    slow = profiles.network_tier == 1
    assert slow.sum() == 240 and entropy[slow].min() >= entropy[~slow].max() - 1e-12
    assert set(zip(profiles.down_mbps[slow].tolist(), profiles.up_mbps[slow].tolist(),
                   np.round(profiles.latency_s[slow].astype(float), 3).tolist())) == {(2.0, 0.5, 0.3)}


def test_a_tie_on_compute_from_a_capacity_file_keeps_each_phones_link(tmp_path):
    from emulator.parts import load_scenario

    path = "scenarios/worlds/trace_driven.yaml"
    tied, untied = load_scenario(path), load_scenario(path, ["population.ties=[]"])
    counts = build_federation(tied.data, tied.population.devices, tied.seed).label_counts()
    rows = lambda p: set(zip(p.s_per_sample.tolist(), p.down_mbps.tolist()))
    a, b = SimulatedSystem(tied, counts).profiles, SimulatedSystem(untied, counts).profiles
    assert rows(a) <= rows(b) and not np.array_equal(a.s_per_sample, b.s_per_sample)
    with pytest.raises(ScenarioError, match="compute and network come from one capacity file"):
        load_scenario(path, ["population.ties[+]={by: samples, sets: network}"])

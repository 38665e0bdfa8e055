"""Attackers as device types (population.types[].attack): each attack against its definition, the
attackers' share of accepted updates, a backdoor's success and what norm bounding does to it."""
from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
import yaml
from conftest import small_scenario

from emulator.cli import main
from emulator.driver import run_scenario
from emulator.parts import validate_scenario
from emulator.training.attacks import (Attack, Backdoor, GaussianUpdate, LabelFlip, RandomLabels, Scaling, SignFlip,
                                       add_trigger)


def _generator(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_label_flipping_maps_l_to_c_minus_1_minus_l_and_random_labels_stay_in_range():
    x, y = torch.zeros(6, 3), torch.tensor([0, 1, 2, 3, 4, 9])
    _, flipped = Attack(LabelFlip(), 10).poison(x, y, _generator())
    assert flipped.tolist() == [9, 8, 7, 6, 5, 0]
    _, drawn = Attack(RandomLabels(), 10).poison(x, torch.zeros(1000, dtype=torch.int64), _generator())
    assert drawn.min() >= 0 and drawn.max() <= 9 and len(set(drawn.tolist())) == 10
    _, again = Attack(RandomLabels(), 10).poison(x, torch.zeros(1000, dtype=torch.int64), _generator())
    assert torch.equal(drawn, again)  # seeded: the same device and round draw the same labels


def test_update_attacks_follow_their_definitions():
    delta = np.array([1.0, -2.0, 3.0, -4.0], np.float32)
    assert Attack(SignFlip(scale=2.0), 10).craft(delta, 1, 9).tolist() == [-2.0, 4.0, -6.0, 8.0]
    assert Attack(Scaling(boost=3.0), 10).craft(delta, 1, 9).tolist() == [3.0, -6.0, 9.0, -12.0]
    big = np.random.default_rng(0).standard_normal(100_000).astype(np.float32) * 0.5
    noise = Attack(GaussianUpdate(scale=2.0), 10).craft(big, 1, 9)
    assert np.sqrt(np.mean(noise.astype(np.float64) ** 2)) == pytest.approx(2.0 * 0.5, rel=0.02)  # matched scale
    alone = [Attack(GaussianUpdate(), 10).craft(big, device, 9) for device in (1, 2)]
    together = [Attack(GaussianUpdate(collude=True), 10).craft(big, device, 9) for device in (1, 2)]
    assert not np.array_equal(*alone) and np.array_equal(*together)  # colluders draw the round's one noise


def test_colluding_attackers_of_a_type_send_the_mean_of_their_updates():
    from emulator.algorithms.base import ClientUpdate
    from emulator.server.adversaries import Adversaries

    types = np.array([0, 1, 1, 0, 2, 1])  # type 1 colludes, type 2 attacks alone
    adversaries = Adversaries([None, Attack(SignFlip(collude=True), 10), Attack(SignFlip(), 10)], types)
    deltas = {0: [1.0, 1.0], 1: [2.0, 0.0], 2: [4.0, 2.0], 4: [9.0, 9.0], 5: [0.0, 4.0]}
    updates = [ClientUpdate(d, 10, np.array(v, np.float32), None) for d, v in deltas.items()]
    sent = adversaries.colluded(updates)
    assert [u.device for u in sent] == [0, 1, 2, 4, 5]  # the order kept
    assert [u.delta.tolist() for u in sent] == [[1.0, 1.0], [2.0, 2.0], [2.0, 2.0], [9.0, 9.0], [2.0, 2.0]]
    assert updates[1].delta.tolist() == [2.0, 0.0]  # the originals untouched


def test_colluding_attackers_fool_krum_where_attackers_alone_do_not(tmp_path):
    """Krum keeps the update closest to its neighbours; colluders sending one update are each other's
    nearest (Blanchard et al.'s f-resilience assumes they are not), so Krum picks theirs."""
    accepted = {}
    for collude in (False, True):
        raw = small_scenario(rounds=8)
        raw["population"]["types"] = [{"name": "honest", "share": 0.7}, {
            "name": "attacker", "share": 0.3, "attack": {"kind": "scaling", "boost": 3.0, "collude": collude}}]
        raw["algorithm"]["aggregator"] = {"kind": "krum", "f": 2}
        rows = _rows(run_scenario(validate_scenario(raw), tmp_path / str(collude)).path)
        assert sum(int(r["attackers_reported"]) for r in rows) > 8  # attackers in most rounds
        accepted[collude] = sum(int(r["attackers_accepted"]) for r in rows)
    assert accepted[False] <= 1 and accepted[True] >= 4, accepted


def test_a_backdoor_triggers_its_share_of_samples_and_labels_them_with_the_target():
    images, labels = torch.zeros(10, 1, 8, 8), torch.arange(10) % 3 + 1
    attack = Attack(Backdoor(target=0, fraction=0.4, size=2, value=5.0), 4)
    x, y = attack.poison(images, labels, _generator())
    poisoned = (y == 0).nonzero().flatten()
    assert len(poisoned) == 4
    assert bool((x[poisoned][..., -2:, -2:] == 5.0).all()) and float(x[poisoned].sum()) == 4 * 4 * 5.0
    assert float(x[(y != 0)].abs().sum()) == 0.0  # the others untouched
    vector = add_trigger(torch.zeros(2, 6), 3, 1.0)
    assert vector.tolist() == [[0, 0, 0, 1, 1, 1]] * 2


def _world(attack: dict, attacker_availability: str = "on", aggregator: dict | None = None, rounds: int = 10,
           attacker_share: float = 0.1) -> dict:
    raw = small_scenario(rounds=rounds)
    raw["population"]["availability"] = [{"kind": "always", "name": "on", "share": 0.9},
                                         {"kind": "never", "name": "off", "share": 0.1}]
    raw["population"]["types"] = [
        {"name": "honest", "share": 1 - attacker_share, "availability": "on"},
        {"name": "attacker", "share": attacker_share, "availability": attacker_availability, "attack": attack}]
    if aggregator is not None:
        raw["algorithm"]["aggregator"] = aggregator
    return raw


def _rows(path) -> list[dict]:
    with open(path / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))


BACKDOOR = {"kind": "backdoor", "target": 0, "size": 3, "value": 2.0, "boost": 5.0}


@pytest.fixture(scope="module")
def backdoor_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("backdoor")
    runs = {"baseline": _world(BACKDOOR, attacker_availability="off"),  # attackers never online: the clean model
            "attacked": _world(BACKDOOR),
            "norm bounded": _world(BACKDOOR, aggregator={"kind": "norm_bound"})}
    return {name: _rows(run_scenario(validate_scenario(raw), root / name.replace(" ", "_")).path)
            for name, raw in runs.items()}


def test_a_backdoor_succeeds_under_fedavg_and_norm_bounding_lowers_it(backdoor_runs):
    success = {name: float(np.mean([float(r["backdoor_success"]) for r in rows]))
               for name, rows in backdoor_runs.items()}
    assert success["baseline"] < 0.1 and success["attacked"] > 0.8, success
    assert success["norm bounded"] < success["attacked"] - 0.3, success


def test_the_attackers_share_of_accepted_updates_is_recorded_every_round(backdoor_runs):
    attacked = backdoor_runs["attacked"]
    assert {r["attacker_population_share"] for r in attacked} == {"0.1"}
    assert all(int(r["attackers_accepted"]) == int(r["attackers_reported"]) for r in attacked)  # FedAvg takes all
    assert sum(int(r["attackers_reported"]) for r in attacked) > 0
    assert all(int(r["attackers_reported"]) == 0 for r in backdoor_runs["baseline"])
    bounded = backdoor_runs["norm bounded"]  # boosted updates are the long ones: norm bounding scales them
    assert sum(int(r["attackers_accepted"]) for r in bounded) < sum(int(r["attackers_reported"]) for r in bounded)
    for r in bounded:
        accepted = int(r["updates_accepted"])
        share = float(r["attacker_accepted_share"]) if r["attacker_accepted_share"] else 0.0
        assert share == pytest.approx(int(r["attackers_accepted"]) / accepted if accepted else 0.0)


def test_attackers_that_stay_online_take_more_than_their_share(tmp_path):
    """The world decides participation: attackers always online among honest phones online a tenth of
    the time are a fifth of the population but most of the reports."""
    raw = small_scenario(rounds=6)
    raw["population"]["availability"] = [{"kind": "markov", "name": "rarely", "share": 0.8, "mean_on_s": 360,
                                          "mean_off_s": 3240}, {"kind": "always", "name": "on", "share": 0.2}]
    raw["population"]["types"] = [{"name": "honest", "share": 0.8, "availability": "rarely"},
                                  {"name": "attacker", "share": 0.2, "availability": "on",
                                   "attack": {"kind": "sign_flip"}}]
    rows = _rows(run_scenario(validate_scenario(raw), tmp_path / "run").path)
    reported = sum(int(r["attackers_reported"]) for r in rows)
    participants = sum(int(r["participants"]) for r in rows)
    assert reported / participants > 0.4  # against a population share of 0.2


def test_a_backdoor_target_the_dataset_lacks_exits_2_naming_the_field(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(_world({**BACKDOOR, "target": 99}, rounds=1)))
    assert main(["run", str(config), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    assert "population.types[1].attack.target: 99" in capsys.readouterr().err


@pytest.mark.heavy
def test_the_report_draws_the_attack_figure_only_for_runs_with_attackers(tmp_path):
    attacked = run_scenario(validate_scenario(_world(BACKDOOR, rounds=3)), tmp_path / "attacked").path
    honest = run_scenario(validate_scenario(small_scenario(rounds=3)), tmp_path / "honest").path
    assert main(["report", str(attacked), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "attacks.png").stat().st_size > 0
    assert "(attacks.png)" in (tmp_path / "report" / "report.md").read_text()
    assert main(["report", str(honest), "--out", str(tmp_path / "plain")]) == 0
    assert not (tmp_path / "plain" / "attacks.png").exists()


def test_best_first_gives_the_wanting_devices_the_lowest_keys_and_moves_nobody_else():
    from emulator.system.ties import best_first

    keys = np.array([5.0, 1.0, 4.0, 2.0, 3.0])
    source = best_first(np.array([True, False, False, False, True]), keys)  # devices 0 and 4 want the best two
    assert source.tolist() == [1, 0, 2, 4, 3]  # 0 takes 1's key, 4 takes 3's; 1 and 3 take theirs; 2 stays
    assert sorted(keys[source].tolist()) == sorted(keys.tolist())  # the fleet's values, re-dealt


def _attacker_world(behaves: str | None = None, correlation: float = 1.0):
    from emulator.system import build_system

    attacker = {"name": "attacker", "share": 0.1, "attack": {"kind": "sign_flip"}}
    if behaves is not None:
        attacker["behaves"] = behaves
    raw = small_scenario(**{"system.model": "simulated", "population": {
        "devices": 400, "correlation": correlation, "dropout_per_hour": 0.5,
        "availability": [{"kind": "markov", "share": 0.7, "mean_on_s": 600, "mean_off_s": 1800},
                         {"kind": "diurnal", "share": 0.2, "hours": 12}, {"kind": "always", "share": 0.1}],
        "compute": {"tiers": [{"share": 0.6, "s_per_sample": 0.05}, {"share": 0.4, "s_per_sample": 0.01}]},
        "network": {"kind": "lognormal", "down_mbps": 20, "up_mbps": 5, "sigma": 0.8},
        "types": [{"name": "honest", "share": 0.9}, attacker]}})
    scenario = validate_scenario(raw)
    system = build_system(scenario)
    return system, system.world.data_type == 1


def test_attackers_by_default_behave_as_well_as_the_world_allows():
    system, attacker = _attacker_world()
    profiles = system.profiles
    assert (system.availability.group[attacker] == 2).all()  # the always-online entry
    assert (profiles.compute_tier[attacker] == 1).all()  # the fastest tier
    assert (system.dropout_per_hour[attacker] == 0).all() and (system.dropout_per_hour[~attacker] == 0.5).all()
    link = 8 / profiles.down_mbps + 8 / profiles.up_mbps + 2 * profiles.latency_s
    assert link[attacker].max() <= np.sort(link)[attacker.sum() - 1] + 1e-6  # the fleet's fastest links
    drawn, attacker_drawn = _attacker_world(behaves="drawn")
    assert (drawn.availability.group[attacker_drawn] != 2).any()
    assert (drawn.profiles.compute_tier[attacker_drawn] == 0).any()
    loose, attacker_loose = _attacker_world(correlation=0.0)  # behaviour independent of type: not theirs alone
    assert (loose.availability.group[attacker_loose] != 2).any()

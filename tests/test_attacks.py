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
    assert not np.array_equal(*alone) and np.array_equal(*together)  # colluders send the round's one draw


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


def test_the_report_draws_the_attack_figure_only_for_runs_with_attackers(tmp_path):
    attacked = run_scenario(validate_scenario(_world(BACKDOOR, rounds=3)), tmp_path / "attacked").path
    honest = run_scenario(validate_scenario(small_scenario(rounds=3)), tmp_path / "honest").path
    assert main(["report", str(attacked), "--out", str(tmp_path / "report")]) == 0
    assert (tmp_path / "report" / "attacks.png").stat().st_size > 0
    assert "(attacks.png)" in (tmp_path / "report" / "report.md").read_text()
    assert main(["report", str(honest), "--out", str(tmp_path / "plain")]) == 0
    assert not (tmp_path / "plain" / "attacks.png").exists()

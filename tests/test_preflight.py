"""`emulator validate` refuses what `emulator run` would: every check that needs only the scenario and the
dataset's metadata (input shape, classes; the model built on the CPU from them) runs at validation, with the
message a run gives, before anything starts; an attack's parameters are checked against the data they act
on."""
from __future__ import annotations

import pytest
import yaml
from conftest import small_scenario

from emulator.cli import main
from emulator.parts import validate_scenario
from emulator.registry import ATTACKS
from emulator.errors import ScenarioError, is_plugin

SIMULATED = {"system.model": "simulated"}
SLOW_LINK = {"population.network": {"kind": "tiers", "tiers": [
    {"name": "only", "share": 1.0, "down_mbps": 0.001, "up_mbps": 0.001, "latency_s": 0.05}]}}
BACKDOOR_TYPES = [{"name": "honest", "share": 0.9}, {"name": "attacker", "share": 0.1, "attack": None}]


def _attacked(attack: dict, **overrides) -> dict:
    raw = small_scenario(**overrides)
    raw["population"]["types"] = [dict(t) for t in BACKDOOR_TYPES]
    raw["population"]["types"][1]["attack"] = attack
    return raw


def _fashion(**overrides) -> dict:
    return small_scenario(**{"data": {"dataset": "fashion_mnist", "partition": {"scheme": "iid"}},
                             "model": "mlp", **overrides})


# each check a run made only after start-up, a scenario that trips it and what the message names
ONLY_AT_RUN = {
    "top_k above the model's values": (
        small_scenario(compression={"kind": "top_k", "k": 5000}), "compression.k: 5000, but model 'logreg' has 610"),
    "secure aggregation of 2 vectors a device": (
        small_scenario(algorithm={"name": "scaffold"}, secure_aggregation={"kind": "secagg"}, **SIMULATED),
        "secure_aggregation: algorithm 'scaffold' uploads 2 vectors"),
    "compression of 2 vectors a device": (
        small_scenario(algorithm={"name": "scaffold"}, compression={"kind": "sign"}),
        "compression: algorithm 'scaffold' uploads 2 vectors"),
    "compression of a model that partly stays on the devices": (
        small_scenario(model="mlp", algorithm={"name": "fedper", "personal_layers": ["5"]},
                       compression={"kind": "top_k", "fraction": 0.1}),
        "compression: algorithm 'fedper' keeps part of the model"),
    "personal layers the model lacks": (
        small_scenario(model="mlp", algorithm={"name": "fedper", "personal_layers": ["head"]}),
        "algorithm.personal_layers: 'head' names no parameter"),
    "a deadline shorter than the model's transfer on the best link": (
        small_scenario(**SIMULATED, **SLOW_LINK, **{"system.deadline_s": 10}),
        "system.deadline_s: 10 s, but even the fastest device needs at least"),
    "an attack's target the dataset lacks": (
        _attacked({"kind": "backdoor", "target": 10}), "population.types[1].attack.target: 10, but the dataset has 10"),
    "an own test split from data that has no users": (
        small_scenario(**{"data.local_test": {"split": "dataset"}}), "data.local_test.split: dataset, but"),
}


@pytest.mark.parametrize("case", list(ONLY_AT_RUN))
def test_validate_refuses_what_run_refuses_with_the_same_message(case, tmp_path, capsys):
    raw, says = ONLY_AT_RUN[case]
    config = tmp_path / "scenario.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert main(["validate", str(config), "--quiet"]) == 2
    validated = capsys.readouterr().err
    assert says in validated
    assert main(["run", str(config), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    ran = capsys.readouterr().err
    assert ran == validated and not (tmp_path / "run").exists()  # refused before anything started


# every parameter of every built-in attack: what it means against the data (a value the data makes meaningless,
# on synthetic vectors of 60 features and 10 classes, and on 28 x 28 images), or None where it has no meaning
# there (a scale, a share of samples, a switch)
ATTACK_FIELDS = {
    ("backdoor", "target"): {"synthetic": 10, "fashion_mnist": 12},
    ("backdoor", "size"): {"synthetic": 60, "fashion_mnist": 28},
    ("backdoor", "fraction"): None, ("backdoor", "value"): None, ("backdoor", "boost"): None,
    ("sign_flip", "scale"): None, ("gaussian", "scale"): None, ("scaling", "boost"): None,
}


def test_every_attack_parameter_is_in_the_table():
    fields = {(kind, name) for kind in ATTACKS.names() if not is_plugin(ATTACKS.get(kind).origin)
              for name in ATTACKS.get(kind).config.model_fields if name not in ("kind", "collude")}
    assert fields == set(ATTACK_FIELDS)


@pytest.mark.parametrize("kind, field, dataset", [(k, f, d) for (k, f), bad in ATTACK_FIELDS.items() if bad
                                                  for d in bad])
def test_an_attack_parameter_the_data_makes_meaningless_is_refused_naming_it(kind, field, dataset):
    bad = ATTACK_FIELDS[(kind, field)][dataset]
    base = _fashion if dataset == "fashion_mnist" else small_scenario
    raw = base()
    raw["population"]["types"] = [dict(t) for t in BACKDOOR_TYPES]
    raw["population"]["types"][1]["attack"] = {"kind": kind, field: bad - 1 if field == "size" else 0}
    validate_scenario(raw)  # a value just inside is accepted
    raw["population"]["types"][1]["attack"] = {"kind": kind, field: bad}
    with pytest.raises(ScenarioError, match=rf"population\.types\[1\]\.attack\.{field}: {bad}, but"):
        validate_scenario(raw)

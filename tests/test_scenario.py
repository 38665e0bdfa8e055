"""The scenario schema: good files load, bad files get errors that name the field and the fix."""
import shlex
from pathlib import Path

import pytest
import yaml

from emulator.cli import main
from emulator.scenario import ScenarioError, apply_overrides
from emulator.parts import load_scenario, validate_scenario

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    return path


def problems(tmp_path, text: str, overrides=()) -> str:
    with pytest.raises(ScenarioError) as err:
        load_scenario(write(tmp_path, text), list(overrides))
    return str(err.value)


def test_every_shipped_scenario_validates():
    files = sorted((ROOT / "scenarios").rglob("*.yaml"))
    assert files, "no scenarios shipped"
    for path in files:
        load_scenario(path)


def suggested_overrides(path: Path) -> list[list[str]]:
    """The `--set` groups a scenario's comments suggest, one group per comment line."""
    groups = []
    for line in path.read_text().splitlines():
        if not line.startswith("#") or "--set" not in line:
            continue
        words = shlex.split(line.lstrip("#"))
        groups.append([words[i + 1].rstrip(".,;") for i, word in enumerate(words[:-1]) if word == "--set"])
    return groups


def test_overrides_suggested_in_scenario_comments_are_valid():
    """The variants a scenario's comments point users to (baselines, regimes, adaptive) must load."""
    checked = 0
    for path in sorted((ROOT / "scenarios").rglob("*.yaml")):
        for group in suggested_overrides(path):
            try:
                load_scenario(path, group)
            except ScenarioError as err:
                pytest.fail(f"{path.relative_to(ROOT)}: suggested {group} is invalid: {err}")
            checked += 1
    assert checked >= 10


def test_defaults_fill_in_a_minimal_file(tmp_path):
    scenario = load_scenario(write(tmp_path, "name: x\nrounds: 3\n"))
    assert scenario.data.dataset == "synthetic" and scenario.data.partition.scheme == "natural"
    assert scenario.algorithm.name == "fedavg" and scenario.algorithm.local_steps == 10
    vision = load_scenario(write(tmp_path, "name: x\nrounds: 3\ndata: {dataset: mnist}\n"))
    assert vision.data.partition.scheme == "iid"


def test_unknown_key_is_rejected_with_the_allowed_keys(tmp_path):
    msg = problems(tmp_path, "name: x\nrounds: 3\nalgorithm: {name: fedavg, client_lrr: 0.1}\n")
    assert "algorithm.client_lrr: unknown key" in msg and "client_lr" in msg


def test_wrong_type_and_out_of_range_name_the_yaml_path(tmp_path):
    msg = problems(tmp_path, "name: x\nrounds: many\n")
    assert "rounds:" in msg and "integer" in msg
    msg = problems(tmp_path, "name: x\nrounds: 3\ndata: {partition: {scheme: dirichlet, alpha: -1}}\n")
    assert "data.partition.alpha" in msg and "greater than 0" in msg


def test_unknown_names_list_the_choices(tmp_path):
    msg = problems(tmp_path, "name: x\nrounds: 3\nmodel: vgg\n")
    assert "model.name" in msg and "'vgg'" in msg and "cnn_fmnist" in msg
    msg = problems(tmp_path, "name: x\nrounds: 3\nalgorithm: {name: fedsgd}\n")
    assert "algorithm.name" in msg and "fedavg" in msg
    msg = problems(tmp_path, "name: x\nrounds: 3\ndata: {dataset: imagenet}\n")
    assert "data.dataset" in msg and "fashion_mnist" in msg


def test_cross_field_problems_point_at_the_field(tmp_path):
    msg = problems(tmp_path, "name: x\nrounds: 3\nalgorithm: {clients_per_round: 50}\npopulation: {devices: 10}\n")
    assert "algorithm.clients_per_round" in msg and "with_replacement" in msg
    msg = problems(tmp_path, "name: x\nrounds: 3\nmodel: cnn_fmnist\n")
    assert "model.name" in msg and "(1, 28, 28)" in msg
    msg = problems(tmp_path, "name: x\nrounds: 3\ndata: {dataset: mnist, partition: {scheme: natural}}\n")
    assert "data.partition.scheme" in msg
    msg = problems(tmp_path, "name: x\nrounds: 3\nalgorithm: {local_steps: 5, local_epochs: 1}\n")
    assert "algorithm" in msg and "not both" in msg


def test_malformed_yaml_says_where(tmp_path):
    msg = problems(tmp_path, "name: x\nrounds: [3\n")
    assert "not valid YAML" in msg and "line" in msg
    msg = problems(tmp_path, "- a\n- b\n")
    assert "mapping" in msg


def test_overrides_set_nested_fields_with_yaml_types(tmp_path):
    path = write(tmp_path, "name: x\nrounds: 3\nmodel: logreg\n")
    scenario = load_scenario(path, ["rounds=7", "algorithm.client_lr=0.5", "model.name=mlp",
                                    "data.partition.scheme=dirichlet", "data.partition.alpha=0.1"])
    assert scenario.rounds == 7 and scenario.algorithm.client_lr == 0.5 and scenario.model.name == "mlp"
    assert scenario.data.partition.alpha == 0.1
    assert "rounds" in problems(tmp_path, "name: x\nrounds: 3\n", ["rounds=-2"])
    with pytest.raises(ScenarioError, match="KEY=VALUE"):
        apply_overrides({}, ["rounds"])
    with pytest.raises(ScenarioError, match="not a section"):
        apply_overrides({"rounds": 3}, ["rounds.x=1"])


QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"  # availability: [{kind: markov, mean_on_s: 3600, ...}]


def validated(capsys, *sets: str) -> dict:
    """`emulator validate quickstart.yaml --set ...`: the resolved scenario it prints."""
    assert main(["validate", str(QUICKSTART), *[arg for s in sets for arg in ("--set", s)]]) == 0
    return yaml.safe_load(capsys.readouterr().out)


def rejected(capsys, path: Path, *sets: str) -> str:
    """The message `emulator validate PATH --set ...` exits 2 with."""
    assert main(["validate", str(path), *[arg for s in sets for arg in ("--set", s)]]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("key", ["population.availability[0].mean_on_s", "population.availability.0.mean_on_s",
                                 "population.availability[-1].mean_on_s", "population.availability.-1.mean_on_s"])
def test_overrides_reach_list_items_by_index(capsys, key):
    availability = validated(capsys, f"{key}=7200")["population"]["availability"]
    assert availability == [{"kind": "markov", "share": 1.0, "name": None, "mean_on_s": 7200.0, "mean_off_s": 10800.0}]


def test_overrides_append_to_and_replace_lists(capsys):
    availability = validated(capsys, "population.availability[0].share=0.5",
                             "population.availability[+]={kind: always, share: 0.5}")["population"]["availability"]
    assert [a["kind"] for a in availability] == ["markov", "always"] and [a["share"] for a in availability] == [0.5] * 2
    replaced = validated(capsys, "population.availability=[{kind: always}]")["population"]["availability"]
    assert replaced == [{"kind": "always", "share": 1.0, "name": None}]
    scenario = load_scenario(QUICKSTART, ["population.availability[+]={kind: never, share: 0.25}",
                                          "population.availability[0].share=0.75",
                                          "population.availability[-1].share=0.25",
                                          "population.availability[+]={kind: diurnal, share: 0.5}",
                                          "population.availability[0].share=0.25",
                                          "population.availability[2].timezones.offsets_h=[-5, 1]",
                                          "population.availability[2].timezones.offsets_h[-1]=8"])
    kinds = [(a.kind, a.share) for a in scenario.population.availability]
    assert kinds == [("markov", 0.25), ("never", 0.25), ("diurnal", 0.5)]
    assert scenario.population.availability[2].timezones.offsets_h == [-5.0, 8.0]


def test_list_override_errors_name_the_key_and_the_fix(tmp_path, capsys):
    err = rejected(capsys, QUICKSTART, "population.availability[1].mean_on_s=7200")
    assert ("population.availability[1]: index out of range; population.availability has 1 item, so valid "
            "indices are 0 and -1; add an item with population.availability[+]=VALUE") in err
    two = ["population.availability[0].share=0.5", "population.availability[+]={kind: always, share: 0.5}"]
    err = rejected(capsys, QUICKSTART, *two, "population.availability[-3].share=1")
    assert "has 2 items, so valid indices are 0 to 1, or -2 to -1 counting from the end" in err
    err = rejected(capsys, QUICKSTART, "population.availability.mean_on_s=7200")
    assert ("population.availability is a list of 1 item, not a section; pick an item, e.g. "
            "population.availability[0].mean_on_s") in err
    err = rejected(capsys, QUICKSTART, "population.compute[0].sigma=1")
    assert "population.compute is a section, not a list, so it has no item [0]; use population.compute.FIELD" in err
    err = rejected(capsys, QUICKSTART, "rounds[0]=5")
    assert "rounds is a value (60), not a section or a list; set it whole with --set rounds=VALUE" in err
    for key, bad in [("population.availability[x].share", "'[x].share'"), ("population.availability[]", "'[]'"),
                     ("population..devices", "'..devices'"), ("population.availability[0]share", "'share'")]:
        err = rejected(capsys, QUICKSTART, f"{key}=1")
        assert f"{key!r} is not a field path" in err and f"expected .FIELD, [INDEX] or [+] (to append), not {bad}" in err
    assert "must start with a field name" in rejected(capsys, QUICKSTART, "[0].share=1")


def test_indexing_a_list_the_file_leaves_to_its_default_asks_for_the_whole_list(tmp_path, capsys):
    minimal = write(tmp_path, "name: x\nrounds: 3\n")  # availability defaults to [{kind: always}]
    for key in ("population.availability[0].share=1", "population.availability[+]={kind: never, share: 0.1}"):
        err = rejected(capsys, minimal, key)
        assert ("population.availability is not set in the scenario file, so it has no items to change or append "
                "to; set the whole list instead: --set 'population.availability=[...]' (its default is "
                "[{kind: always, share: 1.0}])") in err
    assert "population.compute is not a list" in rejected(capsys, minimal, "population.compute[0]=1")
    assert "nosuch: unknown key; allowed here: name, plugins, seed" in rejected(capsys, minimal, "nosuch[0]=1")
    whole = load_scenario(minimal, ["population.availability=[{kind: always, share: 0.5}]",
                                    "population.availability[+]={kind: never, share: 0.5}"])
    assert [a.kind for a in whole.population.availability] == ["always", "never"]


def test_resolved_scenario_round_trips(tmp_path):
    scenario = load_scenario(ROOT / "scenarios" / "quickstart.yaml")
    again = validate_scenario(yaml.safe_load(yaml.safe_dump(scenario.model_dump(mode="json"))))
    assert again == scenario


def test_validate_command_exit_codes(tmp_path, capsys):
    assert main(["validate", str(ROOT / "scenarios" / "quickstart.yaml"), "--quiet"]) == 0
    bad = write(tmp_path, "name: x\nrounds: 0\n")
    assert main(["validate", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "rounds" in err and "Traceback" not in err


def test_cli_bad_input_has_no_traceback(tmp_path, capsys):
    """In this process (exit 2 from a fresh `python -m emulator run`: test_reliability)."""
    bad = write(tmp_path, "name: x\nrounds: 3\nruntime: {num_cpus: -1}\n")
    assert main(["run", str(bad), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "runtime.num_cpus" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()

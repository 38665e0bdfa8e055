"""Nothing silently wrong (issue 31): every input is refused or honoured exactly, and a run that went wrong
says so in its status and exit code.

In process and small (40 synthetic devices, in-process backend): what is claimed is what the emulator
does with an input, not how it scales.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import ROOT, comparable, digest, small_scenario
from emulator.cli import main
from emulator.parts import load_scenario
from emulator.scenario import ScenarioError

QUICKSTART = str(ROOT / "scenarios" / "quickstart.yaml")


def scenario_file(tmp_path: Path, name: str = "s.yaml", **overrides) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(small_scenario(**overrides)))
    return str(path)


# ------------------------------------------------------------------------- YAML that means one thing
def test_a_key_written_twice_is_refused_naming_both_lines(tmp_path, capsys):
    path = tmp_path / "twice.yaml"
    path.write_text("name: twice\nrounds: 3\nalgorithm:\n  name: fedavg\n  client_lr: 0.1\n  client_lr: 0.5\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "'client_lr' is written twice" in err and "lines 5 and 6" in err and str(path) in err


def test_a_section_written_twice_is_refused_not_half_defaulted(tmp_path, capsys):
    path = tmp_path / "sections.yaml"
    path.write_text("name: s\nrounds: 3\npopulation: {devices: 50}\nalgorithm: {name: fedavg}\n"
                    "population: {dropout_per_hour: 1.0}\n")
    assert main(["validate", str(path)]) == 2
    assert "'population' is written twice" in capsys.readouterr().err


def test_a_merge_key_may_still_be_overridden(tmp_path):
    """`<<: *base` then a key of its own is YAML's way to override a merged default, not a duplicate."""
    path = tmp_path / "merge.yaml"
    path.write_text("name: m\nrounds: 3\nx-defaults: &d {name: fedavg, client_lr: 0.1}\n")
    raw = yaml.safe_load(path.read_text())
    del raw["x-defaults"]
    text = ("name: m\nrounds: 3\nalgorithm:\n  <<: {name: fedavg, client_lr: 0.1, batch_size: 8}\n"
            "  client_lr: 0.5\n")
    path.write_text(text)
    scenario = load_scenario(path)
    assert scenario.algorithm.client_lr == 0.5 and scenario.algorithm.batch_size == 8


def test_aliased_items_are_copies_so_a_set_changes_only_the_one_it_names(tmp_path):
    path = tmp_path / "anchors.yaml"
    path.write_text("name: a\nrounds: 3\npopulation:\n  devices: 40\n  availability:\n"
                    "    - &on {kind: markov, mean_on_s: 600, mean_off_s: 600, share: 0.5}\n    - *on\n")
    scenario = load_scenario(path, ["population.availability[1].mean_on_s=7200"])
    first, second = scenario.population.availability
    assert (first.mean_on_s, second.mean_on_s) == (600, 7200)


def test_exponents_without_a_dot_are_numbers(tmp_path):
    """PyYAML reads `1e-3` as text (YAML 1.1); a number field refuses text, so it must arrive as a float."""
    path = tmp_path / "exp.yaml"
    path.write_text("name: e\nrounds: 3\nalgorithm: {name: fedavg, client_lr: 1e-3}\n")
    assert load_scenario(path).algorithm.client_lr == 0.001
    assert load_scenario(QUICKSTART, ["algorithm.client_lr=5e-2"]).algorithm.client_lr == 0.05


# ------------------------------------------------------------------------------ numbers are numbers
@pytest.mark.parametrize(("path", "value", "says"), [
    ("algorithm.client_lr", ".inf", "finite number"),
    ("algorithm.client_lr", ".nan", "finite number"),
    ("data.partition.alpha", ".inf", "finite number"),
    ("population.dropout_per_hour", "1e400", "finite number"),   # overflows to inf
    ("rounds", "true", "a boolean, not an integer"),
    ("algorithm.clients_per_round", "yes", "a boolean, not an integer"),
    ("algorithm.clients_per_round", "'8'", "is text (in quotes), not an integer"),
    ("algorithm.batch_size", "16.5", "integer"),
    ("output.tensorboard", "1", "is not true or false"),
])
def test_a_number_field_refuses_what_is_not_that_number(path, value, says, capsys):
    assert main(["validate", QUICKSTART, "--quiet", "--set", f"{path}={value}"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: " in err and says in err, err


def test_plugin_configs_get_the_same_domains():
    """A plugin's config is a Strict model: it refuses a non-finite float and a boolean count for free."""
    from emulator.extend import Count, Fraction, Strict

    class Mine(Strict):
        share: Fraction = 0.5
        count: Count = 3
        strength: float = 1.0

    for bad in ({"share": 1.5}, {"count": True}, {"strength": float("nan")}, {"count": -1}):
        with pytest.raises(ValueError):
            Mine(**bad)
    assert Mine(share=1, count=2.0).count == 2


# -------------------------------------------------------------------------------- sweeps over seeds
def test_a_seed_grid_runs_the_seeds_it_names(tmp_path, forked_sweep_workers):
    from emulator.sweeps import plan_sweep, run_sweep

    base = scenario_file(tmp_path, rounds=2)
    runs = plan_sweep(base, [], [("seed", ["3", "4"])], seeds=1, out=tmp_path / "sweep")
    assert [(r.name, r.scenario.seed) for r in runs] == [("tiny-seed3", 3), ("tiny-seed4", 4)]
    result = run_sweep(runs, tmp_path / "sweep", parallel=1)
    assert not result.failed
    main(["run", base, "--set", "seed=3", "--out", str(tmp_path / "alone3"), "--quiet"])
    assert comparable(tmp_path / "sweep" / "tiny-seed3") == comparable(tmp_path / "alone3")
    assert comparable(tmp_path / "sweep" / "tiny-seed4") != comparable(tmp_path / "alone3")


def test_a_seed_grid_with_several_seeds_per_point_that_overlap_is_refused(tmp_path):
    from emulator.sweeps import plan_sweep

    with pytest.raises(ScenarioError, match="same name"):
        plan_sweep(scenario_file(tmp_path), [], [("seed", ["3", "4"])], seeds=2, out=tmp_path / "sweep")


@pytest.mark.parametrize("key", ["name", "output.dir"])
def test_a_grid_over_what_the_sweep_sets_itself_is_refused(key, tmp_path, capsys):
    assert main(["sweep", scenario_file(tmp_path), "--grid", f"{key}=a,b", "--out", str(tmp_path / "w")]) == 2
    assert f"--grid {key}=..." in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


def test_a_sweep_refuses_zero_runs_at_once(tmp_path):
    import emulator

    with pytest.raises(ScenarioError, match="parallel=0"):
        emulator.sweep(scenario_file(tmp_path), seeds=1, parallel=0, out=tmp_path / "sw")


# ---------------------------------------------------------------------- the run directory is ours
def test_out_into_a_directory_holding_the_users_files_is_refused_and_touches_nothing(tmp_path, capsys):
    exp = tmp_path / "exp1"
    exp.mkdir()
    scenario = exp / "scenario.yaml"
    scenario.write_text("# my notes, kept by hand\n" + yaml.safe_dump(small_scenario(rounds=2)))
    before = digest(exp)
    assert main(["run", str(scenario), "--out", str(exp), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "already holds files (scenario.yaml)" in err and f"--out {exp / 'run'}" in err
    assert digest(exp) == before
    assert main(["run", str(scenario), "--out", str(exp / "run"), "--quiet"]) == 0  # the way it suggests
    assert digest(exp)["scenario.yaml"] == before["scenario.yaml"]


def test_a_report_into_a_directory_holding_other_files_is_refused(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["run", scenario_file(tmp_path, rounds=2), "--out", str(run), "--quiet"]) == 0
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "summary.csv").write_text("mine\n")
    assert main(["report", str(run), "--out", str(notes)]) == 2
    assert "holds files that are not a report (summary.csv)" in capsys.readouterr().err
    assert (notes / "summary.csv").read_text() == "mine\n"
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 0
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 0  # over its own earlier report


# ------------------------------------------------------------------------------ honest run statuses
def test_a_diverged_run_stops_with_its_own_status_and_exit_code(tmp_path, capsys):
    path = scenario_file(tmp_path, rounds=6, model="mlp", **{"algorithm.client_lr": 1e30})
    assert main(["run", path, "--out", str(tmp_path / "run"), "--quiet"]) == 3
    err = capsys.readouterr().err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["stopped_at_round"] == 1
    assert "train_loss is nan in round 1" in summary["error"] and "stop.diverged: false" in err
    assert len(comparable(tmp_path / "run")) == 1  # the rounds run are kept


def test_a_user_may_keep_a_diverged_run_going(tmp_path):
    path = scenario_file(tmp_path, rounds=3, model="mlp", **{"algorithm.client_lr": 1e30, "stop.diverged": False})
    assert main(["run", path, "--out", str(tmp_path / "run"), "--quiet"]) == 0
    assert len(comparable(tmp_path / "run")) == 3


def test_a_run_in_which_no_device_ever_reports_ends_no_progress(tmp_path, capsys):
    # phones that drop out within milliseconds of starting: no report ever arrives
    path = scenario_file(tmp_path, rounds=3, **{"population.dropout_per_hour": 1e6})
    assert main(["run", path, "--out", str(tmp_path / "run"), "--quiet"]) == 4
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "no_progress" and summary["rounds_completed"] == 3
    assert "population.dropout_per_hour" in capsys.readouterr().err


def test_a_long_stretch_without_progress_stops_the_run_early(tmp_path):
    path = scenario_file(tmp_path, rounds=50, **{"population.dropout_per_hour": 1e6, "stop.no_progress_rounds": 4})
    assert main(["run", path, "--out", str(tmp_path / "run"), "--quiet"]) == 4
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["stopped_at_round"] == 4 and len(comparable(tmp_path / "run")) == 4


def test_a_sweep_counts_a_diverged_run_as_failed(tmp_path, forked_sweep_workers):
    from emulator.sweeps import plan_sweep, run_sweep

    path = scenario_file(tmp_path, rounds=2, model="mlp")
    runs = plan_sweep(path, [], [("algorithm.client_lr", ["0.05", "1e30"])], seeds=1, out=tmp_path / "sw")
    result = run_sweep(runs, tmp_path / "sw", parallel=1)
    assert [r.name for r in result.failed] == ["tiny-client_lr_1e30-seed3"]
    assert result.failed[0].error.startswith("diverged: the model diverged")


def test_user_data_with_a_nan_feature_is_refused_naming_where(tmp_path):
    import emulator

    x = np.random.default_rng(0).random((60, 4)).astype(np.float32)
    x[7, 2] = np.nan
    y = np.arange(60) % 2
    with pytest.raises(ScenarioError, match=r"1 value\(s\) that are not finite .* sample 7, column 2"):
        emulator.run(small_scenario(rounds=1), data=((x, y), (x[:10], y[:10])), out=tmp_path / "r")
    assert not (tmp_path / "r").exists()


# ------------------------------------------------------------------------ sizes past the machine
def test_a_population_that_cannot_fit_in_memory_is_refused_before_anything_is_allocated(tmp_path, capsys):
    path = scenario_file(tmp_path, **{"population.devices": 100_000_000_000})
    assert main(["run", path, "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "population.devices: 100,000,000,000 devices need at least" in err and "devices fit here" in err
    assert not (tmp_path / "run").exists()


def test_the_per_device_memory_bound_is_below_what_a_device_really_costs():
    """The refusal above must never refuse a population that fits: a real world costs more a device."""
    import tracemalloc

    from emulator.data import build_federation
    from emulator.parts import validate_scenario
    from emulator.system.availability_mix import AvailabilityMix
    from emulator.system.checks import BYTES_PER_DEVICE

    scenario = validate_scenario(small_scenario(**{"population.devices": 4000,
                                                   "data.synthetic.max_samples": 20}))
    tracemalloc.start()
    federation = build_federation(scenario.data, 4000, scenario.seed, scenario.population.types)
    world = AvailabilityMix(scenario.population.availability, 4000, scenario.seed)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert federation.num_devices == 4000 and world.num_devices == 4000
    assert held / 4000 > BYTES_PER_DEVICE, held / 4000


def test_a_diverged_run_may_be_resumed_past_divergence_deliberately(tmp_path, capsys):
    path = scenario_file(tmp_path, rounds=3, model="mlp", **{"algorithm.client_lr": 1e30,
                                                             "output.checkpoint_every": 1})
    assert main(["run", path, "--out", str(tmp_path / "run"), "--quiet"]) == 3
    assert main(["run", "--resume", str(tmp_path / "run"), "--set", "stop.diverged=false", "--quiet"]) == 0
    assert len(comparable(tmp_path / "run")) == 3
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"


def test_a_resume_that_changes_the_thread_count_says_it_changes_the_numbers(tmp_path, capsys):
    path = scenario_file(tmp_path, rounds=2)
    assert main(["run", path, "--out", str(tmp_path / "run"), "--quiet"]) == 0
    capsys.readouterr()
    assert main(["run", "--resume", str(tmp_path / "run"), "--set", "rounds=3", "--set", "runtime.torch_threads=2",
                 "--quiet"]) == 0
    assert "warning: --resume with runtime.torch_threads 1 -> 2" in capsys.readouterr().err
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())  # and the run's record says so
    assert summary["torch_threads"] == 2
    assert summary["torch_threads_changes"] == [{"from_round": 3, "from": 1, "to": 2}]
    assert main(["run", "--resume", str(tmp_path / "run"), "--set", "rounds=4", "--set", "runtime.torch_threads=1",
                 "--quiet"]) == 0  # and back
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["torch_threads"] == 1 and [c["from_round"] for c in summary["torch_threads_changes"]] == [3, 4]


def test_time_zones_that_the_types_would_always_override_are_refused(capsys):
    latent = str(ROOT / "scenarios" / "worlds" / "latent_types.yaml")  # every type sets its timezone
    assert main(["validate", latent, "--quiet"]) == 0
    assert main(["validate", latent, "--quiet", "--set", "population.availability[0].timezones={offsets_h: [3]}"]) == 2
    assert "every type in population.types sets its timezone" in capsys.readouterr().err

"""Analysis, reports and sweeps, on runs produced by the emulator itself."""
import csv
import math

import numpy as np
import pandas as pd
import pytest
import yaml

from emulator.analysis import gini, group_runs, load_runs, lorenz_curve, time_to_accuracy, write_report
from conftest import small_scenario
from emulator.cli import main
from emulator.driver import run_scenario
from emulator.scenario import validate_scenario


@pytest.fixture(scope="module")
def runs(ray_session, tmp_path_factory):
    """A FedAvg run (two seeds) and a FAST run on a simulated population."""
    root = tmp_path_factory.mktemp("runs")
    world = {"population.availability": [{"kind": "markov", "mean_on_s": 1800, "mean_off_s": 1800}],
             "population.dropout_per_hour": 1.0, "rounds": 10, "evaluation.every": 2}
    for seed in (1, 2):
        run_scenario(validate_scenario(small_scenario(name=f"fedavg-seed{seed}", seed=seed, **world)),
                     root / f"fedavg-{seed}")
    fast = small_scenario(name="fast", **world, algorithm={**small_scenario()["algorithm"], "name": "fast",
                                                           "adaptive": True, "lam": 4})
    run_scenario(validate_scenario(fast), root / "fast")
    return root


def test_time_to_accuracy_is_what_the_metrics_say(runs):
    path = runs / "fedavg-1" / "metrics.csv"
    rows = list(csv.DictReader(open(path)))
    accuracies = [float(r["test_acc"]) for r in rows if r["test_acc"]]
    target = sorted(accuracies)[len(accuracies) // 2]
    moved = 0
    for row in rows:  # by hand: walk the rounds until an evaluation reaches the target
        moved += int(row["bytes_down"]) + int(row["bytes_up"])
        if row["test_acc"] and float(row["test_acc"]) >= target:
            expected = (int(row["round"]), float(row["sim_time_s"]) / 3600, moved)
            break
    reach = time_to_accuracy(pd.read_csv(path), target)
    assert (reach["round"], reach["sim_hours"], reach["bytes"]) == pytest.approx(expected)
    never = time_to_accuracy(pd.read_csv(path), 1.01)
    assert math.isnan(never["round"]) and math.isnan(never["sim_hours"])


def test_runs_of_one_experiment_group_by_seed(runs):
    groups = group_runs(load_runs([runs]))
    assert sorted(groups) == ["fast", "fedavg"]
    assert [r.seed for r in groups["fedavg"]] == [1, 2]


def test_report_writes_every_figure_and_the_table(runs, tmp_path):
    out = tmp_path / "report"
    assert main(["report", str(runs), "--out", str(out), "--target", "0.3"]) == 0
    report = (out / "report.md").read_text()
    for figure in ("accuracy_vs_time.png", "accuracy_vs_rounds.png", "accuracy_vs_bytes.png", "participation.png",
                   "round_durations.png", "fast_q.png"):
        assert (out / figure).stat().st_size > 5000, figure
        assert f"({figure})" in report
    table = [line for line in report.splitlines() if line.startswith("| ")]
    assert table[0].startswith("| experiment | seeds | final acc") and "hours to 0.3" in table[0]
    assert any(line.startswith("| fedavg | 2 |") for line in table) and any(line.startswith("| fast | 1 |")
                                                                          for line in table)
    summary = pd.read_csv(out / "summary.csv")
    assert set(summary.experiment) == {"fedavg", "fast"} and (summary.final_acc > 0).all()


def test_report_of_nothing_is_a_clear_error(tmp_path, capsys):
    assert main(["report", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    assert "no run directories" in capsys.readouterr().err


def test_sweep_of_two_values_and_two_seeds_makes_four_runs_and_one_report(ray_session, tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario(rounds=3)))
    out = tmp_path / "sweep"
    code = main(["sweep", str(scenario), "--grid", "algorithm.client_lr=0.01,0.1", "--seeds", "2", "--out", str(out),
                 "--quiet"])
    assert code == 0
    run_dirs = sorted(p.parent for p in out.rglob("metrics.csv"))
    assert len(run_dirs) == 4
    lrs = sorted(yaml.safe_load((p / "scenario.yaml").read_text())["algorithm"]["client_lr"] for p in run_dirs)
    seeds = sorted(yaml.safe_load((p / "scenario.yaml").read_text())["seed"] for p in run_dirs)
    assert lrs == [0.01, 0.01, 0.1, 0.1] and seeds == [3, 3, 4, 4]
    assert [p.name for p in out.glob("*/report.md")] == ["report.md"]
    table = pd.read_csv(out / "report" / "summary.csv")
    assert len(table) == 2 and (table.seeds == 2).all()


def test_sweep_rejects_a_bad_grid_before_running_anything(tmp_path, capsys):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario(rounds=3)))
    out = tmp_path / "sweep"
    assert main(["sweep", str(scenario), "--grid", "algorithm.client_lr=0.1,-1", "--out", str(out)]) == 2
    assert "algorithm.client_lr" in capsys.readouterr().err and not out.exists()


def test_gini_and_lorenz():
    assert gini([5, 5, 5, 5]) == pytest.approx(0.0)
    assert gini([0, 0, 0, 12]) == pytest.approx(0.75)
    share, held = lorenz_curve([0, 0, 0, 12])
    assert list(share) == [0, 0.25, 0.5, 0.75, 1.0] and list(held) == [0, 0, 0, 0, 1.0]
    assert gini(np.arange(100)) == pytest.approx(1 / 3, abs=0.01)


def test_report_says_how_many_seeds_reached_the_target(runs, tmp_path):
    fedavg = [p for p in sorted(runs.iterdir()) if p.name.startswith("fedavg")]
    accs = [pd.read_csv(p / "metrics.csv").test_acc.max() for p in fedavg]
    target = (min(accs) + max(accs)) / 2  # one seed gets there, the other does not
    assert min(accs) < target <= max(accs)
    write_report(fedavg, tmp_path / "r", target=target)
    line = next(l for l in (tmp_path / "r" / "report.md").read_text().splitlines() if l.startswith("| fedavg"))
    assert "(1 of 2 seeds)" in line

"""Analysis, reports and sweeps, on runs produced by the emulator itself and on run directories written by
hand (fake_run: no Ray, so the report's rules are checked in milliseconds)."""
import csv
import json
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from emulator.analysis import (gini, group_runs, load_metrics, load_runs, lorenz_curve, seed_statistics, select_runs,
                               time_to_accuracy, write_report)
from emulator.analysis.metrics import T_975, t_975
from conftest import ROOT, small_scenario
from emulator.cli import main
from emulator.driver import run_scenario
from emulator.parts import validate_scenario


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


def test_sweep_of_two_values_and_two_seeds_makes_four_runs_and_one_report(tmp_path, forked_sweep_workers):
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


# ------------------------------------------------------------------ run directories written by hand
def fake_run(path, name="exp", seed=0, acc=0.6, rounds=10, done=None, status="completed",
             finished_at="2026-11-23T10:00:00+0000", error=None, summary=True, stragglers=2, cancelled=1,
             **overrides):
    """A run directory as the driver writes it: `done` rounds (default all) of metrics.csv with a test
    evaluation every second round (test accuracy `acc`: one value, or one per evaluation), stragglers and
    cancelled devices per round (cancelled=None: a run from before they were counted apart),
    scenario.yaml (small_scenario with `overrides`), participation.csv and, unless summary=False (a killed
    run), summary.json."""
    done = rounds if done is None else done
    r = np.arange(1, done + 1)
    test_acc = np.full(done, np.nan)
    test_acc[1::2] = acc
    metrics = pd.DataFrame({
        "round": r, "kind": "train", "failed": 0, "sim_time_s": 60.0 * r, "selected": 13, "participants": 10,
        "dropped": 1, "stragglers": stragglers, "bytes_down": 1000, "bytes_up": 500, "train_loss": 1.0,
        "train_acc": 0.5, "test_loss": np.where(np.isnan(test_acc), np.nan, 1.0), "test_acc": test_acc,
        "wall_time_s": 0.1 * r, "round_duration_s": 60.0})
    participation = pd.DataFrame({"device": range(4), "selected": [3, 2, 1, 0], "reported": [2, 2, 1, 0],
                                  "dropped": 0, "straggled": [1, 0, 0, 0]})
    if cancelled is not None:
        metrics["cancelled"] = cancelled
        participation["cancelled"] = [0, 1, 0, 0]
    path.mkdir(parents=True)
    metrics.to_csv(path / "metrics.csv", index=False)
    participation.to_csv(path / "participation.csv", index=False)
    (path / "scenario.yaml").write_text(yaml.safe_dump(small_scenario(name=name, seed=seed, rounds=rounds,
                                                                      **overrides)))
    if summary:
        (path / "summary.json").write_text(json.dumps({
            "name": name, "seed": seed, "status": status, "rounds": rounds, "rounds_completed": done,
            "finished_at": finished_at, **({"error": error} if error else {})}))
    return path


def table_cells(report: str) -> dict[str, dict[str, str]]:
    """report.md's comparison table: experiment -> heading -> cell."""
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in report.splitlines()
            if line.startswith("| ")]
    return {row[0]: dict(zip(rows[0], row)) for row in rows[1:]}


def test_an_experiment_is_everything_but_the_seed(tmp_path):
    fake_run(tmp_path / "a", seed=1, finished_at="2026-11-23T09:00:00+0000")
    fake_run(tmp_path / "b", seed=1, **{"runtime.runners": 4, "output.dir": "elsewhere", "system.events": True})
    fake_run(tmp_path / "c", seed=2, name="exp-seed2")  # the seed suffix of a sweep's names is no difference
    fake_run(tmp_path / "d", seed=1, rounds=20)         # more rounds: another experiment
    fake_run(tmp_path / "e", seed=1, name="control")    # named apart: another experiment
    groups = {label: [r.path.name for r in runs] for label, runs in group_runs(load_runs([tmp_path])).items()}
    assert groups == {"control": ["e"], "exp (rounds=10)": ["b", "c"], "exp (rounds=20)": ["d"]}
    # b differs from a only where results cannot: the same seed of the same experiment, run again later
    duplicates = select_runs(load_runs([tmp_path])).duplicates
    assert [(dup.path.name, kept.path.name) for dup, kept in duplicates] == [("a", "b")]


def test_a_repeated_seed_counts_once_the_latest_kept_and_the_other_listed(tmp_path):
    old = fake_run(tmp_path / "z-first", seed=1, acc=0.2, finished_at="2026-11-23T09:00:00+0000")
    new = fake_run(tmp_path / "a-rerun", seed=1, acc=0.6, finished_at="2026-11-23T11:00:00+0000")
    fake_run(tmp_path / "m", seed=2, acc=0.8)
    report = write_report([tmp_path], tmp_path / "r").read_text()
    summary = pd.read_csv(tmp_path / "r" / "summary.csv")
    assert summary.seeds.tolist() == [2] and summary.final_acc[0] == pytest.approx(0.7)
    assert "## Left out: repeated seeds" in report
    assert f"- `{old}` repeats seed 1 of `{new}` (kept)" in report
    assert "2 run(s) in 1 experiment(s), 1 left out (below)" in report


def test_failed_interrupted_and_unfinished_runs_are_listed_apart_and_left_out_of_the_means(tmp_path):
    fake_run(tmp_path / "s1", seed=1, acc=0.6)
    fake_run(tmp_path / "s2", seed=2, acc=0.8)
    left_out = {
        fake_run(tmp_path / "interrupted", seed=3, acc=0.1, done=4, status="interrupted"):
            "interrupted after 4 of 10 rounds",
        fake_run(tmp_path / "failed", seed=4, acc=0.1, done=6, status="failed", error="RuntimeError: boom"):
            "failed after 6 of 10 rounds (RuntimeError: boom)",
        fake_run(tmp_path / "killed", seed=5, acc=0.1, done=3, summary=False):
            "no summary.json (killed, or still running) after 3 of 10 rounds",
        fake_run(tmp_path / "running", seed=6, acc=0.1, done=5, status="running"):
            "still running, or killed, after 5 of 10 rounds",
        fake_run(tmp_path / "short", seed=7, acc=0.1, done=8): "completed, but metrics.csv holds 8 of 10 rounds",
    }
    assert [r.seed for r in group_runs(load_runs([tmp_path]))["exp"]] == [1, 2]
    report = write_report([tmp_path], tmp_path / "r").read_text()
    summary = pd.read_csv(tmp_path / "r" / "summary.csv")
    assert summary.seeds.tolist() == [2] and summary.final_acc[0] == pytest.approx(0.7)
    section = report.split("## Left out: failed, interrupted or unfinished runs")[1].split("\n## ")[0]
    for path, why in left_out.items():
        assert f"`{path}` (exp, seed " in section and why in section, why
        assert report.count(f"`{path}`") == 1, "an incomplete run is listed only as left out"


def test_a_report_of_only_incomplete_runs_is_a_clear_error(tmp_path, capsys):
    fake_run(tmp_path / "killed", done=3, summary=False)
    assert main(["report", str(tmp_path), "--out", str(tmp_path / "r")]) == 2
    assert "none of the 1 run(s) completed" in capsys.readouterr().err


def test_the_spread_is_the_sample_sd_with_a_t_interval_from_three_seeds(tmp_path):
    for seed, acc in enumerate((0.5, 0.6, 0.7)):
        fake_run(tmp_path / f"three-{seed}", name="three", seed=seed, acc=acc)
    for seed, acc in enumerate((0.5, 0.7)):
        fake_run(tmp_path / f"two-{seed}", name="two", seed=seed, acc=acc)
    report = write_report([tmp_path], tmp_path / "r").read_text()
    summary = pd.read_csv(tmp_path / "r" / "summary.csv").set_index("experiment")
    assert summary.at["three", "final_acc_std"] == pytest.approx(0.1)  # the population sd would be 0.0816
    assert summary.at["three", "final_acc_ci95"] == pytest.approx(4.303 * 0.1 / math.sqrt(3))
    assert summary.at["two", "final_acc_std"] == pytest.approx(math.sqrt(0.02))
    assert math.isnan(summary.at["two", "final_acc_ci95"])  # no interval from 2 seeds
    cells = table_cells(report)
    assert cells["three"]["final acc (last 5)"] == "0.6000 ± 0.1000 [0.3516, 0.8484]"
    assert cells["two"]["final acc (last 5)"] == "0.6000 ± 0.1414"
    assert "sample standard deviation" in report and "95% confidence interval of the mean" in report


def test_t_quantiles_are_the_t_distributions():
    for df, q in T_975.items():  # P(T <= q) = 0.975, the density integrated by the trapezoid rule
        x = np.linspace(0.0, q, 100_001)
        density = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi) \
            * (1 + x ** 2 / df) ** (-(df + 1) / 2)
        assert 0.5 + ((density[1:] + density[:-1]) / 2 * np.diff(x)).sum() == pytest.approx(0.975, abs=2e-4), df
    assert t_975(35) == T_975[30] and t_975(1000) == 1.96
    stats = seed_statistics([0.5, math.nan, 0.7])  # a seed without a value is left out
    assert stats["n"] == 2 and stats["mean"] == pytest.approx(0.6) and math.isnan(stats["ci95"])
    assert math.isnan(seed_statistics([0.5])["std"])


def test_the_readme_snippet_draws_accuracy_against_time(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    readme = (ROOT / "README.md").read_text()
    snippet = re.search(r"```python\n(.*?)```", readme[readme.index("Each run writes a directory"):], re.S).group(1)
    fake_run(tmp_path / "runs" / "skewed", rounds=20)  # test accuracy on every second round only
    monkeypatch.chdir(tmp_path)
    plt.close("all")
    exec(snippet, {})
    (line,) = plt.gcf().axes[0].get_lines()
    y = np.asarray(line.get_ydata(), dtype=float)
    segments = np.isfinite(y[1:]) & np.isfinite(y[:-1])  # a line joins two consecutive finite points
    plt.close("all")
    assert segments.sum() == 9
    assert len(load_metrics(tmp_path / "runs" / "skewed", evaluated_only=False)) == 20


def test_the_accuracy_vs_time_script_prints_time_to_target_and_draws(tmp_path):
    fast = fake_run(tmp_path / "fast", acc=[0.3, 0.5, 0.6, 0.6, 0.7])  # 0.5 at round 4: 240 s, 6000 bytes
    slow = fake_run(tmp_path / "slow", acc=0.4, seed=1)
    killed = fake_run(tmp_path / "killed", acc=0.6, seed=2, done=4, summary=False)
    figure = tmp_path / "acc.png"
    done = subprocess.run([sys.executable, str(ROOT / "analysis" / "accuracy_vs_time.py"), str(fast), str(slow),
                           str(killed), "--out", str(figure), "--target", "0.5"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line.split() for line in done.stdout.splitlines()}
    assert lines[str(fast)][1:6] == ["0", "0.5400", "0.07", "4", "0.000"]
    assert "not reached" in " ".join(lines[str(slow)])
    assert "no summary.json" in " ".join(lines[str(killed)])
    assert figure.stat().st_size > 5000


def test_a_users_own_analysis_package_does_not_shadow_the_library(tmp_path):
    (tmp_path / "analysis").mkdir()
    (tmp_path / "analysis" / "__init__.py").write_text("raise ImportError('the user\\'s own analysis package')\n")
    fake_run(tmp_path / "runs" / "a", seed=1)
    fake_run(tmp_path / "runs" / "b", seed=2)
    found = subprocess.run([sys.executable, "-c", "import emulator.analysis as a; print(a.__file__)"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == str(ROOT / "emulator" / "analysis" / "__init__.py")
    report = subprocess.run([sys.executable, "-m", "emulator", "report", "runs", "--out", "report"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    assert table_cells((tmp_path / "report" / "report.md").read_text())["exp"]["seeds"] == "2"


def test_the_table_counts_stragglers_and_cancelled_devices_and_tolerates_older_runs(tmp_path):
    fake_run(tmp_path / "new-1", name="new", seed=1, stragglers=2, cancelled=1)
    fake_run(tmp_path / "new-2", name="new", seed=2, stragglers=4, cancelled=1)
    fake_run(tmp_path / "old", name="old", stragglers=3, cancelled=None)  # before cancelled was counted
    report = write_report([tmp_path], tmp_path / "r").read_text()
    cells = table_cells(report)
    assert (cells["new"]["stragglers"], cells["new"]["cancelled"]) == ("30 ± 14", "10")  # 10 rounds; 20 and 40
    assert (cells["old"]["stragglers"], cells["old"]["cancelled"]) == ("30", "-")
    assert "'-' marks runs written before" in report
    summary = pd.read_csv(tmp_path / "r" / "summary.csv").set_index("experiment")
    assert summary.at["new", "cancelled"] == 10 and math.isnan(summary.at["old", "cancelled"])


def test_bf16_runs_are_another_experiment_while_runtime_settings_are_not():
    from emulator.analysis.runs import Run, experiment_key

    def run(runtime):
        return Run(Path("r"), {"name": "x", "seed": 0, "rounds": 5, "runtime": runtime}, pd.DataFrame())

    assert experiment_key(run({})) == experiment_key(run({"precision": "fp32", "runners": 4}))
    assert experiment_key(run({"precision": "bf16"})) != experiment_key(run({"precision": "fp32"}))
    assert experiment_key(run({"vectorise": True})) != experiment_key(run({}))  # vectorised: other last bits
    assert experiment_key(run({"group_size": 8})) == experiment_key(run({}))  # grouping alone changes nothing

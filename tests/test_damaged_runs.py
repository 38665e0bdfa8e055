"""A report never believes a damaged run directory: every kind of damage to every file a run writes is refused
with the file, the line and what is wrong (exit 2 from `emulator report`, a ScenarioError from Python); with
several runs the healthy ones are reported and the damaged ones listed apart. And the table says what each
figure is when a run has fewer evaluations than it averages.

The runs are real (one in-process run, copied and then damaged), so the checks hold against what a run
writes, not against a hand-made imitation of it."""
from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from conftest import small_scenario
from emulator.analysis import load_run, write_report
from emulator.analysis.files import DamagedRunError
from emulator.cli import main
from emulator.scenario import ScenarioError

FILES = ("metrics.csv", "summary.json", "scenario.yaml", "participation.csv", "class_accuracy.csv", "events.csv",
         "device_eval.csv")


@pytest.fixture(scope="module")
def healthy(tmp_path_factory) -> Path:
    """A finished 6-round run that writes every file a report reads: events, each device's own evaluation."""
    from emulator.driver import run_scenario
    from emulator.parts import validate_scenario

    path = tmp_path_factory.mktemp("healthy") / "run"
    scenario = small_scenario(name="healthy", rounds=6, **{
        "system.events": True, "data.local_test": {"fraction": 0.25, "min_samples": 2},
        "evaluation.devices": {"oracle": True}, "output.tensorboard": False,
        "population.availability": [{"kind": "markov", "mean_on_s": 1800, "mean_off_s": 1800}],
        "population.dropout_per_hour": 1.0})
    run_scenario(validate_scenario(scenario), path)
    for name in FILES:
        assert (path / name).is_file(), name
    return path


def copy_of(healthy: Path, where: Path, name: str = "run") -> Path:
    target = where / name
    shutil.copytree(healthy, target, ignore=shutil.ignore_patterns("checkpoint*", "tensorboard"))
    return target


# ------------------------------------------------------------------------------------- kinds of damage
def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def _set(column: str, value: str, line: int = 3):
    """Line `line`'s `column` (a CSV file) set to `value`."""
    def damage(path: Path) -> None:
        rows = list(csv.reader(io.StringIO(path.read_text(), newline="")))
        rows[line - 1][rows[0].index(column)] = value
        buffer = io.StringIO()
        csv.writer(buffer, lineterminator="\n").writerows(rows)
        path.write_text(buffer.getvalue())
    return damage


def _edit(change):
    def damage(path: Path) -> None:
        path.write_text("".join(change(_lines(path))))
    return damage


def _bytes(change):
    def damage(path: Path) -> None:
        path.write_bytes(change(path.read_bytes()))
    return damage


EVERY_FILE = {  # kind of damage -> (damage, what the message says)
    "empty": (_bytes(lambda data: b""), "empty"),
    "blank": (_bytes(lambda data: b"\n\n"), "empty"),
    "truncated": (_bytes(lambda data: data[:len(data) * 2 // 3].rstrip(b"\n") + b"7"), None),
    "binary junk": (_bytes(lambda data: bytes(range(256)) * 4), "not text"),
    "a NUL byte": (_bytes(lambda data: data[:20] + b"\x00" + data[20:]), "not text"),
    "not UTF-8": (_bytes(lambda data: data[:30] + b"\xff\xfe" + data[30:]), "not text"),
}
CSV_DAMAGE = {
    "garbled line": (_edit(lambda lines: lines[:2] + ["@@ #!! ~~\n"] + lines[3:]), "line 3"),
    "a field short": (_edit(lambda lines: lines[:2] + [lines[2].rstrip("\n").rsplit(",", 1)[0] + "\n"] + lines[3:]),
                      "line 3"),
    "a field more": (_edit(lambda lines: lines[:2] + [lines[2].rstrip("\n") + ",1\n"] + lines[3:]), "line 3"),
    "no header": (_edit(lambda lines: lines[1:]), "line 1"),
    "header only, renamed": (_edit(lambda lines: ["a,b,c\n"] + [",".join("1" * 3) + "\n"]), "line 1"),
}
METRICS_ROWS = {
    "a round twice": (_set("round", "2", line=4), "line 4: round 2 again"),
    "rounds out of order": (_edit(lambda lines: lines[:2] + [lines[3], lines[2]] + lines[4:]),
                            "line 3: round 3 after round 1: out of order"),
    "a round missing": (_edit(lambda lines: lines[:3] + lines[4:]), "line 4: round 4 after round 2: round 3 missing"),
    "a round not a whole number": (_set("round", "2.5"), "line 3: round '2.5' is not a round number"),
    "round zero": (_set("round", "0", line=2), "line 2: round '0' is not a round number"),
    "accuracy above 1": (_set("test_acc", "1.3"), "line 3: test_acc is '1.3', not empty or a fraction in [0, 1]"),
    "accuracy below 0": (_set("test_acc", "-0.2"), "line 3: test_acc is '-0.2'"),
    "accuracy NaN": (_set("test_acc", "nan"), "line 3: test_acc is 'nan'"),
    "train accuracy a word": (_set("train_acc", "high"), "line 3: train_acc is 'high'"),
    "a loss that is a word": (_set("test_loss", "low"), "line 3: test_loss is 'low', not empty or a number"),
    "bytes not whole": (_set("bytes_up", "12.5"), "line 3: bytes_up is '12.5', not a whole number >= 0"),
    "bytes empty": (_set("bytes_down", ""), "line 3: bytes_down is empty"),
    "negative time": (_set("round_duration_s", "-4"), "line 3: round_duration_s is '-4'"),
    "clock running back": (_set("sim_time_s", "0.0", line=4), "line 4: sim_time_s 0.0 is earlier"),
    "no kind": (_set("kind", ""), "line 3: kind is empty"),
    "a count that is a word": (_set("stragglers", "few"), "line 3: stragglers is 'few'"),
    "a share above 1": (_set("unseen_share", "2"), "line 3: unseen_share is '2'"),
    "no test_acc column": (_edit(lambda lines: [lines[0].replace("test_acc", "test_accuracy")] + lines[1:]),
                           "line 1: no test_acc column"),
    "more rounds than the run": (_edit(lambda lines: lines + [lines[-1].replace("6,", "7,", 1)]),
                                 "7 rounds, but scenario.yaml runs 6"),
}
TABLE_ROWS = {
    "participation.csv": {
        "a device twice": (_set("device", "0", line=3), "line 3: device '0' where a run writes device 1"),
        "a count that is a word": (_set("reported", "x"), "line 3: reported is 'x', not a whole number"),
        "a negative count": (_set("selected", "-1"), "line 3: selected is '-1'"),
    },
    "class_accuracy.csv": {
        "a round twice": (_set("round", "1", line=3), "line 3: round 1 after round 1"),
        "an accuracy above 1": (_set("acc_0", "4"), "line 3: acc_0 is '4'"),
        "a time that is a word": (_set("sim_time_s", "later"), "line 3: sim_time_s is 'later'"),
    },
    "events.csv": {
        "an event that is not a name": (_set("event", "12 34"), "line 3: event '12 34' is not an event name"),
        "a device that is a word": (_set("device", "phone"), "line 3: device is 'phone'"),
        "a round going back": (_edit(lambda lines: lines[:1] + [lines[-1]] + lines[1:-1]), "line 3: round"),
    },
    "device_eval.csv": {
        "an accuracy above 1": (_set("accuracy", "1.5"), "line 3: accuracy is '1.5'"),
        "a device that is a word": (_set("device", "d7"), "line 3: device is 'd7'"),
    },
}
JSON_DAMAGE = {
    "not JSON": (_edit(lambda lines: ["{'status': completed\n"]), "not JSON"),
    "a list": (_bytes(lambda data: b"[1, 2]\n"), "holds a JSON list, not the object a run writes"),
    "a string": (_bytes(lambda data: b'"completed"\n'), "holds a JSON string"),
    "a status that is a number": (_bytes(lambda data: json.dumps({**json.loads(data), "status": 3}).encode() + b"\n"),
                                  "status: '3' is not text"),
    "rounds that are text": (_bytes(lambda data: json.dumps({**json.loads(data), "rounds_completed": "6"}).encode()
                                    + b"\n"), "rounds_completed: '6' is not a whole number"),
}
YAML_DAMAGE = {
    "not YAML": (_bytes(lambda data: b"name: [unclosed\nseed: 3\n"), "not YAML"),
    "a list": (_bytes(lambda data: b"- 1\n- 2\n"), "holds a YAML list"),
    "a seed that is a word": (_edit(lambda lines: [l if not l.startswith("seed:") else "seed: three\n"
                                                   for l in lines]), "seed: 'three' is not a whole number"),
}


def _remove(path: Path) -> None:
    path.unlink()


def cases():
    yield pytest.param("metrics.csv", _remove, "missing", id="metrics.csv: missing")
    for name in FILES:
        damages = dict(EVERY_FILE)
        if name.endswith(".csv"):
            damages.update(CSV_DAMAGE)
        damages.update(METRICS_ROWS if name == "metrics.csv" else TABLE_ROWS.get(name, {}))
        damages.update(JSON_DAMAGE if name == "summary.json" else YAML_DAMAGE if name == "scenario.yaml" else {})
        for kind, (damage, says) in damages.items():
            yield pytest.param(name, damage, says, id=f"{name}: {kind}")


CASES = list(cases())


@pytest.mark.parametrize("name, damage, says", CASES)
def test_a_damaged_file_is_refused_naming_the_file_and_what_is_wrong(healthy, tmp_path, capsys, name, damage, says):
    run = copy_of(healthy, tmp_path)
    damage(run / name)
    with pytest.raises(DamagedRunError) as refused:
        load_run(run)
    message = str(refused.value)
    assert isinstance(refused.value, ScenarioError) and refused.value.file == run / name
    assert message.startswith(f"{run / name}: ") and (says is None or says in message), message
    # the command line: one run given, nothing to report: exit 2, the same words, no traceback, nothing written
    assert main(["report", str(run), "--out", str(tmp_path / "report")]) == 2
    err = capsys.readouterr().err
    assert f"{run / name}: " in err and (says is None or says in err) and "Traceback" not in err, err
    assert not (tmp_path / "report").exists()


def test_a_run_still_going_may_end_in_a_line_it_has_not_finished(healthy, tmp_path):
    """A running run (summary status running, or none yet) is read up to its last whole line; a finished run
    whose last line is cut is damaged."""
    run = copy_of(healthy, tmp_path)
    metrics = run / "metrics.csv"
    metrics.write_bytes(metrics.read_bytes()[:-25])
    with pytest.raises(DamagedRunError, match="line 7: cut short"):
        load_run(run)
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    assert len(load_run(run).metrics) == 5


def test_the_report_of_several_runs_leaves_the_damaged_ones_out_and_says_why(healthy, tmp_path, capsys):
    """One report over a healthy run and a damaged copy of it per file: the healthy run alone in the table,
    each damaged one listed with its file and reason, in report.md and on stderr."""
    runs = tmp_path / "runs"
    copy_of(healthy, runs, "healthy")
    damaged = {}
    for name in FILES:
        run = copy_of(healthy, runs, f"damaged-{name.split('.')[0]}")
        damage = CSV_DAMAGE["garbled line"] if name.endswith(".csv") else JSON_DAMAGE["a list"]
        damage[0](run / name)
        damaged[run] = name
    missing = copy_of(healthy, runs, "damaged-no-metrics")
    (missing / "metrics.csv").unlink()
    damaged[missing] = "metrics.csv"
    assert main(["report", str(runs), "--out", str(tmp_path / "report")]) == 0
    err = capsys.readouterr().err
    report = (tmp_path / "report" / "report.md").read_text()
    assert report.startswith(f"# Run report\n\n1 run(s) in 1 experiment(s), {len(damaged)} left out (below)")
    section = report.split("## Left out: damaged run directories")[1].split("\n## ")[0]
    for run, name in damaged.items():
        assert f"- `{run}`: {name}: " in section, name
        assert f"note: left out {run}, damaged: {name}: " in err, name
        assert report.count(f"`{run}`") == 1, "a damaged run is only listed as left out"
    assert pd.read_csv(tmp_path / "report" / "summary.csv").seeds.tolist() == [1]


# ------------------------------------------------------------------ what each cell of the table averaged
def with_evaluations(healthy: Path, where: Path, name: str, evaluations: int, seed: int = 3) -> Path:
    """A copy of the healthy run (6 evaluated rounds) named `name`, keeping only its last `evaluations` test
    evaluations, as a run evaluating less often writes them (test_acc empty on the other rounds)."""
    run = copy_of(healthy, where, f"{name}-{seed}")
    metrics = pd.read_csv(run / "metrics.csv")
    metrics.loc[: len(metrics) - evaluations - 1, ["test_acc", "test_loss"]] = float("nan")
    metrics.to_csv(run / "metrics.csv", index=False)
    scenario = (run / "scenario.yaml").read_text().replace("seed: 3\n", f"seed: {seed}\n")
    (run / "scenario.yaml").write_text(scenario.replace("name: healthy\n", f"name: {name}\n"))
    return run


EVALUATIONS = (1, 2, 4, 5, 6)
MIXED = {1: 3, 2: 4, 3: 0}  # seed -> evaluations, of one experiment


@pytest.fixture(scope="module")
def short_runs(healthy, tmp_path_factory):
    """One report (final accuracy of the last 5) of an experiment per evaluation count, and one whose seeds had
    3, 4 and no evaluations: (report.md's table by experiment, summary.csv, report.md, the runs)."""
    where = tmp_path_factory.mktemp("short")
    runs = {n: with_evaluations(healthy, where / "runs", f"evals{n}", n) for n in EVALUATIONS}
    for seed, n in MIXED.items():
        with_evaluations(healthy, where / "runs", "mixed", n, seed=seed)
    report = write_report([where / "runs"], where / "report", last=5, target=1.0).read_text()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in report.splitlines() if line.startswith("| ")]
    table = {row[0]: dict(zip(rows[0], row)) for row in rows[1:]}
    return table, pd.read_csv(where / "report" / "summary.csv").set_index("experiment"), report, runs


@pytest.mark.parametrize("evaluations", EVALUATIONS)
def test_the_final_accuracy_says_how_many_evaluations_it_averaged(short_runs, evaluations):
    table, summary, report, runs = short_runs
    row = table[f"evals{evaluations}"]
    accuracy = pd.read_csv(runs[evaluations] / "metrics.csv")["test_acc"].dropna()
    short = evaluations < 5
    assert row["final acc (last 5)"] == f"{accuracy.tail(5).mean():.4f}" + (f" (last {evaluations})" if short else "")
    assert row["rise round (90%)"].endswith(f" (last {evaluations})") == short
    assert row["best acc"] == f"{accuracy.max():.4f}"                 # the best of what there is: no note needed
    assert row["hours to 1.0"] == "not reached"                       # shown, and said, when no run gets there
    assert summary.at[f"evals{evaluations}", "final_acc_count"] == min(evaluations, 5)
    assert "a run had only N evaluations, fewer than 5" in report


def test_seeds_with_different_evaluation_counts_show_the_range_and_an_unevaluated_seed_is_named(short_runs):
    table, summary, _, _ = short_runs
    row = table["mixed"]
    assert row["final acc (last 5)"].split(" (")[1:] == ["last 3-4)", "2 of 3 seeds)"]
    assert row["hours to 1.0"] == "not reached"
    assert (summary.at["mixed", "final_acc_count"], summary.at["mixed", "final_acc_count_max"]) == (3, 4)
    assert summary.at["mixed", "evaluated_seeds"] == 2


def test_a_time_to_target_counts_the_seeds_never_evaluated_apart(healthy, tmp_path):
    for seed, evaluations in MIXED.items():
        with_evaluations(healthy, tmp_path / "runs", "mixed", evaluations, seed=seed)
    write_report([tmp_path / "runs"], tmp_path / "report", target=0.01, formats=("png",))
    report = (tmp_path / "report" / "report.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| mixed"))
    assert "(2 of 3 seeds; 1 never evaluated)" in row


API_PROPERTY = {"metrics.csv": "metrics", "summary.json": "summary", "participation.csv": "participation",
                "class_accuracy.csv": "class_accuracy", "events.csv": "events", "scenario.yaml": "scenario"}


@pytest.mark.parametrize("name, damage, says", [case for case in CASES if case.values[0] in API_PROPERTY
                                                and "more rounds than the run" not in case.id])
def test_the_python_api_refuses_a_damaged_file_when_it_is_read(healthy, tmp_path, name, damage, says):
    """emulator.load(...) of a damaged run: the property reading the damaged file raises a ScenarioError naming
    it (scenario.yaml: validated as any scenario), never a table of what is left."""
    import emulator

    run = copy_of(healthy, tmp_path)
    damage(run / name)
    loaded = emulator.load(run)
    with pytest.raises(ScenarioError) as refused:
        getattr(loaded, API_PROPERTY[name])
    assert str(run / name) in str(refused.value) or name == "scenario.yaml" and "scenario.yaml" in str(refused.value)
    if name != "scenario.yaml":
        assert says is None or says in str(refused.value), str(refused.value)


@pytest.mark.parametrize("cut_before", ["system:", "algorithm:"])
def test_a_scenario_yaml_cut_short_that_still_parses_is_refused(healthy, tmp_path, cut_before):
    """A file that lost its last sections can still be a valid scenario (they take their defaults): the
    run's own record of its start (summary.json) tells it apart from the scenario it ran."""
    import emulator

    run = copy_of(healthy, tmp_path)
    text = (run / "scenario.yaml").read_text()
    (run / "scenario.yaml").write_text(text[:text.index(f"\n{cut_before}") + 1])
    with pytest.raises(ScenarioError, match="does not describe the run summary.json recorded"):
        emulator.load(run).scenario
    assert emulator.load(healthy).scenario.name == "healthy"  # the whole file is read as before

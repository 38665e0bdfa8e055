"""Data bias made visible: label TV of the reports and its random-cohort floor, the share of data never seen,
per-class accuracy (class_accuracy.csv), their survival of a resume, and the report's figures and table."""
import csv
import math
import shutil
import xml.etree.ElementTree as ElementTree

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import STATEFUL, small_scenario
from emulator.recording import bias
from emulator.analysis import load_run, write_report
from emulator.analysis import plots
from emulator.data import build_federation
from emulator.driver import resume_run, run_scenario
from emulator.recording.rundir import read_metrics
from emulator.parts import validate_scenario
from emulator.seeding import rng
from emulator.training.local import evaluate, evaluate_by_class

# 4 devices, 3 classes; device 3 holds no data. Population: [3, 5, 4] / 12.
COUNTS = np.array([[2, 0, 2], [0, 4, 0], [1, 1, 2], [0, 0, 0]])
BIAS_COLUMNS = ("label_tv", "label_tv_floor", "unseen_share", "worst_class", "worst_class_acc")


# ---- pure functions, against hand computations --------------------------------------------------------------

def test_population_and_label_mix_by_hand():
    assert bias.population_mix(COUNTS) == pytest.approx([3 / 12, 5 / 12, 4 / 12])
    # samples: label counts summed, [2, 4, 2] / 8; drawn twice, device 1 counts twice: [2, 8, 2] / 12
    assert bias.label_mix(COUNTS, [0, 1], [1, 1], "samples") == pytest.approx([1 / 4, 1 / 2, 1 / 4])
    assert bias.label_mix(COUNTS, [0, 1], [1, 2], "samples") == pytest.approx([1 / 6, 2 / 3, 1 / 6])
    # uniform: the mean of q_0 = [.5, 0, .5] and q_2 = [.25, .25, .5]; device 3 (no data) gets no weight
    assert bias.label_mix(COUNTS, [0, 2, 3], [1, 1, 1], "uniform") == pytest.approx([0.375, 0.125, 0.5])
    # samples and uniform differ when devices hold different amounts: [2,4,2]/8 vs mean([.5,0,.5], [0,1,0])
    assert bias.label_mix(COUNTS, [1, 2], None, "samples") == pytest.approx([1 / 8, 5 / 8, 2 / 8])
    assert bias.label_mix(COUNTS, [1, 2], None, "uniform") == pytest.approx([1 / 8, 5 / 8, 2 / 8])
    assert bias.label_mix(COUNTS, [0, 1], [3, 1], "uniform") == pytest.approx([3 / 8, 1 / 4, 3 / 8])
    assert bias.label_mix(COUNTS, [0, 1], [3, 1], "samples") == pytest.approx([6 / 16, 4 / 16, 6 / 16])
    assert bias.label_mix(COUNTS, [3], None, "samples") is None  # nobody with data reported
    assert bias.label_mix(COUNTS, [], None, "uniform") is None
    with pytest.raises(ValueError, match="weighting"):
        bias.label_mix(COUNTS, [0], None, "equal")


def test_total_variation_by_hand():
    population = bias.population_mix(COUNTS)
    assert bias.total_variation([1 / 4, 1 / 2, 1 / 4], population) == pytest.approx(1 / 12)
    assert bias.total_variation([1 / 6, 2 / 3, 1 / 6], population) == pytest.approx(0.25)
    assert bias.total_variation([0.375, 0.125, 0.5], population) == pytest.approx(7 / 24)
    assert bias.total_variation([1, 0], [0, 1]) == 1.0
    assert bias.total_variation(population, population) == 0.0


def test_the_floor_is_the_mean_tv_of_random_cohorts():
    halves = np.array([[1, 0], [0, 1]])  # any one device is half the population away; both together, none
    assert bias.random_cohort_floor(halves, 1, "samples", rng(0, "t", 1)) == pytest.approx(0.5)
    assert bias.random_cohort_floor(halves, 2, "uniform", rng(0, "t", 2)) == pytest.approx(0.0)
    assert bias.random_cohort_floor(halves, 5, "uniform", rng(0, "t", 5)) == pytest.approx(0.0)  # capped at 2
    # one device of COUNTS alone: TV 5/12, 7/12, 1/6 (device 3 has no mix and is left out): mean 7/18
    floor = bias.random_cohort_floor(COUNTS, 1, "samples", rng(0, "t", 1), draws=4000)
    assert floor == pytest.approx(7 / 18, abs=0.015)
    # the whole population, sample-weighted, is the population: no gap at all
    assert bias.random_cohort_floor(COUNTS, 4, "samples", rng(0, "t", 4)) == pytest.approx(0.0, abs=1e-12)
    # from the seed alone: the same stream gives the same floor, another one (almost surely) another
    again = [bias.random_cohort_floor(COUNTS, 2, "uniform", rng(7, "label-tv-floor", 2)) for _ in range(2)]
    assert again[0] == again[1]
    assert bias.random_cohort_floor(COUNTS, 2, "uniform", rng(8, "label-tv-floor", 2)) != again[0]


def test_unseen_share_by_hand_and_kept_up_to_date_per_cohort():
    sizes = np.array([10, 20, 30, 40])
    assert bias.unseen_share(sizes, [0, 2, 0, 1]) == pytest.approx(0.4)
    assert bias.unseen_share(sizes, [0, 0, 0, 0]) == 1.0
    reported = np.zeros(4, np.int32)
    unseen = bias.UnseenData(sizes, reported)
    assert unseen.share == 1.0
    reported[[1, 3]] += 1
    assert unseen.update([1, 3, 0, 3], reported) == pytest.approx(0.4)  # device 0 selected but not reported
    reported[1] += 1
    assert unseen.update([1], reported) == pytest.approx(0.4)  # a second report adds nothing new
    reported[0] += 1
    assert unseen.update([0], reported) == pytest.approx(0.3)
    unseen.reset(np.array([1, 0, 0, 0]))  # as after loading a checkpoint
    assert unseen.share == pytest.approx(0.9) == bias.unseen_share(sizes, [1, 0, 0, 0])


def test_class_accuracy_and_the_worst_class_by_hand():
    predictions, labels = [0, 1, 1, 2, 2, 2], [0, 1, 2, 2, 2, 0]
    correct, total = bias.class_correct(predictions, labels, 4)
    assert correct.tolist() == [1, 1, 2, 0] and total.tolist() == [2, 1, 3, 0]
    accuracy = bias.class_accuracy(correct, total)
    assert accuracy[:3] == pytest.approx([0.5, 1.0, 2 / 3]) and math.isnan(accuracy[3])
    assert bias.worst_class(accuracy) == (0, 0.5)
    assert bias.worst_class([0.7, 0.2, 0.2]) == (1, 0.2)  # a tie: the lower class
    assert bias.worst_class([math.nan, math.nan]) == (None, None)


def test_evaluation_by_class_adds_up_to_the_overall_accuracy():
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 4)
    x, y = torch.randn(103, 5), torch.randint(0, 3, (103,))  # class 3 has no test samples
    loss, acc, correct, total = evaluate_by_class(model, x, y, batch_size=10, num_classes=4)
    assert (loss, acc) == evaluate(model, x, y, 10)
    assert correct.sum() == round(acc * 103) and total.tolist() == np.bincount(y.numpy(), minlength=4).tolist()
    predictions = model(x).argmax(1).numpy()
    assert correct.tolist() == bias.class_correct(predictions, y.numpy(), 4)[0].tolist()


# ---- a run -------------------------------------------------------------------------------------------------------

WORLD = {**STATEFUL, "system.events": True}


@pytest.fixture(scope="module")
def reference(ray_session, tmp_path_factory):
    """A stateful world (Markov availability, dropout, a deadline) run without interruption, with events."""
    path = tmp_path_factory.mktemp("ref") / "run"
    run_scenario(validate_scenario(small_scenario(**WORLD)), path)
    return path


def _federation(path):
    scenario = validate_scenario(small_scenario(**WORLD))
    return build_federation(scenario.data, scenario.population.devices, scenario.seed)


def _reported(path) -> dict[int, list[int]]:
    """Round -> the devices that reported in it, from events.csv."""
    rounds: dict[int, list[int]] = {}
    with open(path / "events.csv", newline="") as handle:
        for row in csv.DictReader(handle):
            if row["event"] == "reported":
                rounds.setdefault(int(row["round"]), []).append(int(row["device"]))
    return rounds


def test_a_run_records_label_tv_its_floor_and_unseen_data_every_round(reference):
    rows = read_metrics(reference)
    assert all(column in rows[0] for column in BIAS_COLUMNS)
    federation = _federation(reference)
    counts = federation.label_counts()
    population = bias.population_mix(counts)
    reported = _reported(reference)
    for row in rows:
        failed = row["failed"] == "1"  # reports that came in a failed round are not aggregated
        devices = [] if failed else sorted(reported.get(int(row["round"]), []))
        assert (row["label_tv"] == "") == (not devices)
        if devices:  # the TV of what reported (uniform weighting, the default), recomputed from the events
            mix = bias.label_mix(counts, devices, None, "uniform")
            assert float(row["label_tv"]) == pytest.approx(bias.total_variation(mix, population), abs=1e-12)
            assert 0 < float(row["label_tv_floor"]) <= 1
        assert 0 <= float(row["unseen_share"]) <= 1
    assert any(r["label_tv"] != "" for r in rows)
    shares = [float(r["unseen_share"]) for r in rows]
    assert shares == sorted(shares, reverse=True) and shares[-1] < 1  # never grows; some data gets seen
    participation = pd.read_csv(reference / "participation.csv")
    assert shares[-1] == pytest.approx(bias.unseen_share(participation["samples"], participation["reported"]))


def test_class_accuracy_csv_has_one_row_per_evaluation_and_adds_up_to_test_acc(reference):
    rows = read_metrics(reference)
    table = pd.read_csv(reference / "class_accuracy.csv")
    evaluated = [r for r in rows if r["test_acc"] != ""]
    assert table["round"].tolist() == [int(r["round"]) for r in evaluated]
    assert table["sim_time_s"].tolist() == pytest.approx([float(r["sim_time_s"]) for r in evaluated])
    federation = _federation(reference)
    classes = federation.train.num_classes
    assert list(table.columns) == ["round", "sim_time_s"] + [f"acc_{c}" for c in range(classes)]
    per_class = np.bincount(federation.test.y, minlength=classes)
    for (_, accuracies), row in zip(table.iterrows(), evaluated):
        acc = accuracies[[f"acc_{c}" for c in range(classes)]].to_numpy(dtype=float)
        assert np.isnan(acc).tolist() == (per_class == 0).tolist()  # blank only where a class has no samples
        correct = np.nansum(acc * per_class)  # per-class correct counts add up to the overall count
        assert correct == pytest.approx(float(row["test_acc"]) * per_class.sum(), abs=1e-6)
        assert int(row["worst_class"]) == int(np.nanargmin(acc))
        assert float(row["worst_class_acc"]) == pytest.approx(np.nanmin(acc))
        assert ((0 <= acc[~np.isnan(acc)]) & (acc[~np.isnan(acc)] <= 1)).all()


def test_a_resumed_run_writes_the_class_accuracy_file_of_an_uninterrupted_one(reference, tmp_path):
    def stop_after_round_5(row):
        if row["round"] == 5:
            raise KeyboardInterrupt

    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(validate_scenario(small_scenario(**WORLD)), run, on_round=stop_after_round_5)
    assert pd.read_csv(run / "class_accuracy.csv")["round"].tolist() == [1, 2, 3, 4, 5]
    with open(run / "class_accuracy.csv", "a", newline="") as handle:
        handle.write("6,1234.5,0.1")  # a line cut short by a kill
    resume_run(run)  # from the checkpoint after round 4: round 5 again, the cut line dropped
    assert (run / "class_accuracy.csv").read_bytes() == (reference / "class_accuracy.csv").read_bytes()
    assert read_metrics(run)[-1]["unseen_share"] == read_metrics(reference)[-1]["unseen_share"]


def test_server_rounds_have_no_label_tv(ray_session, tmp_path):
    raw = small_scenario(**{"data.server_set": {"size": 120, "source": "iid"}, "system.model": "ideal",
                            "rounds": 6, "output.tensorboard": False},
                         algorithm={**small_scenario()["algorithm"], "name": "safari", "q": 0.5})
    rows = read_metrics(run_scenario(validate_scenario(raw), tmp_path / "safari").path)
    kinds = {r["kind"] for r in rows}
    assert kinds == {"client", "server"}, kinds
    for row in rows:
        assert (row["label_tv"] == "") == (row["kind"] == "server")
        assert (row["label_tv_floor"] == "") == (row["kind"] == "server")
        assert row["unseen_share"] != ""


# ---- the report -----------------------------------------------------------------------------------------------

def _as_older_version(run, path):
    """A copy of a run as an older version wrote it: no bias columns, no class_accuracy.csv."""
    shutil.copytree(run, path)
    (path / "class_accuracy.csv").unlink()
    metrics = pd.read_csv(path / "metrics.csv").drop(columns=list(BIAS_COLUMNS))
    metrics.to_csv(path / "metrics.csv", index=False)
    text = (path / "scenario.yaml").read_text().replace("name: tiny", "name: older")
    (path / "scenario.yaml").write_text(text)
    return path


def test_the_report_draws_label_tv_and_class_accuracy_and_tabulates_them(reference, tmp_path):
    older = _as_older_version(reference, tmp_path / "older")
    out = tmp_path / "report"
    write_report([reference, older], out, formats=("png", "pdf", "svg"))
    for stem in ("label_tv", "class_accuracy"):
        assert (out / f"{stem}.png").read_bytes().startswith(b"\x89PNG")
        assert (out / f"{stem}.pdf").read_bytes().startswith(b"%PDF")
        assert ElementTree.parse(out / f"{stem}.svg").getroot().tag.endswith("svg")
    report = (out / "report.md").read_text()
    assert "![Label mix of the reports against the population](label_tv.png)" in report
    assert "![Test accuracy per class](class_accuracy.png)" in report
    assert "| mean label TV | TV over floor | data never seen | worst class acc |" in report
    summary = pd.read_csv(out / "summary.csv").set_index("experiment")
    metrics = pd.read_csv(reference / "metrics.csv")
    assert summary.at["tiny", "mean_label_tv"] == pytest.approx(metrics["label_tv"].mean())
    assert summary.at["tiny", "label_tv_excess"] == pytest.approx(
        (metrics["label_tv"] - metrics["label_tv_floor"]).mean())
    assert summary.at["tiny", "unseen_share"] == pytest.approx(metrics["unseen_share"].iloc[-1])
    assert summary.at["tiny", "worst_class_acc"] == pytest.approx(metrics["worst_class_acc"].dropna().iloc[-1])
    assert math.isnan(summary.at["older", "mean_label_tv"])  # older runs report, with '-' in these cells

    only_older = tmp_path / "report-older"
    write_report([older], only_older)
    assert not (only_older / "label_tv.png").exists() and not (only_older / "class_accuracy.png").exists()
    assert "mean label TV" not in (only_older / "report.md").read_text()


def test_the_bias_figures_show_each_experiment_with_its_floor_and_cut_nothing_off(reference, tmp_path):
    from test_figures import LONG, _cut_off

    run = load_run(reference)
    groups = {"short": [run], LONG + " (algorithm.client_lr=0.1)": [run, run]}
    for width in ("one-column", "two-column"):
        fig = plots.draw_label_tv(groups, width)
        lines = fig.axes[0].get_lines()
        colours = [plots.PALETTE[0], plots.PALETTE[1]]
        # per experiment its line and a thin dashed floor of the same colour (and the legend's floor handle)
        for colour in colours:
            drawn = [line for line in lines if line.get_color() == colour]
            assert len(drawn) == 2 and sum(line.get_linewidth() < 1 for line in drawn) == 1
        floor = [line for line in lines if line.get_color() == colours[0] and line.get_linewidth() < 1][0]
        assert floor.get_ydata() == pytest.approx(run.metrics["label_tv_floor"].dropna().to_numpy())
        assert not _cut_off(fig)
        heatmap = plots.draw_class_accuracy(groups, width)
        assert len([ax for ax in heatmap.axes if ax.get_ylabel() == "class"]) == 2
        assert not _cut_off(heatmap)
    table = plots.class_accuracy_table([run, run])
    assert table.to_numpy() == pytest.approx(run.class_accuracy.set_index("round").drop(columns="sim_time_s")
                                             .to_numpy(), nan_ok=True)

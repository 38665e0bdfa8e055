"""Report figures are fit for a paper: PNG, PDF and SVG, a column wide, and no text cut off, however long the
experiment names. Runs are made by hand (no Ray), so these tests take seconds."""
import json
import math
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest
import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text

from conftest import small_scenario
from emulator.analysis import plots
from emulator.analysis.figure_style import FIGURE_FORMATS, writing_formats
from emulator.analysis.runs import Run, group_runs
from emulator.cli import main

LONG = "a-very-long-experiment-name-that-goes-on-and-on-for-sixty-chars"


def make_run(name: str, seed: int = 0, rounds: int = 40, round_s: float = 90.0, mb_per_round: float = 10.0,
             fast: bool = False, asynchronous: bool = False, **settings) -> Run:
    """A run as `load_run` would give it: per-round metrics (an evaluation every 5 rounds) and participation."""
    rng = np.random.default_rng(seed)
    r = np.arange(1, rounds + 1)
    durations = round_s * rng.lognormal(0.0, 0.3, rounds)
    accuracy = 0.9 - 0.8 * np.exp(-r / 10) + rng.normal(0, 0.01, rounds)
    metrics = pd.DataFrame({
        "round": r, "kind": "client", "failed": 0, "sim_start_s": durations.cumsum() - durations,
        "sim_time_s": durations.cumsum(), "round_duration_s": durations, "selected": 26, "participants": 20,
        "dropped": 0, "stragglers": 6, "bytes_down": int(mb_per_round * 0.6e6), "bytes_up": int(mb_per_round * 0.4e6),
        "test_acc": np.where(r % 5 == 0, accuracy, np.nan)})
    if fast:
        metrics["q"] = np.clip(0.5 + 0.1 * np.sin(r / 3), 0, 1)
    if asynchronous:  # a row per server update: the stream's columns
        metrics["staleness_mean"] = rng.poisson(3.0, rounds).astype(float)
        metrics["concurrency_mean"] = 50 - rng.uniform(0, 5, rounds)
    devices = 200
    reported = rng.poisson(rounds * 20 / devices, devices)
    participation = pd.DataFrame({"device": np.arange(devices), "samples": 100, "selected": reported + 1,
                                  "reported": reported, "dropped": 0, "straggled": 1})
    scenario = {"name": name, "seed": seed, "rounds": rounds}
    for key, value in settings.items():  # algorithm__client_lr=0.1 -> {"algorithm": {"client_lr": 0.1}}
        section, field = key.split("__")
        scenario.setdefault(section, {})[field] = value
    summary = {"status": "completed", "rounds_completed": rounds, "finished_at": "2026-01-01T00:00:00+0000"}
    return Run(Path(f"/runs/{name}-{seed}"), scenario, metrics, summary, participation)


def sweep_groups() -> dict[str, list[Run]]:
    """A sweep of one scenario over two settings (one point with two seeds), and a FAST run: labelled by
    group_runs as 'quickstart (algorithm.client_lr=..., system.over_selection=...)' and 'fast-fmnist'."""
    runs = [make_run("quickstart", seed, algorithm__client_lr=0.05, system__over_selection=1.3) for seed in (0, 1)]
    runs += [make_run("quickstart", 0, round_s=60, algorithm__client_lr=0.1, system__over_selection=2.0),
             make_run("quickstart", 0, round_s=45, algorithm__client_lr=0.05, system__over_selection=2.0),
             make_run("fast-fmnist", 0, rounds=60, round_s=20, fast=True)]
    return group_runs(runs)


def async_groups() -> dict[str, list[Run]]:
    """A synchronous experiment (two seeds) beside an asynchronous one (a row per server update)."""
    runs = [make_run("quickstart", seed) for seed in (0, 1)]
    runs += [make_run("fedbuff", seed, rounds=80, round_s=15, asynchronous=True) for seed in (0, 1)]
    return group_runs(runs)


def long_groups() -> dict[str, list[Run]]:
    """Names of 60 characters and more, and settings on top, that no shortening can make short."""
    runs = [make_run(LONG, seed, rounds=30, round_s=4000, mb_per_round=200, algorithm__client_lr=0.1,
                     system__over_selection=2.0, population__dropout_per_hour=1.0) for seed in (0, 1)]
    runs += [make_run(LONG, 0, rounds=30, round_s=5000, mb_per_round=200, algorithm__client_lr=0.05,
                      system__over_selection=1.3, population__dropout_per_hour=0.5),
             make_run("yet_another_extraordinarily_long_scenario_name_for_a_paper_draft_v2", 0, rounds=30,
                      round_s=3000, mb_per_round=200, fast=True),
             make_run("x" * 90, 0, rounds=30, round_s=3500, mb_per_round=200)]
    return group_runs(runs)


# ---- short legend labels --------------------------------------------------------------------------------------

def test_short_labels_keep_what_differs_and_drop_the_shared_name_and_key_paths():
    labels = ["quickstart (algorithm.client_lr=0.1, system.over_selection=1.3)",
              "quickstart (algorithm.client_lr=0.05, system.over_selection=2.0)"]
    assert plots.short_labels(labels) == {labels[0]: "client_lr=0.1, over_selection=1.3",
                                          labels[1]: "client_lr=0.05, over_selection=2.0"}


def test_short_labels_keep_the_name_where_names_differ_and_drop_the_words_all_share():
    labels = ["fast-fmnist", "quickstart (algorithm.client_lr=0.1)", "quickstart (algorithm.client_lr=0.05)"]
    assert plots.short_labels(labels) == {"fast-fmnist": "fast-fmnist", labels[1]: "quickstart (client_lr=0.1)",
                                          labels[2]: "quickstart (client_lr=0.05)"}
    assert plots.short_labels(["fast-fmnist", "fedavg-fmnist"]) == {"fast-fmnist": "fast", "fedavg-fmnist": "fedavg"}
    # what is left must still say something: a bare number does not
    assert plots.short_labels(["deadline_60", "deadline_120"]) == {"deadline_60": "deadline_60",
                                                                   "deadline_120": "deadline_120"}
    # a sweep's runs (NAME-KEY_VALUE) read as KEY=VALUE
    sweep = ["quickstart-over_selection_1.0", "quickstart-over_selection_2.0"]
    assert plots.short_labels(sweep) == {sweep[0]: "over_selection=1.0", sweep[1]: "over_selection=2.0"}


def test_short_labels_keep_as_much_of_a_key_as_tells_it_apart():
    labels = ["q (population.compute.sigma=0.5, population.network.sigma=0.7)",
              "q (population.compute.sigma=0.7, population.network.sigma=0.5)"]
    assert plots.short_labels(labels) == {labels[0]: "compute.sigma=0.5, network.sigma=0.7",
                                          labels[1]: "compute.sigma=0.7, network.sigma=0.5"}


def test_short_labels_leave_single_and_unparsable_labels_alone():
    assert plots.short_labels([]) == {}
    assert plots.short_labels(["quickstart"]) == {"quickstart": "quickstart"}
    odd = ["run (a, b)", "run (c)"]
    assert plots.short_labels(odd) == {"run (a, b)": "run (a, b)", "run (c)": "run (c)"}
    values = ["s (population.availability=[{'kind': 'always'}, {'kind': 'never'}], seed_data=1)",
              "s (population.availability=[{'kind': 'markov'}], seed_data=1)"]
    assert plots.short_labels(values) == {values[0]: "availability=[{'kind': 'always'}, {'kind': 'never'}]",
                                          values[1]: "availability=[{'kind': 'markov'}]"}


# ---- units ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("span_s, unit", [(90, "seconds"), (600, "minutes"), (7199, "minutes"), (7200, "hours"),
                                          (2.9 * 86400, "hours"), (3 * 86400, "days"), (40 * 86400, "days")])
def test_time_unit_follows_the_span(span_s, unit):
    assert plots.time_unit(span_s)[0] == unit


@pytest.mark.parametrize("span, unit", [(5e5, "kB"), (2.6e8, "MB"), (1.9e9, "MB"), (2e9, "GB"), (4e12, "TB")])
def test_bytes_unit_follows_the_span(span, unit):
    assert plots.bytes_unit(span)[0] == unit


def test_axis_labels_name_the_unit():
    groups = sweep_groups()  # rounds of about a minute: tens of minutes; tens of MB a round: hundreds of MB
    assert _xlabel(plots.draw_accuracy(groups, "time")) == "simulated time (minutes)"
    assert _xlabel(plots.draw_accuracy(groups, "bytes")) == "data moved, up + down (MB)"
    assert _xlabel(plots.draw_round_times(groups)) == "round duration (simulated minutes)"  # up to 3 minutes
    groups = long_groups()  # 30 rounds of about an hour, 200 MB each
    assert _xlabel(plots.draw_accuracy(groups, "time")) == "simulated time (hours)"
    assert _xlabel(plots.draw_accuracy(groups, "bytes")) == "data moved, up + down (GB)"
    assert _xlabel(plots.draw_round_times(groups)) == "round duration (simulated hours)"


def _xlabel(fig: Figure) -> str:
    return fig.axes[0].get_xlabel()


# ---- files, sizes, looks ----------------------------------------------------------------------------------------

def _all_figures(groups, out: Path, **width) -> list[Path]:
    paths = [plots.accuracy_figure(groups, axis, out / f"accuracy_vs_{axis}.png", **width)
             for axis in ("time", "rounds", "bytes")]
    paths += [plots.participation_figure(groups, out / "participation.png", **width),
              plots.round_time_figure(groups, out / "round_durations.png", **width),
              plots.snapshot_figure(groups, out / "fast_q.png", **width)]
    return paths


@pytest.mark.heavy
def test_every_figure_is_written_as_png_pdf_and_svg(tmp_path):
    with writing_formats(FIGURE_FORMATS):  # the tests' default is PNG only (conftest.py)
        paths = _all_figures(sweep_groups(), tmp_path)
    assert all(p is not None for p in paths)
    for png in paths:
        assert png.suffix == ".png" and png.read_bytes().startswith(b"\x89PNG")
        assert png.with_suffix(".pdf").read_bytes().startswith(b"%PDF")
        svg = png.with_suffix(".svg")
        assert svg.stat().st_size > 0
        assert ElementTree.parse(svg).getroot().tag.endswith("svg")


def test_figures_are_one_or_two_paper_columns_wide_with_print_sized_text():
    groups = sweep_groups()
    for width, inches in (("one-column", 3.3), ("two-column", 7.0), ("one", 3.3)):
        for fig in _drawn(groups, width):
            assert fig.get_figwidth() == pytest.approx(inches)
            sizes = {t.get_fontsize() for t in _texts(fig)}
            assert min(sizes) >= 7 and max(sizes) <= 9
    with pytest.raises(ValueError, match="one-column"):
        plots.draw_accuracy(groups, "time", "three-column")


def test_each_experiment_has_its_own_colour_line_style_and_marker_in_every_figure():
    groups = sweep_groups()
    looks = {}
    for fig in _drawn(groups, "two-column"):
        if not fig.legends:  # round durations: one box per experiment, named on the axis
            continue
        legend = fig.legends[0]
        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            look = (handle.get_color(), str(handle.get_linestyle()), handle.get_marker())
            assert looks.setdefault(text.get_text(), look) == look  # the same in every figure
    assert len(looks) == len(groups) == len(set(looks.values()))
    assert len({color for color, _, _ in looks.values()}) == len(groups)
    assert len({style for _, style, _ in looks.values()}) == len(groups)
    assert set(looks) == {plots.short_labels(list(groups))[label] + (" (2\u00a0seeds)" if len(runs) > 1 else "")
                          for label, runs in groups.items()}


def _drawn(groups, width) -> list[Figure]:
    figures = [plots.draw_accuracy(groups, axis, width) for axis in ("time", "rounds", "bytes")]
    figures += [plots.draw_participation(groups, width), plots.draw_round_times(groups, width),
                plots.draw_snapshot(groups, width)]
    return figures


# ---- nothing is cut off -------------------------------------------------------------------------------------------

def _texts(fig: Figure) -> list[Text]:
    """The text the figure draws: visible, not empty, and for tick labels only those of ticks in view."""
    hidden = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            low, high = sorted(axis.get_view_interval())
            slack = (high - low) * 1e-9
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                loc = tick.get_loc()
                if loc is None or not low - slack <= loc <= high + slack:
                    hidden.update((tick.label1, tick.label2))
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip() and t not in hidden]


def _cut_off(fig: Figure) -> list[str]:
    """The texts that stick out of the figure (and so are cut off in a PNG or PDF of it)."""
    if not hasattr(fig.canvas, "get_renderer"):  # a pyplot figure, closed after saving
        FigureCanvasAgg(fig)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    box = fig.bbox
    cut = []
    for text in _texts(fig):
        extent = text.get_window_extent(renderer)
        if extent.x0 < box.x0 - 1 or extent.y0 < box.y0 - 1 or extent.x1 > box.x1 + 1 or extent.y1 > box.y1 + 1:
            cut.append(text.get_text())
    return cut


@pytest.mark.parametrize("names", ["sweep", "long"])
@pytest.mark.parametrize("width", [None, "one-column"], ids=["default", "one-column"])
def test_no_text_is_cut_off_at_any_label_length(names, width, tmp_path, monkeypatch):
    """Every title, axis label, tick label and legend entry lies inside the figure, as the figure is saved."""
    saved = []
    monkeypatch.setattr(Figure, "savefig", lambda fig, *args, **kwargs: saved.append(fig))  # keep, don't write
    groups = sweep_groups() if names == "sweep" else long_groups()
    _all_figures(groups, tmp_path, **({"width": width} if width else {}))
    figures = list(dict.fromkeys(saved))
    assert len(figures) == 6
    for fig in figures:
        assert not _cut_off(fig), f"{fig.axes[0].get_xlabel()!r}: cut off: {_cut_off(fig)}"


# ---- the report ----------------------------------------------------------------------------------------------------

def _write_run(run: Run, path: Path) -> Path:
    path.mkdir(parents=True)
    run.metrics.to_csv(path / "metrics.csv", index=False)
    run.participation.to_csv(path / "participation.csv", index=False)
    (path / "scenario.yaml").write_text(yaml.safe_dump(run.scenario))
    (path / "summary.json").write_text(json.dumps(run.summary))
    return path


def test_report_links_the_png_offers_pdf_and_svg_and_says_what_short_labels_stand_for(tmp_path, monkeypatch):
    monkeypatch.delenv("EMULATOR_FIGURE_DPI")  # the print resolution a user gets (the tests draw at 100 dpi)
    runs = [make_run("quickstart", 0, algorithm__client_lr=0.1), make_run("quickstart", 0, algorithm__client_lr=0.05),
            make_run(LONG, 0)]
    dirs = [_write_run(run, tmp_path / "runs" / str(i)) for i, run in enumerate(runs)]
    out = tmp_path / "report"
    assert main(["report", *map(str, dirs), "--out", str(out), "--figure-width", "one",
                 "--formats", "png,pdf,svg"]) == 0
    report = (out / "report.md").read_text()
    for stem in ("accuracy_vs_time", "accuracy_vs_rounds", "accuracy_vs_bytes", "participation", "round_durations"):
        assert f"]({stem}.png)" in report and f"({stem}.pdf)" in report and f"({stem}.svg)" in report
        for suffix in (".png", ".pdf", ".svg"):
            assert (out / (stem + suffix)).stat().st_size > 0
        height, width = matplotlib.image.imread(out / f"{stem}.png").shape[:2]
        assert width == pytest.approx(3.3 * plots.PNG_DPI, rel=0.03), stem  # one column, at most cropped a little
    assert "- `quickstart (client_lr=0.1)`: quickstart (algorithm.client_lr=0.1)" in report
    assert not math.isnan(pd.read_csv(out / "summary.csv").final_acc.iloc[0])


def test_the_async_figure_shows_staleness_shares_and_sync_cohorts_on_one_time_axis(tmp_path):
    groups = async_groups()
    fig = plots.draw_async(groups)
    stale, busy = fig.axes[:2]
    assert len(stale.patches) == 1  # one step outline: the asynchronous experiment's
    heights, _ = np.histogram(np.concatenate([r.metrics["staleness_mean"] for r in groups["fedbuff"]]),
                              bins=np.arange(0, 20) - 0.5)
    assert stale.patches[0].get_path().vertices[:, 1].max() == pytest.approx(heights.max() / heights.sum())
    assert len([line for line in busy.lines if len(line.get_xdata())]) == 2  # async in flight, sync selected
    assert busy.get_xlabel().startswith("simulated time")
    assert plots.draw_async(sweep_groups()) is None  # no asynchronous run: no figure
    for width in ("two-column", "one-column"):
        assert not _cut_off(plots.draw_async(groups, width))
    with writing_formats(("png", "pdf")):
        assert plots.async_figure(groups, tmp_path / "async.png").with_suffix(".pdf").exists()
    assert not (tmp_path / "async.svg").exists()


def test_the_privacy_figure_plots_accuracy_against_epsilon_for_the_private_runs_only(tmp_path):
    runs = [make_run("quickstart", seed) for seed in (0, 1)]
    private = [make_run("private", seed) for seed in (0, 1)]
    for run in private:  # epsilon grows with the releases; a last row at infinity (noise 0) is left out
        run.metrics["dp_epsilon"] = np.sqrt(run.metrics["round"].to_numpy(float)) * 0.5
    groups = group_runs(runs + private)
    fig = plots.draw_accuracy({k: v for k, v in groups.items() if k == "private"}, "epsilon")
    assert fig.axes[0].get_xlabel().startswith("epsilon (nominal")
    x = [line.get_xdata() for line in fig.axes[0].lines if len(line.get_xdata()) > 1][0]
    assert max(x) == pytest.approx(0.5 * math.sqrt(40))  # the last evaluation's epsilon
    assert plots.privacy_figure(group_runs(runs), tmp_path / "none.png") is None  # no private run: no figure
    with writing_formats(FIGURE_FORMATS):
        path = plots.privacy_figure(groups, tmp_path / "eps.png")
    assert path.exists() and path.with_suffix(".svg").exists()
    for width in ("two-column", "one-column"):
        assert not _cut_off(plots.draw_accuracy({"private": groups["private"]}, "epsilon", width))


def test_a_png_only_report_writes_and_offers_no_other_format(tmp_path, capsys):
    dirs = [_write_run(make_run("quickstart", seed), tmp_path / "runs" / str(seed)) for seed in (0, 1)]
    assert main(["report", *map(str, dirs), "--out", str(tmp_path / "r"), "--formats", "png"]) == 0
    assert sorted({p.suffix for p in (tmp_path / "r").iterdir()}) == [".csv", ".md", ".png"]
    assert "For a paper" not in (tmp_path / "r" / "report.md").read_text()
    with pytest.raises(SystemExit) as refused:  # argparse's own exit, code 2
        main(["report", *map(str, dirs), "--out", str(tmp_path / "bad"), "--formats", "pdf"])
    assert refused.value.code == 2 and "includes png" in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_the_png_resolution_follows_emulator_figure_dpi_and_a_bad_one_is_refused_before_anything_is_drawn(
        tmp_path, monkeypatch, capsys):
    dirs = [_write_run(make_run("quickstart", 0), tmp_path / "runs" / "0")]
    monkeypatch.setenv("EMULATOR_FIGURE_DPI", "120")
    assert main(["report", *map(str, dirs), "--out", str(tmp_path / "r120"), "--figure-width", "one"]) == 0
    width = matplotlib.image.imread(tmp_path / "r120" / "accuracy_vs_time.png").shape[1]
    assert width == pytest.approx(3.3 * 120, rel=0.03)
    for bad in ("high", "10", "72.5"):
        monkeypatch.setenv("EMULATOR_FIGURE_DPI", bad)
        assert main(["report", *map(str, dirs), "--out", str(tmp_path / "bad")]) == 2
        assert "EMULATOR_FIGURE_DPI" in capsys.readouterr().err and not (tmp_path / "bad").exists()
    # a sweep, whose report comes after its runs, refuses it before the first run
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario(rounds=1)))
    assert main(["sweep", str(scenario), "--seeds", "1", "--out", str(tmp_path / "sweep"), "--quiet"]) == 2
    assert "EMULATOR_FIGURE_DPI" in capsys.readouterr().err and not (tmp_path / "sweep").exists()

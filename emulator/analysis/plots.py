"""Figures for a report, sized and styled to go into a paper: one figure per question, every experiment overlaid.

Every figure is written three times with one stem: PNG (linked from report.md), PDF and SVG (for a paper).
Its width is a paper's column, two-column (7 in, the default) or one-column (3.3 in), and its text is 7-8 pt,
so it reads at print size without scaling. An experiment keeps one look in every figure: a colour from Okabe
and Ito's colour-blind-safe palette, a line style and a marker, so lines are told apart in greyscale too.
Experiments with several seeds are drawn as the mean with a lighter band from the lowest to the highest seed.
Legend labels keep only what differs between experiments (`short_labels`); report.md lists the full names.
Axes show simulated time in seconds, minutes, hours or days and bytes in kB, MB, GB or TB, chosen by the span.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from emulator.analysis.figure_style import (  # noqa: F401  (re-exported)
    PALETTE,
    PNG_DPI,
    PT,
    STYLE,
    WIDTHS,
    _figure,
    _inches,
    _legend,
    _line,
    _looks,
    _mean_line,
    _save,
    _seeds,
    _styled,
    _wrap,
    bytes_unit,
    legend_key,
    short_labels,
    time_unit,
)
from emulator.analysis.metrics import lorenz_curve
from emulator.analysis.runs import Run

# ---- the figures --------------------------------------------------------------------------------------------------

def mean_band(curves: list[tuple[np.ndarray, np.ndarray]], points: int = 200):
    """Mean, low and high of several curves on a common x grid (where every curve is defined)."""
    if len(curves) == 1:
        x, y = curves[0]
        return x, y, y, y
    start = max(c[0][0] for c in curves if len(c[0]))
    stop = min(c[0][-1] for c in curves if len(c[0]))
    if not stop > start:
        x, y = curves[0]
        return x, y, y, y
    grid = np.linspace(start, stop, points)
    ys = np.array([np.interp(grid, x, y) for x, y in curves])
    return grid, ys.mean(axis=0), ys.min(axis=0), ys.max(axis=0)


AXES = {  # x axis -> its values in base units (seconds, rounds, bytes), from a run's metrics
    "time": lambda m: m["sim_time_s"],
    "rounds": lambda m: m["round"].astype(float),
    "bytes": lambda m: (m["bytes_down"] + m["bytes_up"]).cumsum(),
    "epsilon": lambda m: m["dp_epsilon"],  # runs with privacy: the nominal epsilon spent so far
    "energy": lambda m: m["energy_j"].cumsum(),  # runs with population.energy: joules spent so far
}


def _curve(run: Run, axis: str, column: str) -> tuple[np.ndarray, np.ndarray]:
    metrics = run.metrics
    x = AXES[axis](metrics).to_numpy(dtype=float)
    y = metrics[column].to_numpy(dtype=float)
    keep = ~np.isnan(y) & np.isfinite(x)
    return x[keep], y[keep]


def _x_axis(axis: str, span: float) -> tuple[str, float]:
    """The x axis label (with its unit) and the divisor from base units."""
    if axis == "time":
        unit, seconds = time_unit(span)
        return f"simulated time ({unit})", seconds
    if axis == "bytes":
        unit, size = bytes_unit(span)
        return f"data moved, up + down ({unit})", size
    if axis == "epsilon":
        return "epsilon (nominal, Poisson cohorts)", 1.0
    if axis == "energy":
        return ("fleet energy (MJ)", 1e6) if span >= 1e6 else ("fleet energy (kJ)", 1e3)
    return "round", 1.0


@_styled
def draw_accuracy(groups: dict[str, list[Run]], axis: str, width: str | float = "two-column") -> Figure:
    """Test accuracy against simulated time, rounds or bytes moved: one line (and seed band) per experiment."""
    width_in = _inches(width)
    one_column = width_in < 5
    fig = _figure(width_in, 2.4 if one_column else 3.0)
    ax = fig.add_subplot()
    looks, names = _looks(groups), short_labels(list(groups))
    bands = {}
    for label, runs in groups.items():
        curves = [c for c in (_curve(r, axis, "test_acc") for r in runs) if len(c[0])]
        if curves:
            bands[label] = mean_band(curves)
    span = max((band[0].max() for band in bands.values()), default=1.0)
    xlabel, divisor = _x_axis(axis, span)
    handles, texts = [], []
    for label, (x, mean, low, high) in bands.items():
        handles.append(_mean_line(ax, x / divisor, mean, low, high, looks[label], len(groups[label]), one_column))
        texts.append(names[label] + _seeds(groups[label]))
    ax.set_xlabel(xlabel)
    if axis == "rounds":
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("test accuracy")
    ax.grid(True)
    _legend(fig, handles, texts)
    return fig


def accuracy_figure(groups: dict[str, list[Run]], axis: str, path: Path, width: str | float = "two-column") -> Path:
    """`draw_accuracy`, written to `path` (PNG) and beside it as PDF and SVG; returns the PNG's path."""
    return _save(draw_accuracy(groups, axis, width), path)


def privacy_figure(groups: dict[str, list[Run]], path: Path, width: str | float = "two-column") -> Path | None:
    """Test accuracy against the epsilon spent, for the experiments run with client-level DP (None if none)."""
    private = {label: runs for label, runs in groups.items() if all(_has(r, "dp_epsilon") for r in runs)}
    return _save(draw_accuracy(private, "epsilon", width), path) if private else None


def energy_figure(groups: dict[str, list[Run]], path: Path, width: str | float = "two-column") -> Path | None:
    """Test accuracy against the energy the fleet spent, for the experiments with population.energy."""
    powered = {label: runs for label, runs in groups.items() if all(_has(r, "energy_j") for r in runs)}
    return _save(draw_accuracy(powered, "energy", width), path) if powered else None


@_styled
def draw_participation(groups: dict[str, list[Run]], width: str | float = "two-column") -> Figure | None:
    """How often each device reported (as a share of the population, so that populations of different sizes
    compare; the mean over seeds) and the Lorenz curve of reports, per experiment."""
    with_data = {label: runs for label, runs in groups.items() if any(r.participation is not None for r in runs)}
    if not with_data:
        return None
    width_in = _inches(width)
    one_column = width_in < 5
    fig = _figure(width_in, 4.4 if one_column else 2.6)
    hist, lorenz = fig.subplots(2, 1) if one_column else fig.subplots(1, 2)
    looks, names = _looks(groups), short_labels(list(groups))
    seeded = [r for runs in with_data.values() for r in runs if r.participation is not None]
    top = max(int(r.participation["reported"].max()) for r in seeded)
    edges = np.arange(0, top + 2) - 0.5 if top < 60 else np.linspace(0, top, 41)
    handles, texts = [], []
    for label, runs in with_data.items():
        tables = [r.participation["reported"].to_numpy() for r in runs if r.participation is not None]
        shares = np.mean([np.histogram(reports, bins=edges)[0] / len(reports) for reports in tables], axis=0)
        centres = (edges[:-1] + edges[1:]) / 2
        handles.append(_line(hist, centres, shares, looks[label], one_column, drawstyle="steps-mid"))
        share, held = lorenz_curve(np.concatenate(tables))
        _line(lorenz, share, held, looks[label], one_column)
        texts.append(names[label] + _seeds(runs))
    hist.set_xlabel("rounds a device reported in")
    hist.set_ylabel("share of devices")
    hist.xaxis.set_major_locator(MaxNLocator(integer=True))
    hist.set_title("Reports per device")
    lorenz.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=0.8)
    lorenz.set_xlabel("share of devices, fewest reports first")
    lorenz.set_ylabel("share of all reports")
    lorenz.set_title("Lorenz curve of reports")
    for ax in (hist, lorenz):
        ax.grid(True)
    _legend(fig, handles, texts)
    return fig


def participation_figure(groups: dict[str, list[Run]], path: Path, width: str | float = "two-column") -> Path | None:
    """`draw_participation`, saved as `accuracy_figure` saves; None when no run has participation.csv."""
    fig = draw_participation(groups, width)
    return None if fig is None else _save(fig, path)


@_styled
def draw_round_times(groups: dict[str, list[Run]], width: str | float = "two-column") -> Figure:
    """A box of round durations per experiment, the first experiment on top."""
    width_in = _inches(width)
    one_column = width_in < 5
    fig = _figure(width_in, 1.0)
    looks, names = _looks(groups), short_labels(list(groups))
    size = STYLE["ytick.labelsize"]
    ticks = [_wrap(fig, names[label] + _seeds(groups[label]), (0.4 if one_column else 0.35) * width_in, size)
             for label in groups]
    lines = [t.count("\n") + 1 for t in ticks]
    fig.set_figheight(0.55 + sum(max(0.3, n * size * 1.3 * PT + 0.08) for n in lines))
    ax = fig.add_subplot()
    data = [np.concatenate([r.metrics["round_duration_s"].to_numpy(dtype=float) for r in runs])
            for runs in groups.values()]
    span = max((np.nanmax(d) for d in data if len(d)), default=1.0)
    unit, seconds = time_unit(span)
    positions = np.arange(len(data), 0, -1)
    boxes = ax.boxplot([d[~np.isnan(d)] / seconds for d in data], positions=positions, vert=False, widths=0.6,
                       patch_artist=True, showfliers=True, medianprops={"color": "black", "linewidth": 1.0},
                       flierprops={"marker": ".", "markersize": 2.5, "markeredgecolor": "0.35", "alpha": 0.6},
                       whiskerprops={"linewidth": 0.7}, capprops={"linewidth": 0.7}, boxprops={"linewidth": 0.7})
    for box, label in zip(boxes["boxes"], groups):
        box.set_facecolor(looks[label]["color"])
        box.set_alpha(0.55)
    ax.set_yticks(positions, ticks)
    ax.set_ylim(0.4, len(data) + 0.6)
    # under a narrow axes (long names at one column) a centred label would stick out on the right
    ax.set_xlabel(f"round duration (simulated {unit})", loc="right" if one_column else "center")
    ax.grid(True, axis="x")
    return fig


def round_time_figure(groups: dict[str, list[Run]], path: Path, width: str | float = "two-column") -> Path:
    """`draw_round_times`, saved as `accuracy_figure` saves."""
    return _save(draw_round_times(groups, width), path)


@_styled
def draw_snapshot(groups: dict[str, list[Run]], width: str | float = "two-column") -> Figure | None:
    """FAST's snapshot probability q over the rounds, per FAST experiment."""
    with_q = {label: runs for label, runs in groups.items() if "q" in runs[0].metrics}
    if not with_q:
        return None
    width_in = _inches(width)
    one_column = width_in < 5
    fig = _figure(width_in, 2.2 if one_column else 2.6)
    ax = fig.add_subplot()
    looks, names = _looks(groups), short_labels(list(groups))
    handles, texts = [], []
    for label, runs in with_q.items():
        x, mean, low, high = mean_band([(r.metrics["round"].to_numpy(float), r.metrics["q"].to_numpy(float))
                                        for r in runs])
        handles.append(_mean_line(ax, x, mean, low, high, looks[label], len(runs), one_column))
        texts.append(names[label] + _seeds(runs))
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("snapshot probability q")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(True)
    _legend(fig, handles, texts)
    return fig


def snapshot_figure(groups: dict[str, list[Run]], path: Path, width: str | float = "two-column") -> Path | None:
    """`draw_snapshot`, saved as `accuracy_figure` saves; None when no experiment is FAST (has a q column)."""
    fig = draw_snapshot(groups, width)
    return None if fig is None else _save(fig, path)


SMOOTH_ROUNDS = 5  # label TV is drawn as a running mean over this many rounds with reports (in longer runs)


def _smoothed(x: np.ndarray, y: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """A trailing running mean of `window` points (the first ones average what there is so far)."""
    if window <= 1 or len(y) == 0:
        return x, y
    sums = np.cumsum(np.concatenate([[0.0], y]))
    counts = np.minimum(np.arange(1, len(y) + 1), window)
    return x, (sums[1:] - sums[np.arange(1, len(y) + 1) - counts]) / counts


def _has(run: Run, column: str) -> bool:
    return column in run.metrics and run.metrics[column].notna().any()


@_styled
def draw_label_tv(groups: dict[str, list[Run]], width: str | float = "two-column") -> Figure | None:
    """The label TV of each round's reports against the population over simulated time, per experiment,
    with the random-cohort floor (what a uniformly random cohort of the same size gets) as a thin dashed
    line of the same colour: the gap between them is the bias participation brings. None when no run
    has the column (runs from before it)."""
    with_tv = {label: runs for label, runs in groups.items() if any(_has(r, "label_tv") for r in runs)}
    if not with_tv:
        return None
    width_in = _inches(width)
    one_column = width_in < 5
    fig = _figure(width_in, 2.4 if one_column else 3.0)
    ax = fig.add_subplot()
    looks, names = _looks(groups), short_labels(list(groups))
    longest = max(int(r.metrics["label_tv"].notna().sum()) for runs in with_tv.values() for r in runs)
    window = SMOOTH_ROUNDS if longest >= 5 * SMOOTH_ROUNDS else 1
    bands = {}
    for label, runs in with_tv.items():
        tv = [_smoothed(*_curve(r, "time", "label_tv"), window) for r in runs if _has(r, "label_tv")]
        floor = [_smoothed(*_curve(r, "time", "label_tv_floor"), window) for r in runs if _has(r, "label_tv_floor")]
        bands[label] = (mean_band([c for c in tv if len(c[0])]), mean_band(floor) if floor else None)
    span = max(band[0][0].max() for band in bands.values())
    xlabel, divisor = _x_axis("time", span)
    handles, texts = [], []
    for label, ((x, mean, low, high), floor) in bands.items():
        look = looks[label]
        handles.append(_mean_line(ax, x / divisor, mean, low, high, look, len(groups[label]), one_column))
        texts.append(names[label] + _seeds(groups[label]))
        if floor is not None:
            ax.plot(floor[0] / divisor, floor[1], color=look["color"], linestyle=(0, (3, 2)), linewidth=0.8,
                    alpha=0.9)
    floor_handle, = ax.plot([], [], color="0.35", linestyle=(0, (3, 2)), linewidth=0.8)
    handles.append(floor_handle)
    texts.append("random-cohort floor (each experiment's colour)")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("label TV of the reports" + (f"\n(mean of {window} rounds)" if window > 1 else ""))
    ax.set_ylim(bottom=0)
    ax.grid(True)
    _legend(fig, handles, texts)
    return fig


def label_tv_figure(groups: dict[str, list[Run]], path: Path, width: str | float = "two-column") -> Path | None:
    """`draw_label_tv`, saved as `accuracy_figure` saves; None when no run has the label_tv column."""
    fig = draw_label_tv(groups, width)
    return None if fig is None else _save(fig, path)


@_styled
def draw_async(groups: dict[str, list[Run]], width: str | float = "two-column") -> Figure | None:
    """Asynchronous runs (FedBuff, FedAsync): (a) how stale the applied updates were, a histogram over the
    server updates of each update's mean staleness (exact for FedAsync's one report an update; the buffer's
    mean for FedBuff), and (b) devices at work over simulated time: the time-weighted mean in flight per
    server update, beside each synchronous experiment's devices selected per round on the same axis.
    None when no run is asynchronous (has a staleness_mean column)."""
    asynchronous = {label: runs for label, runs in groups.items() if any(_has(r, "staleness_mean") for r in runs)}
    if not asynchronous:
        return None
    width_in = _inches(width)
    one_column = width_in < 5
    fig = _figure(width_in, 4.6 if one_column else 2.8)
    stale, busy = (fig.add_subplot(2, 1, 1), fig.add_subplot(2, 1, 2)) if one_column else \
        (fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2))
    looks, names = _looks(groups), short_labels(list(groups))
    highest = max(float(r.metrics["staleness_mean"].max()) for runs in asynchronous.values() for r in runs
                  if _has(r, "staleness_mean"))
    bins = np.arange(0, math.ceil(highest) + 2) - 0.5
    handles, texts = [], []
    for label, runs in asynchronous.items():
        values = np.concatenate([r.metrics["staleness_mean"].dropna().to_numpy(float) for r in runs])
        stale.hist(values, bins=bins, histtype="step", color=looks[label]["color"], linewidth=1.2,
                   weights=np.full(len(values), 1 / max(1, len(values))))
    span = max(float(r.metrics["sim_time_s"].max()) for runs in groups.values() for r in runs)
    xlabel, divisor = _x_axis("time", span)
    for label, runs in groups.items():
        column = "concurrency_mean" if label in asynchronous else "selected"
        curves = [_curve(r, "time", column) for r in runs if _has(r, column)]
        if not curves:
            continue
        x, mean, low, high = mean_band(curves)
        handles.append(_mean_line(busy, x / divisor, mean, low, high, looks[label], len(runs), one_column))
        texts.append(names[label] + _seeds(runs))
    stale.set_xlabel("mean staleness of a server update (updates)")
    stale.set_ylabel("share of server updates")
    stale.xaxis.set_major_locator(MaxNLocator(integer=True))
    stale.grid(True)
    busy.set_xlabel(xlabel)
    busy.set_ylabel("devices at work\n(in flight; sync: selected)")
    busy.set_ylim(bottom=0)
    busy.grid(True)
    _legend(fig, handles, texts)
    return fig


def async_figure(groups: dict[str, list[Run]], path: Path, width: str | float = "two-column") -> Path | None:
    """`draw_async`, saved as `accuracy_figure` saves; None when no run is asynchronous."""
    fig = draw_async(groups, width)
    return None if fig is None else _save(fig, path)


def class_accuracy_table(runs: list[Run]) -> "pd.DataFrame | None":
    """Per-class test accuracy by evaluation round, the mean over the runs (seeds) that have it: index round,
    one column per class (acc_0 ...). None when no run has class_accuracy.csv."""
    import pandas as pd

    tables = [r.class_accuracy for r in runs if r.class_accuracy is not None and len(r.class_accuracy)]
    if not tables:
        return None
    joined = pd.concat(tables).drop(columns=["sim_time_s"], errors="ignore")
    return joined.groupby("round").mean().sort_index()


@_styled
def draw_class_accuracy(groups: dict[str, list[Run]], width: str | float = "two-column") -> Figure | None:
    """Test accuracy per class over the evaluations, one heatmap (class x round) per experiment, the mean
    over its seeds: classes that the reports' data leaves out show as a dark band. Blank where a class has
    no test samples. None when no run has class_accuracy.csv (runs from before it)."""
    tables = {label: class_accuracy_table(runs) for label, runs in groups.items()}
    tables = {label: table for label, table in tables.items() if table is not None}
    if not tables:
        return None
    width_in = _inches(width)
    one_column = width_in < 5
    classes = max(table.shape[1] for table in tables.values())
    panel = 0.45 + min(0.09 * classes, 1.8) * (0.8 if one_column else 1.0)
    fig = _figure(width_in, panel * len(tables) + 0.5)
    axes = fig.subplots(len(tables), 1, sharex=True, squeeze=False)[:, 0]
    names = short_labels(list(groups))
    size = STYLE["axes.titlesize"]
    mesh = None
    for ax, (label, table) in zip(axes, tables.items()):
        rounds = table.index.to_numpy(dtype=float)
        edges = np.concatenate([[min(0.0, rounds[0] - 1)], rounds])  # an evaluation's cell: the rounds up to it
        values = np.ma.masked_invalid(table.to_numpy(dtype=float).T)
        mesh = ax.pcolormesh(edges, np.arange(values.shape[0] + 1) - 0.5, values, vmin=0.0, vmax=1.0,
                             cmap="cividis", shading="flat", rasterized=True)
        ax.set_ylim(values.shape[0] - 0.5, -0.5)  # class 0 on top
        ax.yaxis.set_major_locator(MaxNLocator(integer=True, nbins=6))
        ax.set_ylabel("class")
        ax.set_title(_wrap(fig, names[label] + _seeds(groups[label]), 0.8 * width_in, size), loc="left")
    axes[-1].set_xlabel("round (evaluations)")
    axes[-1].xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.colorbar(mesh, ax=list(axes), label="test accuracy", shrink=min(1.0, 2.5 / len(tables) + 0.2),
                 aspect=20 if len(tables) > 1 else 10)
    return fig


def class_accuracy_figure(groups: dict[str, list[Run]], path: Path, width: str | float = "two-column") -> Path | None:
    """`draw_class_accuracy`, saved as `accuracy_figure` saves; None when no run has class_accuracy.csv."""
    fig = draw_class_accuracy(groups, width)
    return None if fig is None else _save(fig, path)

"""Figures of what each device gets (runs with evaluation.devices): the distribution of device accuracy at the
last evaluation, and device accuracy by group over simulated time. Styled as plots.py's figures."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from emulator.analysis.figure_style import (_figure, _inches, _legend, _looks, _mean_line, _save, _seeds, _styled,
                                            _wrap, STYLE, short_labels)
from emulator.analysis.plots import _curve, _has, _x_axis, mean_band
from emulator.analysis.runs import Run

GROUP_COLUMN = re.compile(r"device_acc_(compute_tier|network_tier|timezone_h|type)_(.+)")


def last_device_accuracy(run: Run) -> np.ndarray | None:
    """Each scored device's accuracy at the run's last evaluation on the devices (device_eval.csv, checked
    when the run was loaded), or None."""
    table = run.device_eval
    if table is None or not len(table) or "accuracy" not in table:
        return None
    return table.loc[table["round"] == table["round"].max(), "accuracy"].to_numpy(dtype=float)


@_styled
def draw_device_cdf(groups: dict[str, list[Run]], width: str | float = "two-column") -> Figure | None:
    """The empirical CDF of device accuracy at the last evaluation, per experiment (its seeds' devices
    pooled): how much of the fleet the model serves below any accuracy. None without device_eval.csv."""
    pooled = {}
    for label, runs in groups.items():
        found = [a for a in (last_device_accuracy(r) for r in runs) if a is not None and len(a)]
        if found:
            pooled[label] = np.sort(np.concatenate(found))
    if not pooled:
        return None
    width_in = _inches(width)
    one_column = width_in < 5
    fig = _figure(width_in, 2.4 if one_column else 3.0)
    ax = fig.add_subplot()
    looks, names = _looks(groups), short_labels(list(groups))
    handles, texts = [], []
    for label, accuracy in pooled.items():
        share = np.arange(1, len(accuracy) + 1) / len(accuracy)
        look = looks[label]
        line, = ax.step(accuracy, share, where="post", color=look["color"], linestyle=look["linestyle"],
                        linewidth=1.2)
        handles.append(line)
        texts.append(f"{names[label]}{_seeds(groups[label])} ({len(accuracy)} devices)")
    ax.axhline(0.1, color="0.6", linewidth=0.6, linestyle=(0, (1, 2)))  # LEAF's 10th percentile reads here
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("accuracy on the device's own test split (last evaluation)")
    ax.set_ylabel("share of devices at or below")
    ax.grid(True)
    _legend(fig, handles, texts)
    return fig


def device_cdf_figure(groups: dict[str, list[Run]], path: Path, width: str | float = "two-column") -> Path | None:
    fig = draw_device_cdf(groups, width)
    return None if fig is None else _save(fig, path)


def _lines_of(runs: list[Run]) -> list[tuple[str, str]]:
    """(column, legend text) of the device accuracy lines the runs have: the device mean, the 10th
    percentile, the devices never reported, each group, and the sampled estimate."""
    columns = [("device_acc_mean", "device mean (oracle)"), ("device_acc_p10", "10th percentile"),
               ("device_acc_never_reported", "never reported"), ("sampled_acc_mean", "sampled estimate")]
    found = [(c, t) for c, t in columns if any(_has(r, c) for r in runs)]
    groups = sorted({c for r in runs for c in r.metrics.columns if GROUP_COLUMN.fullmatch(c) and _has(r, c)})
    for column in groups:
        name, value = GROUP_COLUMN.fullmatch(column).groups()
        found.append((column, f"{name.replace('_', ' ')} {value}"))
    return found


@_styled
def draw_device_groups(groups: dict[str, list[Run]], width: str | float = "two-column") -> Figure | None:
    """Device accuracy over simulated time, one panel per experiment (the mean over its seeds, a band
    from the lowest to the highest): the device mean, its 10th percentile, the devices that never
    reported, each compute tier / time zone / type, and the sampled estimate where there is one. None
    without the columns."""
    panels = {label: _lines_of(runs) for label, runs in groups.items()}
    panels = {label: lines for label, lines in panels.items() if lines}
    if not panels:
        return None
    width_in = _inches(width)
    one_column = width_in < 5
    fig = _figure(width_in, (1.9 if one_column else 2.3) * len(panels) + 0.3)
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    names = short_labels(list(groups))
    looks = _looks(dict.fromkeys((text for lines in panels.values() for _, text in lines), []))  # first seen, first
    span = max(float(r.metrics["sim_time_s"].max()) for runs in groups.values() for r in runs)
    xlabel, divisor = _x_axis("time", span)
    handles = {}
    for ax, (label, lines) in zip(axes, panels.items()):
        runs = groups[label]
        for column, text in lines:
            curves = [_curve(r, "time", column) for r in runs if _has(r, column)]
            x, mean, low, high = mean_band([c for c in curves if len(c[0])])
            handles[text] = _mean_line(ax, x / divisor, mean, low, high, looks[text], len(curves), one_column)
        ax.set_ylim(0, 1)
        ax.set_ylabel("device accuracy")
        ax.grid(True)
        ax.set_title(_wrap(fig, names[label] + _seeds(runs), 0.8 * width_in, STYLE["axes.titlesize"]), loc="left")
    axes[-1].set_xlabel(xlabel)
    _legend(fig, list(handles.values()), list(handles))
    return fig


def device_groups_figure(groups: dict[str, list[Run]], path: Path, width: str | float = "two-column") -> Path | None:
    fig = draw_device_groups(groups, width)
    return None if fig is None else _save(fig, path)

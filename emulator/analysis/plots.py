"""Figures for a report: one figure per question, every experiment overlaid and labelled.

Experiments with several seeds are drawn as the mean with a band from the lowest to the highest seed.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from emulator.analysis.metrics import lorenz_curve  # noqa: E402
from emulator.analysis.runs import Run  # noqa: E402

AXES = {
    "time": ("simulated wall-clock (hours)", lambda m: m["sim_time_s"] / 3600.0),
    "rounds": ("round", lambda m: m["round"].astype(float)),
    "bytes": ("data moved, up + down (GB)", lambda m: (m["bytes_down"] + m["bytes_up"]).cumsum() / 1e9),
}


def _curve(run: Run, axis: str, column: str) -> tuple[np.ndarray, np.ndarray]:
    metrics = run.metrics
    x = AXES[axis][1](metrics).to_numpy(dtype=float)
    y = metrics[column].to_numpy(dtype=float)
    keep = ~np.isnan(y)
    return x[keep], y[keep]


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


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def accuracy_figure(groups: dict[str, list[Run]], axis: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, runs in groups.items():
        curves = [c for c in (_curve(r, axis, "test_acc") for r in runs) if len(c[0])]
        if not curves:
            continue
        x, mean, low, high = mean_band(curves)
        seeds = f" ({len(runs)} seeds)" if len(runs) > 1 else ""
        line, = ax.plot(x, mean, label=label + seeds, linewidth=1.6)
        if len(runs) > 1:
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel(AXES[axis][0])
    ax.set_ylabel("test accuracy")
    ax.set_title(f"Test accuracy against {AXES[axis][0].split(' (')[0]}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)


def participation_figure(groups: dict[str, list[Run]], path: Path) -> Path | None:
    with_data = {label: runs for label, runs in groups.items() if any(r.participation is not None for r in runs)}
    if not with_data:
        return None
    fig, (hist, lorenz) = plt.subplots(1, 2, figsize=(10, 4))
    for label, runs in with_data.items():
        reports = np.concatenate([r.participation["reported"].to_numpy() for r in runs if r.participation is not None])
        bins = np.arange(0, reports.max() + 2) - 0.5 if reports.max() < 60 else 40
        hist.hist(reports, bins=bins, alpha=0.5, label=label)
        share, held = lorenz_curve(reports)
        lorenz.plot(share, held, label=label)
    hist.set_xlabel("rounds a device reported in")
    hist.set_ylabel("devices (all seeds)")
    hist.set_title("Participation per device")
    lorenz.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
    lorenz.set_xlabel("share of devices (least participating first)")
    lorenz.set_ylabel("share of all reports")
    lorenz.set_title("Lorenz curve of participation")
    for ax in (hist, lorenz):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(fig, path)


def round_time_figure(groups: dict[str, list[Run]], path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 0.6 * len(groups) + 2))
    labels = list(groups)
    data = [np.concatenate([r.metrics["round_duration_s"].to_numpy() / 60.0 for r in groups[label]])
            for label in labels]
    ax.boxplot(data, vert=False, tick_labels=labels, showfliers=True)
    ax.set_xlabel("round duration (simulated minutes)")
    ax.set_title("Round durations")
    ax.grid(alpha=0.3, axis="x")
    return _save(fig, path)


def snapshot_figure(groups: dict[str, list[Run]], path: Path) -> Path | None:
    with_q = {label: runs for label, runs in groups.items() if "q" in runs[0].metrics}
    if not with_q:
        return None
    fig, ax = plt.subplots(figsize=(7, 3.6))
    for label, runs in with_q.items():
        x, mean, low, high = mean_band([(r.metrics["round"].to_numpy(float), r.metrics["q"].to_numpy(float))
                                        for r in runs])
        line, = ax.plot(x, mean, label=label, linewidth=1.4)
        if len(runs) > 1:
            ax.fill_between(x, low, high, color=line.get_color(), alpha=0.2, linewidth=0)
    ax.set_xlabel("round")
    ax.set_ylabel("snapshot probability q")
    ax.set_title("FAST: q over the run")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, path)

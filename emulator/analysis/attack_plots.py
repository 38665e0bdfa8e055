"""The figure of runs with attackers (population.types[].attack): over simulated time, the backdoor's success
beside the main task's accuracy, and the attackers' share of the accepted updates beside their share of the
population. Styled as plots.py's figures."""
from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from emulator.analysis.figure_style import _figure, _inches, _legend, _looks, _mean_line, _save, _seeds, _styled
from emulator.analysis.figure_style import short_labels
from emulator.analysis.plots import _curve, _has, _x_axis, mean_band
from emulator.analysis.runs import Run

PANELS = (("backdoor_success", "backdoor success"), ("test_acc", "test accuracy"),
          ("attacker_accepted_share", "attackers' share of accepted updates"))


@_styled
def draw_attacks(groups: dict[str, list[Run]], width: str | float = "two-column") -> Figure | None:
    """One panel per measure (a line per experiment: the mean over its seeds, a band from the lowest to the
    highest); the attackers' share of the population as a dotted line in the last. None without attackers."""
    hostile = {label: runs for label, runs in groups.items() if all(_has(r, "attackers_reported") for r in runs)}
    if not hostile:
        return None
    panels = [(column, text) for column, text in PANELS
              if any(_has(r, column) for runs in hostile.values() for r in runs)]
    width_in = _inches(width)
    one_column = width_in < 5
    fig = _figure(width_in, (1.8 if one_column else 2.1) * len(panels) + 0.3)
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    looks, names = _looks(hostile), short_labels(list(hostile))
    span = max(float(r.metrics["sim_time_s"].max()) for runs in hostile.values() for r in runs)
    xlabel, divisor = _x_axis("time", span)
    handles = {}  # experiment -> its line, for the legend (the first panel it appears in)
    for ax, (column, text) in zip(axes, panels):
        for label, runs in hostile.items():
            curves = [c for c in (_curve(r, "time", column) for r in runs if _has(r, column)) if len(c[0])]
            if not curves:
                continue
            x, mean, low, high = mean_band(curves)
            line = _mean_line(ax, x / divisor, mean, low, high, looks[label], len(curves), one_column)
            handles.setdefault(names[label] + _seeds(runs), line)
            if column == "attacker_accepted_share":  # the population's share, for comparison
                share = float(runs[0].metrics["attacker_population_share"].iloc[-1])
                ax.axhline(share, linestyle=":", color=looks[label]["color"], linewidth=1)
        ax.set_ylim(0, 1)
        ax.set_ylabel(text)
        ax.grid(True)
    axes[-1].set_xlabel(xlabel)
    _legend(fig, list(handles.values()), list(handles))
    return fig


def attack_figure(groups: dict[str, list[Run]], path: Path, width: str | float = "two-column") -> Path | None:
    fig = draw_attacks(groups, width)
    return None if fig is None else _save(fig, path)

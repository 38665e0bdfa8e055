"""`emulator report`: a comparison table and one figure per question, written to report.md."""
from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Callable

import pandas as pd

from emulator.analysis import attack_plots, device_plots, plots
from emulator.analysis.energy import who_pays_lines
from emulator.analysis.network import by_region_lines
from emulator.analysis.figure_style import FIGURE_FORMATS, figure_formats, png_dpi, writing_formats
from emulator.analysis.metrics import seed_statistics, summarize
from emulator.analysis.runs import NotARunError, Run, read_runs, select_runs
from emulator.errors import expect

COLUMNS = {  # table column -> (heading, format)
    "final_acc": ("final acc (last {last})", "{:.4f}"),
    "best_acc": ("best acc", "{:.4f}"),
    "tta_hours": ("hours to {target}", "{:.2f}"),
    "tta_gb": ("GB to {target}", "{:.3f}"),
    "tta_round": ("rounds to {target}", "{:.0f}"),
    "rise_round": ("rise round (90%)", "{:.0f}"),
    "sim_hours": ("simulated h", "{:.2f}"),
    "gb_moved": ("GB moved", "{:.3f}"),
    "median_round_s": ("median round s", "{:.0f}"),
    "failed_rounds": ("failed rounds", "{:.0f}"),
    "stragglers": ("stragglers", "{:.0f}"),
    "cancelled": ("cancelled", "{:.0f}"),
    "gini_reports": ("Gini of reports", "{:.3f}"),
    "never_reported": ("never reported", "{:.1%}"),
    "snapshot_share": ("snapshot share", "{:.1%}"),
    "mean_label_tv": ("mean label TV", "{:.3f}"),
    "label_tv_excess": ("TV over floor", "{:.3f}"),
    "unseen_share": ("data never seen", "{:.1%}"),
    "worst_class_acc": ("worst class acc", "{:.4f}"),
    "epsilon": ("epsilon (nominal)", "{:.2f}"),
    "epsilon_device": ("epsilon, most-seen device", "{:.2f}"),
    "fleet_kj": ("fleet energy kJ", "{:.1f}"),
    "kj_to_target": ("kJ to {target}", "{:.1f}"),
    "wasted_energy_share": ("energy wasted", "{:.1%}"),
    "cancelled_energy_share": ("of it cancelled", "{:.1%}"),
    "top10_energy_share": ("energy of top 10%", "{:.1%}"),
    "aborted": ("aborted", "{:.0f}"),
    "network_wait_s": ("network wait s", "{:.1f}"),
    "access_up_busiest": ("busiest cell up", "{:.0%}"),
    "transfer_slowdown": ("transfer slowdown", "{:.2f}"),
    "backhaul_gb": ("backhaul GB", "{:.3f}"),
    "edge_idle_s": ("edge idle s", "{:.0f}"),
    "edge_rounds_failed": ("failed edge rounds", "{:.0f}"),
}


def comparison_table(groups: dict[str, list[Run]], target: float | None, last: int) -> pd.DataFrame:
    """One row per experiment: per measurement the mean over its seeds, the sample standard deviation in
    `<col>_std`, the half-width of the 95% confidence interval of the mean in `<col>_ci95` (3 or more
    seeds), and in `<col>_seeds` how many seeds had a value (e.g. reached the target). What the final
    accuracy averaged: `final_acc_count` and `final_acc_count_max`, the fewest and most evaluations
    averaged by a seed (fewer than `last` where a run had fewer), `evaluated_seeds` the seeds with any."""
    rows = []
    for label, runs in groups.items():
        per_seed = pd.DataFrame([summarize(r.metrics, r.participation, target, last) for r in runs])
        row = {"experiment": label, "seeds": len(runs)}
        evaluated = per_seed[per_seed["evaluations"] > 0]
        row["evaluated_seeds"] = len(evaluated)
        row["final_acc_count"] = int(evaluated["final_acc_count"].min()) if len(evaluated) else 0
        row["final_acc_count_max"] = int(evaluated["final_acc_count"].max()) if len(evaluated) else 0
        for column in per_seed.drop(columns=["final_acc_count", "evaluations"]):
            stats = seed_statistics(per_seed[column])
            row[column], row[f"{column}_std"], row[f"{column}_ci95"] = stats["mean"], stats["std"], stats["ci95"]
            row[f"{column}_seeds"] = stats["n"]
        rows.append(row)
    return pd.DataFrame(rows)


def _markdown(table: pd.DataFrame, target: float | None, last: int) -> str:
    shown = [c for c in COLUMNS if c in table and (table[c].notna().any() or c.startswith("tta")) and not (
        c in ("failed_rounds", "snapshot_share") and (table[c] == 0).all())]
    if "stragglers" in shown and "cancelled" not in shown:  # runs from before cancelled devices were counted
        shown.insert(shown.index("stragglers") + 1, "cancelled")
    headings = ["experiment", "seeds"] + [COLUMNS[c][0].format(target=target, last=last) for c in shown]
    lines = ["| " + " | ".join(headings) + " |", "|" + "---|" * len(headings)]
    for _, row in table.iterrows():
        cells = [str(row["experiment"]), str(int(row["seeds"]))]
        for column in shown:
            value, spread, ci = row[column], row.get(f"{column}_std", math.nan), row.get(f"{column}_ci95", math.nan)
            if pd.isna(value):
                reached = "not reached" if int(row["evaluated_seeds"]) else "no evaluation"
                cells.append(reached if column.startswith("tta") else "-")
                continue
            form = COLUMNS[column][1]
            text = form.format(value)
            if not pd.isna(spread) and spread > 0:
                text += " ± " + form.format(spread)
                if not pd.isna(ci):
                    text += f" [{form.format(value - ci)}, {form.format(value + ci)}]"
            text += _averaged(row, column, last)
            counted, seeds = int(row.get(f"{column}_seeds", row["seeds"])), int(row["seeds"])
            if counted < seeds:
                unevaluated = seeds - int(row["evaluated_seeds"])
                text += f" ({counted} of {seeds} seeds" + (
                    f"; {unevaluated} never evaluated)" if column.startswith("tta") and unevaluated else ")")
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _averaged(row, column: str, last: int) -> str:
    """What a final accuracy (and the rise round, 90% of it) averaged when a run had fewer than `last`
    evaluations: " (last 4)", or " (last 3-4)" where the seeds differ; "" when every seed had `last`."""
    if column not in ("final_acc", "rise_round") or int(row["final_acc_count"]) >= last:
        return ""
    low, high = int(row["final_acc_count"]), int(row["final_acc_count_max"])
    return f" (last {low})" if low == high else f" (last {low}-{high})"


def _notes(table: pd.DataFrame, selection, last: int, damaged) -> list[str]:
    """What the table's count columns mean, and the runs left out of it, with the reason."""
    lines = []
    if (table["final_acc_count"] < last).any():
        lines += [f"(last N) after a final accuracy: a run had only N evaluations, fewer than {last}, and its final "
                  "accuracy is the mean of those N; its rise round is the first round reaching 90% of that mean.", ""]
    if "stragglers" in table and table["stragglers"].notna().any():
        lines += ["stragglers: devices that missed the deadline, summed over a run's rounds; cancelled: "
                  "over-selected devices told to stop because enough reports had arrived."
                  + (" '-' marks runs written before the two were counted apart (their stragglers include "
                     "the cancelled)." if (table["cancelled_seeds"] < table["seeds"]).any() else ""), ""]
    if "mean_label_tv" in table and table["mean_label_tv"].notna().any():
        lines += ["mean label TV: total variation between the label mix of each round's reports (weighted as "
                  "aggregation weighs them) and the population's, averaged over the rounds with reports; TV "
                  "over floor: its mean excess over the TV of uniformly random cohorts of the same size (a "
                  "finite cohort's noise), the part participation adds; data never seen: the share of "
                  "training samples on devices that never reported, at the end; worst class acc: the lowest "
                  "per-class test accuracy at the last evaluation.", ""]
    if selection.incomplete:
        lines += ["## Left out: failed, interrupted or unfinished runs", "",
                  "Not in the table or the figures:", ""]
        lines += [f"- `{run.path}` ({run.name}, seed {run.seed}): {why}" for run, why in selection.incomplete]
        lines.append("")
    if damaged:
        lines += ["## Left out: damaged run directories", "",
                  "A file of these runs is not what a run writes; none of it is in the table or the figures:", ""]
        lines += [f"- `{path}`: {exc.file.name}: {exc.problem}" for path, exc in damaged]
        lines.append("")
    if selection.duplicates:
        lines += ["## Left out: repeated seeds", "",
                  "Runs of one experiment with the same seed would count that seed twice; the latest completed "
                  "run of each seed is kept:", ""]
        lines += [f"- `{dup.path}` repeats seed {dup.seed} of `{kept.path}` (kept)"
                  for dup, kept in selection.duplicates]
        lines.append("")
    return lines


def write_report(run_paths, out: str | Path, target: float | None = None, last: int = 5,
                 title: str = "Run report", figure_width: str = "two-column",
                 formats: tuple[str, ...] | None = None, notify: Callable[[str], None] | None = None) -> Path:
    """Load the runs, draw every figure, and write out/report.md (and out/summary.csv).

    Figures are `figure_width` wide: "two-column" (7 in) or "one-column" (3.3 in), in `formats` (PNG, and
    PDF and SVG for papers; None: EMULATOR_FIGURE_FORMATS, else all three). A damaged run directory
    (emulator/analysis/files.py) is left out, listed in report.md and told to `notify` (default: stderr);
    when no run reads whole, NotARunError (a ScenarioError) names each damaged file."""
    check_arguments(run_paths, out, target, last, title, figure_width, formats, notify)
    try:
        formats = formats if formats is not None else figure_formats()
        png_dpi()
    except ValueError as exc:
        raise NotARunError(str(exc)) from None
    with writing_formats(formats):
        return _write_report(run_paths, out, target, last, title, figure_width, notify or _to_stderr)


def check_arguments(run_paths, out, target, last, title, figure_width, formats, notify) -> None:
    """write_report's arguments of the kinds it takes (ArgumentError, a ScenarioError and a TypeError)."""
    def path(value) -> bool:
        return isinstance(value, (str, os.PathLike))

    name = "emulator.analysis.write_report"
    expect(name, "run_paths", run_paths, path(run_paths) or isinstance(run_paths, (list, tuple)) and bool(run_paths)
           and all(map(path, run_paths)), "a run directory (a path) or a non-empty list of them")
    expect(name, "out", out, path(out) and not Path(out).is_file(), "the report's directory (a path, not a file)")
    expect(name, "target", target, target is None or _number(target), "None or a test accuracy in (0, 1], such as 0.8")
    expect(name, "last", last, isinstance(last, int) and not isinstance(last, bool),
           "a whole number >= 1: the final accuracy is the mean of the last N evaluations")
    expect(name, "title", title, isinstance(title, str), "a string")
    expect(name, "figure_width", figure_width, figure_width in ("one-column", "two-column", "one", "two")
           or _number(figure_width) and figure_width > 0, "'one-column', 'two-column' or a width in inches")
    expect(name, "formats", formats, formats is None or isinstance(formats, (list, tuple)) and "png" in formats
           and all(f in FIGURE_FORMATS for f in formats), f"None or a tuple of {', '.join(FIGURE_FORMATS)} "
           "with png (report.md shows the PNG)")
    expect(name, "notify", notify, notify is None or callable(notify), "None or a function called with each note")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _write_report(run_paths, out: str | Path, target: float | None, last: int, title: str,
                  figure_width: str, notify: Callable[[str], None]) -> Path:
    if target is not None and not 0 < target <= 1:
        raise NotARunError(f"target {target}: not a test accuracy; give a fraction in (0, 1], such as 0.8")
    if last < 1:
        raise NotARunError(f"last {last}: the final accuracy is the mean of the last N >= 1 evaluations")
    out = Path(out)
    if out.is_dir() and not (out / "report.md").exists() and any(out.iterdir()):
        held = sorted(entry.name for entry in out.iterdir())
        raise NotARunError(f"--out {out}: this directory holds files that are not a report ({', '.join(held[:3])}"
                           f"{' ...' if len(held) > 3 else ''}); a report writes into a new or empty directory, or "
                           f"over an earlier report: choose e.g. --out {out / 'report'}")
    runs, damaged = read_runs(run_paths)
    if not runs:
        raise NotARunError(f"none of the {len(damaged)} run(s) could be read, nothing to compare:\n  "
                           + "\n  ".join(str(exc) for _, exc in damaged))
    selection = select_runs(runs)
    groups = selection.groups
    if not groups:
        raise NotARunError(f"none of the {len(runs)} run(s) completed, nothing to compare: "
                           + "; ".join(f"{r.path}: {why}" for r, why in selection.incomplete)
                           + "".join(f"; {exc}" for _, exc in damaged))
    for path, exc in damaged:
        notify(f"note: left out {path}, damaged: {exc.file.name}: {exc.problem}")
    out.mkdir(parents=True, exist_ok=True)
    table = comparison_table(groups, target, last)
    table.to_csv(out / "summary.csv", index=False)
    width = figure_width
    figures = [
        ("Test accuracy against simulated wall-clock",
         plots.accuracy_figure(groups, "time", out / "accuracy_vs_time.png", width)),
        ("Test accuracy against rounds",
         plots.accuracy_figure(groups, "rounds", out / "accuracy_vs_rounds.png", width)),
        ("Test accuracy against bytes moved",
         plots.accuracy_figure(groups, "bytes", out / "accuracy_vs_bytes.png", width)),
        ("Test accuracy against the fleet's energy", plots.energy_figure(groups, out / "accuracy_vs_energy.png", width)),
        ("Test accuracy against the privacy spent (client-level DP)",
         plots.privacy_figure(groups, out / "accuracy_vs_epsilon.png", width)),
        ("Who took part", plots.participation_figure(groups, out / "participation.png", width)),
        ("How long rounds took", plots.round_time_figure(groups, out / "round_durations.png", width)),
        ("FAST's snapshot probability", plots.snapshot_figure(groups, out / "fast_q.png", width)),
        ("Asynchronous runs: staleness and devices at work",
         plots.async_figure(groups, out / "async.png", width)),
        ("Label mix of the reports against the population",
         plots.label_tv_figure(groups, out / "label_tv.png", width)),
        ("Test accuracy per class", plots.class_accuracy_figure(groups, out / "class_accuracy.png", width)),
        ("What each device gets: accuracy on its own test split, last evaluation",
         device_plots.device_cdf_figure(groups, out / "device_accuracy_cdf.png", width)),
        ("What each device gets, by group, over simulated time",
         device_plots.device_groups_figure(groups, out / "device_accuracy_groups.png", width)),
        ("Attackers: the backdoor's success, the main task and the attackers' share of accepted updates",
         attack_plots.attack_figure(groups, out / "attacks.png", width)),
    ]
    lines = [f"# {title}", ""]
    used = sum(map(len, groups.values()))
    left_out = len(selection.incomplete) + len(selection.duplicates) + len(damaged)
    lines.append(f"{used} run(s) in {len(groups)} experiment(s)"
                 + (f", {left_out} left out (below)" if left_out else "")
                 + f"; accuracies are test accuracies, the final one the mean of the last {last} evaluations, the "
                 "time to a target that of the first evaluation reaching it. "
                 "With several seeds a cell reads mean ± sample standard deviation over the seeds (n - 1 in the "
                 "denominator); with 3 or more, [low, high] is the 95% confidence interval of the mean (Student's "
                 "t). summary.csv holds them as `<column>_std` and `<column>_ci95` (the interval's half-width). "
                 "Figures: the mean with a min-max band.")
    lines += ["", _markdown(table, target, last), ""]
    lines += _notes(table, selection, last, damaged)
    lines += who_pays_lines(groups)
    lines += by_region_lines(groups)
    for heading, path in figures:
        if path is not None:
            lines += [f"## {heading}", "", f"![{heading}]({path.name})", ""]
            papers = [f"[{path.stem}.{kind}]({path.stem}.{kind})" for kind in figure_formats() if kind != "png"]
            lines += [f"For a paper: {', '.join(papers)}.", ""] if papers else []
    lines += plots.legend_key(groups)
    lines += ["## Runs", ""]
    for label, members in groups.items():
        lines.append(f"- **{label}**: " + ", ".join(f"`{r.path}` (seed {r.seed})" for r in members))
    (out / "report.md").write_text("\n".join(lines) + "\n")
    return out / "report.md"

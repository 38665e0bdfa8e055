"""`emulator report`: a comparison table and one figure per question, written to report.md."""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from emulator.analysis import plots
from emulator.analysis.metrics import summarize
from emulator.analysis.runs import Run, group_runs, load_runs

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
    "gini_reports": ("Gini of reports", "{:.3f}"),
    "never_reported": ("never reported", "{:.1%}"),
    "snapshot_share": ("snapshot share", "{:.1%}"),
}


def comparison_table(groups: dict[str, list[Run]], target: float | None, last: int) -> pd.DataFrame:
    """One row per experiment: the mean over its seeds (and the spread, in `<col>_std`)."""
    rows = []
    for label, runs in groups.items():
        per_seed = pd.DataFrame([summarize(r.metrics, r.participation, target, last) for r in runs])
        row = {"experiment": label, "seeds": len(runs)}
        for column in per_seed:
            row[column] = per_seed[column].mean()  # over the seeds that have a value (e.g. reached a target)
            row[f"{column}_std"] = per_seed[column].std(ddof=0) if len(runs) > 1 else math.nan
            row[f"{column}_seeds"] = int(per_seed[column].notna().sum())
        rows.append(row)
    return pd.DataFrame(rows)


def _markdown(table: pd.DataFrame, target: float | None, last: int) -> str:
    shown = [c for c in COLUMNS if c in table and table[c].notna().any() and not (
        c in ("failed_rounds", "snapshot_share") and (table[c] == 0).all())]
    headings = ["experiment", "seeds"] + [COLUMNS[c][0].format(target=target, last=last) for c in shown]
    lines = ["| " + " | ".join(headings) + " |", "|" + "---|" * len(headings)]
    for _, row in table.iterrows():
        cells = [str(row["experiment"]), str(int(row["seeds"]))]
        for column in shown:
            value, spread = row[column], row.get(f"{column}_std", math.nan)
            if pd.isna(value):
                cells.append("not reached" if column.startswith("tta") else "-")
                continue
            text = COLUMNS[column][1].format(value)
            if not pd.isna(spread) and spread > 0:
                text += " ± " + COLUMNS[column][1].format(spread)
            counted = int(row.get(f"{column}_seeds", row["seeds"]))
            if counted < int(row["seeds"]):
                text += f" ({counted} of {int(row['seeds'])} seeds)"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_report(run_paths, out: str | Path, target: float | None = None, last: int = 5,
                 title: str = "Run report") -> Path:
    """Load the runs, draw every figure, and write out/report.md (and out/summary.csv)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    runs = load_runs(run_paths)
    groups = group_runs(runs)
    table = comparison_table(groups, target, last)
    table.to_csv(out / "summary.csv", index=False)
    figures = [
        ("Test accuracy against simulated wall-clock", plots.accuracy_figure(groups, "time", out / "accuracy_vs_time.png")),
        ("Test accuracy against rounds", plots.accuracy_figure(groups, "rounds", out / "accuracy_vs_rounds.png")),
        ("Test accuracy against bytes moved", plots.accuracy_figure(groups, "bytes", out / "accuracy_vs_bytes.png")),
        ("Who took part", plots.participation_figure(groups, out / "participation.png")),
        ("How long rounds took", plots.round_time_figure(groups, out / "round_durations.png")),
        ("FAST's snapshot probability", plots.snapshot_figure(groups, out / "fast_q.png")),
    ]
    lines = [f"# {title}", ""]
    lines.append(f"{len(runs)} run(s) in {len(groups)} experiment(s); accuracies are test accuracies, the final one "
                 f"the mean of the last {last} evaluations; several seeds show as mean ± standard deviation "
                 "(figures: mean with a min-max band).")
    lines += ["", _markdown(table, target, last), ""]
    for heading, path in figures:
        if path is not None:
            lines += [f"## {heading}", "", f"![{heading}]({path.name})", ""]
    lines += ["## Runs", ""]
    for label, members in groups.items():
        lines.append(f"- **{label}**: " + ", ".join(f"`{r.path}` (seed {r.seed})" for r in members))
    (out / "report.md").write_text("\n".join(lines) + "\n")
    return out / "report.md"

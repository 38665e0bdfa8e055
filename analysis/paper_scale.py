"""The paper-scale tables: emulator runs (results/gpu/) beside the plain reference loop (results/gpu-reference/),
FAST's Fashion-MNIST table and SAFARI's (FedAvg and SAFARI by the number s of clients never selected).

Per cell, over its seeds (mean +- sample sd): the paper's metric as the emulator's scenario reads it (the
mean of the last 5 evaluations, 10 rounds apart), the mean over the last 800 rounds' evaluations (every 10th
round from 210 on: one number less at the mercy of where the last evaluations fall) and the best; for the
plain loop, which evaluates every round near the end, also the last 5 rounds back to back.

    python analysis/paper_scale.py                      # every finished run under results/
    python analysis/paper_scale.py --through 900        # also runs stopped past round 900, all read to 900
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
from dataclasses import dataclass
from pathlib import Path

import yaml

PAPER = {("0.1", "uniform", "fedavg"): 86.85, ("0.1", "beta", "fedavg"): 79.89}  # ../shared/papers/fast.md
PAPER_SAFARI = {0: 87.71, 30: 86.17, 60: 82.37, 90: 80.71, 120: 78.53}  # FedAvg by s: ../shared/papers/safari.md


@dataclass(frozen=True)
class Run:
    source: str  # "emulator", "plain loop", or the plain loop on an emulator run's split and cohorts
    alpha: str
    participation: str  # uniform or beta; for SAFARI's runs, s: how many clients are never selected
    algorithm: str  # fedavg, fast q=0.5, fedavg (Adam kept)
    seed: int
    accuracy: dict  # round -> test accuracy


def read_accuracy(metrics: Path) -> dict[int, float]:
    out = {}
    for row in csv.DictReader(metrics.open()):
        if row.get("test_acc") not in (None, ""):
            out[int(float(row["round"]))] = float(row["test_acc"])
    return out


def kept(summary: dict, accuracy: dict, through: int | None) -> bool:
    """A finished run; with `through`, also one stopped at or past that round."""
    if through is None:
        return summary.get("status") == "completed"
    return bool(accuracy) and max(accuracy) >= through


def _kept_run(folder: Path, through: int | None) -> tuple[dict, dict] | None:
    """An emulator run's scenario and accuracy by round, if `kept` keeps it."""
    summary = json.loads((folder / "summary.json").read_text())
    accuracy = read_accuracy(folder / "metrics.csv")
    if not kept(summary, accuracy, through):
        return None
    return yaml.safe_load((folder / "scenario.yaml").read_text()), accuracy


def emulator_run(folder: Path, through: int | None = None) -> Run | None:
    read = _kept_run(folder, through)
    if read is None:
        return None
    scenario, accuracy = read
    algorithm = scenario["algorithm"]
    q = algorithm.get("q")
    name = "fedavg" if algorithm["name"] == "fedavg" or q in (0, 0.0) else f"fast q={q:g}"
    who = algorithm.get("selection", {}).get("kind", "uniform")
    return Run("emulator", f"{scenario['data']['partition']['alpha']:g}", who, name, int(scenario["seed"]), accuracy)


def safari_run(folder: Path, through: int | None = None) -> Run | None:
    read = _kept_run(folder, through)
    if read is None:
        return None
    scenario, accuracy = read
    algorithm, data = scenario["algorithm"], scenario["data"]
    server = (data.get("server_set") or {}).get("size", 0)
    name = "fedavg" if algorithm.get("q") in (1, 1.0) else f"safari q={algorithm['q']:g}, {server} server samples"
    never = int(algorithm.get("selection", {}).get("exclude", 0))
    return Run("emulator", "", str(never), name, int(scenario["seed"]), accuracy)


def reference_run(folder: Path, through: int | None = None) -> Run | None:
    summary = json.loads((folder / "summary.json").read_text())
    accuracy = read_accuracy(folder / "metrics.csv")
    if not kept(summary, accuracy, through):
        return None
    settings = summary["settings"]
    name = "fedavg" if settings.get("adam", "fresh") == "fresh" else "fedavg (Adam kept)"
    source = "plain loop" if not settings.get("setup") else "plain loop, the emulator's split and cohorts"
    return Run(source, f"{settings['alpha']:g}", settings["participation"], name, int(settings["seed"]), accuracy)


def collect(results: Path, through: int | None = None) -> list[Run]:
    runs = {}
    for summary in sorted(results.glob("gpu/*/*/summary.json")):
        if not (summary.parent / "scenario.yaml").exists():
            continue
        read = emulator_run if "fast-fmnist" in summary.parent.name else (
            safari_run if "safari-fmnist" in summary.parent.name else None)
        if read is not None:
            runs[summary.parent.name] = read(summary.parent, through) or runs.get(summary.parent.name)
    for summary in sorted(results.glob("gpu-reference/*/*/summary.json")):
        runs[summary.parent.name] = reference_run(summary.parent, through) or runs.get(summary.parent.name)
    return [r for r in runs.values() if r is not None]


def metrics(run: Run, rounds: int = 1000) -> dict[str, float]:
    """The run read as if it ended at `rounds` (its evaluations after that left out)."""
    every_10 = [run.accuracy[r] for r in sorted(run.accuracy) if r % 10 == 0 and r <= rounds]
    late = [run.accuracy[r] for r in sorted(run.accuracy) if r % 10 == 0 and 200 < r <= rounds]
    out = {"last5": statistics.mean(every_10[-5:]), "late": statistics.mean(late),
           "best": max(a for r, a in run.accuracy.items() if r <= rounds)}
    back_to_back = [run.accuracy.get(r) for r in range(rounds - 4, rounds + 1)]
    if all(a is not None for a in back_to_back):
        out["last5_consecutive"] = statistics.mean(back_to_back)
    return out


def spread(values: list[float]) -> str:
    if not values:
        return ""
    mean = 100 * statistics.mean(values)
    return f"{mean:.2f} ± {100 * statistics.stdev(values):.2f}" if len(values) > 1 else f"{mean:.2f}"


def safari_table(runs: list[Run], rounds: int = 1000) -> list[str]:
    """SAFARI's Table 6 on Fashion-MNIST: a row per s and algorithm, FedAvg beside the paper's."""
    cells: dict[tuple, list[Run]] = {}
    for run in runs:
        cells.setdefault((int(run.participation), run.algorithm), []).append(run)
    lines = ["| s (never selected) | algorithm | seeds | last 5 evaluations (every 10) | "
             f"mean over rounds 201-{rounds} | best | paper (FedAvg) |", "|---|---|---|---|---|---|---|"]
    for never, algorithm in sorted(cells, key=lambda key: (key[0], key[1] != "fedavg", key[1])):
        measured = [metrics(run, rounds) for run in sorted(cells[never, algorithm], key=lambda r: r.seed)]
        seeds = ",".join(str(r.seed) for r in sorted(cells[never, algorithm], key=lambda r: r.seed))
        paper = PAPER_SAFARI.get(never, "") if algorithm == "fedavg" else ""
        lines.append(f"| {never} | {algorithm} | {len(measured)} ({seeds}) | {spread([m['last5'] for m in measured])} "
                     f"| {spread([m['late'] for m in measured])} | {spread([m['best'] for m in measured])} | {paper} |")
    return lines


def table(runs: list[Run], rounds: int = 1000) -> list[str]:
    cells: dict[tuple, list[Run]] = {}
    for run in runs:
        cells.setdefault((run.alpha, run.participation, run.algorithm, run.source), []).append(run)
    lines = ["| alpha | participation | algorithm | source | seeds | last 5 evaluations (every 10) | last 5 rounds "
             f"back to back | mean over rounds 201-{rounds} | best | paper |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    order = {"uniform": 0, "beta": 1}

    def place(key):  # alpha high to low, uniform before Beta, FedAvg first, the emulator before the plain loop
        alpha, who, algorithm, source = key
        return -float(alpha), order.get(who, 2), not algorithm.startswith("fedavg"), algorithm, source != "emulator"

    for key in sorted(cells, key=place):
        alpha, who, algorithm, source = key
        measured = [metrics(run, rounds) for run in sorted(cells[key], key=lambda r: r.seed)]
        seeds = ",".join(str(r.seed) for r in sorted(cells[key], key=lambda r: r.seed))
        paper = PAPER.get((alpha, who, algorithm), "")
        lines.append(f"| {alpha} | {who} | {algorithm} | {source} | {len(measured)} ({seeds}) | "
                     f"{spread([m['last5'] for m in measured])} | "
                     f"{spread([m['last5_consecutive'] for m in measured if 'last5_consecutive' in m])} | "
                     f"{spread([m['late'] for m in measured])} | {spread([m['best'] for m in measured])} | {paper} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=Path("results"))
    parser.add_argument("--through", type=int, default=None,
                        help="read every run to this round, runs stopped at or past it included (default: finished "
                             "runs, to 1000)")
    args = parser.parse_args(argv)
    runs = collect(args.results, args.through)
    if not runs:
        raise SystemExit(f"no finished paper-scale runs under {args.results}/gpu or {args.results}/gpu-reference")
    fast = [r for r in runs if r.alpha]
    safari = [r for r in runs if not r.alpha]
    if fast:
        print("\n".join(table(fast, args.through or 1000)))
    if safari:
        print(("\n" if fast else "") + "\n".join(safari_table(safari, args.through or 1000)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

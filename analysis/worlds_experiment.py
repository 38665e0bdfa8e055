"""Do FAST, SAFARI and FSL repair the harm of participation that follows data? (docs/reproduction.md)

    python analysis/worlds_experiment.py run --out runs/worlds        # 135 runs, ~40 min on 2 cores
    python analysis/worlds_experiment.py table runs/worlds            # the tables of docs/reproduction.md

`run` launches one `emulator sweep` per (world, algorithm): the block-cyclic world and the
slow-tier-holds-classes world (scenarios/worlds/) at population.correlation 0, 0.5 and 1, and the papers'
fixed regimes on the same data (uniform, FAST's Beta(1, 10) indices, SAFARI's s = 30 excluded clients),
each for FedAvg, FAST (q = 0.2), adaptive FAST, SAFARI and FSL, with 3 seeds. `table` prints, per world
and setting, each algorithm's accuracy at equal rounds (the last) and at equal simulated time (the
shortest run's end in that world), mean +- sample sd over seeds, with label_tv, its excess over the
floor, the unseen share and the worst class.
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
ALGORITHMS = {
    "fedavg": [],
    "fast": ["algorithm.name=fast", "algorithm.q=0.2"],
    "fast-adaptive": ["algorithm.name=fast", "algorithm.adaptive=true", "algorithm.lam=6"],
    "safari": ["algorithm.name=safari", "algorithm.q=0.8", "algorithm.server_lr=0.1"],
    "fsl": ["algorithm.name=fsl"],
}
TIED_WORLDS = {"block-cyclic": "block_cyclic.yaml", "slow-tier": "slow_tier_classes.yaml"}
FIXED = ["population.ties=[]", "system.deadline_s=null", "population.compute={kind: lognormal}"]
REGIMES = {"uniform": "algorithm.selection={kind: uniform}",
           "beta": "algorithm.selection={kind: beta, a: 1, b: 10}",
           "excluded": "algorithm.selection={kind: uniform, exclude: 30}"}


def run(out: Path, seeds: int, parallel: int, rounds: int | None, only: list[str]) -> int:
    jobs = []
    for world, file in TIED_WORLDS.items():
        for algorithm, sets in ALGORITHMS.items():
            jobs.append((f"{world}/{algorithm}", file, sets, ["population.correlation=0,0.5,1"]))
    for regime, selection in REGIMES.items():
        for algorithm, sets in ALGORITHMS.items():
            jobs.append((f"fixed-{regime}/{algorithm}", "slow_tier_classes.yaml", FIXED + [selection] + sets, []))
    return run_sweeps([(name, ROOT / "scenarios" / "worlds" / file, sets, grid) for name, file, sets, grid in jobs],
                      out, seeds, parallel, rounds, only)


def run_sweeps(jobs: list[tuple[str, Path, list[str], list[str]]], out: Path, seeds: int, parallel: int,
               rounds: int | None, only: list[str]) -> int:
    """One `emulator sweep` per (name, scenario, --set items, --grid items) into out/name, skipping those with
    a report already and those `only` leaves out (names by prefix)."""
    for name, scenario, sets, grid in jobs:
        if only and not any(name.startswith(o) for o in only):
            continue
        target = out / name
        if (target / "report" / "report.md").exists():  # the sweep's report: it finished
            print(f"{name}: done already", flush=True)
            continue
        command = [sys.executable, "-m", "emulator", "sweep", str(scenario),
                   "--seeds", str(seeds), "--parallel", str(parallel), "--out", str(target), "--quiet"]
        for item in sets + ([f"rounds={rounds}"] if rounds else []):
            command += ["--set", item]
        for item in grid:
            command += ["--grid", item]
        print(" ".join(command), flush=True)
        if subprocess.call(command) not in (0,):
            print(f"{name}: the sweep failed", flush=True)
    return 0


# --------------------------------------------------------------------------------------------- tables
def _runs(root: Path) -> list[dict]:
    runs = []
    for summary_path in sorted(root.rglob("summary.json")):
        directory = summary_path.parent
        summary = json.loads(summary_path.read_text())
        if summary.get("status") != "completed":
            continue
        scenario = yaml.safe_load((directory / "scenario.yaml").read_text())
        import csv
        with open(directory / "metrics.csv", newline="") as handle:
            rows = list(csv.DictReader(handle))
        setting = directory.relative_to(root).parts[0]
        runs.append({"setting": setting, "algorithm": directory.relative_to(root).parts[1],
                     "correlation": scenario["population"].get("correlation", 1.0) if not setting.startswith("fixed")
                     else None, "seed": scenario["seed"], "rows": rows})
    return runs


def _number(text):
    return float(text) if text not in ("", None) else math.nan


def _accuracy_at(rows: list[dict], end_s: float) -> float:
    evaluated = [r for r in rows if r["test_acc"] and float(r["sim_time_s"]) <= end_s + 1e-9]
    return float(evaluated[-1]["test_acc"]) if evaluated else math.nan


def _mean_sd(values: list[float]) -> str:
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return "-"
    mean = sum(values) / len(values)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
    return f"{100 * mean:.1f} ± {100 * sd:.1f}"


def _mean(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else math.nan


def table(root: Path) -> int:
    runs = _runs(root)
    if not runs:
        print(f"{root}: no completed runs", file=sys.stderr)
        return 1
    worlds = {}
    for r in runs:
        worlds.setdefault("fixed" if r["setting"].startswith("fixed") else r["setting"], []).append(r)
    for world, members in worlds.items():
        equal_time = min(float(r["rows"][-1]["sim_time_s"]) for r in members)
        print(f"\n### {world}: accuracy (%) at round {members[0]['rows'][-1]['round']} and at "
              f"{equal_time / 3600:.2f} simulated hours, mean ± sd over seeds\n")
        print("| setting | algorithm | acc, equal rounds | acc, equal time | sim hours | label_tv | excess | "
              "unseen | worst class |")
        print("|---|---|---|---|---|---|---|---|---|")
        keys = sorted({(r["setting"], r["correlation"], r["algorithm"]) for r in members},
                      key=lambda k: (k[0], k[1] if k[1] is not None else -1, list(ALGORITHMS).index(k[2])))
        for setting, correlation, algorithm in keys:
            group = [r for r in members if (r["setting"], r["correlation"], r["algorithm"]) == (setting, correlation,
                                                                                            algorithm)]
            final = [_number(r["rows"][-1]["test_acc"]) for r in group]
            at_time = [_accuracy_at(r["rows"], equal_time) for r in group]
            hours = _mean([float(r["rows"][-1]["sim_time_s"]) / 3600 for r in group])
            tv = _mean([_mean([_number(x.get("label_tv")) for x in r["rows"]]) for r in group])
            floor = _mean([_mean([_number(x.get("label_tv_floor")) for x in r["rows"]]) for r in group])
            unseen = _mean([_number(r["rows"][-1].get("unseen_share")) for r in group])
            worst = [r["rows"][-1].get("worst_class") for r in group]
            worst_acc = _mean([_number(r["rows"][-1].get("worst_class_acc")) for r in group])
            label = setting if correlation is None else f"{setting} c={correlation:g}"
            print(f"| {label} | {algorithm} (n={len(group)}) | {_mean_sd(final)} | {_mean_sd(at_time)} | {hours:.1f} | "
                  f"{tv:.3f} | {tv - floor:+.3f} | {unseen:.2f} | {'/'.join(map(str, worst))} "
                  f"({100 * worst_acc:.0f}%) |")
    return 0


def command_line(argv, description: str, run, table, out: str, parallel: int, only_example: str) -> int:
    """`run` (the sweeps) and `table` (the tables) as subcommands: shared by the experiment scripts."""
    parser = argparse.ArgumentParser(description=description)
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("run", help="run the sweeps (skips those already done)")
    start.add_argument("--out", type=Path, default=Path(out))
    start.add_argument("--seeds", type=int, default=3)
    start.add_argument("--parallel", type=int, default=parallel)
    start.add_argument("--rounds", type=int, help="override every scenario's rounds (e.g. 5 for a smoke test)")
    start.add_argument("--only", nargs="*", default=[], help=f"settings to run, e.g. {only_example}")
    show = commands.add_parser("table", help="print the tables")
    show.add_argument("root", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        return run(args.out, args.seeds, args.parallel, args.rounds, args.only)
    return table(args.root)


def main(argv=None) -> int:
    return command_line(argv, __doc__.splitlines()[0], run, table, "runs/worlds", 3, "block-cyclic fixed-beta")


if __name__ == "__main__":
    sys.exit(main())

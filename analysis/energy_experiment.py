"""What does eligibility by charging, idle and Wi-Fi do, against availability windows with the same online
share? (docs/worlds.md, "Eligibility and energy: the experiment")

    python analysis/energy_experiment.py run --out runs/energy        # 27 runs of 130 rounds
    python analysis/energy_experiment.py table runs/energy            # the table of docs/worlds.md

`run` launches one `emulator sweep` per (world, algorithm), 3 seeds each, on scenarios/worlds/eligible_at_night.yaml
(1000 phones in three zones tied to their data, batteries, Wi-Fi only): the world as shipped, where a phone
is online while it is charging, idle and on Wi-Fi ("eligible"), and the same fleet online in a nightly
4-hour window of its local time instead ("windows": the same long-run online share, 16.7%, with the same
zones and ties), each for FedAvg, FAST (q = 0.2) and SAFARI (with 600 iid samples, 1% of the data, as the
server's own set); and FedAvg with battery-first selection
(greed 2) under eligibility; and FedAvg, uniform and battery-first, where phones train on battery
("on-battery": idle on Wi-Fi, charging or not, with at least half a battery). `table` writes `emulator report`'s comparison (time, bytes and the fleet's
energy to 60% test accuracy, the energy wasted, who pays, label TV) to OUT/report and prints its table.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from worlds_experiment import run_sweeps  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
WORLD = ROOT / "scenarios" / "worlds" / "eligible_at_night.yaml"
WINDOWS = ("population.availability=[{kind: diurnal, start_hour: 1, hours: 4, start_spread_h: 3, jitter_h: 0.75}]")
ALGORITHMS = {
    "fedavg": [],
    "fast": ["algorithm.name=fast", "algorithm.q=0.2"],
    "safari": ["algorithm.name=safari", "algorithm.q=0.8", "algorithm.server_lr=0.1",
               "data.server_set={size: 600, source: iid}"],  # SAFARI trains on the server's own 1%
}
BATTERY_FIRST = "algorithm.selection={kind: battery, greed: 2}"
ON_BATTERY = ["population.availability.0.requires=[unmetered, idle]", "population.availability.0.min_soc=0.5"]
TARGET = 0.6
ROUNDS = 130  # about a simulated day at ~11 minutes a round: every zone's night comes round


def jobs() -> list[tuple[str, Path, list[str], list[str]]]:
    out = []
    for world, sets in (("eligible", []), ("windows", [WINDOWS])):
        for algorithm, algorithm_sets in ALGORITHMS.items():
            out.append((f"{world}/{algorithm}", WORLD, sets + algorithm_sets, []))
    out.append(("eligible/fedavg-battery-first", WORLD, [BATTERY_FIRST], []))
    for name, sets in (("fedavg", []), ("fedavg-battery-first", [BATTERY_FIRST])):
        out.append((f"on-battery/{name}", WORLD, ON_BATTERY + sets, []))
    return out


COLUMNS = (("final_acc", "final acc", "{:.3f}"), ("tta_hours", "h to 0.6", "{:.2f}"),
           ("kj_to_target", "kJ to 0.6", "{:.0f}"), ("fleet_kj", "fleet kJ", "{:.0f}"),
           ("wasted_energy_share", "wasted", "{:.1%}"), ("cancelled_energy_share", "cancelled", "{:.1%}"),
           ("top10_energy_share", "top 10% pay", "{:.1%}"), ("never_reported", "never reported", "{:.1%}"),
           ("unseen_share", "data never seen", "{:.1%}"), ("worst_class_acc", "worst class", "{:.3f}"),
           ("mean_label_tv", "label TV", "{:.3f}"), ("aborted", "aborted", "{:.0f}"))


def table(root: Path) -> int:
    """One row per (world, algorithm): mean +- sample sd over the seeds; the whole report in OUT/report."""
    from emulator.analysis import write_report
    from emulator.analysis.report import comparison_table
    from emulator.analysis.runs import read_runs, select_runs

    names = [name for name, _, _, _ in jobs() if (root / name).is_dir()]
    if not names:
        print(f"{root}: no runs", file=sys.stderr)
        return 1
    print("| world | algorithm | seeds | " + " | ".join(heading for _, heading, _ in COLUMNS) + " |")
    print("|---|---|---|" + "---|" * len(COLUMNS))
    for name in names:
        runs, _ = read_runs([root / name])
        row = comparison_table(select_runs(runs).groups, TARGET, 5).iloc[0]
        cells = []
        for column, _, form in COLUMNS:
            value, spread = row.get(column, float("nan")), row.get(f"{column}_std", float("nan"))
            text = "-" if value != value else form.format(value)
            cells.append(text + (f" ± {form.format(spread)}" if value == value and spread == spread else ""))
        world, algorithm = name.split("/")
        print(f"| {world} | {algorithm} | {int(row['seeds'])} | " + " | ".join(cells) + " |")
    report = write_report([root / name for name in names], root / "report", target=TARGET,
                          title="Eligibility against availability windows")
    print(f"\nthe whole report (figures, who pays): {report}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    go = sub.add_parser("run")
    go.add_argument("--out", type=Path, required=True)
    go.add_argument("--seeds", type=int, default=3)
    go.add_argument("--parallel", type=int, default=2)
    go.add_argument("--rounds", type=int, default=ROUNDS)
    go.add_argument("--only", nargs="*", default=[])
    show = sub.add_parser("table")
    show.add_argument("root", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        return run_sweeps(jobs(), args.out, args.seeds, args.parallel, args.rounds, args.only)
    return table(args.root)


if __name__ == "__main__":
    sys.exit(main())

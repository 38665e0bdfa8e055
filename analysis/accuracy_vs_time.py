"""Test accuracy against simulated hours, and the time each run took to reach a target accuracy.

    python analysis/accuracy_vs_time.py runs/a runs/b --out accuracy.png --target 0.75

Each argument is a run directory or a directory holding runs. Prints one line per run (final accuracy;
simulated hours, rounds and GB to the target; runs that did not complete are marked) and draws every run's
evaluated test accuracy against simulated hours. Uses only the public functions of emulator.analysis.
"""
from __future__ import annotations

import argparse
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from emulator.analysis import (NotARunError, final_accuracy, incomplete_reason, load_runs,  # noqa: E402
                               time_to_accuracy)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", help="run directories, or directories holding runs")
    parser.add_argument("--out", default="accuracy_vs_time.png", help="where to write the figure (.png, .pdf, .svg)")
    parser.add_argument("--target", type=float, help="test accuracy to reach (e.g. 0.75)")
    parser.add_argument("--last", type=int, default=5, help="final accuracy = mean of the last N evaluations")
    args = parser.parse_args(argv)
    try:
        runs = load_runs(args.runs)
    except NotARunError as exc:
        print(f"accuracy_vs_time: {exc}", file=sys.stderr)
        return 2

    width = max(len(str(run.path)) for run in runs)
    heading = f"{'run':<{width}}  {'seed':>4}  {'final acc':>9}"
    if args.target is not None:
        heading += f"  {f'hours to {args.target}':>14}  {'rounds':>6}  {'GB':>7}"
    print(heading)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for run in runs:
        line = f"{str(run.path):<{width}}  {run.seed:>4}  {final_accuracy(run.metrics, args.last):>9.4f}"
        if args.target is not None:
            reach = time_to_accuracy(run.metrics, args.target)  # needs every round, for the bytes
            line += (f"  {'not reached':>14}  {'-':>6}  {'-':>7}" if math.isnan(reach["round"]) else
                     f"  {reach['sim_hours']:>14.2f}  {reach['round']:>6}  {reach['bytes'] / 1e9:>7.3f}")
        why = incomplete_reason(run)
        print(line + (f"  ({why})" if why else ""))
        evaluated = run.evaluated
        ax.plot(evaluated["sim_time_s"] / 3600.0, evaluated["test_acc"], linewidth=1.4,
                label=f"{run.name} (seed {run.seed})" + (" (incomplete)" if why else ""))
    if args.target is not None:
        ax.axhline(args.target, color="grey", linestyle=":", linewidth=1, label=f"target {args.target}")
    ax.set_xlabel("simulated wall-clock (hours)")
    ax.set_ylabel("test accuracy")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"figure: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What does the energy model cost the system model, a round, as the fleet grows?

The worlds of benchmarks/system.py (three time zones, 1000 reports a round, no training), each run with
and without `population.energy`, in fresh processes, alternating, `--repeats` times; the table gives the
median time a round of each and their ratio. With `--availability eligible` (the default) phones are
online while charging, idle and on Wi-Fi, so energy brings the batteries too: each phone's state of
charge on the clock, the floor at check-in (a cached answer per device) and the walk of each selected
phone's battery through its work. With `--availability diurnal` energy is charged but no level is kept.

Target: at most 1.20x (the energy model adds at most 20% to the system model's time a round) at 10^6
devices.

    .venv/bin/python benchmarks/energy.py [--sizes 100000 1000000] [--rounds 30] [--repeats 3]
                                          [--availability eligible|diurnal]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

TARGET_RATIO = {1_000_000: 1.20}
SYSTEM = Path(__file__).resolve().parent / "system.py"


def child(size: int, rounds: int, availability: str, energy: bool) -> dict:
    command = [sys.executable, str(SYSTEM), "--child", str(size), "--rounds", str(rounds),
               "--availability", availability] + (["--energy"] if energy else [])
    out = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--availability", choices=("eligible", "diurnal"), default="eligible")
    args = parser.parse_args(argv)
    print(f"system model only: {args.availability} availability, 1000 reports a round, {args.rounds} rounds; "
          f"median of {args.repeats} alternating runs of each", file=sys.stderr)
    header = ("devices", "without energy ms / round", "with energy ms / round", "with / without", "target",
              "peak MiB without", "peak MiB with")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    failed = False
    for size in args.sizes:
        runs = {False: [], True: []}
        for _ in range(args.repeats):
            for energy in (False, True):
                runs[energy].append(child(size, args.rounds, args.availability, energy))
        plain = statistics.median(r["ms_per_round"] for r in runs[False])
        powered = statistics.median(r["ms_per_round"] for r in runs[True])
        ratio, target = powered / plain, TARGET_RATIO.get(size)
        ok = target is None or ratio <= target
        failed |= not ok
        print(f"| {size:,} | {plain:.1f} | {powered:.1f} | {ratio:.2f} | "
              f"{'-' if target is None else f'<= {target:.2f}'}{'' if ok else ' MISSED'} | "
              f"{max(r['peak_mib'] for r in runs[False]):.0f} | {max(r['peak_mib'] for r in runs[True]):.0f} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

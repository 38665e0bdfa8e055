"""What shared links cost the system model: the same world with and without system.network, measured in one
command.

10^5 devices in three time zones (diurnal availability), 1000 reports a round out of 1300 selected, a 4.8 MB
model each way; with the network, devices sit in cells of `--per-cell` devices of their own zone (20 Mbit/s
up, 100 down), cells behind one regional link a zone (`--backhaul-mbps`, 1 Gbit/s up, 10 down: the busiest
zone's uploads fill it) and the server's link (10
Gbit/s up, 40 down). Each round every selected device's download and upload is a flow on that tree, so
about 1300 transfers run at once. The two worlds alternate round by round (the same seeds), so the ratio
is measured on the same machine at the same time. The target: the shared links add at most 50% to the
system model's time a round.

    .venv/bin/python benchmarks/network.py [--devices 100000] [--rounds 30] [--per-cell 100]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

TARGET_RATIO = 1.5
COHORT, MODEL_BYTES = 1000, 4_800_000


def scenario(devices: int, per_cell: float, network: bool, backhaul_mbps: float = 1000.0) -> dict:
    raw = {
        "name": "network-bench", "rounds": 1, "seed": 0,
        "algorithm": {"clients_per_round": COHORT, "local_steps": 10, "batch_size": 32},
        "population": {"devices": devices, "dropout_per_hour": 0.2, "availability": [
            {"kind": "diurnal", "start_hour": 21, "hours": 8, "start_spread_h": 3, "jitter_h": 0.5,
             "timezones": {"offsets_h": [-5, 1, 8], "shares": [0.4, 0.3, 0.3]}}]},
        "system": {"model": "simulated", "over_selection": 1.3, "deadline_s": 1800},
    }
    if network:
        raw["system"]["network"] = {
            "access": {"devices_per_link": per_cell, "attach": "zone", "up_mbps": 20, "down_mbps": 100},
            "regions": {"by": "zone", "up_mbps": backhaul_mbps, "down_mbps": 10 * backhaul_mbps},
            "server": {"up_mbps": 10000, "down_mbps": 40000}}
    return raw


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--per-cell", type=float, default=100.0)
    parser.add_argument("--backhaul-mbps", type=float, default=1000.0, help="a region's up capacity (down: 10x)")
    args = parser.parse_args(argv)

    from emulator.algorithms.selection import Uniform
    from emulator.parts import validate_scenario
    from emulator.system import CohortRequest, SimulatedSystem

    worlds = {name: SimulatedSystem(validate_scenario(scenario(args.devices, args.per_cell, name == "shared links",
                                                                  args.backhaul_mbps)))
              for name in ("alone", "shared links")}
    samples = lambda ids: np.full(len(ids), 320)
    times = {name: [] for name in worlds}
    stats = {name: [] for name in worlds}
    for r in range(1, args.rounds + 1):
        for name, system in worlds.items():
            request = CohortRequest(r, COHORT, Uniform(), np.random.default_rng(r), MODEL_BYTES, MODEL_BYTES, samples)
            started = time.perf_counter()
            outcome = system.client_round(request)
            times[name].append(time.perf_counter() - started)
            stats[name].append((len(outcome.selected), outcome.duration_s, outcome.network.get("network_wait_s", 0.0),
                                outcome.network.get("access_up_utilisation", 0.0)))
    print(f"{args.devices:,} devices, {COHORT} reports a round of {int(COHORT * 1.3)} selected, {args.rounds} rounds "
          f"(the first not counted), cells of {args.per_cell:g} devices; {MODEL_BYTES / 1e6:.1f} MB each way",
          file=sys.stderr)
    print("| world | ms / round (median) | transfers at once | simulated s / round | mean wait s | busiest cell up |")
    print("|---|---|---|---|---|---|")
    median = {name: 1000 * statistics.median(t[1:]) for name, t in times.items()}
    for name in worlds:
        selected, duration, wait, busiest = (statistics.mean(column) for column in zip(*stats[name]))
        print(f"| {name} | {median[name]:.1f} | {2 * selected:.0f} ({selected:.0f} down, {selected:.0f} up) | "
              f"{duration:.0f} | {wait:.1f} | {busiest:.2f} |")
    ratio = median["shared links"] / median["alone"]
    print(f"\nshared links / alone: {ratio:.2f} (target <= {TARGET_RATIO}){'' if ratio <= TARGET_RATIO else ' MISSED'}")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())

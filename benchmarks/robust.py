"""What the robust aggregators really cost the server, against what the simulated clock charges for them.

Each rule of emulator/aggregation/robust.py counts its work in element operations, and the clock charges
them at system.server.s_per_operation (1 ns by default) beyond the weighted mean every host runs anyway.
This measures each rule's real time on this machine's one core (median of repeats), beside the mean's (the
baseline, measured in the same run), and prints per rule and size:

- measured: the rule's seconds, and its ratio to the mean's;
- charged: the seconds the clock adds (operations beyond the mean x s_per_operation);
- measured extra / charged: 1 means the default rate prices this machine's server exactly; below 1 it
  over-charges, above 1 it under-charges.

Sizes: 10 to 100 updates of the 784-200-200-10 MLP (199,210 values) and of FAST's CNN (~1.2 M values would
take GBs at 100 updates: its 1,000,000-value row stands for it).

    .venv/bin/python benchmarks/robust.py [--repeats 5] [--rate 1e-9]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # one core, as documented
    os.environ.setdefault(_variable, "1")

import numpy as np  # noqa: E402 (after the thread settings, which numpy reads when it loads)

from emulator.aggregation.robust import (coordinate_median, extra_operations, multi_krum,  # noqa: E402
                                        norm_bound, trimmed_mean)

RULES = {
    "median": lambda rows, weights: coordinate_median(rows),
    "trimmed_mean (0.2)": lambda rows, weights: trimmed_mean(rows, 0.2),
    "krum (f 2)": lambda rows, weights: multi_krum(rows, 2),
    "multi-krum (f 2, m 5)": lambda rows, weights: multi_krum(rows, 2, 5),
    "norm_bound (adaptive)": lambda rows, weights: norm_bound(rows, weights),
}
SIZES = [(10, 199_210), (50, 199_210), (100, 199_210), (20, 1_000_000)]


def _seconds(call, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def weighted_mean(rows: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The host's own aggregate (as aggregation/mean.py sums it): the baseline no rule is charged for."""
    total = np.zeros(rows.shape[1])
    for row, weight in zip(rows, weights):
        total += weight * row.astype(np.float64)
    return total / weights.sum()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rate", type=float, default=1e-9, help="system.server.s_per_operation")
    args = parser.parse_args(argv)
    print("| rule | updates x values | measured s | x the mean | charged s | measured extra / charged |")
    print("|---|---|---|---|---|---|")
    rng = np.random.default_rng(0)
    for n, d in SIZES:
        rows = rng.standard_normal((n, d)).astype(np.float32)
        weights = np.ones(n)
        mean_s = _seconds(lambda: weighted_mean(rows, weights), args.repeats)
        print(f"| weighted mean (baseline) | {n} x {d:,} | {mean_s:.4f} | 1.0 | 0 | - |")
        for name, rule in RULES.items():
            result = rule(rows, weights)
            seconds = _seconds(lambda: rule(rows, weights), args.repeats)
            charged = extra_operations(result, n, d) * args.rate
            extra = max(seconds - mean_s, 0.0)
            print(f"| {name} | {n} x {d:,} | {seconds:.4f} | {seconds / mean_s:.1f} | {charged:.4f} | "
                  f"{extra / charged:.2f} |" if charged else f"| {name} | {n} x {d:,} | {seconds:.4f} | "
                  f"{seconds / mean_s:.1f} | 0 | - |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How fast FAST's paper-scale Fashion-MNIST runs go on one GPU as one Ray sweep, in several configurations.

FAST's Table 2 Fashion-MNIST alpha = 0.1 cells: 12 runs (uniform and Beta(1, 10) participation x FedAvg and
FAST q = 0.5, 3 seeds) of 1000 rounds with the paper's CNN. Measured on an H100 (2026-11-26, docs/gpu.md
"Many runs on one GPU"): runs sharing one Ray sweep on the card go slower in total than the same runs one
after another (the paper-scale runs themselves now go as separate in-process runs under MPS,
benchmarks/gpu_papers.py, four times faster). One run alone on 4 runners x 0.25 did 1000 rounds in 164 s (6.1 rounds a
second, its evaluations included); 4 runs at once on the same runners 3.8 rounds a second in all, 12 at once
on 12 x 0.0833 0.3 (4.3 with each cohort vectorised under CUDA MPS).

Probe: the sweep for a few rounds in each configuration below; prints seconds per round per run, rounds
per second in all and what 12 runs x 1000 rounds would take. A configuration stopped by --limit still
counts where its runs got past round 3. `--best FILE` writes the fastest one's name.

Configurations (names for --configs):
  one         one run at a time on 4 runners x 0.25 (the fastest on Ray)
  base        parallel 12, runners x 0.0833, one device at a time
  vec         the same, each run's cohort (10 devices) vectorised in one task (runtime.group_size 10)
  mps         base under CUDA MPS (nvidia-cuda-mps-control -d): the runners' kernels run side by side
              instead of time-sliced between processes
  vec_mps     vec under MPS
  four        parallel 4 on 4 runners x 0.25, runs sharing the runners
  four_vec    four, each run's cohort vectorised in one task

    python benchmarks/gpu_sweep_probe.py [--rounds 10] [--configs base vec mps vec_mps] [--best FILE]
"""
from __future__ import annotations

import argparse
import csv
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpu_papers import start_mps, stop_mps  # benchmarks/ is on the path when a script here runs

SCENARIO = "scenarios/papers/fast_fmnist.yaml"
GRID = ["--grid", "algorithm.selection={kind: uniform},{kind: beta, a: 1, b: 10}", "--grid", "algorithm.q=0,0.5"]
CONFIGS = {  # name: (parallel, num_gpus per runner, extra --set values, needs MPS)
    "one": (1, 0.25, [], False),
    "base": (12, 0.0833, [], False),
    "vec": (12, 0.0833, ["runtime.vectorise=true", "runtime.group_size=10"], False),
    "mps": (12, 0.0833, [], True),
    "vec_mps": (12, 0.0833, ["runtime.vectorise=true", "runtime.group_size=10"], True),
    "four": (4, 0.25, [], False),
    "four_vec": (4, 0.25, ["runtime.vectorise=true", "runtime.group_size=10"], False),
}


def sweep_args(name: str) -> list[str]:
    """The sweep's own arguments for a configuration, after the scenario path (no rounds, no output)."""
    parallel, share, sets, _ = CONFIGS[name]
    args = ["--set", f"runtime.num_gpus={share}", "--set", "runtime.num_cpus=0.5", *GRID,
            "--seeds", "3", "--parallel", str(parallel)]
    for value in sets:
        args += ["--set", value]
    return args


def seconds_per_round(run_dir: Path) -> float | None:
    """Mean wall seconds between rounds 2 and R-1 (no start-up, no final evaluation); None if too few."""
    rows = list(csv.DictReader((run_dir / "metrics.csv").open())) if (run_dir / "metrics.csv").exists() else []
    if len(rows) < 4:
        return None
    wall = [float(r["wall_time_s"]) for r in rows]
    return (wall[-2] - wall[1]) / (len(wall) - 3)


def probe(name: str, rounds: int, limit_s: float) -> dict:
    needs_mps = CONFIGS[name][3]
    if needs_mps and not start_mps():
        return {"config": name, "error": "no MPS"}
    out = Path(tempfile.mkdtemp(prefix=f"probe-{name}-"))
    command = [sys.executable, "-m", "emulator", "sweep", SCENARIO, "--quiet", "--set", f"rounds={rounds}",
               "--set", "output.tensorboard=false", *sweep_args(name), "--out", str(out / "sweep")]
    started = time.time()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit_s)
        error = None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["?"])[-1][:200]
    except subprocess.TimeoutExpired:
        error = f"over {limit_s:.0f} s"
    finally:
        if needs_mps:
            stop_mps()
    took = time.time() - started
    per_run = [s for s in (seconds_per_round(d) for d in (out / "sweep").glob("*/")) if s is not None]
    shutil.rmtree(out, ignore_errors=True)
    row = {"config": name, "runs": len(per_run), "wall_s": round(took, 1), "error": error}
    if per_run:  # runs in flight at once, not runs measured: a probe past its first wave measured more
        mean, in_flight = sum(per_run) / len(per_run), min(CONFIGS[name][0], len(per_run))
        row.update(s_per_round=round(mean, 3), rounds_per_s=round(in_flight / mean, 2),
                   minutes_12x1000=round(12 * 1000 / (in_flight / mean) / 60, 1))
    return row


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10, help="rounds per run (>= 4; the last is excluded)")
    parser.add_argument("--configs", nargs="+", default=["base", "vec", "mps", "vec_mps"], choices=list(CONFIGS))
    parser.add_argument("--limit", type=float, default=150, help="seconds one configuration may take")
    parser.add_argument("--best", help="write the fastest configuration's name here")
    args = parser.parse_args(argv)
    rows = []
    print("| config | runs | s / round / run | rounds / s (all runs) | 12 x 1000 rounds (min) | probe wall (s) | error |")
    print("|---|---|---|---|---|---|---|", flush=True)
    for name in args.configs:
        row = probe(name, args.rounds, args.limit)
        rows.append(row)
        print(f"| {name} | {row.get('runs', 0)} | {row.get('s_per_round', '')} | {row.get('rounds_per_s', '')} | "
              f"{row.get('minutes_12x1000', '')} | {row.get('wall_s', '')} | {row.get('error') or ''} |", flush=True)
        measured = [r for r in rows if r.get("rounds_per_s")]
        if args.best and measured:  # after every row: a probe stopped by its caller's limit still names one
            best = max(measured, key=lambda r: r["rounds_per_s"])["config"]
            Path(args.best).write_text(best + "\n")
    if args.best and Path(args.best).exists():
        print(f"fastest: {Path(args.best).read_text().strip()}", flush=True)
    return 0 if Path(args.best or "").is_file() or any(r.get("rounds_per_s") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

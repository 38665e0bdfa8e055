"""What does each device get from FedAvg, FAST, SAFARI, fine-tuning, FedPer and Ditto? (docs/devices.md)

    python analysis/personal_experiment.py run --out runs/personal      # 60 runs, ~30 min on 2 cores
    python analysis/personal_experiment.py table runs/personal          # the tables of docs/devices.md

`run` launches one `emulator sweep` per (world, algorithm) at population.correlation 0 and 1, with 3 seeds,
in the two shipped worlds where behaviour follows data: the slow tier that holds classes 7-9
(scenarios/worlds/what_devices_get.yaml) and the block-cyclic time zones (scenarios/worlds/block_cyclic.yaml,
with the same local test splits and on-device evaluation set on it). The algorithms: FedAvg (whose runs
also give FedAvg + fine-tuning: 10 steps on the phone's own data before it is scored), FAST (q 0.2),
SAFARI (q 0.8), FedPer (the MLP's output layer kept on each phone) and Ditto (lam 0.1). `table` prints per
world and correlation each one's central test accuracy, the oracle device mean (every phone on its own
split, with its own model where it has one), the server's sampled estimate, the worst 10% of phones and
the phones that never reported at the last evaluation, and the device mean at equal simulated time (the
shortest run's end in that world: FAST's snapshot rounds wait for phones, Ditto trains twice a round).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

from worlds_experiment import _mean, _mean_sd, _number, _runs, command_line, run_sweeps

ROOT = Path(__file__).resolve().parents[1]
WORLDS = {
    "slow-tier": ("what_devices_get.yaml", []),
    "block-cyclic": ("block_cyclic.yaml", ["data.local_test={fraction: 0.2, min_samples: 5}",
                                           "evaluation.devices={sample: 20, finetune: {steps: 10, lr: 0.05}}"]),
}
ALGORITHMS = {
    "fedavg": [],
    "fast": ["algorithm.name=fast", "algorithm.q=0.2"],
    "safari": ["algorithm.name=safari", "algorithm.q=0.8", "algorithm.server_lr=0.1"],
    "fedper": ["algorithm.name=fedper", "algorithm.personal_layers=[5]"],
    "ditto": ["algorithm.name=ditto", "algorithm.lam=0.1"],
}
COLUMNS = [("central", "test_acc"), ("device mean (oracle)", "device_acc_mean"),
           ("sampled estimate", "sampled_acc_mean"), ("worst 10%", "device_acc_worst10"),
           ("never reported", "device_acc_never_reported")]


def run(out: Path, seeds: int, parallel: int, rounds: int | None, only: list[str]) -> int:
    jobs = [(f"{world}/{name}", ROOT / "scenarios" / "worlds" / file, world_sets + sets, ["population.correlation=0,1"])
            for world, (file, world_sets) in WORLDS.items() for name, sets in ALGORITHMS.items()]
    return run_sweeps(jobs, out, seeds, parallel, rounds, only)


def _last_evaluated(rows: list[dict], column: str, end_s: float = math.inf) -> float:
    evaluated = [r for r in rows if r.get("device_acc_mean") and float(r["sim_time_s"]) <= end_s + 1e-9]
    return _number(evaluated[-1].get(column)) if evaluated else math.nan


def table(root: Path) -> int:
    runs = _runs(root)
    if not runs:
        print(f"{root}: no completed runs", file=sys.stderr)
        return 1
    for world, correlation in sorted({(r["setting"], r["correlation"]) for r in runs}):
        members = [r for r in runs if (r["setting"], r["correlation"]) == (world, correlation)]
        equal_time = min(float(r["rows"][-1]["sim_time_s"]) for r in members)
        print(f"\n### {world}, correlation {correlation:g}: accuracy (%) at the last evaluation, mean ± sd over "
              f"seeds; device mean at {equal_time / 3600:.2f} simulated hours\n")
        print("| algorithm | " + " | ".join(name for name, _ in COLUMNS) + " | device mean, equal time | sim hours |")
        print("|---" * (len(COLUMNS) + 3) + "|")
        rows = [(name, [r for r in members if r["algorithm"] == name], "") for name in ALGORITHMS]
        rows.insert(1, ("fedavg + fine-tuning", rows[0][1], "_ft"))
        for name, group, tuned in rows:
            if not group:
                continue
            cells = []
            for _, column in COLUMNS:
                source = column.replace("device_acc_", f"device_acc{tuned}_").replace("sampled_acc_", f"sampled_acc{tuned}_") \
                    if tuned and column != "test_acc" else column
                cells.append(_mean_sd([_last_evaluated(r["rows"], source) for r in group]))
            at_time = _mean_sd([_last_evaluated(r["rows"], f"device_acc{tuned}_mean", equal_time) for r in group])
            hours = _mean([float(r["rows"][-1]["sim_time_s"]) / 3600 for r in group])
            print(f"| {name} (n={len(group)}) | " + " | ".join(cells) + f" | {at_time} | {hours:.2f} |")
    return 0


def main(argv=None) -> int:
    return command_line(argv, __doc__.splitlines()[0], run, table, "runs/personal", 2, "slow-tier/fedper")


if __name__ == "__main__":
    sys.exit(main())

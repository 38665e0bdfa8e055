"""What does each device get from FedAvg, fine-tuning, FedPer and Ditto? (docs/devices.md, "Personalization")

    python analysis/personal_experiment.py run --out runs/personal      # 18 runs, ~10 min on 2 cores
    python analysis/personal_experiment.py table runs/personal          # the table of docs/devices.md

`run` launches one `emulator sweep` per algorithm on scenarios/worlds/what_devices_get.yaml (Fashion-MNIST,
Dirichlet 0.1, 100 phones, a slow tier past the deadline that, at correlation 1, holds classes 7-9) at
population.correlation 0 and 1, with 3 seeds: FedAvg (whose runs also give FedAvg + fine-tuning: 10 steps
on the phone's own data before it is scored), FedPer (the MLP's output layer kept on each phone) and
Ditto (lam 0.1). `table` prints per correlation each one's central test accuracy, the oracle device mean
(every phone on its own split, with its own model where it has one), the server's sampled estimate, the
worst 10% of phones and the phones that never reported, at equal rounds (the last evaluation) and the
device mean at equal simulated time (the shortest run's end: Ditto's rounds take longer, it trains twice).
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

from worlds_experiment import _mean, _mean_sd, _number, _runs, command_line, run_sweeps

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "worlds" / "what_devices_get.yaml"
ALGORITHMS = {
    "fedavg": [],
    "fedper": ["algorithm.name=fedper", "algorithm.personal_layers=[5]"],
    "ditto": ["algorithm.name=ditto", "algorithm.lam=0.1"],
}
COLUMNS = [("central", "test_acc"), ("device mean (oracle)", "device_acc_mean"),
           ("sampled estimate", "sampled_acc_mean"), ("worst 10%", "device_acc_worst10"),
           ("never reported", "device_acc_never_reported")]


def run(out: Path, seeds: int, parallel: int, rounds: int | None, only: list[str]) -> int:
    jobs = [(f"world/{name}", SCENARIO, sets, ["population.correlation=0,1"]) for name, sets in ALGORITHMS.items()]
    return run_sweeps(jobs, out, seeds, parallel, rounds, only)


def _last_evaluated(rows: list[dict], column: str, end_s: float = math.inf) -> float:
    evaluated = [r for r in rows if r.get("device_acc_mean") and float(r["sim_time_s"]) <= end_s + 1e-9]
    return _number(evaluated[-1].get(column)) if evaluated else math.nan


def table(root: Path) -> int:
    runs = _runs(root)
    if not runs:
        print(f"{root}: no completed runs", file=sys.stderr)
        return 1
    for correlation in sorted({r["correlation"] for r in runs}):
        members = [r for r in runs if r["correlation"] == correlation]
        equal_time = min(float(r["rows"][-1]["sim_time_s"]) for r in members)
        print(f"\n### correlation {correlation:g}: accuracy (%) at the last evaluation, mean ± sd over seeds; "
              f"device mean at {equal_time / 3600:.2f} simulated hours\n")
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
    return command_line(argv, __doc__.splitlines()[0], run, table, "runs/personal", 2, "world/fedper")


if __name__ == "__main__":
    sys.exit(main())

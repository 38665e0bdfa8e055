"""How much does the world multiply an attacker's share, and what does a defence buy? (docs/security.md)

    python analysis/security_experiment.py run --out runs/security      # 30 runs, ~10 min on 2 cores
    python analysis/security_experiment.py table runs/security          # the table of docs/security.md

`run` launches one `emulator sweep` per setting on scenarios/security/backdoor_always_on.yaml (5% of 200
phones run a boosted backdoor; honest phones are online a few hours, a slow tier misses the deadline;
the attackers are always online on the fastest tier) at population.correlation 1 (the attackers behave as
their type says) and 0 (their behaviour drawn like everyone else's), with 3 seeds: synchronous FedAvg with
over-selection and a deadline, the same with norm bounding, the median and Multi-Krum, and buffered
asynchronous FedBuff. `table`
prints per setting the attackers' share of the population, of the reports and of the accepted updates,
the backdoor's success and the main task's accuracy, at the last evaluation and over the run.
"""
from __future__ import annotations

import sys
from pathlib import Path

from worlds_experiment import _mean, _mean_sd, _number, _runs, command_line, run_sweeps

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "security" / "backdoor_always_on.yaml"
SETTINGS = {
    "fedavg": [],
    "fedavg-normbound": ["algorithm.aggregator={kind: norm_bound}"],
    "fedavg-median": ["algorithm.aggregator={kind: median}"],
    "fedavg-krum": ["algorithm.aggregator={kind: krum, f: 3, m: 5}"],
    "fedbuff": ["algorithm={name: fedbuff, concurrency: 20, buffer: 10, client_lr: 0.05, local_steps: 10, "
                "batch_size: 32}"],
}


def run(out: Path, seeds: int, parallel: int, rounds: int | None, only: list[str]) -> int:
    jobs = [(f"world/{name}", SCENARIO, sets, ["population.correlation=0,1"]) for name, sets in SETTINGS.items()]
    return run_sweeps(jobs, out, seeds, parallel, rounds, only)


def _share(rows: list[dict], numerator: str, denominator: str) -> float:
    top = sum(_number(r.get(numerator)) for r in rows if r.get(numerator) not in ("", None))
    bottom = sum(_number(r.get(denominator)) for r in rows if r.get(denominator) not in ("", None))
    return top / bottom if bottom else float("nan")


def table(root: Path) -> int:
    runs = _runs(root)
    if not runs:
        print(f"{root}: no completed runs", file=sys.stderr)
        return 1
    print("| setting | correlation | population share | share of reports | share of accepted | backdoor success, "
          "last | backdoor success, mean over evaluations | test accuracy, last | honest mid tier accepted | "
          "honest fast tier accepted | simulated h |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name in SETTINGS:
        for correlation in sorted({r["correlation"] for r in runs}):
            group = [r for r in runs if r["algorithm"] == name and r["correlation"] == correlation]
            if not group:
                continue
            evaluated = [[r for r in run["rows"] if r.get("backdoor_success")] for run in group]
            population = _mean([_number(run["rows"][-1]["attacker_population_share"]) for run in group])
            reports = [_share(run["rows"], "attackers_reported", "participants") for run in group]
            accepted = [_share(run["rows"], "attackers_accepted", "updates_accepted") if "updates_accepted" in
                        run["rows"][-1] else _share(run["rows"], "attackers_accepted", "participants") for run in group]
            last = [_number(rows[-1]["backdoor_success"]) for rows in evaluated]
            mean = [_mean([_number(r["backdoor_success"]) for r in rows]) for rows in evaluated]
            accuracy = [_number(rows[-1]["test_acc"]) for rows in evaluated]
            hours = _mean([float(run["rows"][-1]["sim_time_s"]) / 3600 for run in group])
            tiers = [_mean_sd([_mean([_number(r.get(f"accepted_compute_tier_{tier}")) for r in run["rows"]])
                               for run in group]) for tier in (1, 0)]  # mid and fast (the slow tier misses the deadline)
            print(f"| {name} (n={len(group)}) | {correlation:g} | {100 * population:.1f} | {_mean_sd(reports)} | "
                  f"{_mean_sd(accepted)} | {_mean_sd(last)} | {_mean_sd(mean)} | {_mean_sd(accuracy)} | "
                  f"{tiers[0]} | {tiers[1]} | {hours:.2f} |")
    return 0


def main(argv=None) -> int:
    return command_line(argv, __doc__.splitlines()[0], run, table, "runs/security", 2, "world/fedavg")


if __name__ == "__main__":
    sys.exit(main())

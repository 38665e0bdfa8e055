"""How much does the world multiply an attacker's share, and what does a defence buy? (docs/security.md)

    python analysis/security_experiment.py run --out runs/security      # 96 runs, ~35 min on 2 cores
    python analysis/security_experiment.py table runs/security          # the table of docs/security.md

`run` launches one `emulator sweep` per setting on scenarios/security/backdoor_always_on.yaml (200 phones,
a boosted backdoor; honest phones are online a few hours and a slow tier reports last; the attackers behave
as well as the world allows: always online, the fast tier, the fastest links), with 1% and 5% of the
phones attacking, at population.correlation 1 (the attackers behave as their type says) and 0 (their
behaviour drawn like everyone else's), 3 seeds: synchronous FedAvg with over-selection and a deadline,
alone and with norm bounding, the median, the trimmed mean and Multi-Krum; buffered asynchronous FedBuff,
alone and with norm bounding and Multi-Krum over each buffer. `table` prints per setting the attackers'
share of the population, of the reports and of the accepted updates, the backdoor's success, the main
task's accuracy, and how often each honest compute tier's reports were accepted.
"""
from __future__ import annotations

import sys
from pathlib import Path

from worlds_experiment import _mean, _mean_sd, _number, _runs, command_line, run_sweeps

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "security" / "backdoor_always_on.yaml"
FEDBUFF = "algorithm={name: fedbuff, concurrency: 20, buffer: 10, client_lr: 0.05, local_steps: 10, batch_size: 32"
SETTINGS = {
    "fedavg": [],
    "fedavg-normbound": ["algorithm.aggregator={kind: norm_bound}"],
    "fedavg-median": ["algorithm.aggregator={kind: median}"],
    "fedavg-trimmed": ["algorithm.aggregator={kind: trimmed_mean, beta: 0.2}"],
    "fedavg-krum": ["algorithm.aggregator={kind: krum, f: 3, m: 5}"],
    "fedbuff": [FEDBUFF + "}"],
    "fedbuff-normbound": [FEDBUFF + ", aggregator: {kind: norm_bound}}"],
    "fedbuff-krum": [FEDBUFF + ", aggregator: {kind: krum, f: 3, m: 5}}"],
}
BACKDOOR = "{kind: backdoor, target: 0, fraction: 0.5, size: 4, value: 3.0, boost: 5.0}"


def _attackers(share: float) -> list[str]:
    """The scenario with `share` of the phones attacking (and as many always-online phones for them)."""
    honest = round(1 - share, 4)
    return [f"population.types=[{{name: honest, share: {honest}, availability: sometimes}}, "
            f"{{name: attacker, share: {share}, attack: {BACKDOOR}}}]",
            f"population.availability=[{{name: sometimes, kind: markov, share: {honest}, mean_on_s: 1800, "
            f"mean_off_s: 7200}}, {{name: always, kind: always, share: {share}}}]"]


SHARES = {"share5": 0.05, "share1": 0.01}
TIERS = ("slow", "mid", "fast")  # compute tiers 2, 1, 0 of the scenario


def run(out: Path, seeds: int, parallel: int, rounds: int | None, only: list[str]) -> int:
    jobs = [(f"{label}/{name}", SCENARIO, _attackers(share) + sets, ["population.correlation=0,1"])
            for label, share in SHARES.items() for name, sets in SETTINGS.items()]
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
    print("| attackers | aggregation | correlation | share of reports | share of accepted | backdoor success, last | "
          "backdoor success, mean | test accuracy, last | honest accepted: slow / mid / fast tier | server s | "
          "simulated h |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label in SHARES:
        for name in SETTINGS:
            for correlation in sorted({r["correlation"] for r in runs}):
                group = [r for r in runs if r["setting"] == label and r["algorithm"] == name
                         and r["correlation"] == correlation]
                if group:
                    print(_line(label, name, correlation, group))
    return 0


def _line(label: str, name: str, correlation: float, group: list[dict]) -> str:
    evaluated = [[r for r in run["rows"] if r.get("backdoor_success")] for run in group]
    population = _mean([_number(run["rows"][-1]["attacker_population_share"]) for run in group])
    reports = [_share(run["rows"], "attackers_reported", "participants") for run in group]
    accepted = [_share(run["rows"], "attackers_accepted", "updates_accepted") if "updates_accepted" in
                run["rows"][-1] else _share(run["rows"], "attackers_accepted", "participants") for run in group]
    last = [_number(rows[-1]["backdoor_success"]) for rows in evaluated]
    mean = [_mean([_number(r["backdoor_success"]) for r in rows]) for rows in evaluated]
    accuracy = [_number(rows[-1]["test_acc"]) for rows in evaluated]
    hours = _mean([float(run["rows"][-1]["sim_time_s"]) / 3600 for run in group])
    server = _mean([sum(_number(r["server_compute_s"]) for r in run["rows"]) for run in group])
    tiers = " / ".join(_percent(_mean([_mean([_number(r.get(f"accepted_compute_tier_{tier}")) for r in run["rows"]])
                                       for run in group])) for tier in (2, 1, 0))
    return (f"| {100 * population:.0f}% | {name} (n={len(group)}) | {correlation:g} | {_mean_sd(reports)} | "
            f"{_mean_sd(accepted)} | {_mean_sd(last)} | {_mean_sd(mean)} | {_mean_sd(accuracy)} | {tiers} | "
            f"{server:.2f} | {hours:.2f} |")


def _percent(value: float) -> str:
    return "-" if value != value else f"{100 * value:.0f}"


def main(argv=None) -> int:
    return command_line(argv, __doc__.splitlines()[0], run, table, "runs/security", 2, "share5/fedavg")


if __name__ == "__main__":
    sys.exit(main())

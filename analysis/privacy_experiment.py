"""What do client-level DP, upload compression and secure aggregation cost in a world where participation
follows data? (docs/privacy.md)

    python analysis/privacy_experiment.py run --out runs/privacy        # 69 runs, ~45 min on 2 cores
    python analysis/privacy_experiment.py table runs/privacy            # the tables of docs/privacy.md

`run` launches one `emulator sweep` per (setting, algorithm) on scenarios/privacy/private_slow_tier.yaml
(1000 phones, 100 selected a round, a slow tier holding classes 7-9 behind a 60 s deadline): no DP; DP-FedAvg
with adaptive clipping at noise multipliers 0.5, 1 and 2; top-k (1%), QSGD (2 levels) and sign uploads; each
for FedAvg, FAST (q = 0.2) and SAFARI (q = 0.8), 3 seeds; and SecAgg / SecAgg+ around FedAvg. `table` prints
accuracy at equal rounds and at equal simulated time, epsilon (nominal and the sampling-free bound of the
most-participating phone), upload bytes, and the secure-aggregation costs.
"""
from __future__ import annotations

import sys
from pathlib import Path

from worlds_experiment import _accuracy_at, _mean, _mean_sd, _number, _runs, command_line, run_sweeps

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "privacy" / "private_slow_tier.yaml"
ALGORITHMS = {
    "fedavg": [],
    "fast": ["algorithm.name=fast", "algorithm.q=0.2"],
    "safari": ["algorithm.name=safari", "algorithm.q=0.8", "algorithm.server_lr=0.1"],
}
SETTINGS = {
    "no-dp": ["privacy=null"],
    "dp-z0.5": ["privacy.noise_multiplier=0.5"],
    "dp-z1": [],
    "dp-z2": ["privacy.noise_multiplier=2.0"],
    "top-k-1pct": ["privacy=null", "compression={kind: top_k, fraction: 0.01}"],
    "qsgd-2": ["privacy=null", "compression={kind: qsgd, levels: 2}"],
    "sign": ["privacy=null", "compression={kind: sign}"],
}
SECURE = {  # around FedAvg only: the aggregate is FedAvg's, the price is time and bytes
    "secagg": ["privacy=null", "secure_aggregation={kind: secagg}"],
    "secagg-plus": ["privacy=null", "secure_aggregation={kind: secagg_plus}"],
}


def jobs() -> list[tuple[str, list[str]]]:
    out = [(f"{setting}/{algorithm}", sets + extra) for setting, sets in SETTINGS.items()
           for algorithm, extra in ALGORITHMS.items()]
    return out + [(f"{setting}/fedavg", sets) for setting, sets in SECURE.items()]


def run(out: Path, seeds: int, parallel: int, rounds: int | None, only: list[str]) -> int:
    return run_sweeps([(name, SCENARIO, sets, []) for name, sets in jobs()], out, seeds, parallel, rounds, only)


def _last(rows: list[dict], column: str) -> float:
    values = [_number(r.get(column)) for r in rows if r.get(column) not in ("", None)]
    return values[-1] if values else float("nan")


def _total(rows: list[dict], column: str, end_s: float | None = None) -> float:
    return sum(float(r[column]) for r in rows if end_s is None or float(r["sim_time_s"]) <= end_s + 1e-9)


def _cell(value: float, digits: int) -> str:
    return "-" if value != value else f"{value:.{digits}f}"


def table(root: Path) -> int:
    runs = _runs(root)
    if not runs:
        print(f"{root}: no completed runs", file=sys.stderr)
        return 1
    main = [r for r in runs if r["setting"] in SETTINGS]
    equal_time = min(float(r["rows"][-1]["sim_time_s"]) for r in main)
    print(f"\n### Accuracy (%) at round {main[0]['rows'][-1]['round']} and at {equal_time / 3600:.2f} simulated "
          "hours (mean ± sd over seeds), epsilon for delta 1e-4, upload GB to that time\n")
    print("| setting | algorithm | acc, equal rounds | acc, equal time | sim hours | epsilon (nominal) | "
          "epsilon, most-seen phone (reports) | GB up, equal time | unseen | worst class acc |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for setting in SETTINGS:
        for algorithm in ALGORITHMS:
            group = [r for r in main if (r["setting"], r["algorithm"]) == (setting, algorithm)]
            if not group:
                continue
            final = [_number(r["rows"][-1]["test_acc"]) for r in group]
            at_time = [_accuracy_at(r["rows"], equal_time) for r in group]
            hours = _mean([float(r["rows"][-1]["sim_time_s"]) / 3600 for r in group])
            epsilon = _mean([_last(r["rows"], "dp_epsilon") for r in group])
            device = _mean([_last(r["rows"], "dp_epsilon_device_max") for r in group])
            most = _mean([_last(r["rows"], "dp_max_participation") for r in group])
            gb = _mean([_total(r["rows"], "bytes_up", equal_time) / 1e9 for r in group])
            unseen = _mean([_number(r["rows"][-1].get("unseen_share")) for r in group])
            worst_class = _mean([_number(r["rows"][-1].get("worst_class_acc")) for r in group])
            privacy = "-" if epsilon != epsilon else f"{epsilon:.2f}"
            worst = "-" if device != device else f"{device:.1f} ({most:.0f})"
            print(f"| {setting} | {algorithm} (n={len(group)}) | {_mean_sd(final)} | {_mean_sd(at_time)} | "
                  f"{hours:.2f} | {privacy} | {worst} | {gb:.3f} | {unseen:.2f} | {100 * worst_class:.1f} |")
    secure = [r for r in runs if r["setting"] in SECURE or (r["setting"] == "no-dp" and r["algorithm"] == "fedavg")]
    if any(r["setting"] in SECURE for r in secure):
        print("\n### Secure aggregation around FedAvg: per round, mean over rounds and seeds\n")
        print("| setting | acc, equal rounds | round s | key exchange s | unmasking s | server s | MB up | MB down | "
              "field bits | aborted rounds |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for setting in ["no-dp", *SECURE]:
            group = [r for r in secure if r["setting"] == setting]
            if not group:
                continue
            every = [x for r in group for x in r["rows"]]

            def mean(column):
                return _mean([_number(x.get(column)) for x in every])

            aborted = sum(int(_number(x.get("secagg_aborted")) or 0) for x in every if x.get("secagg_aborted"))
            print(f"| {setting} | {_mean_sd([_number(r['rows'][-1]['test_acc']) for r in group])} | "
                  f"{mean('round_duration_s'):.1f} | {_cell(mean('secagg_setup_s'), 2)} | "
                  f"{_cell(mean('secagg_unmask_s'), 2)} | {mean('server_compute_s'):.2f} | "
                  f"{mean('bytes_up') / 1e6:.1f} | {mean('bytes_down') / 1e6:.1f} | "
                  f"{_cell(mean('secagg_field_bits'), 0)} | {aborted} |")
    return 0


def main(argv=None) -> int:
    return command_line(argv, __doc__.splitlines()[0], run, table, "runs/privacy", 2, "dp-z1 secagg")


if __name__ == "__main__":
    sys.exit(main())

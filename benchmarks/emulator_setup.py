"""An emulator run's split and cohorts as a file the plain reference loop can train on (`--setup FILE`).

The plain loop beside an emulator run differs from it in three things: the split, who takes part each round,
and the training code. Given this file, it trains on the emulator's own split and cohorts, so what is left
to differ is the training code: a gap that stays is the emulator's, one that goes was the draws'.

    python benchmarks/emulator_setup.py results/gpu/<session>/<run> --out results/setups/<run>.npz

The split is rebuilt from the run's scenario.yaml (a function of its seed). The cohorts are replayed in
process with the run's own scenario but a logistic model and one local step of batch 2, which changes what is
trained and how long a round takes on the simulated clock, not who is selected, where participation depends
on neither (FAST's fixed regimes and uniform selection on always-available devices). The replay is checked
against the run: every round's label mix (metrics.csv's label_tv) must agree, else nothing is written.

Writes an .npz: `offsets` and `indices` (client c holds training images indices[offsets[c]:offsets[c + 1]]
of the IDX file), `cohorts` (rounds x clients a round; -1 pads a round with fewer reports), `run` (its name).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from emulator.analysis.files import read_events_table, read_metrics_table  # noqa: E402
from emulator.data import build_federation  # noqa: E402  (the checkout's emulator, wherever this runs from)
from emulator.parts import validate_scenario  # noqa: E402

REPLAY = {"model": "logreg", "algorithm.local_steps": 1, "algorithm.batch_size": 2, "system.events": True,
          "output.tensorboard": False, "runtime.backend": "inline", "runtime.num_gpus": 0}


def label_tv(run: Path) -> dict[int, float]:
    """Each round's label mix (metrics.csv's label_tv), the file checked as a run writes it."""
    table = read_metrics_table(run / "metrics.csv", cut_ok=True)
    mixes = pd.to_numeric(table["label_tv"], errors="coerce")
    return {int(r): float(v) for r, v in zip(table["round"], mixes) if pd.notna(v)}


def reported(events: Path, rounds: int) -> np.ndarray:
    """Each round's reporting devices, in the order they reported (rounds x most a round; -1 pads)."""
    table = read_events_table(events)
    reports = table[table["event"] == "reported"]
    by_round = {int(r): [int(d) for d in group["device"]] for r, group in reports.groupby("round", sort=False)}
    width = max((len(v) for v in by_round.values()), default=0)
    cohorts = np.full((rounds, width), -1, dtype=np.int32)
    for r, devices in by_round.items():
        cohorts[r - 1, :len(devices)] = devices
    return cohorts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="an emulator run directory (its scenario.yaml and metrics.csv)")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=None, help="replay this many rounds (default: the scenario's)")
    args = parser.parse_args(argv)
    from emulator import api
    from emulator.scenario import apply_overrides

    raw = yaml.safe_load((args.run / "scenario.yaml").read_text())
    scenario = validate_scenario(raw)
    rounds = args.rounds or scenario.rounds
    federation = build_federation(scenario.data, scenario.population.devices, scenario.seed)
    if federation.device_indices is None:
        raise SystemExit("this run's split is stored sorted by device, not as indices into the dataset's files")
    if scenario.data.dataset == "fashion_mnist":  # the indices must mean the rows the plain loop reads
        import reference_fedavg

        labels = reference_fedavg.read_idx(reference_fedavg.default_root(), reference_fedavg.FILES[1])
        if not np.array_equal(labels, federation.train.y):
            raise SystemExit("this run's training set is not the IDX file's rows in order: its indices would "
                             "point at other images in the plain loop")
    with tempfile.TemporaryDirectory() as tmp:
        replay = apply_overrides(raw, [f"{k}={yaml.safe_dump(v, default_flow_style=True).strip()}"
                                       for k, v in {**REPLAY, "rounds": rounds}.items()])
        replay.setdefault("evaluation", {})["every"] = rounds + 1
        replayed = Path(tmp) / "replay"
        api.run(replay, out=replayed, progress=False)
        ours, theirs = label_tv(replayed), label_tv(args.run)
        common = sorted(set(ours) & set(theirs))
        off = [r for r in common if abs(ours[r] - theirs[r]) > 1e-9]
        if not common or off:
            raise SystemExit(f"the replay's cohorts are not the run's (label mix differs from round {off[0]}): "
                             "its participation depends on training or on time, which a replay cannot keep"
                             if off else "the run's metrics.csv has no label_tv to check the replay against")
        cohorts = reported(replayed / "events.csv", rounds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, offsets=federation.device_offsets.astype(np.int64),
                        indices=federation.device_indices.astype(np.int32), cohorts=cohorts, run=args.run.name)
    print(f"{args.out}: {len(federation.device_offsets) - 1} clients, {rounds} rounds of cohorts, checked against "
          f"{len(common)} rounds of {args.run.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

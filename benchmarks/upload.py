"""What privacy and compression add to a round's real (not simulated) time: the server's work per report.

Each report passes through emulator/uplink/pipeline.py on the server: clipping (DP), encoding (QSGD, top-k, sign)
and, once a round, the noised release. This measures each on one update of the 200-200 MLP on 28x28 inputs
(199,210 values), against the baseline it sits beside: one device's local training in the same process (10
steps of batch 32, SGD, one torch thread, as runners train). A ratio of 0.1 means the server spends a tenth
of a device's training time on that report; with R runners training in parallel and one server, the server's
share of a round grows R-fold.

Other processes may share the cores, so operations and the baseline are measured interleaved (one block of
each in turn, repeated) and the table gives medians.

    .venv/bin/python benchmarks/upload.py [--repeats 7]
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import numpy as np
import torch

from emulator.uplink import compression as codec
from emulator.aggregation.mean import WeightedMean
from emulator.models.zoo import build_model
from emulator.uplink.privacy import DpFedAvg, clip
from emulator.training.local import LocalTraining, seeded_generator, train_locally

SHAPE, CLASSES, SAMPLES = (1, 28, 28), 10, 320


def _training():
    model = build_model("mlp", SHAPE, CLASSES, seed=0)
    x = torch.randn(SAMPLES, *SHAPE)
    y = torch.randint(0, CLASSES, (SAMPLES,))
    spec = LocalTraining(lr=0.05, batch_size=32, local_steps=10)
    return lambda: train_locally(model, x, y, spec, seeded_generator(0))


def _operations(values: int):
    rng = np.random.default_rng(0)
    update = rng.normal(0, 0.01, values).astype(np.float32)
    residual = rng.normal(0, 0.001, values)
    dp = DpFedAvg(noise_multiplier=1.0, clip=0.1, expected_cohort=100, adaptive=True)
    total = WeightedMean(values)
    total.add(update)
    return {
        "DP clip": lambda: clip(update, 0.1),
        "DP release (once a round)": lambda: dp.release(total.total, 100, 50, np.random.default_rng(1)),
        "QSGD, 2 levels": lambda: codec.qsgd(update + residual, 2, rng),
        "top-k 1%, error feedback": lambda: codec.top_k(update, values // 100, residual),
        "sign, error feedback": lambda: codec.sign(update + residual),
    }


def _seconds(fn, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def main(argv=None) -> int:
    from emulator.parts import load_parts

    load_parts()  # the built-in models and datasets, as the CLI registers them
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    train = _training()
    values = sum(p.numel() for p in build_model("mlp", SHAPE, CLASSES, seed=0).state_dict().values())
    operations = _operations(values)
    train()
    times = {name: [] for name in ["one device's training", *operations]}
    for _ in range(args.repeats):
        times["one device's training"].append(_seconds(train, 3))
        for name, fn in operations.items():
            times[name].append(_seconds(fn, 10))
    baseline = statistics.median(times["one device's training"])
    print(f"Server work per report, MLP update of {values:,} values; {platform.processor() or platform.machine()}, "
          f"median of {args.repeats} blocks\n")
    print("| operation | ms | vs one device's training |")
    print("|---|---|---|")
    for name, samples in times.items():
        median = statistics.median(samples)
        print(f"| {name} | {1000 * median:.2f} | {median / baseline:.3f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

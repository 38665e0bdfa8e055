"""fp32 against bf16 (runtime.precision): the time of one local training step and of evaluation on this CPU.

Each row runs the emulator's own code (emulator.training.local.train_locally and evaluate_by_class, with the
model prepared as runners prepare it) at one torch thread, as runners train: FAST's Fashion-MNIST CNN
(cnn_fmnist) and the 200-200 MLP, a local step of batch 128 (SGD, dropout on), and an evaluation pass over
10,000 test images (batch 1024). Variants: fp32; bf16 as the emulator runs it (autocast, a CNN's weights
and 4-D inputs channels_last); and, for the CNN, bf16 with the weights left in the default layout, to show
what channels_last adds.

Other processes may share the cores, so the variants are measured interleaved (one block of each in turn,
repeated) and contention falls on all of them alike; the table gives the median time per step over the
blocks and the ratio to fp32 (the median of the per-block ratios, so that a slow moment hits a pair, not one
side), and the ratio of the fastest blocks (the least disturbed ones). Inputs are random 28x28 images (speed does not depend on their values).

    .venv/bin/python benchmarks/precision.py [--repeats 11] [--steps 5]

--accuracy ROUNDS instead runs the reference run (scenarios/fmnist_fedavg.yaml: FAST's CNN, 100 devices, 10 a
round) for ROUNDS rounds in fp32 and in bf16, in process, and prints the test accuracy of both at each
evaluation (every 5th round) and the gap at the end against the 0.5-point tolerance (tests/test_precision.py
checks the same claim on the MLP, in seconds; this is the CNN's, minutes).

    .venv/bin/python benchmarks/precision.py --accuracy 30
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from emulator.training import precision as numerics
from emulator.models.zoo import build_model
from emulator.training.local import LocalTraining, evaluate_by_class, seeded_generator, train_locally

BATCH, SHAPE, CLASSES = 128, (1, 28, 28), 10
TARGET = 2.5  # issue 14: the FAST CNN with bf16 at least 2.5x faster than fp32 on AVX512-BF16 / AMX
TOLERANCE = 0.005  # bf16's final test accuracy within half a point of fp32's
REFERENCE = Path(__file__).resolve().parents[1] / "scenarios" / "fmnist_fedavg.yaml"


def _model(name: str, precision: str, channels_last: bool = True) -> torch.nn.Module:
    model = build_model(name, SHAPE, CLASSES, seed=0)
    return numerics.prepare_model(model, precision) if channels_last else model


def train_block(name: str, precision: str, steps: int, channels_last: bool = True):
    """A callable running `steps` local steps of batch BATCH the way a runner does; returns seconds."""
    model = _model(name, precision, channels_last)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn((BATCH * steps, *SHAPE), generator=generator)
    y = torch.randint(0, CLASSES, (BATCH * steps,), generator=generator)
    spec = LocalTraining(lr=0.01, batch_size=BATCH, local_steps=steps)

    def run() -> float:
        start = time.perf_counter()
        train_locally(model, x, y, spec, seeded_generator(0), precision=precision)
        return time.perf_counter() - start
    return run


def eval_block(name: str, precision: str, samples: int = 10_000, channels_last: bool = True):
    model = _model(name, precision, channels_last)
    generator = torch.Generator().manual_seed(2)
    x = torch.randn((samples, *SHAPE), generator=generator)
    y = torch.randint(0, CLASSES, (samples,), generator=generator)

    def run() -> float:
        start = time.perf_counter()
        evaluate_by_class(model, x, y, 1024, CLASSES, precision)
        return time.perf_counter() - start
    return run


def measure(variants: dict, repeats: int, per: int) -> dict[str, list[float]]:
    """Interleaved: every repeat runs one block of each variant in turn. Returns ms per unit per block."""
    for run in variants.values():  # warm-up: oneDNN primitives, allocator, optimizer imports
        run()
    times = {label: [] for label in variants}
    for _ in range(repeats):
        for label, run in variants.items():
            times[label].append(run() * 1000 / per)
    return times


def cpu_summary() -> str:
    flags = numerics.cpu_flags()
    shown = sorted(f for f in flags if f.startswith(("avx512_bf16", "amx")) or f in ("avx512f", "avx2", "bf16"))
    return (f"CPU: {numerics.cpu_name()} ({os.cpu_count()} logical cores), flags: {' '.join(shown) or 'none read'}; "
            f"bf16 supported: {numerics.cpu_bf16()}\ntorch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), "
            f"{torch.get_num_threads()} torch thread(s), Python {platform.python_version()}")


def accuracy(rounds: int) -> int:
    """The reference run in fp32 and in bf16: test accuracy at each evaluation, and the final gap."""
    import tempfile

    import yaml

    from emulator.driver import run_scenario
    from emulator.parts import validate_scenario
    from emulator.recording.rundir import read_metrics

    curves = {}
    with tempfile.TemporaryDirectory() as out:
        for name in ("fp32", "bf16"):
            raw = yaml.safe_load(REFERENCE.read_text())
            raw.update(rounds=rounds, output={"tensorboard": False})
            raw["runtime"] = {"precision": name, "backend": "inline", "runners": 2}
            start = time.perf_counter()
            rows = read_metrics(run_scenario(validate_scenario(raw), Path(out) / name).path)
            curves[name] = {int(r["round"]): float(r["test_acc"]) for r in rows if r["test_acc"] != ""}
            print(f"  {name}: {rounds} rounds in {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)
    print(f"| round | fp32 test acc | bf16 test acc | bf16 - fp32 |\n|---|---|---|---|")
    for step in sorted(curves["fp32"]):
        fp32, bf16 = curves["fp32"][step], curves["bf16"][step]
        print(f"| {step} | {fp32:.4f} | {bf16:.4f} | {100 * (bf16 - fp32):+.2f} points |")
    last = max(curves["fp32"])
    gap = abs(curves["bf16"][last] - curves["fp32"][last])
    verdict = "within" if gap <= TOLERANCE else "outside"
    print(f"\nafter {last} rounds bf16 is {100 * gap:.2f} points from fp32 ({verdict} the {100 * TOLERANCE:.1f}-point "
          "tolerance)")
    return 0 if gap <= TOLERANCE else 1


def main(argv=None) -> int:
    from emulator.parts import load_parts

    load_parts()  # the built-in models and datasets, as the CLI registers them
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=11, help="interleaved blocks per variant")
    parser.add_argument("--steps", type=int, default=5, help="training steps per block")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (runners use 1)")
    parser.add_argument("--accuracy", type=int, metavar="ROUNDS",
                        help="instead: the reference run's test accuracy in fp32 and bf16 over ROUNDS rounds")
    args = parser.parse_args(argv)
    if args.accuracy:
        print(cpu_summary())
        return accuracy(args.accuracy)
    torch.set_num_threads(args.threads)
    print(cpu_summary())
    if not numerics.cpu_bf16():
        print("note: this CPU has no bf16 instructions; bf16 is emulated here (and a run asking for it is refused)")
    print(f"load average at start: {' '.join(f'{v:.2f}' for v in os.getloadavg())}\n")

    rows = []
    groups = [
        ("cnn_fmnist", f"local step, batch {BATCH}", args.steps, lambda p, cl=True: train_block("cnn_fmnist", p, args.steps, cl)),
        ("cnn_fmnist", "evaluation, 10k images, ms per 1k", 10, lambda p, cl=True: eval_block("cnn_fmnist", p, channels_last=cl)),
        ("mlp", f"local step, batch {BATCH}", args.steps * 4, lambda p, cl=True: train_block("mlp", p, args.steps * 4)),
        ("mlp", "evaluation, 10k images, ms per 1k", 10, lambda p, cl=True: eval_block("mlp", p)),
    ]
    for model, what, per, make in groups:
        variants = {"fp32": make("fp32"), "bf16": make("bf16")}
        if numerics.has_convolutions(build_model(model, SHAPE, CLASSES)):
            variants["bf16, weights not channels_last"] = make("bf16", False)
        times = measure(variants, args.repeats, per)
        base = times["fp32"]
        for label, series in times.items():
            ratio = statistics.median(b / t for b, t in zip(base, series))
            rows.append((model, what, label, statistics.median(series), min(series), max(series), ratio))
        print(f"  measured {model} {what}", file=sys.stderr, flush=True)

    print("| model | what | precision | ms (median) | min-max | speed-up vs fp32 | fastest vs fastest |")
    print("|---|---|---|---|---|---|---|")
    fastest = {}
    for model, what, label, median, low, high, ratio in rows:
        fastest.setdefault((model, what), low)  # fp32 comes first in each group
        print(f"| {model} | {what} | {label} | {median:.1f} | {low:.1f}-{high:.1f} | {ratio:.2f}x | "
              f"{fastest[model, what] / low:.2f}x |")
    cnn = next(r for r in rows if r[0] == "cnn_fmnist" and r[2] == "bf16")
    verdict = "meets" if cnn[6] >= TARGET else "misses"
    print(f"\ncnn_fmnist local step with bf16: {cnn[6]:.2f}x fp32's speed ({verdict} the {TARGET}x target)")
    print(f"load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Cohort-vectorised local training (emulator/training/cohort.py) against one device at a time.

Two workloads of issue 14, each trained both ways from the same global model:
- a 1000-report MLP round: the 2NN on Fashion-MNIST (random 28x28 images when the set is not installed),
  60 samples a device, 10 local SGD steps of batch 32; (a) one device at a time as a runner trains it
  (load the global vector, torch.manual_seed, train_locally, flatten, subtract), (b) `train_cohort` in
  groups of 25 ... 200;
- the FAST CNN round: cnn_fmnist (dropout included), 10 devices of 600 samples, 10 steps of batch 128.

Each runs in two child processes: glibc's allocator as it comes, and after `cohort.keep_freed_memory()`
(a vectorised step allocates G times one device's activations; above glibc's 32 MiB mmap ceiling those
blocks are otherwise mapped, page-faulted and unmapped on every step). Every time is also given as a ratio
to (a) with the default allocator, measured in the same run: absolute times on a shared 2-core machine are
noisy (other processes, a test suite), the ratios less so. The last two columns compare each device's
trained parameters with (a): the largest difference, and how many devices differ by more than 1e-6. The
two ways train the same models up to rounding, except where a rounding difference flips a ReLU or
max-pool decision at a near-tie, which moves that device by about lr x one sample's gradient / batch
(~1e-5 for the MLP here).
Both ways include reading each device's samples (ArrayDataset.tensors) and use one torch thread, as
runners do.

    .venv/bin/python benchmarks/cohort.py [--devices 1000] [--groups 25 50 100 200] [--repeats 1]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

import numpy as np
import torch

from emulator import params as param_vector
from emulator.training.cohort import keep_freed_memory, train_cohort
from emulator.data.federation import ArrayDataset
from emulator.models.zoo import build_model
from emulator.training.local import LocalTraining, seeded_generator, set_torch_arithmetic, train_locally


MALLOC = ("default", "heap")


def fashion_mnist(total: int) -> tuple[str, ArrayDataset]:
    """The real training set when installed (/usr/share/datasets/fashion-mnist), else random images."""
    try:
        from emulator.data.vision import load_vision

        train, _ = load_vision("fashion_mnist")
        return "Fashion-MNIST", train
    except Exception:  # noqa: BLE001 - any reason the set is missing means: use random images
        rng = np.random.default_rng(0)
        x = rng.integers(0, 256, size=(total, 1, 28, 28), dtype=np.uint8)
        return "random 28x28 images", ArrayDataset(x, rng.integers(0, 10, total), 10, (0.5,), (0.25,))


def partition(train: ArrayDataset, devices: int, per_device: int) -> list[np.ndarray]:
    order = np.random.default_rng(1).permutation(len(train.y))
    return [order[d * per_device:(d + 1) * per_device] for d in range(devices)]


def one_at_a_time(model, train, parts, spec, seeds, global_params) -> tuple[float, np.ndarray]:
    """What DeviceRunner.train does per device, without Ray."""
    deltas = np.empty((len(parts), global_params.size), dtype=np.float32)
    start = time.perf_counter()
    for d, (samples, seed) in enumerate(zip(parts, seeds)):
        x, y = train.tensors(samples)
        param_vector.load(model, global_params)
        torch.manual_seed(seed)
        train_locally(model, x, y, spec, seeded_generator(seed))
        deltas[d] = param_vector.flatten(model) - global_params
    return time.perf_counter() - start, deltas


def vectorised(model, train, parts, spec, seeds, global_params, group: int) -> tuple[float, np.ndarray]:
    deltas = np.empty((len(parts), global_params.size), dtype=np.float32)
    start = time.perf_counter()
    param_vector.load(model, global_params)
    for first in range(0, len(parts), group):
        members = range(first, min(first + group, len(parts)))
        data = [train.tensors(parts[d]) for d in members]
        results = train_cohort(model, [x for x, _ in data], [y for _, y in data], [spec] * len(members),
                               [seeds[d] for d in members])
        for d, (vector, _) in zip(members, results):
            deltas[d] = vector - global_params
    return time.perf_counter() - start, deltas


def workload_rows(label, model_name, train, devices, per_device, spec, groups, repeats) -> list[tuple]:
    model = build_model(model_name, train.input_shape, train.num_classes, seed=0)
    global_params = param_vector.flatten(model)
    parts = partition(train, devices, per_device)
    seeds = [10_000 + d for d in range(devices)]
    base, reference = min((one_at_a_time(model, train, parts, spec, seeds, global_params)
                           for _ in range(repeats)), key=lambda r: r[0])
    rows = [(label, "(a) one device at a time", "-", base, 1.0, 0.0, 0)]
    for group in groups:
        seconds, deltas = min((vectorised(model, train, parts, spec, seeds, global_params, group)
                               for _ in range(repeats)), key=lambda r: r[0])
        worst = np.abs(deltas - reference).max(axis=1)
        rows.append((label, "(b) vectorised", group, seconds, seconds / base, float(worst.max()),
                     int((worst > 1e-6).sum())))
    return rows


def measure(args) -> list[tuple]:
    """One process's rows (a child of main: one allocator setting each)."""
    if args.child == "heap":
        keep_freed_memory()
    set_torch_arithmetic(args.threads)
    name, train = fashion_mnist(max(args.devices * 60, args.cnn_devices * 600))
    rows = workload_rows(f"MLP, {args.devices} devices x 10 steps of 32", "mlp", train, args.devices, 60,
                         LocalTraining(lr=0.01, batch_size=32, local_steps=10), args.groups, args.repeats)
    rows += workload_rows(f"FAST CNN, {args.cnn_devices} devices x 10 steps of 128", "cnn_fmnist", train,
                          args.cnn_devices, 600, LocalTraining(lr=0.01, batch_size=128, local_steps=10),
                          args.cnn_groups, args.repeats)
    return [(name, args.child) + row for row in rows]


def main() -> None:
    from emulator.parts import load_parts

    load_parts()  # the built-in models and datasets, as the CLI registers them
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", type=int, default=1000)
    parser.add_argument("--groups", type=int, nargs="+", default=[25, 50, 100, 200])
    parser.add_argument("--cnn-devices", type=int, default=10)
    parser.add_argument("--cnn-groups", type=int, nargs="+", default=[10])
    parser.add_argument("--repeats", type=int, default=1, help="take the fastest of this many runs of each")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (runners use 1)")
    parser.add_argument("--malloc", nargs="+", choices=MALLOC, default=list(MALLOC),
                        help="glibc settings to measure, each in its own process")
    parser.add_argument("--child", choices=MALLOC, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args)))
        return
    rows = []
    for setting in args.malloc:
        command = [sys.executable, __file__, "--child", setting] + [a for a in sys.argv[1:]]
        done = subprocess.run(command, check=True, capture_output=True, text=True)
        rows += [tuple(row) for row in json.loads(done.stdout.strip().splitlines()[-1])]
    baseline = {row[2]: row[5] for row in rows if row[3].startswith("(a)") and row[1] == args.malloc[0]}
    print(f"data: {rows[0][0]}; torch {torch.__version__}, {args.threads} thread(s), {os.cpu_count()} cores, "
          f"{platform.machine()} {cpu_name()}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    print(f"x (a): time / workload's (a) with malloc {args.malloc[0]}, measured in this run; absolute seconds are "
          "noisy on a shared machine, compare the ratios\n"
          "malloc default: glibc as it comes; heap: cohort.keep_freed_memory() (large blocks from the heap, kept)\n")
    header = ("workload", "malloc", "way", "group", "seconds", "x (a)", "max |diff| vs (a)", "devices > 1e-6")
    widths = (38, 7, 24, 5, 7, 6, 17, 14)
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for _, setting, label, way, group, seconds, _, diff, over in rows:
        cells = (label, setting, way, str(group), f"{seconds:.2f}", f"{seconds / baseline[label]:.2f}",
                 f"{diff:.1e}", str(over))
        print("  ".join(c.ljust(w) for c, w in zip(cells, widths)))


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as handle:
            return next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor()


if __name__ == "__main__":
    main()

"""Evaluating every device on its own test split, against one pass over a central test set of the same size.

10,000 devices (Fashion-MNIST when installed, else synthetic features), Dirichlet(0.3) label skew, each
device holding out 20% of its samples (data.local_test); the global model is the scenario's (MLP by
default, `--model cnn_fmnist` for the CNN). Three ways to score the devices, timed in the same process:

- central: one pass over a central test set of exactly as many samples as all local splits together
  (the baseline: what any evaluation of that many samples costs);
- oracle: what `evaluation.devices` runs, one pass over every device's samples at once, then per-device
  accuracy by summing each sample's correctness by owner (emulator/evaluation/fleet.py);
- per device: one model call per device (10,000 tiny calls), the way a naive loop would do it.

It also prints the memory the local splits take (the samples carved out of the training set and their
offsets). Target (issue 29): the oracle within 1.2x of the central pass.

    .venv/bin/python benchmarks/device_eval.py [--devices 10000] [--model mlp] [--repeat 3]
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from emulator.data import build_federation
from emulator.data.vision import DEBIAN_FASHION_MNIST
from emulator.evaluation.fleet import FleetEvaluation
from emulator.models.zoo import build_model
from emulator.parts import validate_scenario
from emulator.training.local import evaluate_by_class, evaluate_per_sample, set_torch_arithmetic


def federation_for(devices: int, model: str):
    data = ({"dataset": "fashion_mnist", "root": str(DEBIAN_FASHION_MNIST)} if DEBIAN_FASHION_MNIST.is_dir()
            else {"dataset": "synthetic", "synthetic": {"iid": True}})
    raw = {"name": "device-eval-bench", "rounds": 1, "model": model, "population": {"devices": devices},
           "data": {**data, "partition": {"scheme": "dirichlet", "alpha": 0.3},
                    "local_test": {"fraction": 0.2, "min_samples": 1}}}
    scenario = validate_scenario(raw)
    federation = build_federation(scenario.data, devices, scenario.seed)
    return scenario, federation


def best_of(repeat: int, work) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, default=10000)
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1024)
    args = parser.parse_args()
    set_torch_arithmetic(1)  # as runners train and evaluate

    scenario, federation = federation_for(args.devices, args.model)
    model = build_model(args.model, federation.train.input_shape, federation.train.num_classes, 0,
                        scenario.model.options())
    local_x, local_y = federation.local_test.tensors()
    total = len(local_y)
    pool_x, pool_y = federation.train.tensors(np.arange(total) % len(federation.train))  # same count, central
    fleet = FleetEvaluation(federation.local_sizes, {})
    reported = np.zeros(federation.num_devices, dtype=np.int64)
    offsets = federation.local_offsets

    def central():
        evaluate_by_class(model, pool_x, pool_y, args.batch, federation.train.num_classes)

    def oracle():
        loss, correct = evaluate_per_sample(model, local_x, local_y, args.batch)
        fleet.score(None, loss, correct, reported)

    def per_device():
        for d in range(federation.num_devices):
            if offsets[d + 1] > offsets[d]:
                evaluate_by_class(model, local_x[offsets[d]:offsets[d + 1]], local_y[offsets[d]:offsets[d + 1]],
                                  args.batch, federation.train.num_classes)

    with torch.no_grad():
        central()  # warm up kernels
        base = best_of(args.repeat, central)
        fast = best_of(args.repeat, oracle)
        slow = best_of(1, per_device)

    split_bytes = federation.local_test.x.nbytes + federation.local_test.y.nbytes + offsets.nbytes
    scored = int(np.sum(federation.local_sizes > 0))
    print(f"{args.devices} devices ({scored} with a local test), {total} local test samples in all, "
          f"model {args.model}, dataset {scenario.data.dataset}, 1 torch thread, median of {args.repeat}\n")
    print("| evaluation | seconds | ratio to central | per device (ms) |")
    print("|---|---:|---:|---:|")
    print(f"| central: one pass over {total} test samples (baseline) | {base:.3f} | 1.00x | |")
    print(f"| oracle (evaluation.devices): every device's split in one pass | {fast:.3f} | {fast / base:.2f}x | "
          f"{fast / scored * 1e3:.3f} |")
    print(f"| per device: {scored} model calls | {slow:.3f} | {slow / base:.2f}x | {slow / scored * 1e3:.3f} |")
    print(f"\nlocal splits in memory: {split_bytes / 2**20:.1f} MiB (samples carved out of the training set, "
          f"{split_bytes / args.devices:.0f} bytes a device); target: oracle <= 1.2x central")


if __name__ == "__main__":
    main()

"""Issue 14's one table: where the time of a round goes, every figure a ratio to baselines measured in
this same run (machines are noisy; ratios travel).

(a) A 1000-report MLP round: Fashion-MNIST split iid over 1000 devices (60 samples each), every device
    reports, 10 local SGD steps of batch 32 (the `mlp` model, 200-200 hidden).
(b) The FAST CNN round: FAST's Fashion-MNIST CNN (`cnn_fmnist`), 100 devices, 10 a round, 10 local
    steps of batch 128.
(c) The quickstart as a whole process, Ray start included (benchmarks/quickstart.py).
(d) The system model alone at 10^6 and 10^7 devices (benchmarks/system.py).

For (a) and (b) the baselines are the plain sequential PyTorch loop (one process, no Ray: copy the global
weights in, train, average; with torch's default threads and with one, the faster is the baseline) and
the emulator as it trained before issue 14 (one Ray task per device, one device at a time:
`runtime.group_size: 1`). The emulator runs with one runner per core, one torch thread each, and gives
seconds per round from its own wall-clock column, without the first round (warm-up) and the last
(evaluation).

    .venv/bin/python benchmarks/speed.py [--rounds 4] [--only a b c d]
"""
from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from emulator.training import precision as numerics
from emulator.data.federation import Federation
from emulator.models.zoo import build_model
from emulator.params import flatten, load
from emulator.parts import validate_scenario
from overhead import workload_data  # benchmarks/overhead.py: the same data, split over more devices

HERE = Path(__file__).resolve().parent
WORKLOADS = {  # name: (model, devices, reports a round, local steps, batch)
    "a": ("mlp", 1000, 1000, 10, 32),
    "b": ("cnn_fmnist", 100, 10, 10, 128),
}
TARGETS = {  # (workload, variant): the target, printed beside the measured ratios
    ("a", "emulator vectorised"): "<= 0.35x today and <= 0.5x the plain loop",
    ("b", "emulator bf16"): ">= 2.5x faster than the emulator in fp32",
}


# ----------------------------------------------------------------------------------- the plain loop
def plain_round_s(federation: Federation, workload: str, rounds: int, threads: int, precision: str = "fp32") -> float:
    """Seconds per round of textbook FedAvg in this process with `threads` torch threads."""
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return plain_fedavg_round_s(federation, WORKLOADS[workload], rounds, precision)
    finally:
        torch.set_num_threads(previous)


def plain_fedavg_round_s(federation: Federation, workload: tuple, rounds: int, precision: str = "fp32",
                         device: str = "cpu") -> float:
    """Seconds per round (median, first round left out) of textbook FedAvg: one model, the global weights
    copied in, the device's steps, the delta summed; no Ray, no system model. `workload` is (model,
    devices, reports a round, local steps, batch). On a GPU (benchmarks/gpu.py) the training set is held
    there once and each device's samples are gathered from it every round, as a GPU runner does."""
    model_name, devices, reports, steps, batch = workload
    device = torch.device(device)
    train = federation.train
    model = numerics.prepare_model(build_model(model_name, train.input_shape, train.num_classes, seed=0).to(device),
                                   precision)
    global_params = flatten(model)
    if device.type == "cpu":
        held = [train.tensors(federation.device_samples(d)) for d in range(devices)]
        samples = held.__getitem__
    else:
        x_all, y_all = (t.to(device) for t in train.tensors())
        rows = [torch.as_tensor(federation.device_samples(d), device=device) for d in range(devices)]

        def samples(d):
            return x_all[rows[d]], y_all[rows[d]]
    rng = np.random.default_rng(1)
    times = []
    for _ in range(rounds):
        if device.type == "cuda":
            torch.cuda.synchronize()
        started = time.perf_counter()
        total = np.zeros_like(global_params)
        for d in rng.choice(devices, reports, replace=False):
            x, y = samples(d)
            x = numerics.prepare_inputs(x, model, precision)
            load(model, global_params)
            model.train()
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
            order = torch.randperm(len(y), device=device)
            for step in range(steps):
                index = order[(step * batch) % len(y):][:batch]
                with numerics.autocast(precision, device):
                    loss = F.cross_entropy(model(x[index]), y[index])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            total += flatten(model) - global_params  # flatten copies to the host: a GPU round ends synchronised
        global_params = global_params + total / reports
        times.append(time.perf_counter() - started)
    return float(np.median(times[1:] if len(times) > 1 else times))


# ------------------------------------------------------------------------------------ the emulator
def emulator_round_s(federation: Federation, workload: str, rounds: int, runners: int, **runtime) -> float:
    from emulator.driver import run_scenario

    model_name, devices, reports, steps, batch = WORKLOADS[workload]
    scenario = validate_scenario({
        "name": f"speed-{workload}", "seed": 0, "rounds": rounds,
        "data": {"dataset": "fashion_mnist", "partition": {"scheme": "iid"}},
        "model": model_name,
        "algorithm": {"name": "fedavg", "clients_per_round": reports, "client_lr": 0.05, "local_steps": steps,
                      "batch_size": batch},
        "population": {"devices": devices},
        "runtime": {"runners": runners, **runtime},
        "evaluation": {"every": rounds},
        "output": {"tensorboard": False, "checkpoint_every": 0},
    })
    with tempfile.TemporaryDirectory() as out:
        rows = run_scenario(scenario, os.path.join(out, "run"), federation=federation,
                            notify=lambda message: None).rows
    wall = [float(r["wall_time_s"]) for r in rows]
    if len(wall) < 3:
        return wall[-1] / len(wall)
    return (wall[-2] - wall[0]) / (len(wall) - 2)  # rounds 2 .. R-1: no warm-up, no evaluation


def training_table(workloads: list[str], rounds: int, runners: int) -> list[dict]:
    import ray

    from emulator.runtime.cluster import configure_token_auth

    rows = []
    configure_token_auth()
    started = time.perf_counter()
    ray.init(address="local", include_dashboard=False, logging_level=logging.WARNING)
    rows.append({"workload": "-", "variant": "ray.init in this process", "value": time.perf_counter() - started,
                 "unit": "s"})
    bf16 = numerics.cpu_bf16()
    try:
        for workload in workloads:
            devices = WORKLOADS[workload][1]
            data_name, federation = workload_data(devices)
            plain = {threads: plain_round_s(federation, workload, rounds, threads) for threads in (1, os.cpu_count())}
            best_plain = min(plain.values())
            variants = {"emulator today (a task per device)": dict(group_size=1),
                        "emulator": {},
                        "emulator vectorised": dict(vectorise=True)}
            if bf16:
                variants.update({"emulator bf16": dict(precision="bf16"),
                                 "emulator vectorised bf16": dict(vectorise=True, precision="bf16")})
            measured = {name: emulator_round_s(federation, workload, rounds, runners, **settings)
                        for name, settings in variants.items()}
            today = measured["emulator today (a task per device)"]
            for threads, seconds in plain.items():
                rows.append({"workload": workload, "variant": f"plain loop, {threads} torch thread(s)", "value": seconds,
                             "plain": seconds / best_plain, "data": data_name})
            if bf16:
                seconds = plain_round_s(federation, workload, rounds, 1, "bf16")
                rows.append({"workload": workload, "variant": "plain loop bf16, 1 thread", "value": seconds,
                             "plain": seconds / best_plain, "vs_fp32": plain[1] / seconds})
            for name, seconds in measured.items():
                rows.append({"workload": workload, "variant": name, "value": seconds, "plain": seconds / best_plain,
                             "today": seconds / today,
                             "vs_fp32": measured[name.replace(" bf16", "")] / seconds if "bf16" in name else None,
                             "target": TARGETS.get((workload, name), "")})
    finally:
        ray.shutdown()
    return rows


def child_table(script: str, args: list[str]) -> str:
    """Another benchmark's table, run as its own process (its own interpreter, imports and Ray)."""
    out = subprocess.run([sys.executable, str(HERE / script), *args], capture_output=True, text=True)
    return out.stdout.strip() + ("" if out.returncode == 0 else f"\n(exit {out.returncode}: a target was missed)")


def main(argv=None) -> int:
    from emulator.parts import load_parts

    load_parts()  # the built-in models and datasets, as the CLI registers them
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="rounds per emulator run (>= 3: warm-up, measured, evaluation)")
    parser.add_argument("--only", nargs="+", default=["a", "b", "c", "d"])
    parser.add_argument("--runners", type=int, default=os.cpu_count())
    args = parser.parse_args(argv)
    print(f"machine: {numerics.cpu_name()}, {os.cpu_count()} cores, bf16 {'yes' if numerics.cpu_bf16() else 'no'}, "
          f"torch {torch.__version__}; emulator: {args.runners} runners x 1 torch thread")
    workloads = [w for w in ("a", "b") if w in args.only]
    if workloads:
        rows = training_table(workloads, args.rounds, args.runners)
        print("\n| workload | variant | s / round | vs plain loop | vs emulator today | bf16 speed-up | target |")
        print("|---|---|---|---|---|---|---|")
        for row in rows:
            if row.get("unit") == "s":
                print(f"| - | {row['variant']} | {row['value']:.2f} s | | | | |")
                continue
            ratio = lambda key: f"{row[key]:.2f}x" if row.get(key) is not None else ""
            print(f"| {row['workload']} | {row['variant']} | {row['value']:.3f} | {ratio('plain')} | "
                  f"{ratio('today')} | {ratio('vs_fp32')} | {row.get('target', '')} |")
    if "c" in args.only:
        print("\n(c) the quickstart as a whole process\n")
        print(child_table("quickstart.py", []))
    if "d" in args.only:
        print("\n(d) the system model alone\n")
        print(child_table("system.py", ["--sizes", "1000000", "10000000", "--rounds", "20"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

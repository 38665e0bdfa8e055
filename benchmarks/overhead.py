"""How much does emulation cost over a plain PyTorch loop doing the same federated training?

The same FedAvg workload (100 devices, 10 a round, 10 local SGD steps of batch 32) runs twice in this
process: through the emulator (Ray runner actors + server actor, the full round path) and as a plain
sequential PyTorch loop. Both train on the same data partition and evaluate once at the end. The table
gives seconds per round for each and their ratio; machines are noisy, so only the ratio is compared
with the targets (cnn_fmnist <= 1.3x, mlp <= 2x). The emulator runs with one runner per core (what a
user gets by default) and, to show the pure cost of emulation without parallel speed-up, with one runner
that gets every core's torch threads, like the plain loop.
Start-up (Ray, actors) is reported separately.

    .venv/bin/python benchmarks/overhead.py [--rounds 20] [--models mlp cnn_fmnist]
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

from emulator.data.federation import ArrayDataset, Federation
from emulator.models.zoo import build_model
from emulator.parts import validate_scenario

TARGETS = {"cnn_fmnist": 1.3, "mlp": 2.0}
DEVICES, COHORT, STEPS, BATCH, LR = 100, 10, 10, 32, 0.01


def workload_data(devices: int = DEVICES) -> tuple[str, Federation]:
    """Fashion-MNIST split iid over `devices` devices when installed, else random 28x28 images."""
    from emulator.data.partition import partition_iid

    rng = np.random.default_rng(0)
    try:
        from emulator.data import load_vision

        train, test = load_vision("fashion_mnist", None, False, "balanced")
        name = "fashion_mnist"
    except Exception:
        x = rng.integers(0, 256, size=(60000, 1, 28, 28), dtype=np.uint8)
        train = ArrayDataset(x, rng.integers(0, 10, 60000), 10, (0.5,), (0.25,))
        test = ArrayDataset(x[:10000], train.y[:10000], 10, (0.5,), (0.25,))
        name = "random images (Fashion-MNIST not installed)"
    return name, Federation.from_lists(train, test, partition_iid(len(train), devices, rng))


def plain_loop(federation: Federation, model_name: str, rounds: int) -> float:
    """Textbook FedAvg in one process: copy the global model, train each sampled device, average."""
    train = federation.train
    global_model = build_model(model_name, train.input_shape, train.num_classes, seed=0)
    rng = np.random.default_rng(1)
    start = time.perf_counter()
    for _ in range(rounds):
        cohort = rng.choice(DEVICES, COHORT, replace=False)
        new_state = {k: torch.zeros_like(v) for k, v in global_model.state_dict().items()}
        for device in cohort:
            x, y = train.tensors(federation.device_samples(device))
            local = copy.deepcopy(global_model)
            local.train()
            optimizer = torch.optim.SGD(local.parameters(), lr=LR)
            order = torch.randperm(len(y))
            for step in range(STEPS):
                index = order[(step * BATCH) % len(y):][:BATCH]
                loss = F.cross_entropy(local(x[index]), y[index])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            for k, v in local.state_dict().items():
                new_state[k] += v / COHORT
        global_model.load_state_dict(new_state)
    test_x, test_y = federation.test.tensors()
    global_model.eval()
    with torch.no_grad():
        correct = sum((global_model(test_x[i:i + 1024]).argmax(1) == test_y[i:i + 1024]).sum().item()
                      for i in range(0, len(test_y), 1024))
    elapsed = time.perf_counter() - start
    return elapsed, correct / len(test_y)


def emulated(federation: Federation, model_name: str, rounds: int, runners: int,
             threads: int = 1) -> tuple[float, float, float]:
    from emulator.driver import run_scenario

    scenario = validate_scenario({
        "name": f"overhead-{model_name}", "seed": 0, "rounds": rounds,
        "data": {"dataset": "fashion_mnist", "partition": {"scheme": "iid"}},
        "model": model_name,
        "algorithm": {"name": "fedavg", "clients_per_round": COHORT, "client_lr": LR, "local_steps": STEPS,
                      "batch_size": BATCH},
        "population": {"devices": DEVICES},
        "runtime": {"runners": runners, "num_cpus": threads, "torch_threads": threads},
        "evaluation": {"every": rounds},
    })
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as out:
        result = run_scenario(scenario, os.path.join(out, "run"), federation=federation)
    total = time.perf_counter() - started
    rounds_time = result.rows[-1]["wall_time_s"]
    return rounds_time, total - rounds_time, result.summary["final_test_acc"]


def main(argv=None) -> int:
    from emulator.parts import load_parts

    load_parts()  # the built-in models and datasets, as the CLI registers them
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--models", nargs="+", default=["mlp", "cnn_fmnist"])
    parser.add_argument("--runners", type=int, default=None, help="default: one per CPU core")
    args = parser.parse_args(argv)
    runners = args.runners or os.cpu_count()

    import logging

    import ray

    name, federation = workload_data()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, logging_level=logging.WARNING)
    print(f"data: {name}; {DEVICES} devices, {COHORT} a round, {STEPS} local steps of batch {BATCH}; "
          f"{args.rounds} rounds; {os.cpu_count()} CPU cores, torch {torch.__version__}, "
          f"{runners} runners", file=sys.stderr)
    rows = []
    for model_name in args.models:
        plain_s, plain_acc = plain_loop(federation, model_name, args.rounds)
        emu_s, startup_s, emu_acc = emulated(federation, model_name, args.rounds, runners)
        one_s, _, _ = emulated(federation, model_name, args.rounds, 1, threads=os.cpu_count())
        rows.append((model_name, plain_s / args.rounds, emu_s / args.rounds, emu_s / plain_s, one_s / plain_s,
                     TARGETS.get(model_name), startup_s, plain_acc, emu_acc))
    ray.shutdown()

    header = ("model", "plain s/round", f"emulator s/round ({runners} runners)", "ratio", "ratio, 1 runner x all cores",
              "target", "start-up s", "acc plain", "acc emulator")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    failed = False
    for model_name, plain, emu, ratio, ratio_one, target, startup, acc_p, acc_e in rows:
        ok = target is None or ratio <= target
        failed |= not ok
        print(f"| {model_name} | {plain:.4f} | {emu:.4f} | {ratio:.2f}x | {ratio_one:.2f}x | "
              f"{'-' if target is None else f'<= {target}x'}{'' if ok else ' MISSED'} | {startup:.1f} | "
              f"{acc_p:.3f} | {acc_e:.3f} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Runners sharing one GPU through fractional shares, beside a plain PyTorch loop on the same GPU.

Issue 24's table. Two workloads (as in benchmarks/speed.py):
  mlp1000  a 1000-report round: Fashion-MNIST iid over 1000 devices, all report, 10 SGD steps of batch 32
           (the 200-200 MLP);
  fast_cnn FAST's Fashion-MNIST CNN round: 100 devices, 10 a round, 10 steps of batch 128.
Each runs through the emulator at 1, 2, 4 and 8 runners per GPU (runtime.num_gpus 1, 0.5, 0.25, 0.125, one
CPU each), one device at a time and vectorised, in fp32 and bf16; and as the plain loop in this process on
the same GPU (the training set on the GPU, the global weights copied in, the device's steps, the delta
summed: no Ray, no system model). Figures: seconds per round (the emulator's own wall-clock column, rounds
2 .. R-1: no warm-up, no evaluation), device updates per second, GPU-seconds per 1,000 updates, mean GPU
utilisation over the measured rounds (NVML), and per runner the peak memory torch reserved and the
process's whole footprint on the card (NVML, CUDA context included).

`--memory-rounds N` adds the memory check: the FAST CNN scenario for N rounds at 4 runners x 0.25, each
runner process's footprint sampled through the run; its first and last tenths are compared.

    python benchmarks/gpu.py [--rounds 4] [--shares 1 0.5 0.25 0.125] [--memory-rounds 100] [--json OUT]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import workload_data  # noqa: E402  (benchmarks/overhead.py: Fashion-MNIST, else random images)
from speed import plain_fedavg_round_s  # noqa: E402  (benchmarks/speed.py: the plain loop, also on a GPU)

from emulator.parts import load_parts, validate_scenario  # noqa: E402

WORKLOADS = {  # name: (model, devices, reports a round, local steps, batch)
    "mlp1000": ("mlp", 1000, 1000, 10, 32),
    "fast_cnn": ("cnn_fmnist", 100, 10, 10, 128),
}


class GpuSampler:
    """Samples the card's utilisation and each process's memory on it (NVML) in a thread, every 50 ms."""

    def __init__(self):
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # no NVML: the table leaves those columns empty
            self.nvml = None
        self.samples: list[tuple[float, int, dict]] = []
        self._stop = threading.Event()
        self._thread = None

    def __enter__(self):
        if self.nvml is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _run(self):
        while not self._stop.wait(0.05):
            try:
                busy = self.nvml.nvmlDeviceGetUtilizationRates(self.handle).gpu
                procs = {p.pid: p.usedGpuMemory for p in self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)}
            except Exception:
                continue
            self.samples.append((time.time(), busy, procs))

    def utilisation(self, start: float, end: float) -> float | None:
        values = [busy for t, busy, _ in self.samples if start <= t <= end]
        return float(np.mean(values)) if values else None

    def footprint(self, start: float = 0, end: float = float("inf"), exclude: set = frozenset()) -> dict[int, int]:
        """Each process's largest footprint on the card in [start, end], bytes."""
        peak: dict[int, int] = {}
        for t, _, procs in self.samples:
            if start <= t <= end:
                for pid, used in procs.items():
                    if pid not in exclude and used:
                        peak[pid] = max(peak.get(pid, 0), used)
        return peak


# ----------------------------------------------------------------------------------- the plain loop
def plain_round_s(federation, workload: str, rounds: int, precision: str) -> float:
    """Seconds per round of textbook FedAvg in this process on the GPU (benchmarks/speed.py's plain loop)."""
    return plain_fedavg_round_s(federation, WORKLOADS[workload], rounds, precision, device="cuda")


# ------------------------------------------------------------------------------------ the emulator
def emulator_run(federation, workload: str, rounds: int, share: float, sampler: GpuSampler, **runtime) -> dict:
    from emulator.driver import run_scenario

    model_name, devices, reports, steps, batch = WORKLOADS[workload]
    runners = round(1 / share)
    scenario = validate_scenario({
        "name": f"gpu-{workload}", "seed": 0, "rounds": rounds,
        "data": {"dataset": "fashion_mnist", "partition": {"scheme": "iid"}},
        "model": model_name,
        "algorithm": {"name": "fedavg", "clients_per_round": reports, "client_lr": 0.05, "local_steps": steps,
                      "batch_size": batch},
        "population": {"devices": devices},
        "runtime": {"backend": "ray", "runners": runners, "num_gpus": share, "num_cpus": 1, **runtime},
        "evaluation": {"every": rounds},
        "output": {"tensorboard": False, "checkpoint_every": 0},
    })
    marks = []
    with tempfile.TemporaryDirectory() as out:
        result = run_scenario(scenario, os.path.join(out, "run"), federation=federation, notify=lambda m: None,
                              on_round=lambda row: marks.append(time.time()))
    wall = [float(r["wall_time_s"]) for r in result.rows]
    seconds = (wall[-2] - wall[0]) / (len(wall) - 2) if len(wall) >= 3 else wall[-1] / len(wall)
    window = (marks[0], marks[-2]) if len(marks) >= 3 else (marks[0] - wall[0], marks[-1])
    summary = result.summary
    return {"s_per_round": seconds, "utilisation": sampler.utilisation(*window),
            "peak_reserved_mib": summary.get("runner_gpu_peak_reserved_mib"),
            "device": (summary.get("runner_devices") or ["?"])[0], "window": window}


def runner_footprints(sampler: GpuSampler, window: tuple[float, float]) -> float | None:
    """The largest runner process's footprint on the card over the window, MiB (this process excluded)."""
    peak = sampler.footprint(*window, exclude={os.getpid()})
    return max(peak.values()) / 2 ** 20 if peak else None


def memory_check(federation, rounds: int, sampler: GpuSampler) -> list[str]:
    """FAST's CNN scenario for `rounds` rounds at 4 runners x 0.25: each runner's footprint, first tenth vs last."""
    from emulator.driver import run_scenario

    scenario = validate_scenario({
        "name": "gpu-memory", "seed": 0, "rounds": rounds,
        "data": {"dataset": "fashion_mnist", "partition": {"scheme": "dirichlet", "alpha": 0.1, "balanced": True}},
        "model": "cnn_fmnist",
        "algorithm": {"name": "fast", "host": "fedavg", "q": 0.5, "clients_per_round": 10, "client_lr": 0.001,
                      "client_optimizer": "adam", "local_steps": 10, "batch_size": 128,
                      "selection": {"kind": "beta", "a": 1, "b": 10}},
        "population": {"devices": 100},
        "runtime": {"backend": "ray", "runners": 4, "num_gpus": 0.25, "num_cpus": 1, "vectorise": True},
        "evaluation": {"every": 10, "batch_size": 2000},
        "output": {"tensorboard": False, "checkpoint_every": 0},
    })
    marks = []
    started = time.time()
    with tempfile.TemporaryDirectory() as out:
        result = run_scenario(scenario, os.path.join(out, "run"), federation=federation, notify=lambda m: None,
                              on_round=lambda row: marks.append(time.time()))
    tenth = max(1, rounds // 10)
    first = sampler.footprint(started, marks[tenth - 1], exclude={os.getpid()})
    last = sampler.footprint(marks[-tenth - 1], marks[-1], exclude={os.getpid()})
    lines = [f"memory over {rounds} rounds of FAST's CNN (4 runners x 0.25, vectorised, fp32): "
             f"{(marks[-1] - marks[0]) / (len(marks) - 1):.3f} s a round, final accuracy (1,000 test samples) "
             f"{result.summary.get('final_test_acc', float('nan')):.4f}, torch's peak reserved per runner "
             f"{result.summary.get('runner_gpu_peak_reserved_mib')} MiB, held at the end "
             f"{result.summary.get('runner_gpu_reserved_mib')} MiB",
             "| runner process | footprint, rounds 1-%d (MiB) | footprint, last %d rounds (MiB) | growth |" % (tenth, tenth),
             "|---|---|---|---|"]
    for pid in sorted(set(first) | set(last)):
        a, b = first.get(pid, 0) / 2 ** 20, last.get(pid, 0) / 2 ** 20
        lines.append(f"| {pid} | {a:.0f} | {b:.0f} | {b - a:+.0f} |")
    return lines


def print_table(rows: list[dict]) -> None:
    plain = {(r["workload"], r["variant"].split()[-1]): r["s_per_round"] for r in rows if r["share"] == "-"}
    print(f"\n{rows[0].get('gpu', 'GPU')}; data: {', '.join(sorted({r['data'] for r in rows}))}")
    print("| workload | variant | runners x share | s / round | updates / s | GPU-s / 1k updates | vs plain loop "
          "(same precision) | GPU util % | peak reserved / runner (MiB) | footprint / runner (MiB) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        reports = WORKLOADS[r["workload"]][2]
        share = "-" if r["share"] == "-" else f"{round(1 / r['share'])} x {r['share']:g}"
        base = plain.get((r["workload"], r["variant"].split()[-1]))
        cell = lambda v, f: "" if v is None else format(v, f)
        print(f"| {r['workload']} | {r['variant']} | {share} | {r['s_per_round']:.3f} | {reports / r['s_per_round']:.0f} | "
              f"{1000 * r['s_per_round'] / reports:.3f} | {cell(base / r['s_per_round'] if base else None, '.2f')}x | "
              f"{cell(r.get('utilisation'), '.0f')} | {cell(r.get('peak_reserved_mib'), '.0f')} | "
              f"{cell(r.get('footprint_mib'), '.0f')} |")


def progress(rows: list[dict], path: str | None) -> None:
    """Print the newest row, and keep the rows so far on disk: a run cut short keeps its table."""
    print(rows[-1], flush=True)
    if path:
        Path(path).write_text(json.dumps(rows, indent=1, default=str))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="rounds per emulator run (>= 3)")
    parser.add_argument("--shares", type=float, nargs="+", default=[1.0, 0.5, 0.25, 0.125])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--memory-rounds", type=int, default=0)
    parser.add_argument("--json", help="also write the rows here (after each one)")
    parser.add_argument("--table", metavar="JSON", help="only print the table of rows an earlier run wrote")
    args = parser.parse_args(argv)
    if args.table:
        print_table(json.loads(Path(args.table).read_text()))
        return 0
    if not torch.cuda.is_available():
        print("no CUDA GPU here: benchmarks/gpu.py needs one (docs/gpu.md has the measured tables)")
        return 2
    import ray

    from emulator.runtime.cluster import configure_token_auth

    load_parts()  # the built-in models, as the CLI registers them
    card = torch.cuda.get_device_name(0)
    print(f"GPU: {card}, {torch.cuda.get_device_properties(0).total_memory / 2 ** 30:.0f} GiB; "
          f"{os.cpu_count()} CPU cores; torch {torch.__version__}", flush=True)
    data = {}
    for workload in args.workloads:
        name, federation = workload_data(WORKLOADS[workload][1])
        # the last round evaluates on the server's CPU, outside the measured rounds: 1,000 test samples suffice
        data[workload] = name, dataclasses.replace(federation, test=federation.test.subset(np.arange(1000)))
    rows = []
    with GpuSampler() as sampler:
        for workload in args.workloads:
            name, federation = data[workload]
            for precision in args.precisions:
                started = time.time()
                seconds = plain_round_s(federation, workload, args.rounds, precision)
                rows.append({"gpu": card, "workload": workload, "variant": f"plain loop {precision}", "share": "-",
                             "s_per_round": seconds, "utilisation": sampler.utilisation(started, time.time()),
                             "data": name})
                progress(rows, args.json)
            torch.cuda.empty_cache()
        for share in args.shares:
            configure_token_auth()
            ray.init(address="local", num_cpus=os.cpu_count(), num_gpus=1, include_dashboard=False,
                     logging_level=logging.WARNING)
            try:
                for workload in args.workloads:
                    name, federation = data[workload]
                    for precision in args.precisions:
                        for vectorise in (False, True):
                            variant = f"emulator{' vectorised' if vectorise else ''} {precision}"
                            try:
                                run = emulator_run(federation, workload, args.rounds, share, sampler,
                                                   vectorise=vectorise, precision=precision)
                            except Exception as exc:  # one failed cell must not lose the table
                                print(f"{workload} {variant} share {share}: {type(exc).__name__}: {exc}", flush=True)
                                continue
                            footprint = runner_footprints(sampler, run.pop("window"))
                            rows.append({"gpu": card, "workload": workload, "variant": variant, "share": share, **run,
                                         "footprint_mib": footprint, "data": name})
                            progress(rows, args.json)
                if args.memory_rounds and share == 0.25:
                    for line in memory_check(data["fast_cnn"][1] if "fast_cnn" in data
                                             else workload_data(100)[1], args.memory_rounds, sampler):
                        print(line, flush=True)
            finally:
                ray.shutdown()
    print_table(rows)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What one local step of FAST's Fashion-MNIST CNN costs on a GPU, and what would cut it.

An in-process emulator run on an H200 goes at 0.385 s a round alone (100 local steps: 3.85 ms a step), the
card mostly idle: the step is bound by its launches and the Python around them, not by the card. This
measures, in one process on the card:

1. the plain step (the same CNN, batch 128 resident on the card, cross-entropy, torch.optim.Adam) in three
   forms: eager with Adam's default multi-tensor kernels, eager with the fused Adam kernel, and the whole
   step (forward, backward, Adam) captured once as a CUDA graph and replayed; ms a step each, and the
   graph's weights after the steps against eager's (the same arithmetic: they should agree closely);
2. an emulator run of the scenario in process (`runtime.backend: inline`) under torch.profiler: the CUDA
   API calls a local step makes (kernel launches, copies, synchronisations) and where the host's time goes.

    python benchmarks/gpu_step_profile.py [--steps 500] [--rounds 6]      # on a machine with a CUDA GPU
    python benchmarks/gpu_step_profile.py --device cpu --steps 20 --rounds 2  # a smoke test of the script
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from emulator.models.zoo import build_model  # noqa: E402
from emulator.parts import load_parts  # noqa: E402

SCENARIO = ROOT / "scenarios" / "papers" / "fast_fmnist.yaml"
BATCH, LR = 128, 1e-3


def timed_steps(step, steps: int, device: str) -> float:
    """ms a step over `steps` calls of `step`, after 20 warm-up calls, the device drained at both ends."""
    for _ in range(20):
        step()
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    return 1000 * (time.perf_counter() - start) / steps


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def plain_steps(device: str, steps: int) -> list[tuple[str, float, str]]:
    """(form, ms a step, note) for the eager, fused and graphed plain step."""
    generator = torch.Generator(device="cpu").manual_seed(0)
    images = torch.rand(600, 1, 28, 28, generator=generator).to(device)
    labels = torch.randint(0, 10, (600,), generator=generator).to(device)
    index = torch.randperm(600, generator=generator)[:BATCH].to(device)
    rows = []
    finals = {}
    forms = ["eager", "fused"] + (["graph"] if device.startswith("cuda") else [])
    for form in forms:
        torch.manual_seed(0)
        model = build_model("cnn_fmnist", (1, 28, 28), 10, seed=0).to(device)
        model.eval()  # dropout off: the three forms then compute the same steps
        optimizer = torch.optim.Adam(model.parameters(), lr=LR, fused=form != "eager" or None,
                                     capturable=form == "graph")

        def step():
            x, y = images[index], labels[index]
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=False)
            loss.backward()
            optimizer.step()

        if form == "graph":
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up on a side stream, as capture asks
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step()
            ms = timed_steps(graph.replay, steps, device)
        else:
            ms = timed_steps(step, steps, device)
        finals[form] = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).float().cpu()
        note = ""
        if form != "eager":
            gap = (finals[form] - finals["eager"]).abs().max().item()
            note = f"max |weight - eager's| {gap:.2e} after the same steps"
        rows.append((form, ms, note))
    return rows


def profiled_run(device: str, rounds: int) -> None:
    """An in-process emulator run under torch.profiler: CUDA API calls a local step, and the host's top ops."""
    from torch.profiler import ProfilerActivity, profile

    from emulator.cli import main as emulator_main

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda") else [])
    with tempfile.TemporaryDirectory() as out:
        sets = [f"rounds={rounds}", "runtime.backend=inline", "runtime.torch_threads=1", "output.tensorboard=false",
                f"output.dir={out}", f"runtime.num_gpus={1 if device.startswith('cuda') else 0}"]
        started = time.perf_counter()
        with profile(activities=activities) as prof:
            try:
                emulator_main(["run", str(SCENARIO), "--quiet", *[a for s in sets for a in ("--set", s)]])
            except SystemExit:
                pass
        wall = time.perf_counter() - started
    steps = rounds * 10 * 10  # 10 devices a round, 10 local steps each
    averages = prof.key_averages()
    calls = {e.key: e.count for e in averages}
    print(f"\nemulator, in process, {rounds} rounds ({steps} local steps), profiled: {wall:.1f} s wall")
    for name in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaStreamSynchronize",
                 "cudaDeviceSynchronize", "cudaMemsetAsync", "aten::item", "aten::_local_scalar_dense"):
        if name in calls:
            print(f"  {name:28s} {calls[name]:8d} calls, {calls[name] / steps:7.1f} a local step")
    print(averages.table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=500, help="timed steps of each plain form")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of the profiled emulator run (0: none)")
    args = parser.parse_args(argv)
    load_parts()
    name = torch.cuda.get_device_name(0) if args.device.startswith("cuda") else "CPU"
    print(f"{name}, torch {torch.__version__}: the plain step of the CNN, batch {BATCH}, Adam lr {LR}")
    print("| form | ms a step | |\n|---|---|---|")
    for form, ms, note in plain_steps(args.device, args.steps):
        print(f"| {form} | {ms:.3f} | {note} |")
    if args.rounds:
        profiled_run(args.device, args.rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The quickstart workload in Apple's pfl-research (pfl 0.6.0, PyTorch backend) beside the emulator in process and
a plain PyTorch loop, in one command: is the emulator's cost per round in line with another FL simulator's?

Workload (scenarios/quickstart.yaml): 1000 devices of the emulator's own federation (synthetic data, Dirichlet
0.3), 20 devices a round, the `mlp` model with the emulator's initial weights, FedAvg: 10 SGD steps of batch
min(32, samples) at lr 0.05 from the global model, updates averaged weighted by samples (--weighting; the
emulator is given the same with algorithm.weighting), server lr 1.0. Each contender runs in its own process with
one torch thread, one after another:

- plain: a sequential loop over uniform random cohorts of 20 (seeded).
- emulator: run_scenario in process (runtime.backend inline, one runner, evaluation off). It also simulates the
  system (availability, over-selection, dropout), so its cohorts differ. Its last round always evaluates the
  test set, so it is timed over rounds 2..N-1; the others over rounds 2..N (round 1 warms up).
- pfl: FederatedDataset over the same devices and the plain loop's cohorts, PyTorchModel with local SGD,
  FederatedAveraging, SimulatedBackend without DP, WeightByDatapoints. pfl's `local_num_steps` stops at the end
  of one pass over a device's data (98% of these devices hold fewer than 320 samples), so the devices' datasets
  yield the emulator's batch schedule (reshuffled whenever the data runs out) and NNTrainHyperParams sets
  local_num_steps=10, local_batch_size=32, local_num_epochs=None: exactly 10 steps of batch min(32, n). With the
  same cohorts and batch order pfl and plain train identically. pfl evaluates each device of its first round
  (iteration 0 always evaluates) and prints its metrics each round, as it does by default.

Final test accuracy is measured after the timing (the emulator's own final evaluation, the same test set).

    .venv/bin/python benchmarks/pfl_baseline.py [--rounds 30] [--repeat 1] [--pfl-path /tmp/pfl_pkgs]

pfl lives outside the venv:  .venv/bin/pip install --target /tmp/pfl_pkgs pfl==0.6.0 --no-deps
                             .venv/bin/pip install --target /tmp/pfl_pkgs 'prv-accountant>=0.2,<0.3' --no-deps
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "quickstart.yaml"
INSTALL = ("install it outside the project venv:\n"
           "  .venv/bin/pip install --target /tmp/pfl_pkgs pfl==0.6.0 --no-deps\n"
           "  .venv/bin/pip install --target /tmp/pfl_pkgs 'prv-accountant>=0.2,<0.3' --no-deps")


# ------------------------------------------------------------------------------------------ shared
def _setup(weighting: str):
    """The quickstart's scenario, federation and initial model: the same in every child."""
    import torch

    from emulator.data import federation_for
    from emulator.models.zoo import build_model
    from emulator.parts import load_scenario
    from emulator.seeding import torch_seed

    torch.set_num_threads(1)
    scenario = load_scenario(SCENARIO, [f"algorithm.weighting={weighting}"])
    fed = federation_for(scenario.data, scenario.population.devices, scenario.seed)
    model = build_model(scenario.model.name, fed.train.input_shape, fed.train.num_classes,
                        torch_seed(scenario.seed, "model-init"), scenario.model.options())
    return scenario, fed, model


def _cohorts(devices: int, size: int, rounds: int) -> list[list[int]]:
    """Uniform random cohorts, without replacement within a round; plain and pfl draw the same."""
    import numpy as np
    rng = np.random.default_rng(0)
    return [[int(d) for d in rng.choice(devices, size, replace=False)] for _ in range(rounds)]


def _batches(n: int, batch: int, steps: int, generator):
    """The emulator's local schedule: `steps` batches of min(batch, n) indices, reshuffled when data runs out."""
    import torch
    batch = min(batch, n)
    order, position = torch.randperm(n, generator=generator), 0
    for _ in range(steps):
        if position >= n:
            order, position = torch.randperm(n, generator=generator), 0
        yield order[position:position + batch]
        position += batch


def _accuracy(model, fed) -> float:
    import torch
    x, y = fed.test.tensors()
    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x[i:i + 1024]).argmax(1) == y[i:i + 1024]).sum()) for i in range(0, len(y), 1024))
    return correct / len(y)


def _per_round(marks: list[float]) -> float:
    """Seconds a round from the end of round 1 to the last mark."""
    return (marks[-1] - marks[0]) / (len(marks) - 1)


# ------------------------------------------------------------------------------------------ children
def plain_child(rounds: int, weighting: str) -> dict:
    import torch
    import torch.nn.functional as F

    scenario, fed, model = _setup(weighting)
    algo, train = scenario.algorithm, fed.train
    global_params = [p.detach().clone() for p in model.parameters()]
    generator, marks = torch.Generator().manual_seed(0), []
    for cohort in _cohorts(fed.num_devices, algo.clients_per_round, rounds):
        sums, total = [torch.zeros_like(p) for p in global_params], 0.0
        for device in cohort:
            x, y = train.tensors(fed.device_samples(device))
            with torch.no_grad():
                for p, g in zip(model.parameters(), global_params):
                    p.copy_(g)
            model.train()
            optimizer = torch.optim.SGD(model.parameters(), lr=algo.client_lr)
            for index in _batches(len(y), algo.batch_size, algo.local_steps, generator):
                loss = F.cross_entropy(model(x[index]), y[index])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            weight = float(len(y)) if weighting == "samples" else 1.0
            with torch.no_grad():
                for s, p, g in zip(sums, model.parameters(), global_params):
                    s += (p - g) * weight
            total += weight
        for g, s in zip(global_params, sums):
            g += algo.server_lr * s / total
        marks.append(time.perf_counter())
    with torch.no_grad():
        for p, g in zip(model.parameters(), global_params):
            p.copy_(g)
    return {"round_s": _per_round(marks), "accuracy": _accuracy(model, fed), "participants": algo.clients_per_round}


def emulator_child(rounds: int, weighting: str) -> dict:
    import torch

    from emulator.driver import run_scenario
    from emulator.parts import load_scenario

    torch.set_num_threads(1)
    scenario = load_scenario(SCENARIO, [f"rounds={rounds}", "runtime.backend=inline", "evaluation.every=100000",
                                        "runtime.runners=1", f"algorithm.weighting={weighting}"])
    marks, participants = [], []

    def on_round(row: dict) -> None:
        marks.append(time.perf_counter())
        participants.append(int(row.get("participants") or 0))

    with tempfile.TemporaryDirectory() as out:
        result = run_scenario(scenario, Path(out) / "run", on_round=on_round)
    return {"round_s": _per_round(marks[:-1]), "accuracy": result.summary.get("final_test_acc"),
            "participants": statistics.mean(participants[1:-1])}


def pfl_child(rounds: int, weighting: str) -> dict:
    os.environ.setdefault("PFL_PYTORCH_DEVICE", "cpu")
    try:
        from pfl.aggregate.simulate import SimulatedBackend
        from pfl.aggregate.weighting import WeightByDatapoints, WeightByUser
        from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
        from pfl.callback.base import TrainingProcessCallback
        from pfl.data.dataset import Dataset
        from pfl.data.federated_dataset import FederatedDataset
        from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
        from pfl.metrics import Metrics, Weighted
        from pfl.model.pytorch import PyTorchModel
    except Exception as exc:  # noqa: BLE001 (any import failure means: no pfl here)
        return {"error": f"{type(exc).__name__}: {exc}"}
    import numpy as np
    import torch
    import torch.nn.functional as F

    np.random.seed(0)  # pfl's datasets and backend seed themselves from numpy's global state
    scenario, fed, net = _setup(weighting)
    algo, train = scenario.algorithm, fed.train
    generator = torch.Generator().manual_seed(0)

    class Classifier(torch.nn.Module):
        """PyTorchModel wants `loss` and `metrics` on the module; the emulator's MLP has neither."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x)

        def loss(self, x, y):
            self.train()
            return F.cross_entropy(self(x), y)

        @torch.no_grad()
        def metrics(self, x, y):
            self.eval()
            return {"loss": Weighted(float(F.cross_entropy(self(x), y, reduction="sum")), len(y))}

    class Device(Dataset):
        """A device whose training batches follow the emulator's schedule (pfl's own iter makes one pass)."""

        def iter(self, batch_size):  # noqa: A003 (pfl's name)
            if batch_size != algo.batch_size:  # evaluation: pfl's one pass
                yield from super().iter(batch_size)
                return
            x, y = self.raw_data
            for index in _batches(len(y), batch_size, algo.local_steps, generator):
                yield x[index], y[index]

    class Clock(TrainingProcessCallback):
        def __init__(self):
            self.marks = []

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            self.marks.append(time.perf_counter())
            return False, Metrics()

    order = iter([d for cohort in _cohorts(fed.num_devices, algo.clients_per_round, rounds) for d in cohort])
    dataset = FederatedDataset(lambda d: Device(train.tensors(fed.device_samples(d)), user_id=d),
                               lambda: next(order))
    classifier = Classifier(net)
    model = PyTorchModel(classifier, torch.optim.SGD, torch.optim.SGD(classifier.parameters(), lr=algo.server_lr))
    backend = SimulatedBackend(dataset, dataset, postprocessors=[
        WeightByDatapoints() if weighting == "samples" else WeightByUser()])
    clock = Clock()
    FederatedAveraging().run(
        NNAlgorithmParams(central_num_iterations=rounds, evaluation_frequency=rounds + 1,
                          train_cohort_size=algo.clients_per_round, val_cohort_size=0),
        backend, model,
        NNTrainHyperParams(local_num_epochs=None, local_num_steps=algo.local_steps,
                           local_learning_rate=algo.client_lr, local_batch_size=algo.batch_size),
        NNEvalHyperParams(local_batch_size=1 << 30), callbacks=[clock])
    return {"round_s": _per_round(clock.marks), "accuracy": _accuracy(classifier, fed),
            "participants": algo.clients_per_round}


CHILDREN = {"plain": plain_child, "emulator": emulator_child, "pfl": pfl_child}


# ------------------------------------------------------------------------------------------ parent
def _run_child(name: str, args) -> dict:
    path = [str(ROOT)] + ([str(Path(args.pfl_path).resolve())] if name == "pfl" else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path), PYTHONWARNINGS="ignore", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", name, "--rounds", str(args.rounds),
                           "--weighting", args.weighting], env=env, cwd=ROOT, capture_output=True, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise SystemExit(f"the {name} child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def _cpu_name() -> str:
    info = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in (info.read_text().splitlines() if info.exists() else [])
             if line.startswith("model name")]
    return names[0] if names else "unknown CPU"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=list(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=30, help="rounds a run (round 1 is not timed); at least 3")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each contender, interleaved (median)")
    parser.add_argument("--pfl-path", default="/tmp/pfl_pkgs", help="where pfl was pip-installed with --target")
    parser.add_argument("--weighting", choices=["samples", "uniform"], default="samples",
                        help="FedAvg's weights, for all three (the emulator's default is uniform)")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3 (round 1 warms up; the emulator's last round evaluates)")
    if args.child:
        print(json.dumps(CHILDREN[args.child](args.rounds, args.weighting)))
        return

    print(f"machine: {_cpu_name()}, {os.cpu_count()} cores; one torch thread a contender; {args.rounds} rounds, "
          f"median of {args.repeat}")
    runs: dict[str, list[dict]] = {name: [] for name in CHILDREN}
    for _ in range(args.repeat):
        for name in CHILDREN:
            if name == "pfl" and runs["pfl"] and "error" in runs["pfl"][0]:
                continue
            runs[name].append(_run_child(name, args))
    if "error" in runs["pfl"][0]:
        print(f"\npfl could not be imported from {args.pfl_path} ({runs['pfl'][0]['error']}); {INSTALL}")
        del runs["pfl"]
    seconds = {name: statistics.median(r["round_s"] for r in rs) for name, rs in runs.items()}
    print("\n| contender | s/round | ratio to plain | devices/round | final test accuracy |\n|---|---|---|---|---|")
    for name, rs in runs.items():
        accuracy = rs[0]["accuracy"]
        print(f"| {name} | {seconds[name]:.3f} | {seconds[name] / seconds['plain']:.2f} "
              f"| {statistics.mean(r['participants'] for r in rs):.1f} "
              f"| {'n/a' if accuracy is None else f'{accuracy:.3f}'} |")
    print("\ns/round: rounds 2..N (the emulator 2..N-1: its last round evaluates the test set).\nThe emulator's "
          "devices follow its system model; plain and pfl train the same seeded cohorts and batches.")


if __name__ == "__main__":
    main()

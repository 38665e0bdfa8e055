"""Where a round's time goes, beside a plain loop measured in the same command: training, what crosses Ray's
object store, the server's own work; and a sweep of quickstart runs as a whole.

(a) `scenarios/cluster/population_100k.yaml` as shipped (10^5 devices, 1000 reports a round, the 200-200 MLP on
    60 features, one runner per core, the server in the driver; its 500 rounds, stopped after --rounds) without evaluation or
    checkpoints. In the driver this script counts what the runners send back (the pickled size of every
    training result fetched: Ray serialises the same buffers), what the server puts for them, the server's
    own replies to the driver apart, and the seconds the server waits for results. In the runners'
    processes round_probe/ times their tasks and the local training inside them: a round's training is
    its slowest runner's seconds training; the rest of the round is "outside training" (the runners' data,
    model loads and folding, the system model, the server's Python, Ray's round trips, a runner waiting
    on the other). Beside them, a plain PyTorch loop: one process a runner, side by side, one torch thread
    each, each training its share of the round's devices drawn from the same federation as the emulator
    trains them (10 SGD steps of batch 32) with torch.optim.
(b) `emulator sweep scenarios/quickstart.yaml --seeds 4` as a whole process (Ray start, 4 runs of 60 rounds
    side by side, the report), wall clock.

--before DIR runs both with the emulator imported from DIR as well (e.g. `git archive <commit> emulator |
tar -x -C DIR`), interleaved, so a change is measured against the code before it on the same machine.

    .venv/bin/python benchmarks/round_costs.py [--rounds 7] [--repeat 2] [--before DIR] [--only a b]
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POPULATION = ROOT / "scenarios" / "cluster" / "population_100k.yaml"
QUICKSTART = ROOT / "scenarios" / "quickstart.yaml"
PROBE = Path(__file__).resolve().parent / "round_probe"  # times the runners' training in their own processes
# what a runner's training sends back, in the trees measured: updates, a task's receipt, a round's held sum
RUNNER_RESULTS = {"ClientUpdate", "FoldReceipt", "HeldSum", "PartialSum"}
# rounds not measured: the runners' first (their first tasks in a process, the page cache filling with the
# federation's rows)
WARM_ROUNDS = 3


# ------------------------------------------------------------------------------------------ children
def population_child(rounds: int, out: str) -> None:
    """Runs population_100k in this process (the emulator from PYTHONPATH); prints one JSON line."""
    from emulator.driver import run_scenario
    from emulator.parts import load_scenario
    from emulator.runtime import inline
    from emulator.runtime.interrupts import RunInterrupted, StopRequest

    tally = {"fetched": 0, "sums": 0, "other": 0, "put": 0, "wait_s": 0.0}
    get, put, wait = inline.get, inline.put, inline.wait

    def counting_get(ref):
        value = get(ref)
        first = value[0] if isinstance(value, list) and value else value
        from_runner = type(first).__name__ in RUNNER_RESULTS  # the server's own replies are counted apart
        size = len(pickle.dumps(value, protocol=5))
        tally["fetched" if from_runner else "other"] += size
        if type(first).__name__ in ("HeldSum", "PartialSum"):  # of that, the runners' sums
            tally["sums"] += size
        return value

    def counting_put(value, *args, **kwargs):
        tally["put"] += len(pickle.dumps(value, protocol=5))
        return put(value, *args, **kwargs)

    def timed_wait(*args, **kwargs):
        start = time.perf_counter()
        try:
            return wait(*args, **kwargs)
        finally:
            tally["wait_s"] += time.perf_counter() - start

    inline.get, inline.put, inline.wait = counting_get, counting_put, timed_wait
    marks = []
    probe = Path(os.environ["ROUND_PROBE_DIR"])

    stop = StopRequest()

    def on_round(row: dict) -> None:
        runners = {}
        for path in probe.glob("*.json"):  # each runner process's running totals (round_probe/sitecustomize.py)
            runners[path.stem] = json.loads(path.read_text())
        marks.append((time.perf_counter(), dict(tally), int(row.get("participants") or 0), runners))
        if len(marks) == rounds:
            stop.set()

    # the shipped 500 rounds, so that the runners set up for a run of that length (a large run compiles its
    # exact adds at its start: aggregation/exact.py), stopped after `rounds`
    scenario = load_scenario(POPULATION, ["evaluation.every=100000", "output.checkpoint_every=100000",
                                          f"runtime.runners={os.cpu_count()}"])
    try:
        run_scenario(scenario, out, on_round=on_round, stop=stop)
    except RunInterrupted:
        pass
    marks = marks[WARM_ROUNDS - 1:]  # the rounds after WARM_ROUNDS are measured
    (t0, first, _, _), (t1, last, _, _) = marks[0], marks[-1]
    n = len(marks) - 1
    parts = ("train_s", "task_s", "data_s", "load_s", "delta_s", "fold_s")
    rounds, spreads = [], []  # each measured round: the slowest runner's training, its tasks' seconds part by part
    for (_, _, _, before), (_, _, _, after) in zip(marks, marks[1:]):
        spent = [{k: after[pid].get(k, 0.0) - before.get(pid, {}).get(k, 0.0) for k in parts} for pid in after]
        slowest = max(spent, key=lambda s: s["train_s"], default=dict.fromkeys(parts, 0.0))
        rounds.append(slowest)
        tasks = [s["task_s"] for s in spent]
        spreads.append(max(tasks) - min(tasks) if tasks else 0.0)  # how long the runner done first waited
    runner = {k: statistics.mean(r[k] for r in rounds) for k in parts}
    print(json.dumps({"rounds": len(marks) + WARM_ROUNDS - 1, "round_s": (t1 - t0) / n,
                      "fetched_per_round": (last["fetched"] - first["fetched"]) / n,
                      "sums_per_round": (last["sums"] - first["sums"]) / n,
                      "other_per_round": (last["other"] - first["other"]) / n,
                      "put_per_round": (last["put"] - first["put"]) / n,
                      "wait_s": (last["wait_s"] - first["wait_s"]) / n,
                      "participants": statistics.mean(p for _, _, p, _ in marks[1:]), "runners": os.cpu_count(),
                      "spread_s": statistics.mean(spreads), "training_s": runner["train_s"],
                      "tasks_s": runner["task_s"], "data_s": runner["data_s"],
                      "load_s": runner["load_s"], "delta_s": runner["delta_s"], "fold_s": runner["fold_s"]}))


def plain_child(devices: int, repeat: int) -> None:
    """The plain loop: `devices` devices of population_100k's federation trained one after another, as the
    emulator trains them (10 SGD steps of batch 32 from one global model); prints the seconds a round."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    from emulator import params as param_vector
    from emulator.data import federation_for
    from emulator.models.zoo import build_model
    from emulator.parts import load_scenario

    torch.set_num_threads(1)
    scenario = load_scenario(POPULATION)
    federation = federation_for(scenario.data, scenario.population.devices, scenario.seed)
    train, algorithm = federation.train, scenario.algorithm
    model = build_model("mlp", train.input_shape, train.num_classes, 0)
    start_params = param_vector.flatten(model)
    rng, generator = np.random.default_rng(0), torch.Generator().manual_seed(0)
    times = []
    for _ in range(repeat):
        chosen = rng.choice(federation.num_devices, devices, replace=False)
        begin = time.perf_counter()
        for device in chosen:
            x, y = train.tensors(federation.device_samples(int(device)))
            param_vector.load(model, start_params)
            optimizer = torch.optim.SGD(model.parameters(), lr=algorithm.client_lr)
            n = len(y)
            batch = min(algorithm.batch_size, n)
            order, position = torch.randperm(n, generator=generator), 0
            for _ in range(algorithm.local_steps):
                if position >= n:
                    order, position = torch.randperm(n, generator=generator), 0
                index = order[position:position + batch]
                position += batch
                loss = F.cross_entropy(model(x[index]), y[index])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
            param_vector.flatten(model)
        times.append(time.perf_counter() - begin)
    print(json.dumps({"train_s": min(times), "model_bytes": int(start_params.nbytes)}))


# ------------------------------------------------------------------------------------------ parent
def _env(source: str | None, probe: str | None = None) -> dict:
    """The child's environment: the emulator from `source` (None: this tree's, as installed), and given a
    `probe` folder, the runner timing of round_probe/ in every process it starts."""
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    paths = ([str(PROBE)] if probe else []) + ([str(Path(source).resolve())] if source else [])
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths + env.get("PYTHONPATH", "").split(os.pathsep))
    if probe:
        env["ROUND_PROBE_DIR"] = probe
    return env


def _json_child(args: list[str], source: str | None) -> dict:
    # in a directory of its own: Ray's workers put the driver's working directory on their path, which would
    # import this checkout's emulator in the runners instead of the one under test
    with tempfile.TemporaryDirectory() as cwd, tempfile.TemporaryDirectory() as probe:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], env=_env(source, probe),
                              capture_output=True, text=True, cwd=cwd)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise SystemExit(f"child {args} failed:\n{done.stderr[-3000:]}")
    return json.loads(lines[-1])


def _plain_side_by_side(reports: int, runners: int) -> list[dict]:
    """`runners` plain loops at once, one per runner, each training its share of the round's devices: the
    training a round holds on this machine (side by side they share caches, memory and SMT siblings as the
    runners do, which one loop alone would not show)."""
    children = [subprocess.Popen([sys.executable, __file__, "--child", "plain", "--devices", str(reports // runners),
                                  "--repeat", "3"], env=_env(None), stdout=subprocess.PIPE, text=True)
                for _ in range(runners)]
    results = []
    for child in children:
        out, _ = child.communicate()
        lines = [line for line in out.splitlines() if line.startswith("{")]
        if child.returncode or not lines:
            raise SystemExit("a plain loop failed")
        results.append(json.loads(lines[-1]))
    return results


def _sweep_seconds(source: str | None, rounds: int) -> float:
    with tempfile.TemporaryDirectory() as out:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "emulator", "sweep", str(QUICKSTART), "--seeds", "4", "--quiet",
                               "--set", f"rounds={rounds}", "--out", str(Path(out) / "sweep")], env=_env(source),
                              capture_output=True, text=True, cwd=out)
        seconds = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"the sweep failed:\n{done.stderr[-3000:]}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", choices=["population", "plain"], help=argparse.SUPPRESS)
    parser.add_argument("--devices", type=int, default=1000, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=7,
                        help="population_100k rounds a run (the first WARM_ROUNDS are not counted)")
    parser.add_argument("--sweep-rounds", type=int, default=60, help="rounds of each quickstart run in (b)")
    parser.add_argument("--repeat", type=int, default=2, help="runs of each contender, interleaved (median)")
    parser.add_argument("--before", metavar="DIR", help="also measure the emulator imported from DIR")
    parser.add_argument("--only", nargs="+", choices=["a", "b"], default=["a", "b"])
    args = parser.parse_args()
    if args.rounds <= WARM_ROUNDS:
        parser.error(f"--rounds must be over {WARM_ROUNDS}: the first {WARM_ROUNDS} rounds are not measured")
    if args.child == "population":
        with tempfile.TemporaryDirectory() as out:
            population_child(args.rounds, out)
        return
    if args.child == "plain":
        plain_child(args.devices, args.repeat)
        return

    contenders = {"this tree": None} | ({f"before ({args.before})": args.before} if args.before else {})
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores; {_cpu_name()}")
    if "a" in args.only:
        runs: dict[str, list[dict]] = {name: [] for name in contenders}
        for _ in range(args.repeat):
            for name, source in contenders.items():
                runs[name].append(_json_child(["--child", "population", "--rounds", str(args.rounds)], source))
        reports = round(statistics.mean(r["participants"] for rs in runs.values() for r in rs))
        runners = next(iter(runs.values()))[0]["runners"]
        plain = _plain_side_by_side(reports, runners)
        model, training = plain[0]["model_bytes"], max(p["train_s"] for p in plain)
        print(f"\n(a) population_100k, {reports} reports a round, {runners} runners, model {model / 1e6:.3f} MB; "
              f"{runners} plain loops side by side, {reports // runners} devices each: {training:.2f} s")
        print("| contender | round s | training s | outside training s | in runner tasks s | of which data, load, "
              "update, fold s | rest s | server waits s | from runners MB | their sums, models a runner | put MB "
              "| server's replies MB |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        keys = ("round_s", "fetched_per_round", "sums_per_round", "put_per_round", "wait_s", "other_per_round",
                "training_s", "tasks_s", "data_s", "load_s", "delta_s", "fold_s")
        for name, rs in runs.items():
            r = {k: statistics.median(x[k] for x in rs) for k in keys}
            print(f"| {name} | {r['round_s']:.2f} | {r['training_s']:.2f} | {r['round_s'] - r['training_s']:.2f} "
                  f"| {r['tasks_s'] - r['training_s']:.2f} "
                  f"| {r['data_s']:.2f}, {r['load_s']:.2f}, {r['delta_s']:.2f}, {r['fold_s']:.2f} "
                  f"| {r['round_s'] - r['tasks_s']:.2f} | {r['wait_s']:.2f} "
                  f"| {r['fetched_per_round'] / 1e6:.2f} | {r['sums_per_round'] / model / runners:.3f} "
                  f"| {r['put_per_round'] / 1e6:.2f} | {r['other_per_round'] / 1e6:.2f} |")
        print("training: the slowest runner's seconds in local training a round (train_locally, or a vectorised "
              "cohort), timed in its process; outside training: the rest of the round; of that, in runner tasks: "
              "that runner's tasks beyond their training, and in them: reading each device's data, loading the global "
              "model, reading the update back (model minus global), folding updates into the runner's sum; rest: "
              "the round beyond that runner's tasks (the system model, the server, Ray's round trips, waiting on "
              "the other runners); from the runners: every training result fetched (tasks' receipts or updates, "
              "and the runners' sums), of which the sums in model sizes a runner.")
    if "b" in args.only:
        seconds: dict[str, list[float]] = {name: [] for name in contenders}
        for _ in range(args.repeat):
            for name, source in contenders.items():
                seconds[name].append(_sweep_seconds(source, args.sweep_rounds))
        print(f"\n(b) emulator sweep quickstart --seeds 4 ({args.sweep_rounds} rounds each), whole process, "
              f"median of {args.repeat}")
        print("| contender | seconds |\n|---|---|")
        for name, values in seconds.items():
            print(f"| {name} | {statistics.median(values):.1f} |")


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    main()

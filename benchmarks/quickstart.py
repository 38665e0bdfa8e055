"""The quickstart as a whole process, against a plain PyTorch loop doing the same training (issue 14's target:
the emulator's whole process at most 1.3x the plain loop, Ray start included).

Every contender runs as its own child process, so each pays its own interpreter start and imports:

- plain loop (torch threads 1 and 2; the faster is the baseline): one sequential script that builds the
  same federation with the emulator's data code (scenarios/quickstart.yaml: synthetic data, Dirichlet 0.3
  over 1000 devices, the `mlp` model with the same initial weights), then for each of the 60 rounds trains
  as many devices as the emulator's round had reporting (metrics.csv `participants`, 20 each round), drawn
  uniformly at random, 10 SGD steps of batch min(32, samples) each, lr 0.05, averages their deltas
  weighted by samples, and evaluates on the whole test set (batch 1024) every 5 rounds.
- `emulator run scenarios/quickstart.yaml --profile-startup` (the CLI, as a user runs it), wall clock from
  process start to exit: cold (runtime.backend ray, the default: a fresh Ray instance and actor processes)
  warm (on a warm instance this benchmark starts with `emulator up` before that run and stops after it) and in process
  (runtime.backend inline: no Ray). The start-up phases come from --profile-startup's
  table: interpreter and imports, validation, data, ray.init, actors started, actors ready, first round.

    .venv/bin/python benchmarks/quickstart.py [--repeat 3] [--rounds 60] [--before DIR]

--before DIR also runs the cold contender with the emulator imported from DIR (PYTHONPATH; e.g.
`mkdir DIR && git archive HEAD~1 emulator | tar -x -C DIR`), interleaved, to measure a change. Machines are
noisy: each contender runs --repeat times, interleaved, and the table gives the median. The plain loop draws
its devices uniformly (the emulator's follow availability), so its accuracy differs a little; its work is
the same: the same device count each round, 10 steps each.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "quickstart.yaml"
EMULATOR = Path(sys.executable).with_name("emulator")
TARGET = 1.3       # cold, issue 27
WARM_TARGET = 1.1  # warm (emulator up), issue 27


# ------------------------------------------------------------------------------------------ children
def plain_child(threads: int, rounds: int, participants: list[int] | None) -> None:
    """The plain loop (run in its own process). Prints one JSON line with its timings and accuracy."""
    start = time.time()
    import numpy as np
    import torch
    import torch.nn.functional as F

    from emulator.data import build_federation
    from emulator.models.zoo import build_model
    from emulator.parts import load_scenario
    from emulator.seeding import torch_seed

    torch.set_num_threads(threads)
    imported = time.time()
    scenario = load_scenario(SCENARIO, [f"rounds={rounds}"])
    federation = build_federation(scenario.data, scenario.population.devices, scenario.seed, scenario.population.types)
    train, algorithm = federation.train, scenario.algorithm
    model = build_model(scenario.model.name, train.input_shape, train.num_classes,
                        torch_seed(scenario.seed, "model-init"), scenario.model.options())
    test_x, test_y = federation.test.tensors()
    global_params = [p.detach().clone() for p in model.parameters()]
    rng = np.random.default_rng(0)
    generator = torch.Generator().manual_seed(0)
    built = time.time()
    accuracy = None
    for r in range(1, rounds + 1):
        cohort = participants[r - 1] if participants else algorithm.clients_per_round
        devices = rng.choice(federation.num_devices, cohort, replace=False)
        total = torch.zeros(())
        delta_sum = [torch.zeros_like(p) for p in global_params]
        for device in devices:
            samples = federation.device_samples(int(device))
            x, y = train.tensors(samples)
            with torch.no_grad():
                for p, g in zip(model.parameters(), global_params):
                    p.copy_(g)
            model.train()
            optimizer = torch.optim.SGD(model.parameters(), lr=algorithm.client_lr)
            n, batch = len(y), min(algorithm.batch_size, len(y))
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
            with torch.no_grad():
                for s, p, g in zip(delta_sum, model.parameters(), global_params):
                    s += (p - g) * n
            total += n
        for g, s in zip(global_params, delta_sum):
            g += algorithm.server_lr * s / total
        if r % scenario.evaluation.every == 0 or r == rounds:
            with torch.no_grad():
                for p, g in zip(model.parameters(), global_params):
                    p.copy_(g)
                model.eval()
                correct = 0
                for i in range(0, len(test_y), scenario.evaluation.batch_size):
                    logits = model(test_x[i:i + scenario.evaluation.batch_size])
                    correct += int((logits.argmax(1) == test_y[i:i + scenario.evaluation.batch_size]).sum())
                accuracy = correct / len(test_y)
    done = time.time()
    print(json.dumps({"start": start, "imported": imported, "built": built, "done": done, "accuracy": accuracy}))


# ------------------------------------------------------------------------------------------ parent
def _env(source: str | None) -> dict | None:
    """The environment of a child that imports the emulator from `source` (another checkout), or None: this one."""
    if source is None:
        return None
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))}


def _run(command: list[str], env: dict | None = None) -> tuple[float, float, str]:
    launched = time.time()
    result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    ended = time.time()
    if result.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return launched, ended, result.stdout


def _last_json(stdout: str) -> dict:
    return json.loads([line for line in stdout.splitlines() if line.startswith("{")][-1])


def run_emulator(rounds: int, backend: str, source: str | None = None, warm_state: str | None = None) -> dict:
    """`emulator run scenarios/quickstart.yaml --profile-startup` as a user runs it: the whole process's
    seconds, its participants per round, its accuracy and its start-up phases (from the process's start)."""
    with tempfile.TemporaryDirectory() as out:
        command = [str(EMULATOR), "run", str(SCENARIO), "--quiet", "--set", f"output.dir={out}", "--set", f"rounds={rounds}"]
        if source is None:  # an older tree (--before) may know neither
            command += ["--profile-startup", "--set", f"runtime.backend={backend}"]
        launched = time.time()
        env = {**(_env(source) or os.environ), "EMULATOR_WARM_STATE": warm_state or os.path.join(out, "no-warm.json")}
        result = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
        ended = time.time()
        if result.returncode != 0:
            sys.exit(f"{' '.join(command)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
        run_dir = next(Path(out).iterdir())
        with open(run_dir / "metrics.csv") as handle:
            participants = [int(row["participants"]) for row in csv.DictReader(handle)]
        accuracy = json.loads((run_dir / "summary.json").read_text())["final_test_acc"]
    return {"whole": ended - launched, "participants": participants, "accuracy": accuracy,
            "phases": _phases(result.stderr) if source is None else {}}


def _phases(stderr: str) -> dict[str, float]:
    """The seconds column of --profile-startup's table."""
    lines = stderr.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("phase "))
    phases = {}
    for line in lines[head + 1:]:
        match = re.match(r"^(.*?)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)$", line)
        if match:
            phases[match[1]] = float(match[4])
    return phases


def run_plain(threads: int, rounds: int, participants: list[int]) -> dict:
    launched, ended, stdout = _run([sys.executable, __file__, "--child", "plain", "--threads", str(threads),
                                    "--rounds", str(rounds), "--participants", ",".join(map(str, participants))])
    m = _last_json(stdout)
    return {"whole": ended - launched, "imports": m["imported"] - launched, "data": m["built"] - m["imported"],
            "rounds": m["done"] - m["built"], "accuracy": m["accuracy"]}


def main() -> None:
    from emulator.parts import load_parts

    load_parts()  # the built-in models and datasets, as the CLI registers them
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--before", metavar="DIR", help="also run the emulator from this source tree (e.g. "
                        "`git archive HEAD~1 | tar -x -C DIR`), interleaved, to compare a change")
    parser.add_argument("--child", choices=["plain"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out")
    parser.add_argument("--participants")
    args = parser.parse_args()
    if args.child == "plain":
        return plain_child(args.threads, args.rounds, [int(p) for p in args.participants.split(",")]
                           if args.participants else None)

    warm_dir = tempfile.mkdtemp(prefix="quickstart-warm-")
    warm_state = os.path.join(warm_dir, "warm.json")  # a warm instance of this benchmark's own (emulator up)
    contenders = {"cold (Ray)": ("ray", None, None), "warm (emulator up)": ("ray", None, warm_state),
                  "in process (inline)": ("inline", None, None)}
    if args.before:
        contenders[f"cold (Ray), from {args.before}"] = ("ray", args.before, None)
    emulator: dict[str, list[dict]] = {name: [] for name in contenders}
    plain: dict[int, list] = {1: [], 2: []}
    warm_env = {**os.environ, "EMULATOR_WARM_STATE": warm_state}
    for _ in range(args.repeat):  # interleaved, so a burst of load on the machine hits every contender
        for name, (backend, source, state) in contenders.items():
            if state is None:
                emulator[name].append(run_emulator(args.rounds, backend, source))
                continue
            # the warm instance is up only around its own run (its idle daemons would slow the others' Ray)
            subprocess.run([str(EMULATOR), "up"], env=warm_env, check=True, capture_output=True, cwd=ROOT)
            try:
                emulator[name].append(run_emulator(args.rounds, backend, source, state))
            finally:
                subprocess.run([str(EMULATOR), "down"], env=warm_env, capture_output=True, cwd=ROOT)
        participants = emulator["cold (Ray)"][-1]["participants"]
        for threads in plain:
            plain[threads].append(run_plain(threads, args.rounds, participants))
    median = statistics.median
    plain_s = {t: median(r["whole"] for r in runs) for t, runs in plain.items()}
    best = min(plain_s, key=plain_s.get)
    baseline = plain_s[best]
    print(f"quickstart, {args.rounds} rounds, median of {args.repeat} (seconds; load average "
          f"{os.getloadavg()[0]:.2f} at the end, {os.cpu_count()} CPUs)\n")
    print("| process | whole process (s) | ratio to plain loop | notes |")
    print("|---|---:|---:|---|")
    for threads, runs in plain.items():
        r = {k: median(x[k] for x in runs) for k in ("imports", "data", "rounds")}
        print(f"| plain loop, {threads} torch thread{'s' if threads > 1 else ''} | {plain_s[threads]:.2f} | "
              f"{plain_s[threads] / baseline:.2f}x | imports {r['imports']:.2f}, data {r['data']:.2f}, "
              f"rounds {r['rounds']:.2f}; test acc {runs[-1]['accuracy']:.4f}"
              f"{' (baseline)' if threads == best else ''} |")
    for name, runs in emulator.items():
        whole = median(r["whole"] for r in runs)
        target = {"cold": f"target <= {TARGET}x; ", "warm": f"target <= {WARM_TARGET}x; "}.get(name.split()[0], "")
        print(f"| `emulator run`, {name} | {whole:.2f} | {whole / baseline:.2f}x | {target}test acc "
              f"{runs[-1]['accuracy']:.4f} |")
    print("\nStart-up phases (`emulator run --profile-startup`, seconds; phases overlap: the data loads while Ray "
          "starts):\n")
    print("| phase | " + " | ".join(contenders) + " |")
    print("|---|" + "---:|" * len(contenders))
    phases = list(dict.fromkeys(p for runs in emulator.values() for r in runs for p in r["phases"]))
    for phase in phases:
        cells = []
        for runs in emulator.values():
            values = [r["phases"][phase] for r in runs if phase in r["phases"]]
            cells.append(f"{median(values):.2f}" if values else "")
        print(f"| {phase} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

"""The paper-scale runs on one GPU, many at once, in order of need, inside a fixed stretch of device time.

Each run is its own process training on the card: an emulator run in process (`runtime.backend: inline`,
one runner, no Ray) or the plain reference loop (benchmarks/reference_fedavg.py). Up to `--parallel` run at
once; under CUDA MPS (started here where the machine has it) their kernels share the card side by side
instead of taking turns. The list is ordered so that a stretch of device time finishes whole cells first:

1. FAST Table 2, Fashion-MNIST alpha = 0.1: uniform and Beta(1, 10) participation x FedAvg (q = 0) and
   FAST q = 0.5, 1000 rounds (`scenarios/papers/fast_fmnist.yaml`), with the plain loop's FedAvg
   (uniform and Beta) beside them, seed by seed;
2. the plain loop on the emulator's own split and cohorts (results/setups/, benchmarks/emulator_setup.py),
   Beta FedAvg first: what is left to differ is the training code;
3. alpha = 0.05: uniform and Beta FedAvg, then the plain loop's;
4. the plain loop with each client's Adam state kept between its rounds (seed 0), a setup question.

Runs `--done` already holds finished are skipped, so the next stretch goes on with the rest. A run is not
started when less time is left than runs of its kind have taken; at `--limit` seconds the ones still going
are stopped (an emulator run ends after its round, keeping its files) and kept as unfinished.
Measured on an H200 (docs/gpu.md, "Many runs on one GPU"): 12 at once, an emulator run goes at 1.9 rounds a
second (~525 s for 1000) and a plain-loop run took 414 s, so a limit of 550 s finishes a whole first wave.

    python benchmarks/gpu_papers.py --out OUT --limit 550 --done results/gpu --done results/gpu-reference
    python benchmarks/gpu_papers.py --out /tmp/p --list      # the plan, nothing run

Writes OUT/runs/<name>/ (every run's metrics.csv, summary.json, scenario.yaml), OUT/jobs.csv (each run's
start, end, exit code and rounds) and OUT/nvidia-smi.csv (the card's load every 5 s).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

SCENARIO = "scenarios/papers/fast_fmnist.yaml"
SAFARI = "scenarios/papers/safari_fmnist.yaml"
REFERENCE = "benchmarks/reference_fedavg.py"
MPS_ENV = {"CUDA_MPS_PIPE_DIRECTORY": "/tmp/emulator-mps/pipe", "CUDA_MPS_LOG_DIRECTORY": "/tmp/emulator-mps/log"}
# about the least a 1000-round run takes on an H200 (4 at once, from their rate; 12 at once: ~525 s and 414 s):
# one is not started with less time left, until runs of its kind have finished here and say how long they take
LEAST_S = {"emulator": 360.0, "reference": 300.0}
IN_PROCESS = ["runtime.backend=inline", "runtime.num_gpus=1", "runtime.torch_threads=1", "output.tensorboard=false"]


@dataclass
class Job:
    name: str
    kind: str  # "emulator" or "reference"
    args: list[str]
    scenario: str = SCENARIO  # an emulator run's
    started: float = 0.0
    ended: float = 0.0
    code: int | None = None
    process: subprocess.Popen | None = field(default=None, repr=False)


def emulator_jobs(prefix: str, sets: list[str], grid: list[str], seeds: int, rounds: int,
                  scenario: str = SCENARIO) -> list[Job]:
    """The runs of one sweep cell grid, named as `emulator sweep` names them (so committed runs and sweeps agree)."""
    from emulator.sweeps import parse_grid, plan_sweep

    overrides = [f"rounds={rounds}", *sets] + ([f"name={prefix}"] if prefix else [])
    planned = plan_sweep(scenario, overrides, parse_grid(grid), seeds, Path(tempfile.gettempdir()) / "papers-plan")
    return [Job(run.name, "emulator", overrides + run.overrides + [f"seed={run.scenario.seed}", f"name={run.name}"],
                scenario) for run in planned]


def same_setup_jobs(rounds: int, who: str, setups: Path = Path("results/setups")) -> list[Job]:
    """The plain loop on each emulator run's split and cohorts that results/setups/ holds, for one participation."""
    files = sorted(f for f in setups.glob("fast-fmnist-*.npz") if ("uniform" in f.name) == (who == "uniform"))
    jobs = []
    for file in files:
        seed = file.stem.rsplit("seed", 1)[1]
        jobs.append(Job(f"reference-fedavg-alpha0.1-{who}-emulator_setup-seed{seed}", "reference",
                        ["--setup", str(file), "--participation", who, "--seed", seed, "--rounds", str(rounds)]))
    return jobs


def reference_jobs(alpha: float, participations: list[str], seeds: int, rounds: int, adam: str = "fresh") -> list[Job]:
    kept = "-adam_kept" if adam == "kept" else ""
    return [Job(f"reference-fedavg-alpha{alpha:g}-{who}{kept}-seed{seed}", "reference",
                ["--alpha", str(alpha), "--participation", who, "--seed", str(seed), "--adam", adam,
                 "--rounds", str(rounds)])
            for seed in range(seeds) for who in participations]


def by_seed(jobs: list[Job]) -> list[Job]:
    return sorted(jobs, key=lambda job: (int(job.name.rsplit("seed", 1)[1]), jobs.index(job)))


def plan(rounds: int = 1000) -> list[Job]:
    """Every run in the order a stretch of device time should take them."""
    selection = "algorithm.selection={kind: uniform},{kind: beta, a: 1, b: 10}"
    fast = emulator_jobs("", [], [selection, "algorithm.q=0,0.5"], 3, rounds)
    plain = reference_jobs(0.1, ["uniform", "beta"], 3, rounds)
    first = by_seed(fast + plain)
    sharper = by_seed(emulator_jobs("fast-fmnist-alpha0.05-fedavg", ["data.partition.alpha=0.05", "algorithm.q=0"],
                                    [selection], 3, rounds))
    safari_90 = by_seed(emulator_jobs("safari-fmnist-s90", [], ["algorithm.q=1,0.8"], 3, rounds, SAFARI))
    safari_by_s = by_seed(emulator_jobs("safari-fmnist-fedavg", ["algorithm.q=1"],
                                        ["algorithm.selection.exclude=0,30,60,120"], 3, rounds, SAFARI))
    return (first + same_setup_jobs(rounds, "beta") + sharper + safari_90 + same_setup_jobs(rounds, "uniform")
            + reference_jobs(0.05, ["uniform", "beta"], 3, rounds) + safari_by_s
            + reference_jobs(0.1, ["uniform", "beta"], 1, rounds, "kept"))


def finished(done: str | None) -> set[str]:
    """Names of runs finished under `done` (DIR/<session>/<run>/summary.json with status completed)."""
    if not done:
        return set()
    return {s.parent.name for s in Path(done).glob("*/*/summary.json")
            if json.loads(s.read_text()).get("status") == "completed"}


def command(job: Job, out: Path, cpu: bool = False) -> list[str]:
    if job.kind == "reference":
        return [sys.executable, REFERENCE, *job.args, "--out", str(out)] + (["--device", "cpu"] if cpu else [])
    sets = job.args + IN_PROCESS + [f"output.dir={out}"] + (["runtime.num_gpus=0"] if cpu else [])
    return [sys.executable, "-m", "emulator", "run", job.scenario, "--quiet", *[a for s in sets for a in ("--set", s)]]


def start_mps() -> bool:
    """Start the MPS control daemon (its pipe named in this process's environment, which the runs inherit);
    False, saying why, where the machine has none or refuses."""
    if shutil.which("nvidia-cuda-mps-control") is None:
        print("mps: not installed here; runs take turns on the card", flush=True)
        return False
    for path in MPS_ENV.values():
        Path(path).mkdir(parents=True, exist_ok=True)
    os.environ.update(MPS_ENV)
    done = subprocess.run(["nvidia-cuda-mps-control", "-d"], capture_output=True, text=True)
    if done.returncode != 0:
        print(f"mps: did not start ({done.stderr.strip() or done.stdout.strip()})", flush=True)
        for key in MPS_ENV:
            os.environ.pop(key)
        return False
    print("mps: started", flush=True)
    return True


def stop_mps() -> None:
    subprocess.run(["nvidia-cuda-mps-control"], input="quit\n", text=True, capture_output=True)
    for key in MPS_ENV:
        os.environ.pop(key, None)
    time.sleep(1)


def flatten(run_root: Path) -> None:
    """<root>/<name>-<time>/ (what `emulator run` makes under output.dir) -> <root>/."""
    for inner in [p for p in run_root.glob("*/") if (p / "scenario.yaml").exists() or (p / "metrics.csv").exists()]:
        for item in inner.iterdir():
            item.rename(run_root / item.name)
        inner.rmdir()


def rounds_done(run_root: Path) -> int:
    rows = list(csv.DictReader((run_root / "metrics.csv").open())) if (run_root / "metrics.csv").exists() else []
    return int(float(rows[-1]["round"])) if rows else 0


def launch(job: Job, out: Path, logs: Path, cpu: bool) -> None:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
               EMULATOR_DATA_CACHE=str(out / ".cache"))  # a cache of its own: no two runs write one folder
    job.started = time.time()
    log = (logs / f"{job.name}.log").open("w")
    job.process = subprocess.Popen(command(job, out / "runs" / job.name, cpu), env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)


def run_all(todo: list[Job], out: Path, limit: float, parallel: int, rounds: int, cpu: bool) -> list[Job]:
    """Up to `parallel` runs at a time until `limit` seconds have passed; the runs started, as they ended."""
    deadline = time.time() + limit
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    running: list[Job] = []
    done: list[Job] = []
    waiting = list(todo)
    stopping = False
    while running or (waiting and not stopping):
        for job in list(running):
            if job.process.poll() is not None:
                job.code, job.ended = job.process.returncode, time.time()
                running.remove(job)
                done.append(job)
                print(f"{time.strftime('%H:%M:%S')} {job.name}: exit {job.code} after {job.ended - job.started:.0f} s",
                      flush=True)
        left = deadline - time.time()
        if left <= 0 and not stopping:
            stopping = True
            print(f"limit reached: stopping {len(running)} runs, {len(waiting)} not started", flush=True)
            for job in running:
                job.process.terminate()
        while not stopping and waiting and len(running) < parallel:
            job = waiting.pop(0)
            took = [j.ended - j.started for j in done if j.kind == job.kind and j.code == 0]
            if left < (max(took) * 1.05 if took else LEAST_S[job.kind] * rounds / 1000):
                print(f"{job.name}: left for the next stretch ({left:.0f} s left)", flush=True)
                continue
            launch(job, out, logs, cpu)
            running.append(job)
            time.sleep(1.0)  # a staggered start: fewer processes importing torch at one instant
        if stopping and running and time.time() > deadline + 20:
            for job in running:
                job.process.kill()
        time.sleep(1.0)
    return done


def write_jobs(done: list[Job], out: Path) -> None:
    """jobs.csv: each started run's start, end, exit code and rounds (an emulator run's folder flattened)."""
    with (out / "jobs.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["name", "kind", "started_s", "ended_s", "exit", "rounds"])
        t0 = min((j.started for j in done), default=0)
        for job in done:
            root = out / "runs" / job.name
            if job.kind == "emulator":
                flatten(root)
            writer.writerow([job.name, job.kind, round(job.started - t0, 1), round(job.ended - t0, 1), job.code,
                             rounds_done(root)])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--limit", type=float, default=550, help="seconds for all of it")
    parser.add_argument("--parallel", type=int, default=12)
    parser.add_argument("--done", action="append", default=[],
                        help="skip runs finished under DIR/<session>/<run>/ (results/gpu, results/gpu-reference)")
    parser.add_argument("--only", nargs="*", help="run only the jobs whose names start with one of these")
    parser.add_argument("--rounds", type=int, default=1000, help="rounds per run (a smoke test: 3)")
    parser.add_argument("--cpu", action="store_true", help="train on the CPU (a smoke test of the script)")
    parser.add_argument("--list", action="store_true", help="print the plan and stop")
    args = parser.parse_args(argv)
    skip = set().union(*(finished(d) for d in args.done)) if args.done else set()
    wanted = tuple(args.only or ("",))  # every name starts with ""
    todo = [j for j in plan(args.rounds) if j.name not in skip and j.name.startswith(wanted)]
    print(f"plan: {len(todo)} runs to do, {len(skip)} finished already; {args.parallel} at once", flush=True)
    if args.list:
        for job in todo:
            print(f"  {job.kind:9s} {job.name}")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    mps = start_mps()
    smi = subprocess.Popen(["nvidia-smi", "--query-gpu=timestamp,utilization.gpu,memory.used,power.draw",
                            "--format=csv,noheader", "-l", "5"], stdout=(args.out / "nvidia-smi.csv").open("w"),
                           stderr=subprocess.DEVNULL) if shutil.which("nvidia-smi") else None
    try:
        done = run_all(todo, args.out, args.limit, args.parallel, args.rounds, args.cpu)
    finally:
        if smi:
            smi.terminate()
        if mps:
            stop_mps()
    write_jobs(done, args.out)
    shutil.rmtree(args.out / ".cache", ignore_errors=True)
    print(f"{sum(j.code == 0 for j in done)} of {len(done)} started runs finished, of {len(todo)} to do", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

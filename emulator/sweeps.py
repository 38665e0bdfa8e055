"""`emulator sweep`: a grid of scenario variants x seeds, run concurrently, then one report.

Every grid point and seed is validated before anything runs. On this machine, runs that need nothing of
Ray go to worker processes, one a core, each run in process (sweep_workers.py: no Ray start, no task
round trips, the same metrics). The others (a cluster address, GPU shares, `runtime.backend: ray` set
in the scenario) run on one Ray session: each gets its own server and run directory and all share the
runner pool, so concurrency fills the runners' idle time (one run evaluating while another's devices
train) without multiplying the compute. A report compares them at the end.
"""
from __future__ import annotations

import itertools
import re
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from emulator import sweep_workers
from emulator.parts import load_scenario
from emulator.scenario import Scenario, ScenarioError, parse_override


# Fields the sweep sets on every run itself: a grid over them would be overwritten (the run's name is its
# grid point and seed; its directory is OUT/NAME). `seed` is not here: a grid over seeds is honoured.
SWEEP_SETS = {
    "name": "the sweep names each run after its grid point and seed; give the base name with --set name=...",
    "output.dir": "every run of a sweep writes under the sweep's directory; choose it with --out",
}


@dataclass
class SweepRun:
    name: str
    overrides: list[str]
    scenario: Scenario
    path: Path
    error: str | None = None


@dataclass
class SweepResult:
    out: Path
    runs: list[SweepRun]
    report: Path | None = None
    failed: list[SweepRun] = field(default_factory=list)


def parse_grid(items: list[str]) -> list[tuple[str, list[str]]]:
    """`key=v1,v2` -> (key, ['v1', 'v2']); commas inside [] or {} do not split."""
    grid = []
    for item in items:
        if "=" not in item:
            raise ScenarioError(f"--grid {item!r}: expected KEY=V1,V2,... e.g. --grid algorithm.client_lr=0.01,0.1")
        key, _, values = item.partition("=")
        parts, depth, current = [], 0, ""
        for char in values:
            depth += char in "[{"
            depth -= char in "]}"
            if char == "," and depth == 0:
                parts.append(current)
                current = ""
            else:
                current += char
        parts.append(current)
        parts = [p.strip() for p in parts if p.strip()]
        if not parts:
            raise ScenarioError(f"--grid {item!r}: no values after '='")
        parse_override(f"{key}={parts[0]}")  # the key must be a field path
        grid.append((key.strip(), parts))
    return grid


def _tag(key: str, value: str) -> str:
    return f"{key.split('.')[-1]}_{re.sub(r'[^A-Za-z0-9_.-]+', '_', value).strip('_')}"


def plan_sweep(path: str | Path, overrides: list[str], grid: list[tuple[str, list[str]]], seeds: int,
               out: Path, plugins: list[str] | None = None) -> list[SweepRun]:
    """Every (grid point, seed) as a validated scenario with its own name and run directory."""
    if seeds < 1:
        raise ScenarioError(f"--seeds {seeds}: at least 1")
    for key, _ in grid:
        if key in SWEEP_SETS:
            raise ScenarioError(f"--grid {key}=...: {SWEEP_SETS[key]}")
    base = load_scenario(path, overrides, plugins)
    runs = []
    keys = [key for key, _ in grid]
    for values in itertools.product(*[vals for _, vals in grid]) if grid else [()]:
        point = [f"{k}={v}" for k, v in zip(keys, values)]
        # a grid over `seed` is an experiment over seeds: each point's seeds start at its own value
        first_seed = load_scenario(path, overrides + point, plugins).seed if "seed" in keys else base.seed
        label = "-".join([base.name] + [_tag(k, v) for k, v in zip(keys, values) if k != "seed"])
        for s in range(seeds):
            seed = first_seed + s
            name = f"{label}-seed{seed}"
            scenario = load_scenario(path, overrides + point + [f"seed={seed}", f"name={name}"], plugins)
            runs.append(SweepRun(name, point, scenario, out / name))
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise ScenarioError(f"--grid: two runs would have the same name ({', '.join(twice[:3])}): grid values that "
                            "differ only in punctuation, or seeds that overlap (a seed grid with --seeds > 1: "
                            "space the seeds at least --seeds apart)")
    return runs


def run_sweep(runs: list[SweepRun], out: Path, parallel: int, target: float | None = None,
              address: str | None = None, on_done: Callable[[SweepRun], None] | None = None) -> SweepResult:
    # imported here, for start-up speed: planning and validating a sweep (plan_sweep) needs none of them
    from emulator.analysis import write_report
    from emulator.driver import run_scenario
    from emulator.runtime.cluster import ray_session
    from emulator.runtime.interrupts import stop_on_signals

    if not isinstance(parallel, int) or isinstance(parallel, bool) or parallel < 1:
        raise ScenarioError(f"parallel={parallel!r}: the number of runs in flight at once, at least 1")
    on_ray = [r for r in runs if sweep_workers.needs_ray(r.scenario, address)]
    local = [r for r in runs if r not in on_ray]
    for run in local:
        run.scenario = sweep_workers.in_process(run.scenario)
    workers = min(parallel, sweep_workers.usable_cores(), len(local))
    if local:
        processes = "1 worker process" if workers == 1 else f"{workers} worker processes"
        print(f"note: {len(local)} of the sweep's runs go to {processes} on this machine, each run "
              "in process (runtime.backend inline: no Ray, the same metrics); set runtime.backend: ray to run "
              "them on Ray", file=sys.stderr, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    result = SweepResult(out, runs)

    def record(run: SweepRun, error: str | None) -> None:
        run.error = error
        if on_done:
            on_done(run)

    with ray_session(address) if on_ray else nullcontext(), stop_on_signals(), \
            ThreadPoolExecutor(max_workers=parallel) as on_ray_threads, \
            ThreadPoolExecutor(max_workers=max(workers, 1)) as worker_threads, sweep_workers.workers() as worker:
        futures = {on_ray_threads.submit(_run_on_ray, run_scenario, run): run for run in on_ray}
        futures.update({worker_threads.submit(lambda r: worker().run(r.scenario, r.path), run): run for run in local})
        for future in as_completed(futures):
            record(futures[future], future.result())
    result.failed = [r for r in runs if r.error]
    finished = [r.path for r in runs if not r.error]
    if finished:
        result.report = write_report(finished, out / "report", target=target,
                                     title=f"Sweep {out.name}")
    return result


def _run_on_ray(run_scenario, run: SweepRun) -> str | None:
    try:
        summary = run_scenario(run.scenario, run.path).summary
    except Exception as exc:  # keep going: one broken run must not lose the others
        return f"{type(exc).__name__}: {exc}"
    return sweep_workers.error_of(summary)


def default_sweep_dir(path: str | Path, overrides: list[str], plugins: list[str] | None = None) -> Path:
    base = load_scenario(path, overrides, plugins)
    return Path(base.output.dir) / f"sweep-{base.name}-{time.strftime('%Y%m%d-%H%M%S')}"


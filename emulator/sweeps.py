"""`emulator sweep`: a grid of scenario variants x seeds, run concurrently on one Ray session.

Every grid point and seed is validated before anything runs. Each run gets its own server actor and run
directory; all runs share the runner pool, so concurrency fills the runners' idle time (one run
evaluating while another's devices train) without multiplying the compute. A report compares them at
the end.
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

    if not isinstance(parallel, int) or isinstance(parallel, bool) or parallel < 1:
        raise ScenarioError(f"parallel={parallel!r}: the number of runs in flight at once, at least 1")
    in_process = [r for r in runs if r.scenario.runtime.backend == "inline"]
    if in_process and parallel > 1:  # they share this process's torch state (seeds, threads): one at a time
        print(f"note: runtime.backend inline: the sweep's runs go one at a time in this process (not {parallel} "
              "at a time); use backend ray to run them side by side", file=sys.stderr, flush=True)
        parallel = 1
    out.mkdir(parents=True, exist_ok=True)
    result = SweepResult(out, runs)
    with ray_session(address) if len(in_process) < len(runs) else nullcontext():
        def one(run: SweepRun) -> SweepRun:
            try:
                summary = run_scenario(run.scenario, run.path).summary
                if summary["status"] != "completed":  # diverged, no progress: it ran, and went wrong
                    run.error = f"{summary['status']}: {summary.get('error', '')}"
            except Exception as exc:  # keep going: one broken run must not lose the others
                run.error = f"{type(exc).__name__}: {exc}"
            return run

        with ThreadPoolExecutor(max_workers=parallel) as pool:
            futures = [pool.submit(one, run) for run in runs]
            for future in as_completed(futures):
                run = future.result()
                if on_done:
                    on_done(run)
    result.failed = [r for r in runs if r.error]
    finished = [r.path for r in runs if not r.error]
    if finished:
        result.report = write_report(finished, out / "report", target=target,
                                     title=f"Sweep {out.name}")
    return result


def default_sweep_dir(path: str | Path, overrides: list[str], plugins: list[str] | None = None) -> Path:
    base = load_scenario(path, overrides, plugins)
    return Path(base.output.dir) / f"sweep-{base.name}-{time.strftime('%Y%m%d-%H%M%S')}"


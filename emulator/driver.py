"""One run, end to end: scenario -> federation -> Ray runners + server actor -> a run directory.

The driver is the edge of the system: it builds the data, starts the actors, pulls one metrics row per
round from the server actor and writes it to disk before asking for the next, and checkpoints the
server's state every `output.checkpoint_every` rounds so that `resume_run` can continue a run that was
interrupted, ending with the same metrics as if it never had been.
"""
from __future__ import annotations

import platform
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import ray

from emulator.data import build_federation
from emulator.data.federation import Federation
from emulator.results import RunDirectory
from emulator.runtime.cluster import ray_session, runner_count
from emulator.runtime.pool import RunnerPool
from emulator.runtime.runner import RunContext
from emulator.runtime.server import ServerActor
from emulator.scenario import Scenario, ScenarioError, load_scenario
from emulator.seeding import torch_seed


@dataclass
class RunResult:
    path: Path
    rows: list[dict]
    summary: dict


def run_scenario(scenario: Scenario, out: str | Path | None = None,
                 on_round: Callable[[dict], None] | None = None, federation: Federation | None = None) -> RunResult:
    """Run every round of `scenario`; each finished round is on disk before the next starts.

    `federation` replaces the data the scenario describes (bring your own data); it must hold
    population.devices devices."""
    return _execute(scenario, out, on_round, federation, resume=False)


def resumable_scenario(run_dir: str | Path, overrides: list[str] | None = None) -> Scenario:
    """The scenario of a run to resume. Only `rounds` (to extend it) and `runtime.*` (where it runs,
    which does not change its results) may be overridden."""
    run_dir = Path(run_dir)
    if not (run_dir / "scenario.yaml").is_file():
        raise ScenarioError(f"--resume {run_dir}: not a run directory (no scenario.yaml)")
    for text in overrides or []:
        if not (text.startswith("rounds=") or text.startswith("runtime.")):
            raise ScenarioError(f"--resume with --set {text!r}: only rounds and runtime.* can change when resuming; "
                                "start a new run for other changes")
    return load_scenario(run_dir / "scenario.yaml", overrides or [])


def resume_run(run_dir: str | Path, on_round: Callable[[dict], None] | None = None,
               overrides: list[str] | None = None) -> RunResult:
    """Continue an interrupted run from its last checkpoint, in its own directory."""
    return _execute(resumable_scenario(run_dir, overrides), Path(run_dir), on_round, None, resume=True)


def _execute(scenario: Scenario, out, on_round, federation, resume: bool) -> RunResult:
    started = time.time()
    if federation is None:
        federation = build_federation(scenario.data, scenario.population.devices, scenario.seed)
    elif federation.num_devices != scenario.population.devices:
        raise ScenarioError(f"population.devices: {scenario.population.devices}, but the given federation has "
                            f"{federation.num_devices} devices")
    if resume:
        directory = RunDirectory(Path(out))
        checkpoint = directory.load_checkpoint()
    else:
        RunDirectory.check_free(scenario, out)  # before anything starts: an existing run is never touched
        checkpoint = None
    runtime = scenario.runtime
    with ray_session(runtime.address) as session_outlives_run:
        context = RunContext(f"{scenario.name}-{uuid.uuid4().hex[:12]}", federation, scenario.model.name,
                             torch_seed(scenario.seed, "model-init"))
        context_box = [ray.put(context)]
        count = runner_count(runtime.runners, runtime.num_cpus, runtime.num_gpus, runtime.server_num_cpus)
        start = RunnerPool.shared if session_outlives_run else RunnerPool.start
        pool = start(count, runtime.num_cpus, runtime.num_gpus, runtime.torch_threads)
        server = ServerActor.options(num_cpus=runtime.server_num_cpus).remote(
            scenario.model_dump(mode="json"), context_box, pool.runners, runtime.torch_threads)
        try:
            _remote(server.preflight.remote())
            pool.prepare(context.key, context_box)
            if resume:
                done = _remote(server.load_state.remote(checkpoint)) if checkpoint else 0
                rows = directory.rewind(done)
            else:
                directory = RunDirectory.create(scenario, out)
                done, rows = 0, []
            summary = _loop(scenario, federation, directory, server, pool, rows, done, on_round, started)
        finally:
            ray.kill(server)
            pool.shutdown()
    return RunResult(directory.path, summary.pop("_rows"), summary)


def _loop(scenario, federation, directory, server, pool, rows, done, on_round, started) -> dict:
    summary = {"name": scenario.name, "seed": scenario.seed, "status": "running", "rounds": scenario.rounds,
               "rounds_completed": done, "devices": federation.num_devices,
               "train_samples": int(federation.sizes.sum()), "server_samples": int(len(federation.server_indices)),
               "test_samples": len(federation.test), "started_at": _stamp(started), "host": platform.node(),
               "runners": len(pool.runners), "runner_nodes": len(set(pool.node_ids())),
               "resumed_from_round": done if done else None}
    every = scenario.output.checkpoint_every
    directory.open_metrics(_remote(server.get_columns.remote()))
    clock_offset = float(rows[-1]["wall_time_s"]) if rows else 0.0
    rounds_started = time.time()
    interrupted = False
    try:
        for r in range(done + 1, scenario.rounds + 1):
            row = _remote(server.run_round.remote())
            row["wall_time_s"] = round(clock_offset + time.time() - rounds_started, 4)
            directory.append(row)
            if scenario.system.events:
                directory.append_events(_remote(server.take_events.remote()))
            rows.append(row)
            summary.update(_progress(rows))
            if (every and r % every == 0) or r == scenario.rounds:
                directory.write_checkpoint(_remote(server.get_state.remote()))
            if on_round:
                on_round(row)
        summary["status"] = "completed"
    except BaseException as exc:
        interrupted = isinstance(exc, KeyboardInterrupt)
        summary["status"] = "interrupted" if interrupted else "failed"
        if not interrupted:
            summary["error"] = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        try:  # an interrupted server may still be busy with its round: do not wait long for it
            directory.write_participation(ray.get(server.participation.remote(), timeout=10 if interrupted else None))
        except Exception as exc:
            summary.setdefault("note", f"participation.csv not updated: {type(exc).__name__}")
        summary["finished_at"] = _stamp(time.time())
        summary["wall_time_s"] = round(time.time() - started, 3)
        directory.write_summary(summary)
        directory.close()
    summary["_rows"] = rows
    return summary


def _remote(ref):
    """ray.get, unwrapping bad-input errors raised inside an actor so they reach the user as such."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, ScenarioError):
            raise exc.cause from None
        raise


def _progress(rows: list[dict]) -> dict:
    evaluated = [r for r in rows if r.get("test_acc") not in (None, "")]
    last = rows[-1]
    number = lambda v: float(v) if v not in (None, "") else None
    return {
        "rounds_completed": int(last["round"]),
        "rounds_failed": sum(int(r["failed"]) for r in rows),
        "sim_time_s": float(last["sim_time_s"]),
        "bytes_down": sum(int(r["bytes_down"]) for r in rows),
        "bytes_up": sum(int(r["bytes_up"]) for r in rows),
        "final_test_acc": number(evaluated[-1]["test_acc"]) if evaluated else None,
        "final_test_loss": number(evaluated[-1]["test_loss"]) if evaluated else None,
        "best_test_acc": max(float(r["test_acc"]) for r in evaluated) if evaluated else None,
    }


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t))

"""One run, end to end: scenario -> federation -> Ray runners + server actor -> a run directory.

The driver is the edge of the system: it builds the data, starts the actors, pulls one metrics row per
round from the server actor, and writes it to disk before asking for the next.
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
from emulator.scenario import Scenario, ScenarioError
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
    started = time.time()
    if federation is None:
        federation = build_federation(scenario.data, scenario.population.devices, scenario.seed)
    elif federation.num_devices != scenario.population.devices:
        raise ScenarioError(f"population.devices: {scenario.population.devices}, but the given federation has "
                            f"{federation.num_devices} devices")
    directory = RunDirectory.create(scenario, out)
    rows: list[dict] = []
    summary = {"name": scenario.name, "seed": scenario.seed, "status": "running", "rounds": scenario.rounds,
               "rounds_completed": 0, "devices": federation.num_devices,
               "train_samples": int(federation.sizes.sum()), "server_samples": int(len(federation.server_indices)),
               "test_samples": len(federation.test), "started_at": _stamp(started), "host": platform.node()}
    runtime = scenario.runtime
    with ray_session(runtime.address) as session_outlives_run:
        context = RunContext(f"{scenario.name}-{uuid.uuid4().hex[:12]}", federation, scenario.model.name,
                             torch_seed(scenario.seed, "model-init"))
        context_box = [ray.put(context)]
        count = runner_count(runtime.runners, runtime.num_cpus, runtime.num_gpus, runtime.server_num_cpus)
        start = RunnerPool.shared if session_outlives_run else RunnerPool.start
        pool = start(count, runtime.num_cpus, runtime.num_gpus, runtime.torch_threads)
        pool.prepare(context.key, context_box)
        server = ServerActor.options(num_cpus=runtime.server_num_cpus).remote(
            scenario.model_dump(mode="json"), context_box, pool.runners, runtime.torch_threads)
        summary["runners"] = count
        try:
            directory.open_metrics(ray.get(server.get_columns.remote()))
            rounds_started = time.time()
            for _ in range(scenario.rounds):
                row = ray.get(server.run_round.remote())
                row["wall_time_s"] = round(time.time() - rounds_started, 4)
                directory.append(row)
                if scenario.system.events:
                    directory.append_events(ray.get(server.take_events.remote()))
                rows.append(row)
                summary.update(_progress(rows))
                if on_round:
                    on_round(row)
            summary["status"] = "completed"
        except BaseException as exc:
            summary["status"] = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
            if not isinstance(exc, KeyboardInterrupt):
                summary["error"] = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            try:
                directory.write_participation(ray.get(server.participation.remote()))
            except Exception as exc:  # the server itself failed: keep what the metrics already hold
                summary.setdefault("error", f"participation not saved: {exc}")
            summary["finished_at"] = _stamp(time.time())
            summary["wall_time_s"] = round(time.time() - started, 3)
            directory.write_summary(summary)
            directory.close()
            ray.kill(server)
            pool.shutdown()
    return RunResult(directory.path, rows, summary)


def _progress(rows: list[dict]) -> dict:
    evaluated = [r for r in rows if r.get("test_acc") is not None]
    last = rows[-1]
    return {
        "rounds_completed": len(rows),
        "rounds_failed": sum(int(r["failed"]) for r in rows),
        "sim_time_s": last["sim_time_s"],
        "bytes_down": sum(r["bytes_down"] for r in rows),
        "bytes_up": sum(r["bytes_up"] for r in rows),
        "final_test_acc": evaluated[-1]["test_acc"] if evaluated else None,
        "final_test_loss": evaluated[-1]["test_loss"] if evaluated else None,
        "best_test_acc": max(r["test_acc"] for r in evaluated) if evaluated else None,
    }


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t))

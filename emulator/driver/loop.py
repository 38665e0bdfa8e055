"""The rounds of a run: ask the server for each, hand it to the recorder, judge how the run goes.

A dead server actor is started again from the last checkpoint and the rounds after it are run again
(deterministically, so the metrics come out the same). However the run ends, its summary says so: its
status, and for a run that went wrong the round and what to try."""
from __future__ import annotations

import platform
import re
import time
from pathlib import Path

import ray

from emulator.data.federation import Federation
from emulator.driver.actors import ServerHandle
from emulator.driver.request import RunRequest
from emulator.driver.resume import RESULTS_FIELDS
from emulator.parts.plugins import module_files
from emulator.recording import checkpoint as checkpoints
from emulator.recording import health
from emulator.recording.recorder import Recorder, stamp, thread_record
from emulator.recording.rundir import NO_SPACE, OutputError
from emulator.runtime import gpu_share
from emulator.runtime.interrupts import RunInterrupted
from emulator.runtime.pool import RunnerPool

SERVER_RESTARTS = 3  # a server that dies this often without getting past its furthest round ends the run
STALE = ("error", "note", "finished_at", "resume_error", "resume_failed_at", "stopped_at_round")


def opening_summary(request: RunRequest, federation: Federation, pool: RunnerPool, resumed_from: int | None,
                    on_record: int) -> dict:
    """summary.json as the rounds start: the run's facts, over what a resumed run's summary held."""
    scenario, previous = request.scenario, request.summary
    summary = {**previous, "name": scenario.name, "seed": scenario.seed, "status": "running",
               "rounds": scenario.rounds, "rounds_completed": on_record, "devices": federation.num_devices,
               "train_samples": int(federation.sizes.sum()), "server_samples": int(len(federation.server_indices)),
               "test_samples": len(federation.test), "started_at": previous.get("started_at", stamp(request.started)),
               "host": platform.node(), "backend": scenario.runtime.backend, "runners": len(pool.runners),
               "runner_nodes": len(set(pool.node_ids())), "runner_devices": sorted(set(pool.device_names())),
               "resumed_from_round": resumed_from, RESULTS_FIELDS: checkpoints.results_fields(scenario)}
    if scenario.plugins:  # where the plugins came from, so that a resume finds them again
        summary["plugin_paths"] = sorted({str(Path(f).parent) for f in module_files(scenario.plugins).values()})
    for stale in STALE:
        summary.pop(stale, None)
    summary.update(thread_record(previous, scenario.runtime.torch_threads or 1, on_record + 1))
    return summary


def play_rounds(request: RunRequest, recorder: Recorder, server: ServerHandle, pool: RunnerPool,
                summary: dict, resumed_from: int | None) -> dict:
    """Ask the server for rounds until the scenario's last, handing each to `recorder`; set the summary's
    status (and error) however the run ends. Returns the final summary."""
    scenario, stop, previous = request.scenario, request.stop, request.summary
    before = recorder.rows  # the rounds already on record (a resume's)
    clock_offset = float(before[-1]["wall_time_s"]) if before else 0.0
    rounds_started = time.time()
    restarts, furthest, first_round = 0, len(before), len(before) + 1
    kept_summary = False
    if stop is not None:
        stop.deferred = True  # from here a signal stops the run at the next poll
    try:
        recorder.start(server.call("get_columns"), summary)
        while len(recorder.rows) < scenario.rounds:
            try:
                record = server.call("run_round", stop=stop)
                record.wall_time_s = round(clock_offset + time.time() - rounds_started, 4)
                recorder.record(record)  # on disk, checkpointed when due, in the summary's figures
                if len(recorder.rows) == first_round:
                    request.profile.span("first round (trained, recorded)", rounds_started)
            except ray.exceptions.RayActorError as exc:
                restarts += 1
                if restarts > SERVER_RESTARTS:
                    raise
                _restart(server, recorder, request.notify, exc)
                continue
            if len(recorder.rows) > furthest:  # progress past every earlier death: the restarts start counting again
                furthest, restarts = len(recorder.rows), 0
            verdict = health.judge_round(recorder.rows, scenario.stop.diverged, scenario.stop.no_progress_rounds)
            if verdict is not None:
                break
            if stop is not None and stop.is_set():
                raise RunInterrupted(stop.signum)
        else:
            verdict = health.judge_run(recorder.rows)
        summary.update(gpu_share.memory_summary(pool.memory()))
        summary["status"] = "completed" if verdict is None else verdict.status
        if verdict is not None:  # a run that went wrong says so: its own status, the round, what to try
            summary.update(error=verdict.message, stopped_at_round=verdict.round)
    except BaseException as exc:
        kept_summary = _ended_by(exc, summary, previous, recorder, resumed_from)
        raise
    finally:
        if stop is not None:
            stop.deferred = False
        recorder.finish(request.started, stamp_end=not kept_summary)
    return summary


def _ended_by(exc: BaseException, summary: dict, previous: dict, recorder: Recorder, resumed_from) -> bool:
    """The summary of a run that `exc` ended; True when it keeps what a resumed run's summary held."""
    interrupted = isinstance(exc, KeyboardInterrupt)
    full = isinstance(exc, OSError) and exc.errno in NO_SPACE
    summary["status"] = "interrupted" if interrupted or full else "failed"
    if full:
        summary["error"] = f"disk full: {exc.strerror} ({exc.filename or recorder.path})"
        raise OutputError(f"{recorder.path}: the disk is full ({exc.strerror}); every finished round is kept. Free "
                          f"some space, then continue with: emulator run --resume {recorder.path}") from None
    if interrupted:
        return False
    summary["error"] = re.sub(r"\x1b\[[0-9;]*m", "", f"{type(exc).__name__}: {exc}")  # Ray colours tracebacks
    held = int(previous.get("rounds_completed") or 0)
    if resumed_from is not None and previous and len(recorder.rows) <= held:
        # a resume that failed before getting past the rounds the summary held: it keeps what it held
        # (status, data, timings), with a note of what went wrong
        kept = {**previous, "resume_error": summary["error"], "resume_failed_at": stamp(time.time())}
        summary.clear()
        summary.update(kept)
        return True
    return False


def _restart(server: ServerHandle, recorder: Recorder, notify, exc) -> None:
    """The server actor died: start a new one from the last valid checkpoint and redo the rounds after it."""
    point, notes = recorder.latest_checkpoint()
    for note in notes:
        notify(f"warning: {note}")
    done = point.round if point else 0
    notify(f"warning: the server actor died ({type(exc).__name__}); restarting it from "
           f"{f'the checkpoint after round {done}' if point else 'round 0'}")
    server.start(state=point.state if point else None)
    recorder.rewind(done)

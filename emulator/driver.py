"""One run, end to end: scenario -> federation -> Ray runners + server actor -> a run directory.

The driver is the edge of the system: it builds the data, starts the actors, pulls one metrics row per
round from the server actor and hands it to the run's `Recorder` (recording/recorder.py), which has it on
disk before the next round is asked for and checkpoints the server's state every
`output.checkpoint_every` rounds, so that `resume_run` can continue a run that was interrupted, ending
with the same metrics as if it never had been.

Everything that can refuse a run (a bad output path, a run directory in use, an edited scenario, a
finished run) is checked before Ray starts. While a run goes, a stop request (Ctrl-C, SIGTERM) is
honoured at the next 100 ms poll, a dead server actor is restarted from the last checkpoint, and a full
disk stops the run cleanly so that it can be resumed once space is freed.
"""
from __future__ import annotations

import pickle
import platform
import re
import sys
import threading
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import ray
from threadpoolctl import threadpool_limits

from emulator.data import federation_for
from emulator.data.custom import cli_refusal, memory_record, public, scenario_header, write_record
from emulator.data.federation import Federation
from emulator.errors import PluginError
from emulator.parts import load_scenario
from emulator.parts.plugins import innermost, module_files, users_paths
from emulator.recording import checkpoint as checkpoints
from emulator.recording import health
from emulator.device_state import DEVICE_STATE_DIR
from emulator.recording.recorder import Recorder, stamp, thread_record
from emulator.recording.rundir import NO_SPACE, OutputError, RunDirectory, check_writable
from emulator.runtime import gpu_share, inline
from emulator.runtime import warm
from emulator.runtime.cluster import ray_session
from emulator.runtime.data_nodes import place_on_every_node
from emulator.runtime.interrupts import RunInterrupted, StopRequest
from emulator.runtime.pool import RunnerPool
from emulator.runtime.runner import RunContext, unbox
from emulator.runtime.server import FederatedServer, ServerActor
from emulator.runtime.startup import StartupProfile
from emulator.scenario import Scenario, ScenarioError
from emulator.seeding import torch_seed
from emulator.system.checks import machine_memory, population_fits
from emulator.system.ties import check_world
from emulator.training import precision

POLL_S = 0.1            # how often a waiting driver looks at its stop request
SERVER_RESTARTS = 3     # a server that dies this often without getting past its furthest round ends the run


@dataclass
class RunResult:
    path: Path
    rows: list[dict]
    summary: dict


class AlreadyFinished(Exception):
    """`--resume` of a run that has done all its rounds: nothing to do, nothing touched."""

    def __init__(self, path: Path, summary: dict):
        self.path, self.summary = path, summary
        rounds = summary.get("rounds_completed")
        super().__init__(f"{path}: this run already finished all {rounds} rounds; nothing was changed. To run "
                         f"more rounds, extend it: emulator run --resume {path} --set rounds={int(rounds or 0) * 2}")


def run_scenario(scenario: Scenario, out: str | Path | None = None,
                 on_round: Callable[[dict], None] | None = None, federation: Federation | None = None,
                 stop: StopRequest | None = None, notify: Callable[[str], None] | None = None,
                 data_source: dict | None = None, profile: StartupProfile | None = None) -> RunResult:
    """Run every round of `scenario`; each finished round is on disk before the next starts.

    `federation` replaces the data the scenario describes (bring your own data); it must hold
    population.devices devices. `data_source` (emulator.data.custom.record) says where it came from: the
    run directory records it (data.json, summary.json, a comment heading scenario.yaml). `stop`, when set
    (by a signal handler or another thread), ends the run at the next poll with RunInterrupted, keeping
    every finished round. `profile` collects the start-up phases' timings (emulator run --profile-startup)."""
    check_writable(out, scenario.output.dir)  # before Ray starts: a bad path costs nothing
    RunDirectory.check_free(scenario, out)     # an existing run is never touched
    too_big = population_fits(scenario.population.devices, machine_memory())
    if too_big:
        raise ScenarioError(too_big)
    start = _Start(out=out, data_source=data_source, summary=_data_summary(data_source))
    return _execute(scenario, start, on_round, federation, stop, notify or _to_stderr, profile)


def resumable_scenario(run_dir: str | Path, overrides: list[str] | None = None,
                       data_given: bool = False) -> Scenario:
    """The scenario of a run to resume. Only `rounds` (to extend it) and `runtime.*` (where it runs,
    which does not change its results) may be overridden. A run on in-memory data is refused unless the
    caller brings the data again (`data_given`: emulator.resume(run_dir, data=...))."""
    run_dir = Path(run_dir)
    if not (run_dir / "scenario.yaml").is_file():
        raise ScenarioError(f"--resume {run_dir}: not a run directory (no scenario.yaml)")
    if not data_given:
        entry = memory_record(run_dir)
        if entry is not None:
            raise ScenarioError(cli_refusal(run_dir, entry))
    for text in overrides or []:
        if not text.startswith(("rounds=", "runtime.", "stop.")):
            raise ScenarioError(f"--resume with --set {text!r}: only rounds, runtime.* and stop.* can change when "
                                "resuming; start a new run for other changes")
    found = RunDirectory(run_dir).read_summary().get("plugin_paths") or []  # where its plugins were (see _loop)
    scenario = load_scenario(run_dir / "scenario.yaml", overrides or [], search=[Path(p) for p in found])
    if any(text.startswith("runtime") for text in overrides or []):
        recorded = load_scenario(run_dir / "scenario.yaml", [], search=[Path(p) for p in found]).runtime
        before, now = recorded.numerics(), scenario.runtime.numerics()
        for key in sorted(set(before) | set(now)):
            if before.get(key) != now.get(key):
                was, asked = getattr(recorded, key), getattr(scenario.runtime, key)
                raise ScenarioError(f"--resume with --set runtime.{key}={asked}: this run computes with "
                                    f"runtime.{key}={was}, which changes results, so it cannot change when resuming; "
                                    "start a new run for the other setting")
        if (recorded.torch_threads or 1) != (scenario.runtime.torch_threads or 1):  # allowed, but said
            _to_stderr(f"warning: --resume with runtime.torch_threads {recorded.torch_threads or 1} -> "
                       f"{scenario.runtime.torch_threads or 1}: the rounds from here differ in the last bits from an "
                       "uninterrupted run's (more than one thread splits sums differently; see docs/scenarios.md)")
    return scenario


def resume_run(run_dir: str | Path, on_round: Callable[[dict], None] | None = None,
               overrides: list[str] | None = None, stop: StopRequest | None = None,
               notify: Callable[[str], None] | None = None, federation: Federation | None = None,
               data_source: dict | None = None, profile: StartupProfile | None = None) -> RunResult:
    """Continue an interrupted run from its last valid checkpoint, in its own directory; with
    `--set rounds=N`, extend a finished one. Raises AlreadyFinished when there is nothing to do.
    A run on in-memory data needs its `federation` again (emulator.resume checks its fingerprint)."""
    notify = notify or _to_stderr
    run_dir = Path(run_dir)
    scenario = resumable_scenario(run_dir, overrides, data_given=federation is not None)
    directory = RunDirectory(run_dir)
    check_writable(run_dir, run_dir)
    directory.lock()
    try:
        start = _plan_resume(directory, scenario, notify)
        start.data_source = data_source
        return _execute(scenario, start, on_round, federation, stop, notify, profile)
    finally:
        directory.unlock()


# ----------------------------------------------------------------------------------------- planning
@dataclass
class _Start:
    """Where a run starts: a fresh directory, or a checkpoint (None: round 0) of an existing one."""

    out: str | Path | None = None
    directory: RunDirectory | None = None
    checkpoint: checkpoints.Checkpoint | None = None
    summary: dict = field(default_factory=dict)
    data_source: dict | None = None  # in-memory data: what the run directory records about it


def _data_summary(data_source: dict | None) -> dict:
    if data_source is None:
        return {}
    return {"data": public(data_source)}


def _scenario_header(data_source: dict | None) -> str:
    if data_source is None:
        return ""
    return scenario_header(data_source)


def _plan_resume(directory: RunDirectory, scenario: Scenario, notify) -> _Start:
    """Decide, before Ray starts, from which checkpoint a run continues, or refuse with a reason."""
    summary = directory.read_summary()
    _, rows = directory.whole_metrics()
    found, notes = checkpoints.verified(directory.path)
    current = checkpoints.fingerprint(scenario)
    for point in found:
        changed = [] if point.fingerprint == current else checkpoints.differing_fields(
            point.fields, checkpoints.results_fields(scenario))
        if changed:
            raise ScenarioError(
                f"--resume {directory.path}: scenario.yaml no longer describes the experiment this run started "
                f"({', '.join(changed[:8])} changed); resuming would mix two "
                "experiments. Restore the file, or start a new run with the changes")
    done = max((p.round for p in found), default=0)
    finished = int(summary.get("rounds_completed") or 0)
    if summary.get("status") == "completed" and len(rows) >= finished >= scenario.rounds:
        if scenario.rounds < finished:
            raise ScenarioError(f"rounds: {scenario.rounds}, but this run already finished "
                                f"{summary['rounds_completed']} rounds; give more rounds to extend it")
        raise AlreadyFinished(directory.path, summary)
    if scenario.rounds < done:
        raise ScenarioError(f"rounds: {scenario.rounds}, but this run's checkpoint is after round {done}; give "
                            f"at least {done + 1} rounds, or start a new run")
    # the newest verified checkpoint whose rounds are all whole on disk (a damaged row before it would
    # leave a gap: fall back to an older checkpoint, or to round 0)
    usable = next((p for p in sorted(found, key=lambda p: -p.round) if p.round <= len(rows)), None)
    if usable is None or usable.round < done:
        notes.append(f"metrics.csv holds {len(rows)} whole rounds, fewer than the checkpoint's {done}")
    for note in notes:
        notify(f"warning: {note}")
    if notes:
        where = f"the checkpoint after round {usable.round}" if usable else "round 0 (the run is deterministic)"
        notify(f"resuming from {where}")
    return _Start(directory=directory, checkpoint=usable, summary=summary)


# ----------------------------------------------------------------------------------------- running
class _Server:
    """The server actor, started again from the last checkpoint if it dies.

    Its process is started empty first (`spawn`), so that it imports torch while the driver loads the data;
    `start` gives it the run (and a checkpoint's state)."""

    def __init__(self, scenario: Scenario, run_key: str, pool: RunnerPool, runtime_env: dict | None = None,
                 spare=None):
        """`spare`: an empty server actor already started (a warm instance's), used first."""
        self.scenario, self.run_key, self.pool = scenario, run_key, pool
        self.runtime_env = runtime_env
        self.context_box: list | None = None
        self.state_dir: str | None = None  # the run directory's device_state/ (personalized algorithms)
        self.actor = None
        self.starts = 0
        self.spawn(spare)

    def spawn(self, spare=None) -> None:
        """A new, empty server (its process starting, on Ray); the old one is stopped."""
        if self.actor is not None:
            inline.kill(self.actor)
        self.starts += 1  # named, so that operators (and tests) can find it: ray.util.list_named_actors()
        if spare is not None:
            self.actor = spare
            return
        if self.pool.inline or self.scenario.runtime.server == "driver":
            self.actor = inline.InlineActor(FederatedServer())
            return
        options = dict(num_cpus=self.scenario.runtime.server_num_cpus, name=f"server-{self.run_key}-{self.starts}")
        if self.runtime_env:
            options["runtime_env"] = self.runtime_env
        self.actor = ServerActor.options(**options).remote()

    def start(self, context_box: list | None = None, state: dict | None = None, fresh: bool = True) -> int:
        """Set the server up for the run (a new one unless `fresh` is False), from `state` when given; the
        round it continues after. `context_box`: the run's, the first time (a restart reuses it)."""
        if fresh:
            self.spawn()
        if context_box is not None:
            self.context_box = context_box
        self.call("setup", {"plugins": list(self.scenario.plugins)}, self.context_box, self.pool.runners,
                  self.scenario.runtime.torch_threads, pickle.dumps(self.scenario), self.state_dir)
        return self.call("load_state", state) if state is not None else 0

    def call(self, method: str, *args, stop: StopRequest | None = None):
        """Call a server method, polling so that a stop request is honoured within POLL_S (in process, the
        call has returned already: a stop request is honoured after it)."""
        ref = getattr(self.actor, method).remote(*args)
        while stop is not None:
            ready, _ = inline.wait([ref], timeout=POLL_S)
            if ready:
                break
            if stop.is_set():
                raise RunInterrupted(stop.signum)
        return _remote(ref)

    def kill(self) -> None:
        if self.actor is not None:
            inline.kill(self.actor)

    # what the Recorder pulls, when a round needs it (recorder.Source)
    def events(self) -> list[tuple]:
        return self.call("take_events")

    def state(self) -> dict:
        return self.call("get_state")

    def participation(self, rounds: int) -> dict | None:
        return inline.get(self.actor.participation_after.remote(rounds), timeout=5)


def _execute(scenario: Scenario, start: _Start, on_round, federation, stop, notify,
             profile: StartupProfile | None = None) -> RunResult:
    try:
        return _execute_run(scenario, start, on_round, federation, stop, notify,
                            profile or StartupProfile(origin=time.time()))
    except OSError as exc:
        if exc.errno not in NO_SPACE:
            raise
        where = start.directory.path if start.directory else (start.out or scenario.output.dir)
        raise OutputError(f"{where}: the disk is full ({exc.strerror}: {exc.filename or ''}); nothing is lost. "
                          "Free some space, then run again (or continue with emulator run --resume RUN_DIR)"
                          ) from None


def _execute_run(scenario: Scenario, start: _Start, on_round, federation, stop, notify, profile) -> RunResult:
    started = time.time()
    _check_local_precision(scenario.runtime)  # bf16 on a machine without it: refused before data and Ray
    runtime = scenario.runtime
    in_process = runtime.backend == "inline"
    # The data loads while Ray and the actor processes start (each of those imports torch: seconds).
    data = _Data(scenario, federation, profile, background=not in_process, notify=notify)
    run_key = f"{scenario.name}-{uuid.uuid4().hex[:12]}"
    with ExitStack() as session:
        if in_process:
            session_outlives_run = True
        else:
            with profile.phase("ray.init"):
                session_outlives_run = session.enter_context(ray_session(runtime.address))
        if stop is not None:
            stop.install()  # Ray's init installs a SIGTERM handler of its own: ours comes back
        _check_gpus(runtime)
        with profile.phase("actors started"):
            if in_process:  # runtime.backend: inline: the same runner and server objects, in this process
                shipped, spare = None, None
                pool = RunnerPool.in_process(runtime.runners or 1, runtime.torch_threads, gpu=runtime.num_gpus > 0)
            else:
                shipped = plugin_environment(scenario.plugins)
                pool, spare = warm.run_actors(runtime, shipped, session_outlives_run, notify)
            server = _Server(scenario, run_key, pool, shipped, spare)
        directory = start.directory
        try:
            federation = data.result()
            if federation.stored is not None and not in_process:  # a node without the driver's disk gets a copy
                with profile.phase("data on every node"):
                    place_on_every_node(federation.stored, notify)
            context = RunContext(run_key, federation, scenario.model.name, torch_seed(scenario.seed, "model-init"),
                                 scenario.model.options(), tuple(scenario.plugins), runtime.precision)
            context_box = [context] if in_process else [ray.put(context)]
            with profile.phase("actors ready (server set up, runners loaded the run)"):
                state = start.checkpoint.state if directory is not None and start.checkpoint else None
                if directory is not None:
                    server.state_dir = str(directory.path / DEVICE_STATE_DIR)
                loaded = server.start(context_box, state, fresh=False)
                for note in server.call("preflight"):
                    notify(f"note: {note}")
                _prepare(pool, context.key, context_box, gpu_share.trial_for(scenario, len(pool.runners)))
            if directory is None:
                directory = RunDirectory.create(scenario, start.out, header=_scenario_header(start.data_source))
                if start.data_source is not None:
                    write_record(directory.path, start.data_source)
                server.state_dir = str(directory.path / DEVICE_STATE_DIR)  # for a restart, and from now on
                server.call("attach_directory", server.state_dir)
                recorder, resumed_from = Recorder(directory, scenario, server, on_round), None
            else:
                resumed_from = loaded
                recorder = Recorder(directory, scenario, server, on_round)
                recorder.rewind(resumed_from)
                # an extension (--set rounds) is part of the run's record
                directory.write_scenario(scenario, header=_scenario_header(start.data_source))
            summary = _loop(scenario, federation, recorder, server, pool, resumed_from, started, stop,
                            notify, start.summary, profile)
        except KeyboardInterrupt as exc:  # the CLI tells the user where the finished rounds are, if anywhere
            exc.run_dir = directory.path if directory is not None else None
            raise
        except PluginError as exc:  # its advice made true: this run's directory and rounds, or nothing to resume
            kept = len(directory.whole_metrics()[1]) if directory else 0
            raise exc.resumable(directory and directory.path, kept) from exc.__cause__
        finally:
            server.kill()
            pool.shutdown(run_key)
            if directory is not None and start.directory is None:
                directory.unlock()
    return RunResult(directory.path, summary.pop("_rows"), summary)


class _Data:
    """The run's federation, built in a background thread while Ray starts (or here, when nothing else
    waits); `result` joins it, raising what building it raised. Ties the data cannot satisfy are refused
    with it."""

    def __init__(self, scenario: Scenario, federation: Federation | None, profile: StartupProfile,
                 background: bool, notify: Callable[[str], None]):
        self.scenario, self.federation, self.profile, self.notify = scenario, federation, profile, notify
        self.error: BaseException | None = None
        self.thread = None
        if federation is not None:  # data handed over from Python: written to the data cache when on disk
            self.federation = federation_for(scenario.data, scenario.population.devices, scenario.seed,
                                             scenario.population.types, notify, given=federation)
            self._check(self.federation)
        elif background:
            self.thread = threading.Thread(target=self._build_quietly, name="emulator-data", daemon=True)
            self.thread.start()
        else:
            self.federation = self._build()

    def _build(self) -> Federation:
        scenario = self.scenario
        with self.profile.phase("data (load, partition)"):
            federation = federation_for(scenario.data, scenario.population.devices, scenario.seed,
                                        scenario.population.types, self.notify)
        self._check(federation)
        return federation

    def _check(self, federation: Federation) -> None:
        population = self.scenario.population
        if federation.num_devices != population.devices:
            raise ScenarioError(f"population.devices: {population.devices}, but the given federation has "
                                f"{federation.num_devices} devices")
        check_world(self.scenario, federation)  # ties the data cannot satisfy

    def _build_quietly(self) -> None:
        # BLAS on one thread here: Ray's start forks processes meanwhile, and OpenBLAS's fork handler stops its
        # worker threads, so a threaded product in flight (the synthetic labels) would wait for them forever
        try:
            with threadpool_limits(1, user_api="blas"):
                self.federation = self._build()
        except BaseException as exc:  # handed to the main thread by result()
            self.error = exc

    def result(self) -> Federation:
        if self.thread is not None:
            while self.thread.is_alive():
                self.thread.join(POLL_S)  # a short join, so Ctrl-C reaches the main thread meanwhile
            self.thread = None
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return self.federation


def _loop(scenario, federation, recorder: Recorder, server, pool, resumed_from, started, stop, notify,
          previous, profile: StartupProfile) -> dict:
    """Ask the server for rounds until the scenario's last, handing each to `recorder`; restart a dead
    server from the last checkpoint; set the summary's status (and error) however the run ends."""
    before = recorder.rows  # the rounds already on record (a resume's)
    summary = {**previous, "name": scenario.name, "seed": scenario.seed, "status": "running",
               "rounds": scenario.rounds, "rounds_completed": len(before), "devices": federation.num_devices,
               "train_samples": int(federation.sizes.sum()), "server_samples": int(len(federation.server_indices)),
               "test_samples": len(federation.test), "started_at": previous.get("started_at", stamp(started)),
               "host": platform.node(), "backend": scenario.runtime.backend, "runners": len(pool.runners),
               "runner_nodes": len(set(pool.node_ids())), "runner_devices": sorted(set(pool.device_names())),
               "resumed_from_round": resumed_from}
    if scenario.plugins:  # where the plugins came from, so that a resume finds them again
        summary["plugin_paths"] = sorted({str(Path(f).parent) for f in module_files(scenario.plugins).values()})
    for stale in ("error", "note", "finished_at", "resume_error", "resume_failed_at", "stopped_at_round"):
        summary.pop(stale, None)
    summary.update(thread_record(previous, scenario.runtime.torch_threads or 1, len(before) + 1))
    columns = server.call("get_columns")
    clock_offset = float(before[-1]["wall_time_s"]) if before else 0.0
    rounds_started = time.time()
    restarts, furthest = 0, len(before)
    first_round = len(before) + 1
    if stop is not None:
        stop.deferred = True  # from here a signal stops the run at the next poll
    try:
        recorder.start(columns, summary)
        while len(recorder.rows) < scenario.rounds:
            try:
                row = server.call("run_round", stop=stop)
                row["wall_time_s"] = round(clock_offset + time.time() - rounds_started, 4)
                recorder.record(row)  # on disk, checkpointed when due, in the summary's figures
                if len(recorder.rows) == first_round:
                    profile.span("first round (trained, recorded)", rounds_started)
            except ray.exceptions.RayActorError as exc:
                restarts += 1
                if restarts > SERVER_RESTARTS:
                    raise
                _restart(server, recorder, notify, exc)
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
        interrupted = isinstance(exc, KeyboardInterrupt)
        full = isinstance(exc, OSError) and exc.errno in NO_SPACE
        summary["status"] = "interrupted" if interrupted or full else "failed"
        if full:
            summary["error"] = f"disk full: {exc.strerror} ({exc.filename or recorder.path})"
            raise OutputError(f"{recorder.path}: the disk is full ({exc.strerror}); every finished round is "
                              f"kept. Free some space, then continue with: emulator run --resume "
                              f"{recorder.path}") from None
        if not interrupted:  # as plain text: Ray colours its tracebacks for a terminal
            summary["error"] = re.sub(r"\x1b\[[0-9;]*m", "", f"{type(exc).__name__}: {exc}")
            held = int(previous.get("rounds_completed") or 0)
            if resumed_from is not None and previous and len(recorder.rows) <= held:
                # a resume that failed before getting past the rounds the summary held: it keeps what it
                # held (status, data, timings), with a note of what went wrong
                kept = {**previous, "resume_error": summary["error"], "resume_failed_at": stamp(time.time())}
                summary.clear()
                summary.update(kept, _keep=True)
        raise
    finally:
        if stop is not None:
            stop.deferred = False
        recorder.finish(started)
    summary["_rows"] = recorder.rows
    return summary


def _restart(server: _Server, recorder: Recorder, notify, exc) -> None:
    """The server actor died: start a new one from the last valid checkpoint and redo the rounds after
    it (deterministically, so the metrics come out the same)."""
    point, notes = recorder.latest_checkpoint()
    for note in notes:
        notify(f"warning: {note}")
    done = point.round if point else 0
    notify(f"warning: the server actor died ({type(exc).__name__}); restarting it from "
           f"{f'the checkpoint after round {done}' if point else 'round 0'}")
    server.start(state=point.state if point else None)
    recorder.rewind(done)


def _remote(ref):
    """ray.get, unwrapping bad-input errors raised inside an actor (or a runner under it) so they reach the
    user as such: one line, exit 2, no Ray traceback."""
    try:
        return inline.get(ref)
    except ray.exceptions.RayTaskError as exc:
        inner = innermost(exc)
        if isinstance(inner, ScenarioError):
            raise type(inner)(users_paths(str(inner))) from None
        raise


def _prepare(pool: RunnerPool, run_key: str, context_box: list, gpu_trial=None) -> None:
    """pool.prepare, with a runner's bad-input error (a plugin, runtime.precision on its hardware, a GPU
    share too small for the run) reaching the user as such, as _remote does."""
    try:
        pool.prepare(run_key, context_box, gpu_trial)
    except ray.exceptions.RayTaskError as exc:
        inner = innermost(exc)
        if isinstance(inner, ScenarioError):
            raise type(inner)(users_paths(str(inner))) from None
        raise


def _check_local_precision(runtime) -> None:
    """A local run trains and evaluates on this machine: refuse a precision its hardware lacks before Ray
    starts. (On a cluster every runner and the server check their own machine when they first see the run.)"""
    if runtime.precision == "fp32" or runtime.address not in (None, "local"):
        return
    import torch


    precision.require(runtime.precision, "cpu", "this machine")  # the server's CPU, and CPU runners'
    if runtime.num_gpus > 0 and torch.cuda.is_available():
        precision.require(runtime.precision, "cuda", "this machine's GPU")


def _check_gpus(runtime) -> None:
    """A GPU share per runner on a Ray cluster without GPUs would wait forever for resources: refuse it."""
    if runtime.num_gpus <= 0:
        return
    if runtime.backend == "inline":
        import torch

        if not torch.cuda.is_available():
            raise ScenarioError(f"runtime.num_gpus: {runtime.num_gpus:g}, but this process has no GPU (torch sees no "
                                "CUDA device), so the in-process runners could not train on one. Set "
                                "runtime.num_gpus: 0 to train on CPUs, or run where a GPU is visible (nvidia-smi, "
                                "CUDA_VISIBLE_DEVICES)")
        return
    gpus = ray.cluster_resources().get("GPU", 0)
    where = f"the Ray cluster at {runtime.address}" if runtime.address not in (None, "local") else "this machine"
    if gpus < runtime.num_gpus:  # one runner needs its whole share
        raise ScenarioError(
            f"runtime.num_gpus: {runtime.num_gpus:g}, but {where} has {'no GPU' if not gpus else f'{gpus:g} GPU(s)'} "
            "that Ray can see, so no runner could start. Set runtime.num_gpus: 0 to train on CPUs, or run where a "
            "GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES; on a cluster, `ray status` lists the GPUs)")


def plugin_environment(plugins: list[str]) -> dict | None:
    """The runtime_env that ships plugin modules living in the user's directory to every Ray worker (an
    installed plugin package is already on the workers' path). Actors accept only uploaded packages, so
    the modules are uploaded to the cluster here, as ray.init does for a job's own py_modules."""
    files = module_files(plugins)
    if not files:
        return None
    import inspect
    import tempfile

    from ray._private.runtime_env.py_modules import upload_py_modules_if_needed

    options = {}
    if "include_gitignore" in inspect.signature(upload_py_modules_if_needed).parameters:
        options["include_gitignore"] = True
    with tempfile.TemporaryDirectory() as scratch:
        return upload_py_modules_if_needed({"py_modules": sorted(files.values())}, scratch_dir=scratch, **options)


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)

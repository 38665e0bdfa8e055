"""One run's session: Ray and the actors start while the data loads, the run directory opens, the
rounds play, and everything started is stopped again, however the run ends."""
from __future__ import annotations

import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import ray

from emulator.data.custom import scenario_header, write_record
from emulator.device_state import DEVICE_STATE_DIR
from emulator.driver.actors import ServerHandle, start_actors
from emulator.driver.checks import check_gpus, plugin_environment
from emulator.driver.data import DataBuilder
from emulator.driver.loop import opening_summary, play_rounds
from emulator.driver.request import RunRequest
from emulator.errors import PluginError
from emulator.recording.recorder import Recorder
from emulator.recording.rundir import NO_SPACE, OutputError, RunDirectory
from emulator.runtime import gpu_share
from emulator.runtime.cluster import ray_session
from emulator.runtime.data_nodes import place_on_every_node
from emulator.runtime.runner import RunContext, RunHandle
from emulator.seeding import torch_seed


@dataclass
class RunResult:
    path: Path
    rows: list[dict]
    summary: dict


def execute(request: RunRequest) -> RunResult:
    """Run `request` to its end; a full disk becomes an OutputError saying that nothing is lost."""
    try:
        return _session(request)
    except OSError as exc:
        if exc.errno not in NO_SPACE:
            raise
        where = request.directory.path if request.directory else (request.out or request.scenario.output.dir)
        raise OutputError(f"{where}: the disk is full ({exc.strerror}: {exc.filename or ''}); nothing is lost. "
                          "Free some space, then run again (or continue with emulator run --resume RUN_DIR)"
                          ) from None


def _session(request: RunRequest) -> RunResult:
    scenario, profile, runtime = request.scenario, request.profile, request.scenario.runtime
    # The data loads while Ray and the actor processes start (each of those imports torch: seconds).
    data = DataBuilder(scenario, request.federation, profile, background=not request.in_process,
                       notify=request.notify)
    run_key = f"{scenario.name}-{uuid.uuid4().hex[:12]}"
    resuming = request.resuming
    with ExitStack() as session:
        session_outlives_run = True
        if not request.in_process:
            with profile.phase("ray.init"):
                session_outlives_run = session.enter_context(ray_session(runtime.address))
        if request.stop is not None:
            request.stop.install()  # Ray's init installs a SIGTERM handler of its own: ours comes back
        check_gpus(runtime)
        with profile.phase("actors started"):
            shipped = None if request.in_process else plugin_environment(scenario.plugins)
            pool, server = start_actors(scenario, run_key, shipped, session_outlives_run, request.notify)
        server_idle = False  # it played the run to its end, or answered with a plugin's error: a later run may take it
        try:
            federation = data.result()
            with profile.phase("actors ready (server set up, runners loaded the run)"):
                resumed_from = _set_up(request, federation, run_key, server)
            recorder = Recorder(request.directory, scenario, server, request.on_round)
            if resuming:
                recorder.rewind(resumed_from)
                # an extension (--set rounds) is part of the run's record
                request.directory.write_scenario(scenario, header=_header(request.data_source))
            summary = opening_summary(request, federation, pool, resumed_from, len(recorder.rows))
            summary = play_rounds(request, recorder, server, pool, summary, resumed_from)
            server_idle = True
        except KeyboardInterrupt as exc:  # the CLI tells the user where the finished rounds are, if anywhere
            exc.run_dir = request.directory.path if request.directory is not None else None
            raise
        except PluginError as exc:  # its advice made true: this run's directory and rounds, or nothing to resume
            server_idle = server.answers()
            kept = len(request.directory.whole_metrics()[1]) if request.directory else 0
            raise exc.resumable(request.directory and request.directory.path, kept) from exc.__cause__
        finally:
            server.finish(server_idle)
            pool.shutdown(run_key)
            if request.directory is not None and not resuming:
                request.directory.unlock()
    return RunResult(request.directory.path, recorder.rows, summary)


def _set_up(request: RunRequest, federation, run_key: str, server: ServerHandle) -> int | None:
    """Hand the run to the server (from the checkpoint, when resuming) and to the runners; open a new run's
    directory. Returns the round a resumed run continues after (None: a new run)."""
    scenario = request.scenario
    if federation.stored is not None and not request.in_process:  # a node without the driver's disk gets a copy
        with request.profile.phase("data on every node"):
            place_on_every_node(federation.stored, request.notify)
    reports = scenario.rounds * scenario.algorithm.clients_per_round  # every algorithm config has it
    context = RunContext(run_key, federation, scenario.model.name, torch_seed(scenario.seed, "model-init"),
                         scenario.model.options(), tuple(scenario.plugins), scenario.runtime.precision,
                         updates_per_runner=reports / max(1, len(server.pool.runners)))
    run = context if request.in_process else RunHandle(run_key, ray.put(context))
    resuming = request.resuming
    if resuming:
        server.state_dir = str(request.directory.path / DEVICE_STATE_DIR)
    loaded = server.start(run, request.checkpoint.state if resuming and request.checkpoint else None, fresh=False)
    for note in server.call("preflight"):
        request.notify(f"note: {note}")
    server.prepare_runners(gpu_share.trial_for(scenario, len(server.pool.runners)))
    if resuming:
        return loaded
    request.directory = RunDirectory.create(scenario, request.out, header=_header(request.data_source))
    if request.data_source is not None:
        write_record(request.directory.path, request.data_source)
    server.state_dir = str(request.directory.path / DEVICE_STATE_DIR)  # for a restart, and from now on
    server.call("attach_directory", server.state_dir)
    return None


def _header(data_source: dict | None) -> str:
    return "" if data_source is None else scenario_header(data_source)

"""The driver's two doors: a new run of a scenario, and the continuation of an interrupted one."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from emulator.data.custom import public
from emulator.data.federation import Federation
from emulator.driver.checks import before_start
from emulator.driver.request import RunRequest, to_stderr
from emulator.driver.resume import plan_resume, resumable_scenario
from emulator.driver.session import RunResult, execute
from emulator.recording.rundir import RunDirectory, check_writable
from emulator.runtime.interrupts import StopRequest
from emulator.runtime.startup import StartupProfile
from emulator.scenario import Scenario


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
    request = RunRequest(scenario, out=out, summary={} if data_source is None else {"data": public(data_source)},
                         federation=federation, data_source=data_source, on_round=on_round, stop=stop,
                         notify=notify or to_stderr, **({"profile": profile} if profile else {}))
    before_start(request)
    return execute(request)


def resume_run(run_dir: str | Path, on_round: Callable[[dict], None] | None = None,
               overrides: list[str] | None = None, stop: StopRequest | None = None,
               notify: Callable[[str], None] | None = None, federation: Federation | None = None,
               data_source: dict | None = None, profile: StartupProfile | None = None) -> RunResult:
    """Continue an interrupted run from its last valid checkpoint, in its own directory; with
    `--set rounds=N`, extend a finished one. Raises AlreadyFinished when there is nothing to do, and
    ScenarioError, touching nothing, when going on would discard a recorded round (driver/resume.py).
    A run on in-memory data needs its `federation` again (emulator.resume checks its fingerprint)."""
    notify = notify or to_stderr
    run_dir = Path(run_dir)
    scenario = resumable_scenario(run_dir, overrides, data_given=federation is not None, notify=notify)
    directory = RunDirectory(run_dir)
    check_writable(run_dir, run_dir)
    directory.lock()
    try:
        checkpoint, summary = plan_resume(directory, scenario, notify)
        request = RunRequest(scenario, directory=directory, checkpoint=checkpoint, summary=summary,
                             federation=federation, data_source=data_source, on_round=on_round, stop=stop,
                             notify=notify, **({"profile": profile} if profile else {}))
        before_start(request)
        return execute(request)
    finally:
        directory.unlock()

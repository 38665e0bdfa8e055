"""One run as the driver carries it, from the entry point to its last round: the scenario, where the run
directory is (new, or the one a resume continues from a checkpoint), and the caller's hooks."""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from emulator.data.federation import Federation
from emulator.recording import checkpoint as checkpoints
from emulator.recording.rundir import RunDirectory
from emulator.runtime.interrupts import StopRequest
from emulator.runtime.startup import StartupProfile
from emulator.scenario import Scenario


POLL_S = 0.1  # how often a waiting driver looks at its stop request (and lets Ctrl-C through)


def to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class RunRequest:
    """`out`: where a new run's directory goes (None: output.dir). `directory` and `checkpoint`: a resumed
    run's directory and the checkpoint it continues from (None: round 0). `summary`: what summary.json held
    before (a resume's). `federation`: data handed over from Python, with `data_source` saying where it came
    from. `on_round(row)`: the caller's listener, after each round is on disk. `stop`: set (by a signal
    handler or another thread) to end the run at the next poll, keeping every finished round. `profile`:
    the start-up phases' timings (emulator run --profile-startup)."""

    scenario: Scenario
    out: str | Path | None = None
    directory: RunDirectory | None = None
    checkpoint: checkpoints.Checkpoint | None = None
    summary: dict = field(default_factory=dict)
    federation: Federation | None = None
    data_source: dict | None = None
    on_round: Callable[[dict], None] | None = None
    stop: StopRequest | None = None
    notify: Callable[[str], None] = to_stderr
    profile: StartupProfile = field(default_factory=lambda: StartupProfile(origin=time.time()))
    started: float = field(default_factory=time.time)

    @property
    def resuming(self) -> bool:
        return self.directory is not None

    @property
    def in_process(self) -> bool:
        return self.scenario.runtime.backend == "inline"

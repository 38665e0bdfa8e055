"""One run, end to end: scenario -> federation -> Ray runners + server actor -> a run directory.

The driver is the edge of the system: it builds the data, starts the actors, pulls one round at a time
from the server and hands it to the run's `Recorder` (recording/recorder.py), which has it on disk before
the next round is asked for and checkpoints the server's state every `output.checkpoint_every` rounds, so
that `resume_run` can continue a run that was interrupted, ending with the same metrics as if it never
had been.

    run.py       the two doors: run_scenario, resume_run
    request.py   RunRequest: one run as the driver carries it
    checks.py    what is refused before data and Ray start
    resume.py    what a resume may change, and from which checkpoint it goes on
    session.py   Ray, the actors and the data; the run directory; stopping everything again
    data.py      the federation, built while Ray starts
    actors.py    the runner pool and the server (restarted from a checkpoint if it dies)
    loop.py      the rounds, the restarts, the run's status

While a run goes, a stop request (Ctrl-C, SIGTERM) is honoured at the next 100 ms poll, a dead server
actor is restarted from the last checkpoint, and a full disk stops the run cleanly so that it can be
resumed once space is freed.
"""
from __future__ import annotations

from emulator.driver.checks import plugin_environment
from emulator.driver.resume import AlreadyFinished, resumable_scenario
from emulator.driver.run import resume_run, run_scenario
from emulator.driver.session import RunResult

__all__ = ["run_scenario", "resume_run", "resumable_scenario", "AlreadyFinished", "RunResult",
           "plugin_environment"]

"""A sweep's runs in worker processes of this machine, each run in process (runtime.backend inline).

On one machine a sweep of small models spends more on Ray than on its runs: starting the instance (about
12 s on 2 cores), a process per actor importing torch, a task's round trip per group of devices. A run in
process gives the metrics of a Ray run bit for bit (runtime/inline.py, tested), so the runs that need
nothing of Ray go to worker processes, at most one a core, each taking the next run when its last one
ends. A run needs Ray when it names a cluster, asks for GPU shares without `runtime.backend: inline`,
or its scenario sets `runtime.backend: ray` itself (left unset, the backend is the sweep's to choose).

A worker is `python -m emulator.sweep_workers`: it imports the emulator once and reads runs (pickled)
from its stdin, one at a time. Not multiprocessing: its spawn and forkserver methods import the caller's
main script again in every worker, which re-runs a user's script that calls `emulator.sweep` unguarded.
"""
from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

from emulator.scenario import Scenario


def usable_cores() -> int:
    """The cores this process may run on (its affinity, as a container or `taskset` limits it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def needs_ray(scenario: Scenario, address: str | None) -> bool:
    runtime = scenario.runtime
    if address or runtime.address not in (None, "local"):
        return True
    if "backend" in runtime.model_fields_set:  # the scenario's own choice, honoured
        return runtime.backend == "ray"
    return runtime.num_gpus > 0  # GPU shares are Ray's unless the scenario asks for inline runs


def in_process(scenario: Scenario) -> Scenario:
    """The scenario with runtime.backend inline (what its run directory then records)."""
    return scenario.model_copy(update={"runtime": scenario.runtime.model_copy(update={"backend": "inline"})})


def run_here(scenario: Scenario, path: Path) -> str | None:
    """One run in this process; its error (None when it completed). SIGTERM stops it as it stops
    `emulator run`: after the round in flight, every finished round kept."""
    from emulator.driver import run_scenario
    from emulator.parts import load_parts
    from emulator.runtime.interrupts import stop_on_signals

    try:
        load_parts(scenario.plugins)
        with stop_on_signals() as stop:
            # a terminal's Ctrl-C reaches every process of its group: the sweep's own process asks each
            # worker to stop (SIGTERM), once, so the run stops after its round in flight
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            summary = run_scenario(scenario, path, stop=stop).summary
    except BaseException as exc:  # noqa: BLE001  (the worker reports it and takes the next run)
        return f"{type(exc).__name__}: {exc}"
    return error_of(summary)


def error_of(summary: dict) -> str | None:
    """A finished run's error as a sweep reports it: None when it completed; a run that diverged or made
    no progress ran, and went wrong."""
    if summary["status"] != "completed":
        return f"{summary['status']}: {summary.get('error', '')}"
    return None


class Worker:
    """One worker process; `run` sends it a run and waits for its outcome."""

    def __init__(self):
        self.process = subprocess.Popen([sys.executable, "-m", "emulator.sweep_workers"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE)
        pickle.dump(sys.path, self.process.stdin)  # where the caller found its plugins

    def run(self, scenario: Scenario, path: Path) -> str | None:
        from ray import cloudpickle  # parts defined in a notebook or a script travel by value, as to Ray's actors

        try:
            message = cloudpickle.dumps((scenario, str(path)))
        except Exception as exc:  # noqa: BLE001  (that run fails alone, saying why)
            return (f"{type(exc).__name__}: {exc}: the run's scenario cannot be sent to a worker process; set "
                    "runtime.backend: ray to run it on Ray")
        try:
            self.process.stdin.write(message)
            self.process.stdin.flush()
            return pickle.load(self.process.stdout)
        except (EOFError, BrokenPipeError, pickle.UnpicklingError):
            code = self.process.wait()
            return f"the worker process ended with exit code {code} during the run (killed, out of memory?)"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def close(self) -> None:
        if self.process.stdin and not self.process.stdin.closed:
            try:
                self.process.stdin.close()  # an idle worker reads the end of its input and leaves
            except BrokenPipeError:
                pass
        self.process.wait()


@contextmanager
def workers():
    """A worker for each thread that asks (`get()`); on Ctrl-C or SIGTERM in this process every worker is
    asked to stop its run (finished rounds kept) before the signal goes on; all end with the block."""
    started: list[Worker] = []
    local = threading.local()
    lock = threading.Lock()

    def get() -> Worker:
        worker = getattr(local, "worker", None)
        if worker is None or worker.process.poll() is not None:  # none yet, or it died: a fresh one
            local.worker = Worker()
            with lock:
                started.append(local.worker)
        return local.worker

    try:
        yield get
    except BaseException:
        with lock:
            for worker in started:
                worker.stop()
        raise
    finally:
        with lock:
            for worker in started:
                worker.close()


def _serve() -> None:
    """The worker's loop: runs from stdin, outcomes to stdout (fd 1 itself goes to stderr, so that what a
    run prints cannot mix with them)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _stop_with_parent()
    inputs, outcomes = sys.stdin.buffer, os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.path[:] = pickle.load(inputs)
    while True:
        try:
            scenario, path = pickle.load(inputs)
        except EOFError:
            return
        pickle.dump(run_here(scenario, Path(path)), outcomes)
        outcomes.flush()


def _stop_with_parent() -> None:
    """On Linux, SIGTERM this worker when the sweep's process dies (killed, not stopped): its run stops
    after the round in flight instead of running on unwatched."""
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass


if __name__ == "__main__":
    _serve()

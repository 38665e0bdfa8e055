"""The one object a run's driver hands its results to.

The driver asks the server actor for a round and gives the row to `Recorder.record`; the recorder fans it
out to every output of the run directory, in an order that keeps the directory consistent if the process
stops at any point:

    class_accuracy.csv   before the metrics row: a round on record has its classes
    metrics.csv          flushed and fsynced: the round is on disk before the next one starts
    then the sinks (recording/sinks.py), each one concern:
    tensorboard/         flushed, for a live view (output.tensorboard)
    events.csv           the round's device events (system.events), fsynced
    checkpoint.pkl       every output.checkpoint_every rounds and after the last
    summary.json         the run's figures so far, written at the start and at the end (`finish`)
    participation.csv    the per-device ledger as of the last recorded round, at the end
    on_round(row)        last, the caller's listener: the progress bar, a notebook's live plot

What the files hold and where they are is `RunDirectory`'s (rundir.py); this module only decides when
each is written. What the recorder needs from the server beyond the row (events, the state to
checkpoint, the ledger) it asks a `Source` for, only when it needs it, so the driver never learns which
round needs what. When the server actor dies, `rewind` takes every output back to a checkpoint, so the
rounds after it, run again, are recorded once.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Protocol

from emulator.recording import checkpoint as checkpoints
from emulator.recording.round_files import drop_aside, keep_aside, put_back
from emulator.recording.rundir import NO_SPACE, OutputError, RunDirectory
from emulator.recording.sinks import sinks_for

if TYPE_CHECKING:
    from emulator.scenario import Scenario

class RecordedRound(Protocol):
    """A finished round as the server hands it over (emulator/server/record.py's RoundRecord)."""

    round: int
    sim_time_s: float
    class_accuracy: list | None  # an evaluation round's per-class test accuracies, for class_accuracy.csv
    device_eval: dict | None  # an evaluation's per-device table, for device_eval.csv

    def row(self) -> dict:
        """metrics.csv's row."""


class Source(Protocol):
    """What the recorder pulls from the server, when a round needs it."""

    def events(self) -> list[tuple]:
        """The device events since the last call: (round, time_s, device, event) tuples."""

    def state(self) -> dict:
        """The server's whole state after its last round, to checkpoint."""

    def participation(self, rounds: int) -> dict | None:
        """The participation ledger as of round `rounds` (column -> values), or None."""


class Recorder:
    """A run's record on disk: every round's row in every output, rewound on a server restart.

    `rows` are the rounds on record, oldest first (after `rewind`, strings as read back from metrics.csv).
    `summary` is the dict handed to `start`, kept up to date with the run's figures after every round."""

    def __init__(self, directory: RunDirectory, scenario: Scenario, source: Source,
                 on_round: Callable[[dict], None] | None = None):
        self.directory, self.scenario, self.source = directory, scenario, source
        self.sinks, self.listeners = sinks_for(directory, scenario, source, on_round)
        self.rows: list[dict] = []
        self.summary: dict = {}
        self._columns: tuple[str, ...] | None = None
        self._dropped_until: int | None = None  # rounds a rewind dropped, kept aside until on record again

    @property
    def path(self) -> Path:
        return self.directory.path

    # ------------------------------------------------------------------------------------ lifecycle
    def start(self, columns: tuple[str, ...], summary: dict) -> None:
        """Write the run's opening `summary` (with the figures of the rounds already on record, a resume's),
        then open metrics.csv (with `columns`) and the sinks."""
        self.summary = summary
        if self.rows:
            summary.update(progress(self.rows))
        self._write_summary()
        self._open(columns)

    def record(self, record: RecordedRound) -> None:
        """One finished round: on disk in every output before this returns."""
        r, row = int(record.round), record.row()
        if record.class_accuracy is not None:  # before the metrics row: a round on record has its classes
            self.directory.append_class_accuracy(r, record.sim_time_s, record.class_accuracy)
        if record.device_eval is not None:  # and its devices' scores
            self.directory.append_device_eval(r, record.sim_time_s, record.device_eval)
        self.directory.append(row)  # flushed and fsynced: the round is on record
        self.rows.append(row)
        if self._dropped_until is not None and r >= self._dropped_until:  # every dropped round is back
            drop_aside(self.path)
            self._dropped_until = None
        for sink in self.sinks:  # TensorBoard, events, the checkpoint when due
            sink.record(record, row)
        self.summary.update(progress(self.rows))
        for listener in self.listeners:  # once the round is on disk: what a progress bar shows is kept
            listener.record(record, row)

    def latest_checkpoint(self) -> tuple[checkpoints.Checkpoint | None, list[str]]:
        """The newest checkpoint that verifies, and a note for each one that did not."""
        return checkpoints.latest(self.path)

    def rewind(self, round_done: int) -> list[dict]:
        """Keep the rounds up to `round_done` (a checkpoint's) in every output and drop the later ones, which
        are run again. Returns the rows kept. Before `start` (a resume), only the files are rewound."""
        opened = self._columns is not None
        self._close_sinks()
        _, on_disk = self.directory.whole_metrics()
        furthest = max((int(row["round"]) for row in on_disk), default=0)
        if furthest > round_done and self._dropped_until is None:  # put back if the run stops before them
            keep_aside(self.path)
            self._dropped_until = furthest
        self.rows = self.directory.rewind(round_done)
        if opened:
            self._open(self._columns)
        return self.rows

    def finish(self, started: float, stamp_end: bool = True) -> None:
        """Write participation.csv (as of the last recorded round) and the final summary, whatever happened;
        close every output. `started`: when the run started (time.time()), for its wall time; `stamp_end`
        False keeps the summary's own times (a resume that failed before any new round). Rounds a rewind
        dropped and the run did not get back to are put back as they were."""
        self._close_sinks()
        if self._dropped_until is not None:
            self.directory.close()
            put_back(self.path)
            self._dropped_until = None
            _, self.rows = self.directory.whole_metrics()
        summary = self.summary
        try:
            if self.rows or summary.get("status") == "completed":
                participation = self.source.participation(len(self.rows))
                if participation is not None:
                    self.directory.write_participation(participation)
        except Exception as exc:  # noqa: BLE001 - a lost ledger (a dead server) must not cost the summary
            summary["note"] = f"participation.csv not updated: {type(exc).__name__}"
        if self.rows:  # the rounds metrics.csv holds, whatever stopped the run (a full disk mid-checkpoint too)
            summary.update(progress(self.rows))
        if stamp_end:
            summary["finished_at"] = stamp(time.time())
            summary["wall_time_s"] = round(time.time() - started, 3)
        self._write_summary()
        self.directory.close()

    # -------------------------------------------------------------------------------------- outputs
    def _open(self, columns: tuple[str, ...]) -> None:
        self._columns = columns
        self.directory.open_metrics(columns)
        for sink in self.sinks + self.listeners:
            sink.open(self.rows)

    def _close_sinks(self) -> None:
        for sink in self.sinks + self.listeners:
            sink.close()

    def _write_summary(self) -> None:
        try:
            self.directory.write_summary(on_disk(self.summary))
        except OutputError:
            pass  # a finished run's fuller summary stays as it was
        except OSError as exc:
            if exc.errno not in NO_SPACE:
                raise


# ---------------------------------------------------------------------------------------- figures
FIGURES = ("rounds_completed", "rounds_failed", "sim_time_s", "bytes_down", "bytes_up", "final_test_acc",
           "final_test_loss", "best_test_acc", "dp_epsilon", "dp_sampling", "dp_epsilon_device_max")


def on_disk(summary: dict) -> dict:
    """summary.json as written. While the run is going its round figures are left out (metrics.csv holds
    the rounds as they finish): a run killed mid-way then has a summary that says "running" and nothing
    about its rounds that metrics.csv could contradict; the final summary takes them from the rows."""
    if summary.get("status") != "running":
        return dict(summary)
    return {**{k: v for k, v in summary.items() if k not in FIGURES},
            "rounds_on_record": "metrics.csv (the figures are added here when the run ends)"}


def progress(rows: list[dict]) -> dict:
    """The summary's figures of the rounds on record (rows as written or as read back)."""
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
        **_privacy_spent(last),
    }


def _privacy_spent(last: dict) -> dict:
    """A private run's epsilon so far, with the assumption the nominal one makes (empty without privacy)."""
    if last.get("dp_epsilon") in (None, ""):
        return {}
    return {"dp_epsilon": float(last["dp_epsilon"]), "dp_sampling": last.get("dp_sampling"),
            "dp_epsilon_device_max": float(last["dp_epsilon_device_max"])}


def thread_record(previous: dict, threads: int, first_round: int) -> dict:
    """summary.json's record of the torch thread count (it changes the last bits of every round): the count
    now, and each resume that changed it (from which round, from and to what)."""
    record = {"torch_threads": threads}
    if previous.get("torch_threads", threads) != threads:
        record["torch_threads_changes"] = [*previous.get("torch_threads_changes", []), {
            "from_round": first_round, "from": previous["torch_threads"], "to": threads}]
    return record


def stamp(t: float) -> str:
    """A summary's time stamp: local time with its UTC offset."""
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(t))

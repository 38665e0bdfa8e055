"""The outputs a recorded round goes to after metrics.csv: each one concern, with one small interface.

The recorder writes a round's own files first (class accuracies, device scores, then the metrics row,
fsynced): once that row is on disk the round is on record. Then each sink takes it, in order:
TensorBoard's event files, the round's device events, the checkpoint when one is due, and the caller's
listener (a progress bar, a notebook's live plot), last, so that what it shows is already kept.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

from emulator.recording import checkpoint as checkpoints


class Sink:
    """`open(rows)`: (re)opened over the rounds on record (at the start, after a rewind); `record(record,
    row)`: one round, once its metrics row is on disk; `close()`: however the run ends."""

    def open(self, rows: list[dict]) -> None:
        pass

    def record(self, record, row: dict) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardSink(Sink):
    """output.tensorboard: one step per round, flushed for a live view."""

    def __init__(self, path: Path):
        self.path, self.board = path, None

    def open(self, rows: list[dict]) -> None:
        from emulator.recording.tensorboard import TensorBoardLog  # tensorboard loads only where asked for

        self.close()
        self.board = TensorBoardLog(self.path, history=rows)  # event files holding the rows kept so far

    def record(self, record, row: dict) -> None:
        if self.board is not None:
            self.board.append(row)

    def close(self) -> None:
        if self.board is not None:
            self.board.close()
            self.board = None


class EventsSink(Sink):
    """system.events: the round's device events (selected, checked in, reported, ...), fsynced."""

    def __init__(self, directory, source):
        self.directory, self.source = directory, source

    def record(self, record, row: dict) -> None:
        self.directory.append_events(self.source.events())


class CheckpointSink(Sink):
    """The server's whole state every output.checkpoint_every rounds and after the last."""

    def __init__(self, path: Path, scenario, source):
        self.path, self.scenario, self.source = path, scenario, source

    def record(self, record, row: dict) -> None:
        r, every = int(row["round"]), self.scenario.output.checkpoint_every
        if (every and r % every == 0) or r == self.scenario.rounds:
            checkpoints.write(self.path, self.source.state(), self.scenario)


class ListenerSink(Sink):
    """The caller's `on_round(row)`."""

    def __init__(self, on_round: Callable[[dict], None]):
        self.on_round = on_round

    def record(self, record, row: dict) -> None:
        self.on_round(row)


def sinks_for(directory, scenario, source, on_round) -> tuple[list[Sink], list[Sink]]:
    """The run's sinks: those before the summary's figures are updated, and the listener after them."""
    before: list[Sink] = []
    if scenario.output.tensorboard:
        before.append(TensorBoardSink(directory.path))
    if scenario.system.events:
        before.append(EventsSink(directory, source))
    before.append(CheckpointSink(directory.path, scenario, source))
    return before, [ListenerSink(on_round)] if on_round is not None else []

"""The columns an engine and the algorithm add: an asynchronous update's own figures, and the
algorithm's `columns` (its `after_round`, called last: it reads the whole record)."""
from __future__ import annotations

from dataclasses import asdict

from emulator.server.observers.base import Observer
from emulator.server.record import ASYNC_COLUMNS


class Asynchrony(Observer):
    """An asynchronous algorithm's update: its version, staleness, concurrency and wasted compute."""

    columns = ASYNC_COLUMNS

    def after_round(self, record, played) -> dict:
        return asdict(played.asynchronous) if played.asynchronous is not None else {}


class AlgorithmColumns(Observer):
    def __init__(self, world):
        super().__init__(world)
        self.columns = tuple(world.algorithm.columns)

    def after_round(self, record, played) -> dict:
        return self.world.algorithm.after_round(record)

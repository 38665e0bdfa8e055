"""One round as the server hands it on: the engine's facts, then what each observer adds.

`PlayedRound` is what a round engine returns (who was selected, who reported, the system model's
outcome, the training statistics); `RoundRecord` is the typed record built from it, which the observers
complete column by column and the recorder writes as one metrics.csv row. A record reads like a mapping
(`record["train_acc"]`, `record.get("test_acc")`), so a hook written against the row as a dict works.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Iterator, Mapping

import numpy as np

from emulator.algorithms.base import RoundKind, RoundPlan
from emulator.system.base import RoundOutcome
from emulator.training.local import TrainStats


@dataclass
class AsyncFigures:
    """An asynchronous server update's own figures (its metrics columns, ASYNC_COLUMNS)."""

    version: int
    staleness_mean: float | None
    staleness_max: int | None
    concurrency_mean: float
    concurrency_max: int
    wasted_compute_s: float


@dataclass
class PlayedRound:
    """What an engine did in one round, for the observers: the plan, the world's outcome, the distinct
    reporting devices (in draw order, with how often each was drawn), their training statistics, the
    devices whose reports the aggregate weighed, and an asynchronous update's figures."""

    plan: RoundPlan
    outcome: RoundOutcome
    devices: np.ndarray
    counts: np.ndarray
    stats: list[TrainStats]
    aggregated: np.ndarray
    asynchronous: AsyncFigures | None = None
    events: list[tuple] = field(default_factory=list)  # (round, time_s, device, event) for events.csv


@dataclass
class RoundRecord(Mapping):
    """A round's figures: the engine's, then each observer's `columns` (metrics.csv's row, `row()`).

    `class_accuracy` and `device_eval` are an evaluation's tables for class_accuracy.csv and
    device_eval.csv: never metrics columns."""

    round: int
    kind: RoundKind
    failed: int
    sim_start_s: float
    sim_time_s: float
    round_duration_s: float
    selected: int
    participants: int
    dropped: int
    stragglers: int
    cancelled: int
    bytes_down: int
    bytes_up: int
    server_compute_s: float
    train_loss: float | None
    train_acc: float | None
    wall_time_s: float | None = None  # the driver's, once the round is back
    columns: dict[str, Any] = field(default_factory=dict)
    class_accuracy: list | None = field(default=None, repr=False)
    device_eval: dict | None = field(default=None, repr=False)

    @classmethod
    def of(cls, r: int, played: PlayedRound) -> "RoundRecord":
        outcome = played.outcome
        trained = [s for s in played.stats if s.steps > 0]
        return cls(round=r, kind=RoundKind(played.plan.kind), failed=int(outcome.failed),
                   sim_start_s=outcome.start_s, sim_time_s=outcome.end_s, round_duration_s=outcome.duration_s,
                   selected=len(np.unique(outcome.selected)), participants=len(played.devices),
                   dropped=len(outcome.dropped), stragglers=len(outcome.stragglers),
                   cancelled=len(outcome.cancelled), bytes_down=int(outcome.bytes_down),
                   bytes_up=int(outcome.bytes_up), server_compute_s=outcome.server_compute_s,
                   train_loss=float(np.mean([s.loss for s in trained])) if trained else None,
                   train_acc=float(np.mean([s.accuracy for s in trained])) if trained else None)

    def row(self) -> dict[str, Any]:
        """metrics.csv's row: the record's own figures, then the observers' columns."""
        return {name: self[name] for name in self}

    # ------------------------------------------------------------------ read as a mapping
    def __getitem__(self, name: str) -> Any:
        if name in RECORD_COLUMNS:
            return getattr(self, name)
        return self.columns[name]

    def __iter__(self) -> Iterator[str]:
        yield from RECORD_COLUMNS
        yield from self.columns

    def __len__(self) -> int:
        return len(RECORD_COLUMNS) + len(self.columns)

    __hash__ = None  # a record changes as observers fill it in


RECORD_COLUMNS = tuple(f.name for f in fields(RoundRecord) if f.name not in ("columns", "class_accuracy", "device_eval"))
ASYNC_COLUMNS = tuple(f.name for f in fields(AsyncFigures))

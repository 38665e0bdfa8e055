"""The system-model interface: the simulated world that decides who takes part and how long it takes.

The server asks for a cohort; the system model answers with who was selected, who reported in time,
who dropped, when the round started and ended on the simulated clock, and what crossed the network.
Real training happens afterwards, only for the devices that reported.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from emulator.algorithms.selection import SelectionPolicy


@dataclass(frozen=True)
class CohortRequest:
    round_index: int
    target: int  # reports the round needs
    selection: SelectionPolicy
    rng: np.random.Generator
    bytes_down: int  # per selected device
    bytes_up: int  # per reporting device
    samples_processed: Callable[[int], int] = lambda device: 0  # local work, for compute time


@dataclass
class RoundOutcome:
    start_s: float
    end_s: float
    selected: np.ndarray  # device ids in draw order, repeats when drawn twice
    reported: np.ndarray  # the subset (with repeats) whose updates arrived in time, in draw order
    dropped: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    stragglers: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    bytes_down: int = 0
    bytes_up: int = 0
    failed: bool = False

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


class SystemModel:
    """A simulated clock plus the population's behaviour."""

    now_s: float = 0.0

    def client_round(self, request: CohortRequest) -> RoundOutcome:
        raise NotImplementedError

"""The algorithm interface: small hooks the server actor calls every round.

An algorithm never touches Ray or the clock. It says what kind of round comes next and whom to select
(`plan_round`), what each device runs (`local_training`), how streamed updates become the next global
model (`aggregate`), and what to record afterwards (`after_round`). The runtime does the rest.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from emulator.algorithms.selection import SelectionPolicy
from emulator.training import LocalTraining, TrainStats


@dataclass(frozen=True)
class RoundPlan:
    kind: str  # "client" (devices train), later "server" and "snapshot"
    cohort: int  # how many reports the round aims for
    selection: SelectionPolicy


@dataclass
class ClientUpdate:
    """What one device sends back: its model delta and how its local training went."""

    device: int
    num_samples: int
    delta: np.ndarray
    stats: TrainStats
    multiplicity: int = 1  # how many times the device was drawn this round (sampling with replacement)


@dataclass
class AlgorithmContext:
    """What an algorithm may know about the federation when it is built."""

    num_devices: int
    device_sizes: np.ndarray
    num_params: int
    seed: int
    extra: dict = field(default_factory=dict)


class Algorithm:
    name = "base"
    columns: tuple[str, ...] = ()  # extra per-round metric columns this algorithm fills in

    def __init__(self, config, context: AlgorithmContext):
        self.config = config
        self.context = context

    def plan_round(self, round_index: int) -> RoundPlan:
        raise NotImplementedError

    def local_training(self, device: int) -> LocalTraining:
        raise NotImplementedError

    def samples_processed(self, devices: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Samples each device puts through the model this round (its compute time is charged for these)."""
        if len(devices) == 0:
            return np.zeros(0)
        return self.local_training(int(devices[0])).samples_processed(sizes[devices])

    def aggregate(self, params: np.ndarray, updates: Iterable[ClientUpdate]) -> np.ndarray:
        """Consume updates as they stream in (device order) and return the next global parameters."""
        raise NotImplementedError

    def after_round(self, row: dict) -> dict:
        """Values for `columns`, given the round's metrics row so far."""
        return {}

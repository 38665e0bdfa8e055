"""Selection policies: which of the devices that checked in make up the cohort.

The system model decides who is available; the policy only chooses among them. Every policy returns
device ids in the order they were drawn (with repeats when sampling with replacement).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class SelectionPolicy:
    def select(self, available: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def capacity(self, available: int) -> float:
        """How many draws `available` devices can give (the system waits for check-ins below this)."""
        return available


@dataclass(frozen=True)
class Uniform(SelectionPolicy):
    """A uniform draw of `count` devices; with replacement a device can be drawn (and counted) twice."""

    replace: bool = False

    def capacity(self, available: int) -> float:
        return np.inf if self.replace and available else available

    def select(self, available: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        if len(available) == 0 or count == 0:
            return np.zeros(0, dtype=np.int64)
        if not self.replace:
            count = min(count, len(available))
        return np.asarray(rng.choice(available, size=count, replace=self.replace), dtype=np.int64)


def distinct_in_draw_order(drawn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct devices in the order first drawn, with how often each was drawn."""
    if len(drawn) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    unique, first, counts = np.unique(drawn, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    return unique[order], counts[order]

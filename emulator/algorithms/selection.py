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


@dataclass(frozen=True)
class Uniform(SelectionPolicy):
    """A uniform draw of `count` devices; with replacement a device can be drawn (and counted) twice."""

    replace: bool = False

    def select(self, available: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        if len(available) == 0 or count == 0:
            return np.zeros(0, dtype=np.int64)
        if not self.replace:
            count = min(count, len(available))
        return np.asarray(rng.choice(available, size=count, replace=self.replace), dtype=np.int64)

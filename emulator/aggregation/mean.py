"""Aggregation math as pure functions on flat parameter vectors."""
from __future__ import annotations

import numpy as np


class WeightedMean:
    """A running weighted sum: one vector of memory however many updates stream in.

    Sums are kept in float64 and updates must be added in a fixed order (device order) for results to be
    bit-for-bit reproducible.
    """

    def __init__(self, size: int):
        self.total = np.zeros(size, dtype=np.float64)
        self.weight = 0.0
        self.count = 0

    def add(self, vector: np.ndarray, weight: float = 1.0) -> None:
        if weight < 0:
            raise ValueError(f"aggregation weights are non-negative, got {weight}")
        if weight == 0:
            return
        if weight == 1.0:
            self.total += vector
        else:
            self.total += weight * vector.astype(np.float64)
        self.weight += weight
        self.count += 1

    def mean(self) -> np.ndarray:
        """The weighted mean as float32; zeros when nothing (or only zero weight) was added."""
        if self.weight == 0:
            return np.zeros_like(self.total, dtype=np.float32)
        return (self.total / self.weight).astype(np.float32)


def server_update(params: np.ndarray, mean_delta: np.ndarray, server_lr: float) -> np.ndarray:
    """x_{t+1} = x_t + eta * Delta_t (Yang et al.; eta = 1 is the plain model average)."""
    return (params.astype(np.float64) + server_lr * mean_delta.astype(np.float64)).astype(np.float32)

"""Aggregation math as pure functions on flat parameter vectors."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from emulator.aggregation.exact import FINEST_UNIT, ExactSum


class WeightedMean:
    """A running weighted sum: one vector of memory however many updates stream in.

    The sum is exact (aggregation/exact.py) and so are the weights' (fractions), so the mean is the same
    bit for bit whatever order the updates come in and however they were grouped: a runner may fold its
    devices' updates into one partial mean and the server `merge` the partials (of the same `unit`: each
    term is rounded to a multiple of 2^unit, see exact.unit_for).
    """

    def __init__(self, size: int, unit: int = FINEST_UNIT):
        self._sum = ExactSum(size, unit)
        self._weight = Fraction(0)
        self._total: np.ndarray | None = None  # a total set from outside (DP's release, a robust rule)
        self._value: np.ndarray | None = None  # the sum as last read, until a term is added
        self.count = 0

    @property
    def unit(self) -> int:
        return self._sum.unit

    def add(self, vector: np.ndarray, weight: float = 1.0) -> None:
        if weight < 0:
            raise ValueError(f"aggregation weights are non-negative, got {weight}")
        if weight == 0:
            return
        self._sum.add(vector, weight)
        self._weight += Fraction(weight)
        self._total = self._value = None
        self.count += 1

    def merge(self, other: "WeightedMean") -> None:
        """Add another running sum's updates (a runner's partial), as if each had been added here."""
        if other._total is not None or self._total is not None:
            raise ValueError("a mean whose total was set from outside cannot be merged")
        self._sum.merge(other._sum)
        self._value = None
        self._weight += other._weight
        self.count += other.count

    @property
    def total(self) -> np.ndarray:
        """The weighted sum, float64."""
        if self._total is not None:
            return self._total
        if self._value is None:
            self._value = self._sum.value()
            self._value.flags.writeable = False  # read twice a round (the mean, the next unit): shared, not copied
        return self._value

    @total.setter
    def total(self, value: np.ndarray) -> None:
        self._total = np.asarray(value, dtype=np.float64)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_value": None}  # the sum travels once, as its limbs

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update({"_value": None, **state})

    @property
    def weight(self) -> float:
        return float(self._weight)

    @weight.setter
    def weight(self, value: float) -> None:
        self._weight = Fraction(value)

    def mean(self) -> np.ndarray:
        """The weighted mean as float32; zeros when nothing (or only zero weight) was added."""
        if self._weight == 0:
            return np.zeros(len(self._sum), dtype=np.float32)
        return (self.total / self.weight).astype(np.float32)


def server_update(params: np.ndarray, mean_delta: np.ndarray, server_lr: float) -> np.ndarray:
    """x_{t+1} = x_t + eta * Delta_t (Yang et al.; eta = 1 is the plain model average)."""
    return (params.astype(np.float64) + server_lr * mean_delta.astype(np.float64)).astype(np.float32)

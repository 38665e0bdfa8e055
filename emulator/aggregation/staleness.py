"""How much a late update counts, and the asynchronous server steps (FedAsync, FedBuff): pure functions.

Staleness d = the server's version when an update is applied minus the version the device downloaded,
counted in server updates (not seconds). Notation and sources: ../shared/papers/async.md.

- FedAsync (Xie et al. 2019) mixes every arriving model in at once:
  w_t = (1 - alpha s(d)) w_{t-1} + alpha s(d) x_new, where x_new is the device's trained model.
- FedBuff (Nguyen et al. 2022) sums K staleness-weighted deltas, then takes one server step with their
  normalised sum as the pseudo-gradient. Codes normalise differently (the paper divides by K, FedScale by
  the sum of the weights, FLSim not at all), which rescales the effective server learning rate: the
  choice is a parameter, never implicit.
"""
from __future__ import annotations

import numpy as np

STALENESS_KINDS = ("constant", "polynomial", "hinge")
NORMALISATIONS = ("count", "weights", "none")


def staleness_weight(kind: str, staleness, a: float = 0.5, b: float = 4.0):
    """s(d) for d >= 0 (a number or an array): constant 1; polynomial (1 + d)^-a (FedBuff's 1/sqrt(1 + d)
    is a = 0.5); hinge 1 while d <= b, then 1 / (a (d - b) + 1)."""
    d = np.asarray(staleness, dtype=np.float64)
    if np.any(d < 0):
        raise ValueError(f"staleness must be >= 0, got {staleness}")
    if kind == "constant":
        weight = np.ones_like(d)
    elif kind == "polynomial":
        weight = (1.0 + d) ** (-a)
    elif kind == "hinge":
        weight = np.where(d <= b, 1.0, 1.0 / (a * np.maximum(d - b, 0.0) + 1.0))
    else:
        raise ValueError(f"unknown staleness function {kind!r}; choose one of {', '.join(STALENESS_KINDS)}")
    return float(weight) if weight.ndim == 0 else weight


def fedasync_mix(current: np.ndarray, trained: np.ndarray, alpha: float, weight: float) -> np.ndarray:
    """FedAsync's server update: the current model moved towards the device's trained model by alpha s(d)."""
    mixing = alpha * weight
    return ((1.0 - mixing) * current.astype(np.float64) + mixing * trained.astype(np.float64)).astype(np.float32)


class StalenessBuffer:
    """FedBuff's buffer: a running sum of staleness-weighted deltas (one vector, whatever K is)."""

    def __init__(self, num_params: int):
        self.total = np.zeros(num_params, dtype=np.float64)
        self.count = 0
        self.weight_sum = 0.0

    def add(self, delta: np.ndarray, weight: float) -> None:
        self.total += weight * delta.astype(np.float64)
        self.count += 1
        self.weight_sum += weight

    def flush(self, normalisation: str = "count") -> np.ndarray:
        """The pseudo-gradient (a float32 model delta) for the server step, and an empty buffer.

        count: the sum / K (the paper); weights: / the sum of the staleness weights (FedScale's weighted
        mean); none: the sum itself (FLSim: the server learning rate absorbs 1 / K)."""
        if self.count == 0:
            raise ValueError("flushing an empty buffer")
        if normalisation == "count":
            step = self.total / self.count
        elif normalisation == "weights":
            step = self.total / self.weight_sum if self.weight_sum > 0 else np.zeros_like(self.total)
        elif normalisation == "none":
            step = self.total.copy()
        else:
            raise ValueError(f"unknown normalisation {normalisation!r}; choose one of {', '.join(NORMALISATIONS)}")
        self.total[:] = 0.0
        self.count, self.weight_sum = 0, 0.0
        return step.astype(np.float32)

    def state(self) -> dict:
        return {"total": self.total.copy(), "count": self.count, "weight_sum": self.weight_sum}

    def load_state(self, state: dict) -> None:
        self.total = np.asarray(state["total"], dtype=np.float64).copy()
        self.count, self.weight_sum = int(state["count"]), float(state["weight_sum"])


def robust_buffer_step(deltas: np.ndarray, weights: np.ndarray, rule, normalisation: str = "count"):
    """FedBuff's pseudo-gradient with a robust rule (rule(updates, weights) -> RobustResult, see
    aggregation/robust.py) over the buffer in place of its sum; returns (float32 step, the rule's result).

    Each normalisation keeps its meaning and gives flush()'s step exactly when the rule is the weighted mean:
    count: the rule over the staleness-weighted deltas s_i d_i (the paper's sum / K is their mean); weights:
    the rule over the deltas weighted by s_i (FedScale's sum / sum s_i is their weighted mean); none: K times
    the rule over s_i d_i (FLSim's plain sum)."""
    deltas, weights = np.asarray(deltas, np.float64), np.asarray(weights, np.float64)
    if len(deltas) == 0:
        raise ValueError("a robust step over an empty buffer")
    if normalisation == "weights":
        result = rule(deltas, weights)
        step = np.asarray(result.aggregate, np.float64)
    elif normalisation in ("count", "none"):
        result = rule(deltas * weights[:, None], np.ones(len(deltas)))
        step = np.asarray(result.aggregate, np.float64) * (len(deltas) if normalisation == "none" else 1.0)
    else:
        raise ValueError(f"unknown normalisation {normalisation!r}; choose one of {', '.join(NORMALISATIONS)}")
    return step.astype(np.float32), result

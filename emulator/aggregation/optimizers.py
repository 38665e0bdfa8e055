"""Server optimizers: how the mean client delta moves the global model (Reddi et al., ICLR 2021,
"Adaptive Federated Optimization", Algorithm 2).

With Delta_t the (weighted) mean client delta and eta the server rate:

- sgd:      x <- x + eta Delta_t                       (FedAvg with two-sided rates; eta = 1: the model average)
- adagrad:  v_t = v_{t-1} + Delta_t^2
- adam:     v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2
- yogi:     v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2)
- adaptive kinds: m_t = beta1 m_{t-1} + (1 - beta1) Delta_t;  x <- x + eta m_t / (sqrt(v_t) + tau)

Initial state: m_{-1} = 0 and v_{-1} = tau^2 (the paper asks for v_{-1} >= tau^2; its smallest value keeps
the first step's denominator at 2 tau where Delta is 0). There is no bias correction (the paper has none).
A round without reports is no step: the moments neither decay nor grow.

Only trainable entries take the adaptive step (`mask`); the other floating entries of the flat vector
(BatchNorm's running statistics) are statistics, not descent directions, and take the plain average of the
devices' values (x + Delta). Parameters are float32; the moments and the arithmetic are float64, and the
moments are saved exactly in `state()`, so a resumed run continues bit for bit.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from emulator.aggregation.mean import server_update
from emulator.errors import PluginError, build_part, guard
from emulator.registry import SERVER_OPTIMIZERS
from emulator.scenario import ServerOptimizerSettings


class SgdServerOptimizer(ServerOptimizerSettings):
    """x <- x + server_lr mean(delta): the plain step, as with no server_optimizer at all."""

    kind: Literal["sgd"] = "sgd"


class AdagradServerOptimizer(ServerOptimizerSettings):
    """FedAdagrad: m <- b1 m + (1 - b1) d; v <- v + d^2; x <- x + server_lr m / (sqrt(v) + tau)."""

    kind: Literal["adagrad"] = "adagrad"
    beta1: float = Field(0.9, ge=0, lt=1)
    tau: float = Field(1e-3, gt=0)


class AdamServerOptimizer(ServerOptimizerSettings):
    """FedAdam: as FedAdagrad with v <- b2 v + (1 - b2) d^2 (no bias correction, as in the paper)."""

    kind: Literal["adam"] = "adam"
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.99, ge=0, lt=1)
    tau: float = Field(1e-3, gt=0)


class YogiServerOptimizer(ServerOptimizerSettings):
    """FedYogi: as FedAdam with v <- v - (1 - b2) d^2 sign(v - d^2), which grows v no faster than additively."""

    kind: Literal["yogi"] = "yogi"
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.99, ge=0, lt=1)
    tau: float = Field(1e-3, gt=0)


# ------------------------------------------------------------------------------------ the pure math
def first_moment(m: np.ndarray, delta: np.ndarray, beta1: float) -> np.ndarray:
    """m_t = beta1 m_{t-1} + (1 - beta1) Delta_t."""
    return beta1 * m + (1.0 - beta1) * delta


def adagrad_second_moment(v: np.ndarray, delta: np.ndarray, beta2: float = 0.0) -> np.ndarray:
    """v_t = v_{t-1} + Delta_t^2 (beta2 is not used)."""
    return v + delta * delta


def adam_second_moment(v: np.ndarray, delta: np.ndarray, beta2: float) -> np.ndarray:
    """v_t = beta2 v_{t-1} + (1 - beta2) Delta_t^2."""
    return beta2 * v + (1.0 - beta2) * (delta * delta)


def yogi_second_moment(v: np.ndarray, delta: np.ndarray, beta2: float) -> np.ndarray:
    """v_t = v_{t-1} - (1 - beta2) Delta_t^2 sign(v_{t-1} - Delta_t^2): v moves towards Delta^2 additively."""
    squared = delta * delta
    return v - (1.0 - beta2) * squared * np.sign(v - squared)


SECOND_MOMENTS = {"adagrad": adagrad_second_moment, "adam": adam_second_moment, "yogi": yogi_second_moment}


def adaptive_update(params: np.ndarray, m: np.ndarray, v: np.ndarray, lr: float, tau: float) -> np.ndarray:
    """x_{t+1} = x_t + eta m_t / (sqrt(v_t) + tau), in float64."""
    return params + lr * m / (np.sqrt(v) + tau)


# ----------------------------------------------------------------------------------- with state
class ServerOptimizer:
    """The plain step, x <- x + lr Delta: exactly FedAvg's `server_update`, with no state."""

    kind = "sgd"

    def step(self, params: np.ndarray, mean_delta: np.ndarray, lr: float) -> np.ndarray:
        return server_update(params, mean_delta, lr)

    def state(self) -> dict:
        return {}

    def load_state(self, state: dict) -> None:
        pass


class AdaptiveServerOptimizer(ServerOptimizer):
    """FedAdagrad, FedAdam or FedYogi: the moments m and v are kept over rounds (float64)."""

    def __init__(self, kind: str, size: int, beta1: float = 0.9, beta2: float = 0.99, tau: float = 1e-3,
                 mask: np.ndarray | None = None):
        if kind not in SECOND_MOMENTS:
            raise ValueError(f"unknown server optimizer {kind!r}; choose one of sgd, {', '.join(SECOND_MOMENTS)}")
        self.kind, self.beta1, self.beta2, self.tau = kind, beta1, beta2, tau
        self.mask = None if mask is None or bool(np.all(mask)) else np.asarray(mask, dtype=bool)
        self.m = np.zeros(size, dtype=np.float64)
        self.v = np.full(size, tau * tau, dtype=np.float64)
        self.steps = 0

    def step(self, params, mean_delta, lr):
        delta = mean_delta.astype(np.float64)
        self.m = first_moment(self.m, delta, self.beta1)
        self.v = SECOND_MOMENTS[self.kind](self.v, delta, self.beta2)
        self.steps += 1
        new = adaptive_update(params.astype(np.float64), self.m, self.v, lr, self.tau)
        if self.mask is not None:  # statistics (BatchNorm buffers): the plain average of the devices' values
            new = np.where(self.mask, new, params.astype(np.float64) + delta)
        return new.astype(np.float32)

    def state(self) -> dict:
        return {"kind": self.kind, "m": self.m.copy(), "v": self.v.copy(), "steps": self.steps}

    def load_state(self, state: dict) -> None:
        if state.get("kind") != self.kind:
            raise ValueError(f"a checkpoint of server optimizer {state.get('kind')!r} cannot resume {self.kind!r}")
        self.m = np.asarray(state["m"], dtype=np.float64).copy()
        self.v = np.asarray(state["v"], dtype=np.float64).copy()
        self.steps = int(state["steps"])


def build_server_optimizer(config, size: int, mask: np.ndarray | None = None) -> ServerOptimizer:
    """From the scenario's `server_optimizer` (None, the default, is sgd), by its registered kind
    (emulator.registry.SERVER_OPTIMIZERS: ours, or a plugin's)."""
    if config is None:
        return ServerOptimizer()
    return build_part(SERVER_OPTIMIZERS.get(config.kind), f"server optimizer {config.kind!r}", ServerOptimizer,
                      GuardedServerOptimizer, config, size, mask)


class GuardedServerOptimizer(ServerOptimizer):
    """A plugin's server step as the server sees it: each call guarded (an exception names the plugin's own
    file and line: exit 2) and each step's answer checked: a float array of the parameters' shape."""

    def __init__(self, inner: ServerOptimizer, origin: str, part: str):
        self.inner, self.origin, self.part = inner, origin, part
        self.kind = getattr(inner, "kind", "plugin")

    def step(self, params, mean_delta, lr):
        with guard(self.origin, self.part, "step", code=self.inner.step):
            raw = self.inner.step(params, mean_delta, lr)
        new = np.asarray(raw) if isinstance(raw, np.ndarray) else None
        if new is None or new.shape != params.shape or not np.issubdtype(new.dtype, np.floating):
            what = type(raw).__name__ if new is None else f"an array of shape {new.shape} and dtype {new.dtype}"
            raise PluginError(f"plugin {self.origin}: {self.part}'s step returned {what}; return the new parameters, "
                              f"a float numpy array of shape {params.shape} like `params`")
        return new.astype(np.float32, copy=False)

    def state(self) -> dict:
        with guard(self.origin, self.part, "state", code=self.inner.state):
            return self.inner.state()

    def load_state(self, state: dict) -> None:
        with guard(self.origin, self.part, "load_state", code=self.inner.load_state):
            self.inner.load_state(state)


def adaptive(config, size: int, mask: np.ndarray | None = None) -> AdaptiveServerOptimizer:
    """FedAdagrad, FedAdam or FedYogi from their config."""
    return AdaptiveServerOptimizer(config.kind, size, config.beta1, getattr(config, "beta2", 0.0), config.tau, mask)

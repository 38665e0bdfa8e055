"""Selection policies: which of the devices that checked in make up the cohort.

The system model decides who is available; the policy only chooses among them. Every policy returns
device ids in the order they were drawn (with repeats only when sampling with replacement).

Besides the uniform draw, the papers' fixed participation regimes are here for reproduction: FAST's
arbitrary participation (values drawn from a Beta, Gamma or Weibull distribution mapped to device
indices) and SAFARI's devices that never take part (`Excluding`); and a battery-aware draw (EAFL's
battery-first choice), which reads what the world tells it (`reads`, `informed`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Literal

import numpy as np
from pydantic import Field

from emulator.errors import PluginError, build_part, guard
from emulator.registry import SELECTIONS
from emulator.scenario import SelectionSettings
from emulator.seeding import rng


class UniformSelection(SelectionSettings):
    """A uniform draw among the devices that checked in."""

    kind: Literal["uniform"] = "uniform"
    exclude: int = Field(0, ge=0)


class BetaSelection(SelectionSettings):
    """FAST's arbitrary participation: draw x ~ Beta(a, b), take device int(x * M), until the cohort is full."""

    kind: Literal["beta"] = "beta"
    a: float = Field(1.0, gt=0)
    b: float = Field(10.0, gt=0)
    exclude: int = Field(0, ge=0)


class GammaSelection(SelectionSettings):
    """FAST: x ~ Gamma(shape, scale), device int(x * M), draws at or past M rejected."""

    kind: Literal["gamma"] = "gamma"
    shape: float = Field(10.0, gt=0)
    scale: float = Field(0.01, gt=0)
    exclude: int = Field(0, ge=0)


class WeibullSelection(SelectionSettings):
    """FAST: x ~ scale * Weibull(shape), device int(x / divisor * M), draws at or past M rejected."""

    kind: Literal["weibull"] = "weibull"
    shape: float = Field(10.0, gt=0)
    scale: float = Field(1.0, gt=0)
    divisor: float = Field(1.2, gt=0)
    exclude: int = Field(0, ge=0)


class BatterySelection(SelectionSettings):
    """Battery first (EAFL, arXiv 2208.04505): draw without replacement with probability proportional to
    each checked-in device's state of charge to the power `greed` (0: uniform; the larger, the closer to
    taking the fullest batteries). Needs a world with batteries (population.energy, an eligible entry)."""

    kind: Literal["battery"] = "battery"
    greed: float = Field(2.0, ge=0)
    exclude: int = Field(0, ge=0)


class SelectionPolicy:
    reads: tuple[str, ...] = ()  # what the world tells the policy before each draw (`informed`): "soc"

    def select(self, available: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        raise NotImplementedError

    def informed(self, **facts) -> "SelectionPolicy":
        """The policy for one draw, given what it `reads` about the devices that checked in (their order)."""
        return self

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


@dataclass(frozen=True)
class IndexRegime(SelectionPolicy):
    """FAST's arbitrary client participation: draw values, map each to a device index of the whole
    population, keep the first `count` distinct available devices.

    If the regime keeps missing the available devices (few online where it points), the cohort is
    filled up uniformly from the remaining available devices after `max_batches` batches of draws."""

    population: int
    max_batches: int = 50

    def _indices(self, rng: np.random.Generator, n: int) -> np.ndarray:
        raise NotImplementedError

    def select(self, available: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        count = min(count, len(available))
        allowed = np.zeros(self.population, dtype=bool)
        allowed[available] = True
        picked = np.zeros(0, dtype=np.int64)
        for _ in range(self.max_batches):
            if len(picked) >= count:
                break
            idx = self._indices(rng, 8 * (count - len(picked)) + 32)
            idx = idx[(idx >= 0) & (idx < self.population)]
            merged = np.concatenate([picked, idx[allowed[idx]]])
            _, first = np.unique(merged, return_index=True)
            picked = merged[np.sort(first)][:count]
        if len(picked) < count:
            allowed[picked] = False
            rest = np.flatnonzero(allowed)
            picked = np.concatenate([picked, rng.choice(rest, count - len(picked), replace=False)])
        return picked.astype(np.int64)


@dataclass(frozen=True)
class BetaRegime(IndexRegime):
    a: float = 1.0
    b: float = 10.0

    def _indices(self, rng, n):
        return (rng.beta(self.a, self.b, n) * self.population).astype(np.int64)


@dataclass(frozen=True)
class GammaRegime(IndexRegime):
    shape: float = 10.0
    scale: float = 0.01

    def _indices(self, rng, n):
        return (rng.gamma(self.shape, self.scale, n) * self.population).astype(np.int64)


@dataclass(frozen=True)
class WeibullRegime(IndexRegime):
    shape: float = 10.0
    scale: float = 1.0
    divisor: float = 1.2

    def _indices(self, rng, n):
        return (self.scale * rng.weibull(self.shape, n) / self.divisor * self.population).astype(np.int64)


@dataclass(frozen=True)
class BatteryFirst(SelectionPolicy):
    """See BatterySelection. A device whose level is unknown (outside eligible entries) counts as full."""

    greed: float = 2.0
    soc: Callable[[np.ndarray], np.ndarray] | None = field(default=None, compare=False)  # ids -> levels, now
    reads = ("soc",)

    def informed(self, **facts) -> "BatteryFirst":
        return BatteryFirst(self.greed, facts["soc"])

    def select(self, available: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        count = min(count, len(available))
        if count == 0:
            return np.zeros(0, dtype=np.int64)
        if self.soc is None:
            raise ValueError("battery-first selection draws only once the world has told it the levels (informed)")
        weight = np.power(np.clip(np.nan_to_num(self.soc(available), nan=1.0), 0.0, 1.0), self.greed)
        alive = np.flatnonzero(weight > 0)
        if len(alive) <= count:  # every device with charge, then the empty ones at random
            rest = rng.permutation(np.flatnonzero(weight <= 0))[:count - len(alive)]
            return np.asarray(available[np.concatenate([rng.permutation(alive), rest])], dtype=np.int64)
        picked = rng.choice(alive, size=count, replace=False, p=weight[alive] / weight[alive].sum())
        return np.asarray(available[picked], dtype=np.int64)


@dataclass(frozen=True)
class Excluding(SelectionPolicy):
    """Some devices never take part (SAFARI's s excluded clients): they are removed before `inner` draws."""

    inner: SelectionPolicy
    excluded: np.ndarray = field(compare=False)  # boolean mask over the population

    @property
    def reads(self) -> tuple[str, ...]:
        return self.inner.reads

    def informed(self, **facts) -> "Excluding":
        return Excluding(self.inner.informed(**facts), self.excluded)

    def capacity(self, available: int) -> float:
        return self.inner.capacity(available)  # an upper bound: the system may poll for longer

    def select(self, available: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        return self.inner.select(available[~self.excluded[available]], count, rng)


def build_selection(config, num_devices: int, seed: int, uniform: bool = False) -> SelectionPolicy:
    """The scenario's selection policy (`algorithm.selection`); `uniform` forces a uniform draw (FAST's
    snapshots) while keeping any exclusion."""

    spec = config.selection
    replace = config.sampling == "with_replacement"
    if uniform or spec.kind == "uniform":
        policy: SelectionPolicy = Uniform(replace=replace)
    else:
        policy = _build(spec, num_devices, replace)
    if spec.exclude:
        excluded = np.zeros(num_devices, dtype=bool)
        excluded[rng(seed, "excluded-devices").choice(num_devices, spec.exclude, replace=False)] = True
        policy = Excluding(policy, excluded)
    return policy


def _build(spec, num_devices: int, replace: bool) -> SelectionPolicy:
    """The policy `spec.kind` names (ours, or a plugin's: guarded and its answers checked)."""
    return build_part(SELECTIONS.get(spec.kind), f"selection policy {spec.kind!r}", SelectionPolicy,
                      GuardedSelection, spec, num_devices, replace)


@dataclass(frozen=True)
class GuardedSelection(SelectionPolicy):
    """A plugin's policy as the system model sees it: each call guarded (an exception names the plugin's own
    file and line: exit 2) and each cohort checked: integer ids, all among the devices offered, at most
    `count` of them (repeats only when sampling with replacement)."""

    inner: SelectionPolicy
    origin: str
    part: str

    def capacity(self, available: int) -> float:
        with guard(self.origin, self.part, "capacity", code=self.inner.capacity):
            answer = self.inner.capacity(available)
        if not isinstance(answer, (int, float, np.integer, np.floating)) or np.isnan(answer) or answer < 0:
            raise PluginError(f"plugin {self.origin}: {self.part}'s capacity returned {answer!r}; return how many "
                              "devices a cohort can draw from `available` (a number >= 0, inf for no limit)")
        return answer

    def select(self, available: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
        with guard(self.origin, self.part, "select", code=self.inner.select):
            raw = self.inner.select(available, count, rng)
        drawn = np.asarray(raw)
        if drawn.ndim != 1 or (len(drawn) and not np.issubdtype(drawn.dtype, np.integer)):
            self._bad(f"{type(raw).__name__} of shape {drawn.shape} and dtype {drawn.dtype}",
                      "return a 1-D integer array of device ids")
        if len(drawn) > count:
            self._bad(f"{len(drawn)} devices for a cohort of {count}", "return at most `count` device ids")
        if not np.isin(drawn, available).all():
            self._bad("devices that are not in `available`", "draw only from the device ids in `available`")
        return drawn.astype(np.int64)

    def _bad(self, what: str, fix: str):
        raise PluginError(f"plugin {self.origin}: {self.part}'s select returned {what}; {fix}")


def distinct_in_draw_order(drawn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct devices in the order first drawn, with how often each was drawn."""
    if len(drawn) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    unique, first, counts = np.unique(drawn, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    return unique[order], counts[order]

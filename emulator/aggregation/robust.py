"""Byzantine-robust aggregation rules: what the server makes of a round's updates when some may be hostile.

Pure functions of the round's updates (one row per update, in arrival order) that return the aggregate the
server steps with, and which updates it accepted (the attackers' share of accepted updates is measured
from that). References:
- coordinate-wise median and trimmed mean: Yin et al., "Byzantine-robust distributed learning: towards
  optimal statistical rates", ICML 2018 (trimmed mean drops the beta share largest and smallest per
  coordinate);
- Krum and Multi-Krum: Blanchard et al., "Machine learning with adversaries: Byzantine tolerant gradient
  descent", NeurIPS 2017 (score: the sum of squared distances to the n - f - 2 nearest other updates;
  Krum keeps the lowest, Multi-Krum averages the m lowest);
- norm bounding: Sun et al., "Can you really backdoor federated learning?", 2019 (each update scaled to
  at most norm M; adaptive here: M is the round's median update norm times a factor).
Median, trimmed mean and Krum are unweighted, as their papers define them; norm bounding keeps the
host's weights.

Each rule also counts its work in element operations (`operations`), so the server's time for it can be
charged on the simulated clock (system.server.s_per_operation, 1 ns): for n updates of d values, a sort
down each coordinate (median, trimmed mean) n d log2 n; Krum n d (2 + n / 16) (its pairwise distances are
one matrix product, which BLAS runs about 16 times faster per multiply-add than numpy's element passes);
norm bounding 1.5 n d. The weighted mean every host already runs (n d) is the baseline, not charged.
benchmarks/robust.py measures the rules against these counts: at 1 ns they price one core of the
reference machine within a factor of 2 for 10 to 100 updates of 0.2 to 1 M values.

Each rule needs a least number of updates to be itself (`*_needs`): the median 3 (the median of two is their
mean), the trimmed mean the n with floor(beta n) >= 1, Krum max(2f + 3, m + f) (Blanchard et al.'s n > 2f + 2,
and Multi-Krum's m among the n - f it may trust), an adaptive norm bound 3 (the median norm of two is set by
each of them), a fixed one 1. A scenario whose cohort is below it is refused at validation (each config's
`least_updates`); a round that gets fewer reports is `held`: no update accepted, a zero step, the host keeps
the model and the row says so. A rule never silently becomes another one.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal, Optional

import numpy as np
from pydantic import Field

from emulator.errors import PluginError, build_part, guard
from emulator.registry import AGGREGATORS
from emulator.scenario.training import AggregatorSettings


HELD_COLUMN = "aggregator_held"  # metrics.csv: 1 where the round had fewer updates than the rule needs


@dataclass(frozen=True)
class RobustResult:
    aggregate: np.ndarray  # float64, the vector the server steps with (a mean delta)
    accepted: np.ndarray  # bool per update: whether it shaped the aggregate as itself
    note: str = ""  # why a rule could not run as asked (e.g. too few updates for Krum), "" when it did
    operations: float = 0.0  # element operations the rule took (0: not counted, e.g. a plugin that does not say)
    held: bool = False  # too few updates for the rule: none accepted, a zero aggregate; the host keeps the model


def held(updates: np.ndarray, rule: str, need: int, why: str) -> RobustResult:
    """What a rule answers with fewer updates than it needs: nothing accepted, a zero step, and why."""
    rows = np.asarray(updates)
    return RobustResult(np.zeros(rows.shape[1]), np.zeros(len(rows), bool),
                        f"{rule}: {len(rows)} updates, fewer than the {need} it needs ({why}): the model is kept",
                        held=True)


# ------------------------------------------------------------------------- the updates each rule needs
MEDIAN_NEEDS = 3
MEDIAN_WHY = "the median of two updates is their mean"
NO_TRIM = 2 ** 62  # beta 0 trims nothing at any count


def trimmed_mean_needs(beta: float) -> int:
    """The fewest updates of which the trimmed mean drops at least one from each end: floor(beta n) >= 1."""
    if beta <= 0:
        return NO_TRIM
    n = max(1, int(np.ceil(1.0 / beta)) - 1)
    while np.floor(beta * n) < 1:  # the float product the rule computes, not 1 / beta's rounding
        n += 1
    return n


def krum_needs(f: int, m: int = 1) -> int:
    """Krum's n >= 2f + 3 (Blanchard et al.: n > 2f + 2), and n >= m + f: Multi-Krum averages m of the n - f
    updates it may trust (more would take in some of the f it assumes hostile)."""
    return max(2 * f + 3, m + f)


def norm_bound_needs(bound: float | None) -> int:
    """A fixed bound holds for each update alone; an adaptive one is the median norm, which the updates it
    bounds set themselves below MEDIAN_NEEDS."""
    return 1 if bound is not None else MEDIAN_NEEDS


def _sorting(n: int, d: int) -> float:
    """A per-coordinate sort of n values over d coordinates."""
    return float(n * d * max(1.0, np.log2(max(n, 1))))


def extra_operations(result: RobustResult, n: int, d: int) -> float:
    """What a rule cost beyond the weighted mean (n d) every host runs anyway: the server's extra work."""
    return max(0.0, result.operations - n * d)


def coordinate_median(updates: np.ndarray) -> RobustResult:
    """The per-coordinate median (an even count: the mean of the two middle values). Every update counts
    as accepted: none is dropped whole."""
    rows = np.asarray(updates, np.float64)
    n = len(rows)
    if n < MEDIAN_NEEDS:
        return held(rows, "median", MEDIAN_NEEDS, MEDIAN_WHY)
    ordered = np.sort(rows, axis=0)  # a sort down the columns: 4x quicker than np.median's selection along them
    median = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return RobustResult(median, np.ones(n, bool), operations=_sorting(*rows.shape))


def trimmed_mean(updates: np.ndarray, beta: float) -> RobustResult:
    """Per coordinate, the mean after dropping the floor(beta n) largest and smallest values (held where that
    is none: the plain mean is another rule)."""
    if not 0 <= beta < 0.5:
        raise ValueError(f"trimmed mean: beta {beta} must be in [0, 0.5)")
    rows = np.asarray(updates, np.float64)
    cut = int(np.floor(beta * len(rows)))
    if cut < 1:
        return held(rows, "trimmed mean", trimmed_mean_needs(beta), f"floor(beta n) with beta {beta:g}: it would "
                    "drop none, which is the plain mean")
    kept = np.sort(rows, axis=0)[cut:len(rows) - cut]
    return RobustResult(kept.mean(axis=0), np.ones(len(rows), bool), operations=_sorting(*rows.shape))


def krum_scores(updates: np.ndarray, f: int) -> np.ndarray:
    """Each update's Krum score: the sum of its squared distances to its n - f - 2 nearest other updates."""
    rows = np.asarray(updates, np.float64)
    n = len(rows)
    if n - f - 2 < 1:
        raise ValueError(f"krum: {n} updates leave no neighbour to score with f = {f}; it needs {krum_needs(f)}")
    squares = np.einsum("ij,ij->i", rows, rows)
    distances = np.maximum(squares[:, None] + squares[None, :] - 2 * rows @ rows.T, 0.0)
    np.fill_diagonal(distances, np.inf)
    return np.sort(distances, axis=1)[:, :n - f - 2].sum(axis=1)


def multi_krum(updates: np.ndarray, f: int, m: int = 1) -> RobustResult:
    """The mean of the m updates with the lowest Krum scores (m = 1: Krum). Ties go to the earlier update
    (arrival order), so the rule is deterministic. With fewer than krum_needs(f, m) updates (Krum's guarantee
    needs n >= 2f + 3; Multi-Krum's m must stay within the n - f it may trust) it is held."""
    rows = np.asarray(updates, np.float64)
    n, d = rows.shape
    need = krum_needs(f, m)
    if n < need:
        why = f"2f + 3 with f = {f}" if need == 2 * f + 3 else f"m + f: m = {m} of the n - f it may trust"
        return held(rows, "multi-krum" if m > 1 else "krum", need, why)
    scores = krum_scores(rows, f)
    chosen = np.argsort(scores, kind="stable")[:m]
    accepted = np.zeros(n, bool)
    accepted[chosen] = True
    return RobustResult(rows[chosen].mean(axis=0), accepted, "", float(n * d * (2 + n / 16)))


def norm_bound(updates: np.ndarray, weights: np.ndarray, bound: float | None = None,
               factor: float = 1.0) -> RobustResult:
    """The weighted mean after scaling each update to norm at most M: `bound`, or (None) the round's median
    update norm times `factor` (held below MEDIAN_NEEDS updates). Accepted: the updates left unscaled."""
    rows = np.asarray(updates, np.float64)
    if len(rows) < norm_bound_needs(bound):
        return held(rows, "norm bounding", MEDIAN_NEEDS, "an adaptive bound is their median norm, which "
                    "fewer updates set themselves")
    weights = np.asarray(weights, np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    limit = float(bound) if bound is not None else float(np.median(norms)) * factor
    scale = np.where(norms > limit, limit / np.maximum(norms, 1e-300), 1.0)
    total = weights.sum()
    aggregate = ((scale * weights) @ rows) / total if total > 0 else np.zeros(rows.shape[1])
    return RobustResult(aggregate, scale >= 1.0, operations=1.5 * rows.size)


# ------------------------------------------------------------------------------------ the rules' configs
class MedianAggregator(AggregatorSettings):
    """Coordinate-wise median (Yin et al., ICML 2018; Flower's FedMedian)."""

    kind: Literal["median"] = "median"

    def least_updates(self) -> tuple[int, str | None, str]:
        """(the fewest updates the rule needs at once, the field that sets it (None: the rule), why)."""
        return MEDIAN_NEEDS, None, MEDIAN_WHY


class TrimmedMeanAggregator(AggregatorSettings):
    """Coordinate-wise trimmed mean (Yin et al., ICML 2018): drop the beta share largest and smallest."""

    kind: Literal["trimmed_mean"] = "trimmed_mean"
    beta: float = Field(0.1, ge=0, lt=0.5)

    def least_updates(self) -> tuple[int, str | None, str]:
        if self.beta == 0:
            return NO_TRIM, "beta", "beta 0 drops nothing at any cohort size: it is the plain mean"
        return trimmed_mean_needs(self.beta), "beta", f"it drops floor(beta n) updates from each end, none below " \
            f"{trimmed_mean_needs(self.beta)} with beta {self.beta:g}"


class KrumAggregator(AggregatorSettings):
    """Krum (m = 1) or Multi-Krum (Blanchard et al., NeurIPS 2017), assuming f attackers a round."""

    kind: Literal["krum"] = "krum"
    f: int = Field(1, ge=0)
    m: int = Field(1, ge=1)  # updates averaged: 1 is Krum, more is Multi-Krum

    def least_updates(self) -> tuple[int, str | None, str]:
        need = krum_needs(self.f, self.m)
        if need == 2 * self.f + 3:
            return need, "f", f"n >= 2f + 3 with f = {self.f}, Blanchard et al."
        return need, "m", f"it averages m = {self.m} of the n - f updates it may trust: n >= m + f"


class NormBoundAggregator(AggregatorSettings):
    """Norm bounding (Sun et al., 2019): each update scaled to norm at most `bound`, or, without one, to the
    round's median update norm times `factor` (adaptive)."""

    kind: Literal["norm_bound"] = "norm_bound"
    bound: Optional[float] = Field(None, gt=0)
    factor: float = Field(1.0, gt=0)

    def least_updates(self) -> tuple[int, str | None, str]:
        return norm_bound_needs(self.bound), "bound", "without a bound it is the updates' median norm, which " \
            f"fewer than {MEDIAN_NEEDS} updates set themselves"


Rule = Callable[[np.ndarray, np.ndarray], RobustResult]


def median_rule(config: MedianAggregator) -> Rule:
    return lambda updates, weights: coordinate_median(updates)


def trimmed_mean_rule(config: TrimmedMeanAggregator) -> Rule:
    return lambda updates, weights: trimmed_mean(updates, config.beta)


def krum_rule(config: KrumAggregator) -> Rule:
    return lambda updates, weights: multi_krum(updates, config.f, config.m)


def norm_bound_rule(config: NormBoundAggregator) -> Rule:
    return lambda updates, weights: norm_bound(updates, weights, config.bound, config.factor)


def build_aggregator(config) -> Rule | None:
    """The rule `algorithm.aggregator` names (None: the host's weighted mean), by its registered kind: ours,
    or a plugin's, whose every call is guarded and whose result is checked."""
    if config is None:
        return None
    return build_part(AGGREGATORS.get(config.kind), f"aggregator {config.kind!r}", object, _guarded_rule, config)


def _guarded_rule(rule: Rule, origin: str, part: str) -> Rule:
    """A plugin's rule: a failure named at the plugin, and a result of the wrong shape refused."""
    def guarded(updates: np.ndarray, weights: np.ndarray) -> RobustResult:
        with guard(origin, part, "call", code=rule):
            result = rule(updates, weights)
        if not isinstance(result, RobustResult) or np.shape(result.aggregate) != (updates.shape[1],) or \
                np.shape(result.accepted) != (len(updates),):
            raise PluginError(f"plugin {origin}: {part} returned {type(result).__name__}; return an "
                              "emulator.extend.RobustResult(aggregate: one value per parameter, accepted: one bool "
                              "per update)")
        return result
    return guarded

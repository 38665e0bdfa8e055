"""How far the data that took part in a run is from the federation's data: pure numpy functions.

When who takes part depends on what data they hold, the model learns from a skewed slice of the population.
These measures make that visible every round (metrics.csv) and in the report:

- `label_mix`, `population_mix`, `total_variation`: the label distribution of a round's reports against the
  population's (the paper's TV_r, correlated-participation.md section 3);
- `random_cohort_floor`: the TV that a uniformly random cohort of the same size gets anyway, so that a
  finite cohort's noise is not mistaken for bias (the excess over it is the bias);
- `unseen_share`, `UnseenData`: the share of training samples on devices that never reported so far;
- `class_correct`, `class_accuracy`, `worst_class`: per-class test accuracy, where label skew shows first.

Nothing here loops over the population in Python: the per-round work is over the reporting cohort only, so
a population of 10^6 devices costs microseconds a round (the floor is computed once per cohort size).
"""
from __future__ import annotations

import numpy as np

WEIGHTINGS = ("samples", "uniform")
FLOOR_DRAWS = 200  # random cohorts per floor: the floor's standard error is about sd(TV) / 14


def population_mix(label_counts: np.ndarray) -> np.ndarray:
    """P(c): the share of class c among all training samples of the federation (the objective's target)."""
    totals = np.asarray(label_counts, dtype=np.float64).sum(axis=0)
    return totals / totals.sum() if totals.sum() > 0 else totals


def label_mix(label_counts: np.ndarray, devices, counts=None, weighting: str = "samples") -> np.ndarray | None:
    """The label distribution of the data that reported, weighted as the aggregation weights the updates.

    `devices` are the distinct reporting devices and `counts` how often each was drawn (sampling with
    replacement weighs a repeat twice, as aggregation does; default once each). "samples": each device's label
    counts, times its count, over the samples they add up to; "uniform": the mean of each device's own
    label distribution q_i, weighted by its count. A device without samples gets no weight (it trains no
    step, and aggregation gives it none). None when no reported device holds data."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting {weighting!r}: one of {', '.join(WEIGHTINGS)}")
    devices = np.asarray(devices, dtype=np.int64)
    if len(devices) == 0:
        return None
    rows = np.asarray(label_counts)[devices].astype(np.float64)
    weights = np.ones(len(devices)) if counts is None else np.asarray(counts, dtype=np.float64)
    held = rows.sum(axis=1)
    if weighting == "uniform":
        weights = np.where(held > 0, weights, 0.0)
        rows = rows / np.where(held > 0, held, 1.0)[:, None]
    mix = weights @ rows
    total = mix.sum()
    return mix / total if total > 0 else None


def total_variation(p, q) -> float:
    """0.5 * sum_c |p(c) - q(c)|: 0 for the same distribution, 1 for disjoint ones."""
    return float(0.5 * np.abs(np.asarray(p, dtype=np.float64) - np.asarray(q, dtype=np.float64)).sum())


def random_cohort_floor(label_counts: np.ndarray, size: int, weighting: str, rng: np.random.Generator,
                        draws: int = FLOOR_DRAWS, population: np.ndarray | None = None) -> float:
    """The mean label TV of `draws` uniformly random cohorts of `size` distinct devices from the whole
    population: what a finite cohort gets with no bias at all (and, with "uniform" weighting, what weighing
    devices equally costs). Deterministic for a given `rng`; the caller caches it per size."""
    label_counts = np.asarray(label_counts)
    devices = len(label_counts)
    size = int(min(size, devices))
    if size <= 0:
        return float("nan")
    target = population_mix(label_counts) if population is None else population
    values = []
    for _ in range(draws):  # a loop over draws, not devices: each draw touches `size` rows
        mix = label_mix(label_counts, rng.choice(devices, size, replace=False), None, weighting)
        if mix is not None:
            values.append(total_variation(mix, target))
    return float(np.mean(values)) if values else float("nan")


def unseen_share(sizes, reported_counter) -> float:
    """The share of training samples on devices that have not reported yet (reported_counter == 0)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum())
    if total == 0:
        return float("nan")
    return float(np.dot(sizes, np.asarray(reported_counter) == 0) / total)


class UnseenData:
    """`unseen_share` kept up to date in O(cohort) a round: `reset` reads the whole counter once (at the
    start, after loading a checkpoint), `update` only the devices that may have reported this round."""

    def __init__(self, sizes, reported_counter):
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.total = int(self.sizes.sum())
        self.reset(reported_counter)

    def reset(self, reported_counter) -> None:
        self.seen = np.asarray(reported_counter) > 0
        self.unseen = int(np.dot(self.sizes, ~self.seen))

    def update(self, devices, reported_counter) -> float:
        """Mark those of `devices` that have now reported; returns the share still unseen."""
        devices = np.unique(np.asarray(devices, dtype=np.int64))
        new = devices[(np.asarray(reported_counter)[devices] > 0) & ~self.seen[devices]]
        self.seen[new] = True
        self.unseen -= int(self.sizes[new].sum())
        return self.share

    @property
    def share(self) -> float:
        return self.unseen / self.total if self.total else float("nan")


def class_correct(predictions, labels, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Per class: how many test samples of it were classified correctly, and how many there are."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    correct = np.bincount(labels[predictions == labels], minlength=num_classes)
    return correct.astype(np.int64), np.bincount(labels, minlength=num_classes).astype(np.int64)


def class_accuracy(correct, total) -> np.ndarray:
    """Per-class accuracy; NaN for a class with no test samples."""
    correct, total = np.asarray(correct, dtype=np.float64), np.asarray(total, dtype=np.float64)
    return np.divide(correct, total, out=np.full(len(total), np.nan), where=total > 0)


def worst_class(accuracy) -> tuple[int | None, float | None]:
    """The class the model gets wrong most (the lowest index on a tie) and its accuracy; (None, None)
    when no class has test samples."""
    accuracy = np.asarray(accuracy, dtype=np.float64)
    if not np.any(~np.isnan(accuracy)):
        return None, None
    index = int(np.nanargmin(accuracy))
    return index, float(accuracy[index])

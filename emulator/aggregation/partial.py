"""Updates folded where they are trained: a runner sums its task's updates into one partial mean, and only
that crosses to the server, which merges the partials (one model-sized message a task instead of one a
device). The sums are exact (aggregation/exact.py), so a round's mean is the same bit for bit whoever
folded what: one runner or eight, any group size, Ray or in process, folded or not.
"""
from __future__ import annotations

from dataclasses import dataclass

from emulator.aggregation.mean import WeightedMean

WEIGHTINGS = ("samples", "uniform")


def update_weight(weighting: str, num_samples: int, steps: int, multiplicity: int) -> float:
    """An update's weight in a FedAvg mean: its samples (or 1) times the times its device was drawn; 0 for a
    device that had no data to train on (no steps: it sends no information)."""
    if steps == 0:
        return 0.0
    base = num_samples if weighting == "samples" else 1.0
    return float(base * multiplicity)


@dataclass(frozen=True)
class Folding:
    """What a runner needs to fold a round's updates: the rule for each update's weight. An algorithm
    gives one (Algorithm.partial_fold) when its round is a weighted mean of the updates and nothing else
    reads them one at a time."""

    weighting: str = "samples"

    def __post_init__(self):
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting {self.weighting!r}: one of {', '.join(WEIGHTINGS)}")

    def fold(self, updates, size: int) -> "PartialSum":
        """The updates (ClientUpdate, in job order) as one partial sum, with each one's training stats."""
        mean = WeightedMean(size)
        for update in updates:
            mean.add(update.delta, update_weight(self.weighting, update.num_samples, update.stats.steps,
                                                 update.multiplicity))
        return PartialSum(mean, [update.device for update in updates], [update.stats for update in updates])


@dataclass
class PartialSum:
    """A task's updates folded: their weighted sum, and which devices they came from with how each one's
    training went (in job order: the round's per-device statistics)."""

    mean: WeightedMean
    devices: list[int]
    stats: list

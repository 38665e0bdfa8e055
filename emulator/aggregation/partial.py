"""Updates folded where they are trained: a runner sums its tasks' updates into one partial mean that it
holds through the round, and only that crosses to the server when the round's training is done (one
message a runner a round, instead of one a device). The sums are exact (aggregation/exact.py), so a
round's mean is the same bit for bit whoever folded what: one runner or eight, any group size, Ray or in
process, folded or not.
"""
from __future__ import annotations

from dataclasses import dataclass

from emulator.aggregation.exact import FINEST_UNIT
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
    """What a runner needs to fold a round's updates: the rule for each update's weight, and the unit its
    sum rounds each term to (the one the server's own mean of the round would use). An algorithm gives one
    (Algorithm.partial_fold) when its round is a weighted mean of the updates and nothing else reads them
    one at a time."""

    weighting: str = "samples"
    unit: int = FINEST_UNIT

    def __post_init__(self):
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting {self.weighting!r}: one of {', '.join(WEIGHTINGS)}")

    def fold_into(self, mean: WeightedMean, updates) -> None:
        """Add the updates (ClientUpdate) to `mean`, each with its weight by this rule."""
        for update in updates:
            mean.add(update.delta, update_weight(self.weighting, update.num_samples, update.stats.steps,
                                                 update.multiplicity))


@dataclass(frozen=True)
class FoldTask:
    """A task's instruction to fold its updates into the sum its runner holds for the round: the rule,
    the round's ticket (new for each time a round is played, so a round replayed after a restart never
    meets the sum of the attempt before) and the task's group number (which groups a held sum covers)."""

    rule: Folding
    ticket: str
    group: int


@dataclass
class FoldReceipt:
    """What a folding task sends back: which devices it trained and how each one's training went."""

    devices: list[int]
    stats: list


@dataclass
class HeldSum:
    """A runner's sum of a round's updates, and the groups it holds."""

    mean: WeightedMean
    groups: list[int]


class HeldSums:
    """The round's sums a runner holds between its tasks, one a run: a task folds into it, the server takes
    it when the round's training is done. A new ticket for a run replaces what was held for it."""

    def __init__(self):
        self._held: dict[str, tuple[str, HeldSum]] = {}  # run key -> (ticket, its sum)

    def fold(self, run_key: str, task: FoldTask, updates, size: int) -> FoldReceipt:
        ticket, held = self._held.get(run_key, (None, None))
        if ticket != task.ticket:
            held = HeldSum(WeightedMean(size, task.rule.unit), [])
            self._held[run_key] = (task.ticket, held)
        if task.group not in held.groups:  # else Ray retried a task of a runner it restarted, and the server
            task.rule.fold_into(held.mean, updates)  # trained the group again too: same seeds, same updates, once
            held.groups.append(task.group)
        return FoldReceipt([update.device for update in updates], [update.stats for update in updates])

    def take(self, run_key: str, ticket: str) -> HeldSum | None:
        """The sum held for this round (and forget it); None when this runner holds none (it trained no
        group of the round, or it restarted and lost it)."""
        held_ticket, held = self._held.get(run_key, (None, None))
        if held_ticket != ticket:
            return None
        del self._held[run_key]
        return held

    def forget(self, run_key: str) -> None:
        self._held.pop(run_key, None)

    def runs(self) -> set[str]:
        return set(self._held)

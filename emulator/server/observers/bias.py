"""Who reported, against the population: the round's label mix and the data never seen so far.

label_tv is the total variation between the reports' label mix and the population's; label_tv_floor is
the mean TV of uniformly random cohorts of the same size (what chance alone gives); unseen_share is the
share of training samples no report has covered yet. Rounds without reports leave the first two empty.
"""
from __future__ import annotations

import numpy as np

from emulator.recording import bias
from emulator.seeding import rng
from emulator.server.observers.base import Observer


class LabelBias(Observer):
    columns = ("label_tv", "label_tv_floor", "unseen_share")

    def __init__(self, world):
        super().__init__(world)
        self.population_mix = bias.population_mix(world.label_counts)
        self.unseen = bias.UnseenData(world.sizes, world.system.ledger.counts["reported"])
        self._floors: dict[int, float] = {}  # cohort size -> random-cohort TV floor (from the seed: not saved)

    def after_round(self, record, played) -> dict:
        world = self.world
        devices, counts = played.devices, played.counts
        maybe_new = np.concatenate([np.asarray(played.outcome.selected, np.int64), np.asarray(devices, np.int64)])
        unseen = self.unseen.update(maybe_new, world.system.ledger.counts["reported"])
        weighting = getattr(world.scenario.algorithm, "weighting", "uniform")
        mix = bias.label_mix(world.label_counts, devices, counts, weighting) if len(devices) else None
        if mix is None:
            return {"label_tv": None, "label_tv_floor": None, "unseen_share": unseen}
        return {"label_tv": bias.total_variation(mix, self.population_mix),
                "label_tv_floor": self.floor(len(devices), weighting), "unseen_share": unseen}

    def floor(self, size: int, weighting: str) -> float:
        """The mean label TV of uniformly random cohorts of `size` devices: computed once per size, from the
        seed alone, so that it is the same after a resume and with any number of runners."""
        if size not in self._floors:
            self._floors[size] = bias.random_cohort_floor(
                self.world.label_counts, size, weighting, rng(self.world.scenario.seed, "label-tv-floor", size),
                population=self.population_mix)
        return self._floors[size]

    def load_state(self, state: dict) -> None:
        self.unseen.reset(self.world.system.ledger.counts["reported"])

"""A metrics column of our own: how evenly the rounds so far have spread participation over the fleet.

Jain's fairness index of the devices' report counts, (sum x)^2 / (n sum x^2): 1 when every device has
reported equally often, 1/n when one device did all the reporting. An observer: it declares its column,
and after every round returns its value, reading the world the server holds (the participation ledger).
"""
from typing import Literal

import numpy as np

from emulator.extend import Observer, ObserverSettings, register_observer


class FairnessConfig(ObserverSettings):
    """Jain's fairness index of how often each device has reported (or been selected) so far."""

    kind: Literal["fairness"] = "fairness"
    of: Literal["reported", "selected"] = "reported"


class Fairness(Observer):
    def __init__(self, config: FairnessConfig, world):
        super().__init__(world)
        self.counter = config.of
        self.columns = (f"{config.of}_fairness",)

    def after_round(self, record, played) -> dict:
        counts = self.world.system.ledger.counts[self.counter].astype(np.float64)
        square = float(np.sum(counts ** 2))
        return {self.columns[0]: float(counts.sum() ** 2 / (len(counts) * square)) if square else None}


register_observer("fairness", Fairness, config=FairnessConfig)

"""FedAvg with two-sided learning rates (Yang, Fang, Liu; ICLR 2021)."""
from __future__ import annotations

from typing import Iterable

import numpy as np

from emulator.aggregation import WeightedMean, server_update
from emulator.algorithms.base import Algorithm, ClientUpdate, RoundPlan
from emulator.algorithms.selection import Uniform
from emulator.training import LocalTraining


def local_training_from(config) -> LocalTraining:
    """The device-side part of any algorithm config (the schema's ClientTraining fields)."""
    return LocalTraining(lr=config.client_lr, batch_size=config.batch_size, local_steps=config.local_steps,
                         local_epochs=config.local_epochs, optimizer=config.client_optimizer,
                         momentum=config.client_momentum, weight_decay=config.weight_decay)


class FedAvg(Algorithm):
    """Devices run K local steps (or E epochs) with lr eta_L; the server moves x by eta times the mean delta.

    Weights: uniform (each draw counts once, so a device drawn twice counts twice) or by sample count."""

    name = "fedavg"

    def __init__(self, config, context):
        super().__init__(config, context)
        self._local = local_training_from(config)
        self._selection = Uniform(replace=config.sampling == "with_replacement")

    def plan_round(self, round_index: int) -> RoundPlan:
        return RoundPlan("client", self.config.clients_per_round, self._selection)

    def local_training(self, device: int) -> LocalTraining:
        return self._local

    def weight(self, update: ClientUpdate) -> float:
        """A device that had no data to train on (steps == 0) sends no information and gets no weight."""
        if update.stats.steps == 0:
            return 0.0
        base = update.num_samples if self.config.weighting == "samples" else 1.0
        return float(base * update.multiplicity)

    def aggregate(self, params: np.ndarray, updates: Iterable[ClientUpdate]) -> np.ndarray:
        mean = WeightedMean(len(params))
        for update in updates:
            mean.add(update.delta, self.weight(update))
        if mean.weight == 0:
            return params
        return server_update(params, mean.mean(), self.config.server_lr)

"""FedAvg with two-sided learning rates (Yang, Fang, Liu; ICLR 2021), and the hosts built on it:
FedProx (a proximal term on the devices) and FedAvgM (server momentum)."""
from __future__ import annotations

from typing import Iterable

import numpy as np

from emulator.aggregation import WeightedMean, server_update
from emulator.algorithms.base import Algorithm, ClientUpdate, RoundPlan
from emulator.algorithms.selection import build_selection
from emulator.training import LocalTraining


def local_training_from(config, **changes) -> LocalTraining:
    """The device-side part of any algorithm config (the schema's ClientTraining fields)."""
    spec = dict(lr=config.client_lr, batch_size=config.batch_size, local_steps=config.local_steps,
                local_epochs=config.local_epochs, optimizer=config.client_optimizer,
                momentum=config.client_momentum, weight_decay=config.weight_decay)
    spec.update(changes)
    return LocalTraining(**spec)


class FedAvg(Algorithm):
    """Devices run K local steps (or E epochs) with lr eta_L; the server moves x by eta times the mean delta.

    Weights: uniform (each draw counts once, so a device drawn twice counts twice) or by sample count."""

    name = "fedavg"

    def __init__(self, config, context):
        super().__init__(config, context)
        self._local = local_training_from(config)
        self.selection = build_selection(config, context.num_devices, context.seed)

    def plan_round(self, round_index: int) -> RoundPlan:
        return RoundPlan("client", self.config.clients_per_round, self.selection)

    def local_training(self, device: int) -> LocalTraining:
        return self._local

    def weight(self, update: ClientUpdate) -> float:
        """A device that had no data to train on (steps == 0) sends no information and gets no weight."""
        if update.stats.steps == 0:
            return 0.0
        base = update.num_samples if self.config.weighting == "samples" else 1.0
        return float(base * update.multiplicity)

    def mean_delta(self, params: np.ndarray, updates: Iterable[ClientUpdate]) -> WeightedMean:
        mean = WeightedMean(len(params))
        for update in updates:
            mean.add(update.delta, self.weight(update))
            self.observe(update)
        return mean

    def observe(self, update: ClientUpdate) -> None:
        """Per-update bookkeeping beyond the mean (SCAFFOLD's control variates)."""

    def server_step(self, params: np.ndarray, mean_delta: np.ndarray) -> np.ndarray:
        return server_update(params, mean_delta, self.config.server_lr)

    def aggregate(self, params, updates, round_index):
        mean = self.mean_delta(params, updates)
        if mean.weight == 0:
            return params
        return self.server_step(params, mean.mean())


class FedProx(FedAvg):
    """FedProx (Li et al., MLSys 2020): each device minimises F_i(w) + (mu / 2) ||w - x||^2."""

    name = "fedprox"

    def __init__(self, config, context):
        super().__init__(config, context)
        self._local = local_training_from(config, prox_mu=config.mu)


class FedAvgM(FedAvg):
    """FedAvgM (Hsu et al., 2019): v <- beta v + mean(delta); x <- x + eta v."""

    name = "fedavgm"

    def __init__(self, config, context):
        super().__init__(config, context)
        self.velocity = np.zeros(context.num_params, dtype=np.float32)

    def server_step(self, params, mean_delta):
        self.velocity = (self.config.momentum * self.velocity.astype(np.float64) + mean_delta).astype(np.float32)
        return server_update(params, self.velocity, self.config.server_lr)

    def state(self):
        return {"velocity": self.velocity.copy()}

    def load_state(self, state):
        self.velocity = np.asarray(state["velocity"], dtype=np.float32).copy()

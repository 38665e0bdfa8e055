"""FedAvg with two-sided learning rates (Yang, Fang, Liu; ICLR 2021), and the hosts built on it:
FedProx (a proximal term on the devices) and FedAvgM (server momentum).

The server step goes through a server optimizer (emulator/aggregation/optimizers.py: sgd, the default, or
FedAdagrad / FedAdam / FedYogi), and every rate may follow a schedule (emulator/aggregation/schedules.py): the rates of
round r are a pure function of r, set when the round is planned and again when it is aggregated, so
nothing about them needs saving; the optimizer's moments go into `state()`."""
from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Literal

import numpy as np
from pydantic import Field, model_validator

from emulator.aggregation.exact import FINEST_UNIT, unit_for
from emulator.aggregation.mean import WeightedMean, server_update
from emulator.aggregation.partial import Folding, update_weight
from emulator.aggregation.optimizers import build_server_optimizer
from emulator.aggregation.robust import HELD_COLUMN, build_aggregator, extra_operations
from emulator.aggregation.schedules import lr_at
from emulator.algorithms.base import Algorithm, ClientUpdate, RoundKind, RoundPlan
from emulator.algorithms.selection import build_selection
from emulator.scenario.training import ClientTraining, single_server_momentum
from emulator.training.local import LocalTraining


class FedAvgConfig(ClientTraining):
    """FedAvg with two-sided learning rates (Yang et al., ICLR 2021): x <- x + server_lr * mean(delta)."""

    name: Literal["fedavg"] = "fedavg"
    server_lr: float = Field(1.0, gt=0)


class FedProxConfig(ClientTraining):
    """FedProx (Li et al.): devices add (mu / 2) ||w - x||^2 to their loss."""

    name: Literal["fedprox"] = "fedprox"
    server_lr: float = Field(1.0, gt=0)
    mu: float = Field(0.01, ge=0)


class FedAvgMConfig(ClientTraining):
    """FedAvgM (Hsu et al.): server momentum, v <- beta v + mean(delta); x <- x + server_lr v."""

    name: Literal["fedavgm"] = "fedavgm"
    server_lr: float = Field(1.0, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)

    @model_validator(mode="after")
    def _one_momentum(self):
        single_server_momentum(self, "fedavgm")
        return self


def local_training_from(config, **changes) -> LocalTraining:
    """The device-side part of any algorithm config (the schema's ClientTraining fields)."""
    spec = dict(lr=config.client_lr, batch_size=config.batch_size, local_steps=config.local_steps,
                local_epochs=config.local_epochs, optimizer=config.client_optimizer,
                momentum=config.client_momentum, weight_decay=config.weight_decay)
    spec.update(changes)
    return LocalTraining(**spec)


# What a subclass overrides to read or weigh the updates its own way: then they travel one by one.
_MEAN_HOOKS = ("weight", "observe", "mean_delta", "robust_delta", "aggregate", "aggregate_partials")


class FedAvg(Algorithm):
    """Devices run K local steps (or E epochs) with lr eta_L; the server moves x by eta times the mean delta.

    Weights: uniform (each draw counts once, so a device drawn twice counts twice) or by sample count."""

    name = "fedavg"
    rates: tuple[str, ...] = ("client_lr", "server_lr")  # the config's rates; `<rate>_schedule` schedules one
    honours_rates = True

    def __init__(self, config, context):
        super().__init__(config, context)
        self._local = local_training_from(config)
        self.selection = build_selection(config, context.num_devices, context.seed)
        self.server_optimizer = build_server_optimizer(getattr(config, "server_optimizer", None),
                                                       context.num_params, context.parameter_mask)
        self._round, self._rates = 1, None
        if self.scheduled:  # the rates in use go into metrics.csv; without a schedule the columns stay as they were
            self.columns = tuple(self.columns) + tuple(self.rates)
        self.aggregator = build_aggregator(getattr(config, "aggregator", None))
        self.acceptance: tuple[np.ndarray, np.ndarray] | None = None  # (devices, accepted) of the last robust round
        self.operations = 0.0  # the robust rule's element operations beyond the mean, this round (for the clock)
        self.held = False  # whether the rule had too few updates this round, so the model was kept
        self.sum_unit = FINEST_UNIT  # the unit the round's mean rounds each term to: set by the last round's size
        if self.aggregator is not None:
            self.columns = tuple(self.columns) + ("updates_accepted", HELD_COLUMN)

    # ------------------------------------------------------------------------------------ rates
    @property
    def scheduled(self) -> bool:
        return any(getattr(self.config, f"{rate}_schedule", None) is not None for rate in self.rates)

    def rates_at(self, round_index: int) -> dict[str, float]:
        """Each rate of round `round_index` (1-based): the config's value, through its schedule if any."""
        total = self.context.total_rounds
        return {rate: lr_at(getattr(self.config, rate), getattr(self.config, f"{rate}_schedule", None),
                            round_index, total) for rate in self.rates if hasattr(self.config, rate)}

    def set_round(self, round_index: int) -> None:
        """The round whose rates `lr` gives (before any round is planned: round 1's)."""
        self._round = round_index

    @property
    def lr(self) -> dict[str, float]:
        if self._rates is None or self._rates[0] != self._round:
            self._rates = (self._round, self.rates_at(self._round))
        return self._rates[1]

    # ------------------------------------------------------------------------------------ hooks
    def plan_round(self, round_index: int) -> RoundPlan:
        self.set_round(round_index)
        return RoundPlan(RoundKind.CLIENT, self.config.clients_per_round, self.selection)

    def local_training(self, device: int) -> LocalTraining:
        lr = self.lr["client_lr"]
        return self._local if lr == self._local.lr else replace(self._local, lr=lr)

    def weight(self, update: ClientUpdate) -> float:
        """A device that had no data to train on (steps == 0) sends no information and gets no weight."""
        return update_weight(self.config.weighting, update.num_samples, update.stats.steps, update.multiplicity)

    def partial_fold(self) -> Folding | None:
        """Runners may fold the updates when the round is the plain weighted mean: no robust rule, and no
        subclass that weighs, observes or aggregates the updates its own way."""
        if self.aggregator is not None or any(getattr(type(self), hook) is not getattr(FedAvg, hook)
                                              for hook in _MEAN_HOOKS):
            return None
        return Folding(self.config.weighting, self.sum_unit)

    def mean_delta(self, params: np.ndarray, updates: Iterable[ClientUpdate]) -> WeightedMean:
        if self.aggregator is not None:
            mean = self.robust_delta(params, updates)
        else:
            mean = WeightedMean(len(params), self.sum_unit)
            for update in updates:
                mean.add(update.delta, self.weight(update))
                self.observe(update)
            self.sum_unit = unit_for(mean.total)
        release = self.context.release  # client-level DP: the noised sum over the expected cohort
        return release(mean, self._round) if release is not None else mean

    def accepted_updates(self):
        return self.acceptance

    def server_operations(self) -> float:
        return self.operations

    def robust_delta(self, params: np.ndarray, updates: Iterable[ClientUpdate]) -> WeightedMean:
        """algorithm.aggregator's rule over the round's updates (every one at once: the rules need them all),
        as a mean of the round's total weight (so DP's release, with norm bounding, noises the sum it expects);
        which updates it accepted, and the rule's extra work, are kept for the round's metrics and clock."""
        kept = []
        for update in updates:
            weight = self.weight(update)
            self.observe(update)
            if weight > 0:
                kept.append((update.device, update.delta, weight))
        mean = WeightedMean(len(params))
        if not kept:
            self.acceptance = (np.zeros(0, np.int64), np.zeros(0, bool))
            return mean
        rows, weights = np.stack([delta for _, delta, _ in kept]), np.array([w for _, _, w in kept])
        result = self.aggregator(rows, weights)
        self.keep_acceptance(np.array([device for device, _, _ in kept], np.int64), result, rows.shape)
        if result.held:  # fewer updates than the rule needs: no step, the model as it was (the row says so)
            return mean
        mean.total = np.asarray(result.aggregate, np.float64) * weights.sum()
        mean.weight, mean.count = float(weights.sum()), len(kept)
        return mean

    def keep_acceptance(self, devices: np.ndarray, result, shape: tuple[int, int]) -> None:
        """A robust step's record: which devices' updates it accepted, and its work beyond the mean (added to
        the round's: FedAsync takes a step per report)."""
        accepted = np.asarray(result.accepted, bool)
        if self.acceptance is not None:
            devices = np.concatenate([self.acceptance[0], devices])
            accepted = np.concatenate([self.acceptance[1], accepted])
        self.acceptance = (devices, accepted)
        self.operations += extra_operations(result, *shape)
        self.held = self.held or bool(getattr(result, "held", False))

    def observe(self, update: ClientUpdate) -> None:
        """Per-update bookkeeping beyond the mean (SCAFFOLD's control variates)."""

    def server_step(self, params: np.ndarray, mean_delta: np.ndarray) -> np.ndarray:
        return self.server_optimizer.step(params, mean_delta, self.lr["server_lr"])

    def aggregate(self, params, updates, round_index):
        self.set_round(round_index)
        return self._step(params, self.mean_delta(params, updates))

    def aggregate_partials(self, params, partials, round_index):
        self.set_round(round_index)
        mean = WeightedMean(len(params), self.sum_unit)
        for partial in partials:
            mean.merge(partial)
        self.sum_unit = unit_for(mean.total)
        release = self.context.release
        return self._step(params, release(mean, self._round) if release is not None else mean)

    def _step(self, params: np.ndarray, mean: WeightedMean) -> np.ndarray:
        return params if mean.weight == 0 else self.server_step(params, mean.mean())

    def after_round(self, row: dict) -> dict:
        values = dict(self.lr) if self.scheduled else {}
        if self.aggregator is not None:
            values["updates_accepted"] = int(self.acceptance[1].sum()) if self.acceptance is not None else 0
            values[HELD_COLUMN] = int(self.held)
            self.acceptance, self.operations, self.held = None, 0.0, False
        return values

    def state(self) -> dict:
        """The server optimizer's moments (sgd has none) and the next round's sum unit (a resumed run rounds
        as an uninterrupted one; without either the state, and old checkpoints, stay as they were)."""
        optimizer = self.server_optimizer.state()
        return ({"server_optimizer": optimizer} if optimizer else {}) | (
            {"sum_unit": self.sum_unit} if self.sum_unit != FINEST_UNIT else {})

    def load_state(self, state: dict) -> None:
        if "server_optimizer" in state:
            self.server_optimizer.load_state(state["server_optimizer"])
        self.sum_unit = state.get("sum_unit", FINEST_UNIT)


class FedProx(FedAvg):
    """FedProx (Li et al., MLSys 2020): each device minimises F_i(w) + (mu / 2) ||w - x||^2."""

    name = "fedprox"

    def __init__(self, config, context):
        super().__init__(config, context)
        self._local = local_training_from(config, prox_mu=config.mu)


class FedAvgM(FedAvg):
    """FedAvgM (Hsu et al., 2019): v <- beta v + mean(delta); x <- x + eta v. Its momentum is its server
    optimizer: the schema refuses an adaptive server_optimizer on top."""

    name = "fedavgm"

    def __init__(self, config, context):
        super().__init__(config, context)
        self.velocity = np.zeros(context.num_params, dtype=np.float32)

    def server_step(self, params, mean_delta):
        self.velocity = (self.config.momentum * self.velocity.astype(np.float64) + mean_delta).astype(np.float32)
        return server_update(params, self.velocity, self.lr["server_lr"])

    def state(self):
        return {**super().state(), "velocity": self.velocity.copy()}

    def load_state(self, state):
        super().load_state(state)
        self.velocity = np.asarray(state["velocity"], dtype=np.float32).copy()

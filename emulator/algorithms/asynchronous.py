"""Asynchronous aggregation on the simulated clock: FedAsync and FedBuff (../shared/papers/async.md).

There are no rounds: the server keeps `concurrency` devices training at once (emulator/system/stream.py),
and each metrics row is one server update. An asynchronous algorithm says how many reports make an update
(`reports_per_update`: FedBuff's buffer K, 1 for FedAsync) and how the reports, each with its staleness and
the model its device downloaded, move the global model (`apply`). Everything else (what a device runs,
the server optimizer, rate schedules by server update) is FedAvg's.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from emulator.aggregation.staleness import StalenessBuffer, fedasync_mix, robust_buffer_step, staleness_weight
from emulator.algorithms.base import Arrival, RoundKind, RoundPlan
from emulator.algorithms.fedavg import FedAvg
from emulator.scenario.base import ScenarioFieldError
from emulator.scenario.training import AsynchronousTraining


class FedAsyncConfig(AsynchronousTraining):
    """FedAsync (Xie et al. 2019): each report mixed in at once with weight alpha s(d)."""

    name: Literal["fedasync"] = "fedasync"
    alpha: float = Field(0.6, gt=0, le=1)  # the mixing weight

    def robust_batch(self):
        return 1, "a report at a time"

    @model_validator(mode="after")
    def _no_server_step(self):
        if self.server_optimizer is not None and self.server_optimizer.kind != "sgd":
            raise ScenarioFieldError("algorithm.server_optimizer", "fedasync mixes each report into the model "
                                     "(alpha s(d)) and takes no server optimizer step; leave it out, or use "
                                     "fedbuff, whose buffered step takes one")
        if self.server_lr_schedule is not None:
            raise ScenarioFieldError("algorithm.server_lr_schedule", "fedasync has no server learning rate "
                                     "(alpha is its mixing weight); leave it out")
        rule = self.aggregator
        if rule is not None and (rule.kind != "norm_bound" or rule.bound is None):
            raise ScenarioFieldError("algorithm.aggregator", "fedasync applies each report alone, and a rule over "
                                     "one update keeps it as it is (an adaptive bound is its own norm); use "
                                     "norm_bound with a fixed bound, or fedbuff, whose buffer the rule sees whole")
        return self


class FedBuffConfig(AsynchronousTraining):
    """FedBuff (Nguyen et al. 2022): a server step per `buffer` reports, staleness-weighted."""

    name: Literal["fedbuff"] = "fedbuff"
    buffer: int = Field(10, gt=0)  # K, reports per server update
    server_lr: float = Field(1.0, gt=0)
    normalisation: Literal["count", "weights", "none"] = "count"  # the buffer's sum / K, / sum of s(d), or as is

    def robust_batch(self):
        return self.buffer, "buffer"

    @model_validator(mode="after")
    def _buffer_fits(self):
        if self.buffer > self.concurrency:
            raise ScenarioFieldError("algorithm.buffer", f"{self.buffer} reports per server update, but only "
                                     f"{self.concurrency} devices train at once (algorithm.concurrency); lower "
                                     "the buffer or raise the concurrency")
        return self


class AsynchronousAlgorithm(FedAvg):
    asynchronous = True

    @property
    def concurrency(self) -> int:
        return self.config.concurrency

    @property
    def reports_per_update(self) -> int:
        return 1

    def plan_round(self, round_index: int) -> RoundPlan:
        self.set_round(round_index)
        return RoundPlan(RoundKind.ASYNC, self.reports_per_update, self.selection)

    def weight_of(self, staleness: int) -> float:
        """s(d); 0 for an update staler than max_staleness (discarded: wasted work)."""
        limit = self.config.max_staleness
        if limit is not None and staleness > limit:
            return 0.0
        settings = self.config.staleness
        return staleness_weight(settings.kind, staleness, settings.a, settings.b)

    def aggregate(self, params, updates, round_index):
        raise TypeError(f"{self.name} is asynchronous: its reports arrive through apply(), not aggregate()")


class FedAsync(AsynchronousAlgorithm):
    """FedAsync (Xie et al. 2019): every report is mixed in at once, w <- (1 - alpha s(d)) w + alpha s(d) x_new,
    x_new being the device's trained model (the model it downloaded plus its delta)."""

    name = "fedasync"
    rates = ("client_lr",)

    def apply(self, params, arrivals, update_index):
        self.set_round(update_index)
        for arrival in arrivals:
            weight = self.weight_of(arrival.staleness)
            if weight == 0.0 or arrival.update.stats.steps == 0:
                continue
            delta = arrival.update.delta
            if self.aggregator is not None:  # norm bounding, each report alone (the schema allows no other rule)
                result = self.aggregator(delta[None, :].astype(np.float64), np.ones(1))
                self.keep_acceptance(np.array([arrival.update.device]), result, (1, len(delta)))
                delta = result.aggregate
            trained = (arrival.downloaded.astype(np.float64) + delta).astype(np.float32)
            params = fedasync_mix(params, trained, self.config.alpha, weight)
        return params


class FedBuff(AsynchronousAlgorithm):
    """FedBuff (Nguyen et al. 2022): K staleness-weighted deltas are buffered, then one server step with
    their normalised sum (`normalisation`: count = the paper's / K, weights, none) through the server
    optimizer at server_lr."""

    name = "fedbuff"

    def __init__(self, config, context):
        super().__init__(config, context)
        self.buffer = StalenessBuffer(context.num_params)

    @property
    def reports_per_update(self) -> int:
        return self.config.buffer

    def apply(self, params, arrivals, update_index):
        self.set_round(update_index)
        buffered = [(arrival, self.weight_of(arrival.staleness)) for arrival in arrivals]
        buffered = [(a, w) for a, w in buffered if w > 0.0 and a.update.stats.steps > 0]  # too stale, or no data
        if self.aggregator is not None:
            return self._robust_step(params, buffered)
        for arrival, weight in buffered:
            self.buffer.add(arrival.update.delta, weight)
        if self.buffer.count == 0:
            return params
        return self.server_step(params, self.buffer.flush(self.config.normalisation))

    def _robust_step(self, params, buffered):
        """algorithm.aggregator's rule over the buffer in place of its sum (aggregation/staleness.py)."""
        devices = np.array([a.update.device for a, _ in buffered], np.int64)
        if not buffered:
            self.acceptance = (devices, np.zeros(0, bool))
            return params
        deltas = np.stack([a.update.delta for a, _ in buffered])
        step, result = robust_buffer_step(deltas, np.array([w for _, w in buffered]), self.aggregator,
                                          self.config.normalisation)
        self.keep_acceptance(devices, result, deltas.shape)
        if result.held:  # fewer reports than the rule needs: no step, the model as it was (the row says so)
            return params
        return self.server_step(params, step)

    def state(self):
        return {**super().state(), "buffer": self.buffer.state()}

    def load_state(self, state):
        super().load_state(state)
        if "buffer" in state:
            self.buffer.load_state(state["buffer"])

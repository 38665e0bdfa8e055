"""FAST: FedAvg with snapshot rounds under arbitrary client participation (fixed and adaptive).

Most rounds take whoever the participation pattern yields (the host's selection policy among the devices
that checked in). A snapshot round - with probability q, or every I-th round - enforces a uniform cohort
from the whole population: the system model samples from everyone and waits for those devices to come
online, so a snapshot's cost shows up in simulated time. FAST changes only who takes part; the host
algorithm (FedAvg, FedProx or FedAvgM) trains and aggregates unchanged.

Adaptive FAST: q_0 = 0 and after each round q_{r+1} = clip(q_r + lam (acc_{r-1} - acc_r), 0, 1), where
acc_r is the mean training accuracy of round r's participants and acc_{-1} = 0.

The host also owns the rates and the server step: algorithm.server_optimizer (with host fedavg or fedprox)
and the client_lr / server_lr schedules act in every round, snapshot or not.
"""
from __future__ import annotations

from typing import Literal, Optional

import numpy as np
from pydantic import Field, model_validator

from emulator.algorithms.base import RoundKind, RoundPlan
from emulator.algorithms.fedavg import FedAvg, FedAvgM, FedProx
from emulator.algorithms.hosted import Hosted
from emulator.algorithms.selection import build_selection
from emulator.scenario.training import ClientTraining, single_server_momentum
from emulator.seeding import rng


class FastConfig(ClientTraining):
    """FAST: snapshot rounds (a uniform cohort from the whole population, waited for) with probability q,
    or every `every` rounds, or adaptively (q_{r+1} = clip(q_r + lam (acc_{r-1} - acc_r), 0, 1)), on top of
    a host algorithm; between snapshots the cohort follows `selection` and the devices' availability."""

    name: Literal["fast"] = "fast"
    host: Literal["fedavg", "fedprox", "fedavgm"] = "fedavg"
    server_lr: float = Field(1.0, gt=0)
    mu: float = Field(0.01, ge=0)  # host fedprox
    momentum: float = Field(0.9, ge=0, lt=1)  # host fedavgm
    q: Optional[float] = Field(None, ge=0, le=1)
    every: Optional[int] = Field(None, gt=0)
    adaptive: bool = False
    lam: float = Field(1.0, ge=0)
    # how a snapshot round closes: "first" at the first clients_per_round reports of the over-selected
    # sample, as every round; "all" draws exactly clients_per_round and waits for each (the paper's snapshot)
    snapshot_close: Literal["first", "all"] = "first"

    @model_validator(mode="after")
    def _schedule(self):
        given = [x for x in (self.q is not None, self.every is not None, self.adaptive) if x]
        if len(given) != 1:
            raise ValueError("choose one snapshot schedule: q (a probability), every (every I-th round) or "
                             "adaptive: true")
        if self.host == "fedavgm":
            single_server_momentum(self, "host fedavgm")
        return self


HOSTS = {"fedavg": FedAvg, "fedprox": FedProx, "fedavgm": FedAvgM}


def adapt_q(q: float, previous_accuracy: float, accuracy: float, lam: float) -> float:
    """One step of adaptive FAST: more snapshots when training accuracy falls, fewer when it rises."""
    return float(np.clip(q + lam * (previous_accuracy - accuracy), 0.0, 1.0))


class Fast(Hosted):
    """Snapshot rounds on top of a host; every other hook is the host's (algorithms/hosted.py)."""

    name = "fast"
    own_columns = ("q",)
    honours_rates = True  # through its host

    def __init__(self, config, context):
        super().__init__(config, context)
        self.host = HOSTS[config.host](config, context)
        self.q = config.q if config.q is not None else (1.0 / config.every if config.every else 0.0)
        self.previous_accuracy = 0.0
        self.snapshot_selection = build_selection(config, context.num_devices, context.seed, uniform=True)
        self._q_this_round = self.q

    def plan_round(self, round_index: int) -> RoundPlan:
        self.host.set_round(round_index)  # a snapshot round does not ask the host to plan: the rates still move
        self._q_this_round = self.q
        if self.config.every:
            snapshot = round_index % self.config.every == 0
        else:
            snapshot = rng(self.context.seed, "snapshot", round_index).random() < self.q
        if snapshot:
            return RoundPlan(RoundKind.SNAPSHOT, self.config.clients_per_round, self.snapshot_selection,
                             wait_for_all=self.config.snapshot_close == "all")
        return self.host.plan_round(round_index)

    def after_round(self, row) -> dict:
        if self.config.adaptive and row.get("train_acc") is not None:
            self.q = adapt_q(self.q, self.previous_accuracy, row["train_acc"], self.config.lam)
            self.previous_accuracy = row["train_acc"]
        return {**self.host.after_round(row), "q": self._q_this_round}

    def state(self):
        return {"q": self.q, "previous_accuracy": self.previous_accuracy, "host": self.host.state()}

    def load_state(self, state):
        self.q, self.previous_accuracy = state["q"], state["previous_accuracy"]
        self.host.load_state(state["host"])

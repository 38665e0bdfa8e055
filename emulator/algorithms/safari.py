"""SAFARI (server-assisted federated averaging under incomplete participation).

Each round is a client round with probability q - the sampled devices run K local steps and the server
averages the returned models (global lr 1) - or else a server round: SGD steps on the server's own set
T with lr eta_s. q = 1 is FedAvg; q = 0 is centralised SGD on T. The rounds never mix: the mix is over time.
A server optimizer (algorithm.server_optimizer) takes the client rounds' step, with rate global_lr; the
schedules: client_lr_schedule, server_lr_schedule (eta_s), global_lr_schedule.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Literal, Optional

from pydantic import Field

from emulator.algorithms.base import RoundKind, RoundPlan
from emulator.algorithms.fedavg import FedAvg
from emulator.scenario.training import ClientTraining, LrSchedule, ServerTraining
from emulator.seeding import rng
from emulator.training.local import LocalTraining


class SafariConfig(ClientTraining, ServerTraining):
    """SAFARI (server-assisted FedAvg): a client round with probability q (unweighted model average,
    global lr 1), otherwise a server round of `server_steps` SGD steps on the server set with lr server_lr."""

    name: Literal["safari"] = "safari"
    q: float = Field(0.8, ge=0, le=1)
    server_lr: float = Field(0.1, gt=0)
    server_steps: int = Field(1, gt=0)
    global_lr: float = Field(1.0, gt=0)
    global_lr_schedule: Optional[LrSchedule] = None  # global_lr (the client rounds' server step) round by round


def server_sgd(config, steps: int, lr: float) -> LocalTraining:
    return LocalTraining(lr=lr, batch_size=config.server_batch_size, local_steps=steps,
                         momentum=config.server_momentum)


class Safari(FedAvg):
    name = "safari"
    rates = ("client_lr", "server_lr", "global_lr")

    def __init__(self, config, context):
        super().__init__(config, context)
        self._server = server_sgd(config, config.server_steps, config.server_lr)

    def plan_round(self, round_index: int) -> RoundPlan:
        self.set_round(round_index)
        if rng(self.context.seed, "round-kind", round_index).random() < self.config.q:
            return super().plan_round(round_index)
        return RoundPlan(RoundKind.SERVER)

    def server_step(self, params, mean_delta):
        return self.server_optimizer.step(params, mean_delta, self.lr["global_lr"])

    def server_round(self, params, round_index):
        self.set_round(round_index)
        lr = self.lr["server_lr"]
        spec = self._server if lr == self._server.lr else replace(self._server, lr=lr)
        return self.context.server_train(params, spec, f"server-round-{round_index}")

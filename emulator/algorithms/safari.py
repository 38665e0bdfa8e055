"""SAFARI (server-assisted federated averaging under incomplete participation).

Each round is a client round with probability q - the sampled devices run K local steps and the server
averages the returned models (global lr 1) - or else a server round: SGD steps on the server's own set
T with lr eta_s. q = 1 is FedAvg; q = 0 is centralised SGD on T. The rounds never mix: the mix is over time.
"""
from __future__ import annotations

from emulator.algorithms.base import RoundPlan
from emulator.algorithms.fedavg import FedAvg
from emulator.aggregation import server_update
from emulator.seeding import rng
from emulator.training import LocalTraining


def server_sgd(config, steps: int, lr: float) -> LocalTraining:
    return LocalTraining(lr=lr, batch_size=config.server_batch_size, local_steps=steps,
                         momentum=config.server_momentum)


class Safari(FedAvg):
    name = "safari"

    def __init__(self, config, context):
        super().__init__(config, context)
        self._server = server_sgd(config, config.server_steps, config.server_lr)

    def plan_round(self, round_index: int) -> RoundPlan:
        if rng(self.context.seed, "round-kind", round_index).random() < self.config.q:
            return super().plan_round(round_index)
        return RoundPlan("server")

    def server_step(self, params, mean_delta):
        return server_update(params, mean_delta, self.config.global_lr)

    def server_round(self, params, round_index):
        return self.context.server_train(params, self._server, f"server-round-{round_index}")

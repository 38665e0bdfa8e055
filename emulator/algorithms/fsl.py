"""FSL: federated learning with server learning (Mai, La, Zhang), FSL-p, and the data-sharing baseline.

Objective F(x) + gamma f_0(x), with f_0 the loss on the server's set D_0.
- FSL (incremental): xbar = x + eta_g mean(delta); then K_0 SGD steps with lr gamma * eta_0 on D_0 from xbar.
  With couple: true, eta_0 = K eta_l eta_g / K_0 (the paper's coupling K_0 eta_0 = K eta_l eta_g).
- FSL-p (parallel): the server trains on D_0 from x_t as one more participant (K_0 steps, lr eta_0) and its
  delta is averaged in with weight gamma against each device's 1.
- DS (Zhao et al.): FedAvg where the server's set is appended to every device's data.

The aggregation step x + eta_g mean(delta) goes through the server optimizer (algorithm.server_optimizer)
with rate eta_g. Schedules: client_lr_schedule (eta_l), server_lr_schedule (eta_g) and, for a given eta_0,
server_step_lr_schedule; a coupled eta_0 is derived each round from that round's eta_l and eta_g.
"""
from __future__ import annotations

import math
from typing import Literal, Optional

import numpy as np
from pydantic import Field, model_validator

from emulator.aggregation.schedules import lr_at
from emulator.algorithms.fedavg import FedAvg, FedAvgConfig, local_training_from
from emulator.algorithms.safari import server_sgd
from emulator.scenario.base import ScenarioFieldError
from emulator.scenario.training import ClientTraining, LrSchedule, ServerTraining


class FslConfig(ClientTraining, ServerTraining):
    """FSL (federated learning with server learning): after aggregating (x + eta_g mean(delta)), the server
    runs K_0 SGD steps with lr gamma * eta_0 on its set. variant parallel is FSL-p: the server trains from
    x_t as one more participant, weighted gamma against a device's 1."""

    name: Literal["fsl"] = "fsl"
    variant: Literal["incremental", "parallel"] = "incremental"
    server_lr: float = Field(1.0, gt=0)  # eta_g
    gamma: float = Field(1.0, ge=0)
    server_steps: Optional[int] = Field(None, gt=0)  # K_0
    server_epochs: Optional[int] = Field(None, gt=0)  # E_s passes over the server set instead
    server_step_lr: Optional[float] = Field(None, gt=0)  # eta_0
    couple: bool = True  # eta_0 = K eta_l eta_g / K_0 when server_step_lr is not given
    server_step_lr_schedule: Optional[LrSchedule] = None  # eta_0 round by round (a coupled eta_0 follows eta_l, eta_g)

    @model_validator(mode="after")
    def _server_work(self):
        if self.server_steps is not None and self.server_epochs is not None:
            raise ValueError("give server_steps or server_epochs, not both")
        if self.server_steps is None and self.server_epochs is None:
            self.server_steps = self.local_steps or 10
        if self.server_step_lr is None and not self.couple:
            raise ValueError("give server_step_lr (eta_0), or set couple: true to derive it from K eta_l eta_g / K_0")
        if self.server_step_lr_schedule is not None and self.server_step_lr is None:
            raise ScenarioFieldError("server_step_lr_schedule", "schedules server_step_lr, which is not given: a "
                                     "coupled eta_0 = K eta_l eta_g / K_0 already follows client_lr_schedule and "
                                     "server_lr_schedule; give server_step_lr, or leave this out")
        return self


class DataSharingConfig(FedAvgConfig):
    """DS (Zhao et al.): FedAvg where every device also trains on the server's set, appended to its data."""

    name: Literal["ds"] = "ds"


class Fsl(FedAvg):
    name = "fsl"
    rates = ("client_lr", "server_lr", "server_step_lr")  # server_step_lr: eta_0, given or coupled

    def __init__(self, config, context):
        super().__init__(config, context)
        n0 = context.server_samples
        batch = min(config.server_batch_size, max(n0, 1))
        self.server_steps = config.server_steps or config.server_epochs * math.ceil(n0 / batch)

    def rates_at(self, round_index: int) -> dict[str, float]:
        """eta_l and eta_g through their schedules; eta_0 given (and scheduled), or K eta_l eta_g / K_0."""
        config = self.config
        rates = {rate: lr_at(getattr(config, rate), getattr(config, f"{rate}_schedule"), round_index,
                             self.context.total_rounds) for rate in ("client_lr", "server_lr")}
        rates["server_step_lr"] = lr_at(config.server_step_lr, config.server_step_lr_schedule, round_index,
                                        self.context.total_rounds) if config.server_step_lr is not None else (
            self._client_steps() * rates["client_lr"] * rates["server_lr"] / self.server_steps)
        return rates

    @property
    def eta_0(self) -> float:
        return self.lr["server_step_lr"]

    def _client_steps(self) -> float:
        """K: local steps, or for local epochs the steps an average device takes."""
        config = self.config
        if config.local_steps is not None:
            return config.local_steps
        mean_size = float(np.mean(self.context.device_sizes)) if len(self.context.device_sizes) else 1.0
        return config.local_epochs * math.ceil(mean_size / min(config.batch_size, max(mean_size, 1)))

    def aggregate(self, params, updates, round_index):
        self.set_round(round_index)
        config = self.config
        mean = self.mean_delta(params, updates)
        if config.variant == "parallel":
            spec = server_sgd(config, self.server_steps, self.eta_0)
            trained, _ = self.context.server_train(params, spec, f"fsl-p-{round_index}")
            if config.gamma > 0:
                mean.add(trained.astype(np.float64) - params, config.gamma)
            return params if mean.weight == 0 else self.server_step(params, mean.mean())
        xbar = params if mean.weight == 0 else self.server_step(params, mean.mean())
        spec = server_sgd(config, self.server_steps, config.gamma * self.eta_0)
        trained, _ = self.context.server_train(xbar, spec, f"fsl-{round_index}")
        return trained


class DataSharing(FedAvg):
    name = "ds"

    def __init__(self, config, context):
        super().__init__(config, context)
        self._local = local_training_from(config, with_server_data=True)

    def samples_processed(self, devices, sizes):
        spec = self._local
        return spec.samples_processed(sizes[devices] + self.context.server_samples)

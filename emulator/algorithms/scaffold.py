"""SCAFFOLD (Karimireddy et al., ICML 2020): control variates correct each device's drift.

The server keeps the global control c and, per device, its control c_i (server-side state, created the
first time a device reports). A device runs y <- y - eta_l (g(y) - c_i + c), and its new control is
c_i+ = c_i - c + (x - y) / (K eta_l) ("option II"), so the server can derive it from the delta alone:
delta_c = c_i+ - c_i = -delta_y / (K eta_l) - c. Server: x <- x + eta_g mean(delta_y),
c <- c + |S| / N mean(delta_c). Devices download x and c and upload delta_y and delta_c: twice the bytes.

The devices' controls live in a DeviceStateStore (the run directory's device_state/scaffold/): a model's
worth of floats for every device that ever reported would not fit in memory at 10^6 devices, and a
checkpoint then records only which slot holds whose control.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from emulator.aggregation.mean import WeightedMean
from emulator.algorithms.base import ClientUpdate
from emulator.algorithms.fedavg import FedAvg
from emulator.device_state import DeviceStateStore, within
from emulator.scenario.base import ScenarioFieldError
from emulator.scenario.training import ClientTraining


class ScaffoldConfig(ClientTraining):
    """SCAFFOLD (Karimireddy et al.), option II control variates; devices send twice the bytes."""

    name: Literal["scaffold"] = "scaffold"
    server_lr: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _plain_sgd(self):
        if self.client_optimizer != "sgd" or self.client_momentum != 0:
            raise ValueError("SCAFFOLD's control variates assume plain SGD on the devices: set client_optimizer: "
                             "sgd and client_momentum: 0")
        schedule = self.client_lr_schedule
        if schedule is not None and schedule.kind == "cosine" and schedule.min_lr == 0:
            raise ScenarioFieldError("client_lr_schedule.min_lr", "SCAFFOLD divides by the round's client_lr to "
                                     "derive each device's control variate; give a min_lr above 0")
        return self


class Scaffold(FedAvg):
    name = "scaffold"
    payload = (2, 2)

    def __init__(self, config, context):
        super().__init__(config, context)
        self.control = np.zeros(context.num_params, dtype=np.float32)
        self.device_controls = DeviceStateStore(within(context.state_dir, "scaffold"), context.num_devices,
                                                context.num_params)
        mask = context.parameter_mask
        self._mask = np.ones(context.num_params, dtype=bool) if mask is None else mask

    def job_payload(self, device: int) -> np.ndarray:
        """The gradient correction c - c_i the device adds to every step (zero on non-trainable entries)."""
        own = self.device_controls.get(device)
        correction = self.control if own is None else self.control - own
        return np.where(self._mask, correction, 0.0).astype(np.float32)

    def aggregate(self, params, updates, round_index):
        self._control_mean = WeightedMean(len(params))
        self._reporters = 0
        new = super().aggregate(params, updates, round_index)
        if self._reporters:
            scale = self._reporters / self.context.num_devices
            self.control = (self.control + scale * self._control_mean.mean()).astype(np.float32)
        return new

    def observe(self, update: ClientUpdate) -> None:
        weight = self.weight(update)
        if weight == 0:
            return
        steps, lr = update.stats.steps, self.lr["client_lr"]  # the round's eta_l (client_lr_schedule)
        delta_c = np.where(self._mask, -update.delta / (steps * lr) - self.control, 0.0).astype(np.float32)
        old = self.device_controls.get(update.device)
        self.device_controls.put(update.device, delta_c if old is None else old + delta_c)
        self._control_mean.add(delta_c, weight)
        self._reporters += 1

    def state(self):
        return {**super().state(), "control": self.control.copy(), "device_controls": self.device_controls.state()}

    def load_state(self, state):
        super().load_state(state)
        self.control = np.asarray(state["control"], dtype=np.float32).copy()
        controls = state["device_controls"]
        if "generation" in controls:
            self.device_controls.load_state(controls)
        else:  # a checkpoint from before the store: device -> control, in memory
            for device, control in sorted(controls.items()):
                self.device_controls.put(int(device), np.asarray(control, dtype=np.float32))


"""FedDyn (Acar et al., ICLR 2021, Algorithm 1): dynamic regularisation, as an emulator plugin.

Device k minimises  L_k(theta) - <g_k, theta> + (alpha / 2) ||theta - theta^{t-1}||^2,  where g_k is its
running gradient state, and afterwards sets  g_k <- g_k - alpha (theta_k^t - theta^{t-1}).  The server keeps
h <- h - alpha (1 / m) sum_{k in P_t} (theta_k^t - theta^{t-1})  (m: all devices) and sets
theta^t = mean_{k in P_t} theta_k^t - h / alpha.

The emulator's local training already has both device-side terms: the proximal term (prox_mu = alpha)
and a vector added to every gradient (the job payload), here -g_k, the gradient of -<g_k, theta>. The
server holds g_k for the device, as SCAFFOLD's controls are held; on a phone it would live on the phone.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from emulator.extend import ClientTraining, FedAvg, local_training_from, register_algorithm


class FedDynConfig(ClientTraining):
    """FedDyn (Acar et al., ICLR 2021): a device's loss adds a linear term from its gradient state and a prox term."""

    name: Literal["feddyn"] = "feddyn"
    alpha: float = Field(0.01, gt=0)  # the paper's alpha: the weight of the dynamic regulariser


class FedDyn(FedAvg):
    name = "feddyn"

    def __init__(self, config, context):
        super().__init__(config, context)
        self._local = local_training_from(config, prox_mu=config.alpha)
        self.h = np.zeros(context.num_params, dtype=np.float64)
        self.grads: dict[int, np.ndarray] = {}  # g_k, from a device's first report on (zero before)

    def job_payload(self, device):
        g = self.grads.get(device)
        return None if g is None else (-g).astype(np.float32)

    def aggregate(self, params, updates, round_index):
        alpha, total, reports = self.config.alpha, np.zeros(len(params)), 0
        for update in updates:
            if update.stats.steps == 0:
                continue
            delta = update.delta.astype(np.float64)  # theta_k^t - theta^{t-1}
            self.grads[update.device] = self.grads.get(update.device, 0.0) - alpha * delta
            total += delta
            reports += 1
        if reports == 0:
            return params
        self.h -= alpha * total / self.context.num_devices
        return (params + total / reports - self.h / alpha).astype(np.float32)

    def state(self):
        return {"h": self.h.copy(), "grads": {k: v.copy() for k, v in self.grads.items()}}

    def load_state(self, state):
        self.h = np.array(state["h"], dtype=np.float64)
        self.grads = {int(k): np.array(v, dtype=np.float64) for k, v in state["grads"].items()}


register_algorithm("feddyn", FedDyn, config=FedDynConfig)

"""The ideal world: every device is always available, never drops, and every round takes the same time."""
from __future__ import annotations

import numpy as np

from emulator.system.base import CohortRequest, RoundOutcome, SystemModel


class IdealSystem(SystemModel):
    def __init__(self, num_devices: int, round_duration_s: float, server_s_per_sample: float = 0.0,
                 server_s_per_operation: float = 0.0):
        super().__init__(num_devices, server_s_per_sample, server_s_per_operation)
        self.round_duration_s = round_duration_s
        self._everyone = np.arange(num_devices, dtype=np.int64)

    def client_round(self, request: CohortRequest) -> RoundOutcome:
        selected = request.selection.select(self._everyone, request.target, request.rng)
        distinct = np.unique(selected)
        start = self.now_s
        self.now_s += self.round_duration_s
        self.ledger.record(distinct, distinct, [], [])
        return RoundOutcome(start_s=start, end_s=self.now_s, selected=selected, reported=selected.copy(),
                            bytes_down=len(distinct) * request.bytes_down, bytes_up=len(distinct) * request.bytes_up)

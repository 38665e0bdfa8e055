"""The participation ledger as it stood after each of the last two rounds, for participation.csv.

The driver writes participation.csv for the last round it saved, which may be one behind the server
while the next round is in flight (a stop request): so the ledger after this round and the one before
are kept, and answered at once (the server actor's own concurrency group)."""
from __future__ import annotations

import numpy as np

from emulator.server.observers.base import Observer


class ParticipationLedger(Observer):
    def __init__(self, world):
        super().__init__(world)
        self._ledgers: dict[int, dict] = {}
        self.keep(0)

    def after_round(self, record, played) -> dict:
        self.keep(record.round)
        return {}

    def keep(self, round_index: int) -> None:
        system = self.world.system
        self._ledgers[round_index] = system.ledger.state()
        batteries = getattr(system, "batteries", None)
        if batteries is not None:  # each phone's state of charge as the round ended
            self._ledgers[round_index]["soc"] = batteries.soc(system.now_s)
        for old in [r for r in self._ledgers if r < round_index - 1]:
            del self._ledgers[old]

    def load_state(self, state: dict) -> None:
        self._ledgers = {}

    def columns_after(self, round_index: int) -> dict[str, np.ndarray] | None:
        """participation.csv's columns as they stood after `round_index` (None if no longer kept)."""
        ledger = self._ledgers.get(round_index)
        if ledger is None:
            return None
        world = self.world
        columns = {"device": np.arange(len(world.sizes)), "samples": world.sizes, **ledger,
                   **world.system.describe_devices()}
        if "energy_j" in columns and "battery_wh" in columns:  # how many full batteries' worth it spent on learning
            columns["battery_share"] = columns["energy_j"] / (columns["battery_wh"] * 3600.0)
        if world.upload.dp is not None:  # each device's sampling-free bound over the rounds it reported in
            columns["dp_epsilon"] = world.upload.device_epsilons(ledger["reported"])
        return columns

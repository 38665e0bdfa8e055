"""The shared links in a round (a world with system.network): how long transfers waited for capacity, and how
busy each tier's busiest link was (emulator/system/network.py)."""
from __future__ import annotations

from emulator.server.observers.base import Observer


class Network(Observer):
    @staticmethod
    def wanted(world) -> bool:
        return getattr(world.system, "network", None) is not None

    def __init__(self, world):
        super().__init__(world)
        self.columns = tuple(world.system.network.columns())

    def after_round(self, record, played) -> dict:
        # a round in which nothing was sent (a server round, a cohort that never formed) waited for nothing
        network = played.outcome.network
        return {name: network.get(name, 0.0) for name in self.columns}

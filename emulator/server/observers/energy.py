"""The energy a round cost the devices (a world with population.energy): all of it, the part spent on work
that was not used, and the radio's part (emulator/system/energy.py)."""
from __future__ import annotations

from emulator.server.observers.base import Observer
from emulator.system.energy import ENERGY_COLUMNS


class Energy(Observer):
    columns = ENERGY_COLUMNS

    @staticmethod
    def wanted(world) -> bool:
        return getattr(world.system, "energy", None) is not None

    def after_round(self, record, played) -> dict:
        # a round in which no device worked (a server round, a cohort that never formed) cost them nothing
        energy = played.outcome.energy
        return {name: energy.get(name, 0.0) for name in self.columns}

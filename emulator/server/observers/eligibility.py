"""The devices that aborted a round because their eligibility lapsed mid-work (unplugged, off Wi-Fi, picked
up, or a battery at its floor): a part of `dropped`, counted apart; with batteries, the energy they had spent."""
from __future__ import annotations

from emulator.server.observers.base import Observer


class Aborts(Observer):
    def __init__(self, world):
        super().__init__(world)
        energy = getattr(world.system, "energy", None) is not None
        self.columns = ("aborted",) + (("energy_aborted_j",) if energy else ())

    @staticmethod
    def wanted(world) -> bool:
        return getattr(world.system, "eligible", None) is not None

    def after_round(self, record, played) -> dict:
        outcome = played.outcome
        columns = {"aborted": len(outcome.aborted)}
        if "energy_aborted_j" in self.columns:
            columns["energy_aborted_j"] = outcome.energy.get("energy_aborted_j", 0.0)
        return columns

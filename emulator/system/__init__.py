"""The simulated world. `build_system` picks the model named in the scenario's `system` section."""
from __future__ import annotations

from emulator.system.base import CohortRequest, RoundOutcome, SystemModel
from emulator.system.ideal import IdealSystem


def build_system(scenario) -> SystemModel:
    return IdealSystem(scenario.population.devices, scenario.system.round_duration_s)


__all__ = ["CohortRequest", "RoundOutcome", "SystemModel", "IdealSystem", "build_system"]

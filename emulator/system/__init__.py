"""The simulated world. `build_system` picks the model named in the scenario's `system` section."""
from __future__ import annotations

from emulator.system.base import CohortRequest, RoundOutcome, SystemModel
from emulator.system.ideal import IdealSystem
from emulator.system.simulated import SimulatedSystem


def build_system(scenario) -> SystemModel:
    if scenario.system.model == "ideal":
        return IdealSystem(scenario.population.devices, scenario.system.round_duration_s,
                           scenario.system.server.s_per_sample)
    return SimulatedSystem(scenario)


__all__ = ["CohortRequest", "RoundOutcome", "SystemModel", "IdealSystem", "SimulatedSystem", "build_system"]

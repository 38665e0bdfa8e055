"""The simulated world. `build_system` picks the model named in the scenario's `system` section."""
from __future__ import annotations

from emulator.system.base import CohortRequest, RoundOutcome, SystemModel
from emulator.system.ideal import IdealSystem
from emulator.system.simulated import SimulatedSystem


def build_system(scenario, label_counts=None) -> SystemModel:
    """`label_counts` (devices x classes): the data each device holds, for behaviour tied to it."""
    if scenario.system.model == "ideal":
        server = scenario.system.server
        return IdealSystem(scenario.population.devices, scenario.system.round_duration_s, server.s_per_sample,
                           server.s_per_operation)
    return SimulatedSystem(scenario, label_counts)


__all__ = ["CohortRequest", "RoundOutcome", "SystemModel", "IdealSystem", "SimulatedSystem", "build_system"]

"""The observers around a round, in the order they fill a record (and its columns appear in metrics.csv).

Ours come first; a scenario's own (`observers:`, registered by a plugin with `register_observer`) after
them, then the algorithm's columns (which may read everything before), and the participation ledger last.
"""
from __future__ import annotations

from emulator.errors import build_part
from emulator.registry import OBSERVERS
from emulator.server.observers.adversaries import Attackers
from emulator.server.observers.base import Observer
from emulator.server.observers.bias import LabelBias
from emulator.server.observers.devices import DeviceEvaluation
from emulator.server.observers.eligibility import Aborts
from emulator.server.observers.energy import Energy
from emulator.server.observers.evaluation import CentralEvaluation
from emulator.server.observers.network import Network
from emulator.server.observers.participation import ParticipationLedger
from emulator.server.observers.plugged import GuardedObserver
from emulator.server.observers.rounds import AlgorithmColumns, Asynchrony
from emulator.server.observers.uplink import Uplink


def observers_for(world) -> list[Observer]:
    """The run's observers, built on its `ServerWorld`."""
    scenario = world.scenario
    chosen: list[Observer] = [CentralEvaluation(world), LabelBias(world)]
    if world.algorithm.asynchronous:
        chosen.append(Asynchrony(world))
    chosen.append(Uplink(world))
    if Energy.wanted(world):
        chosen.append(Energy(world))
    if Aborts.wanted(world):
        chosen.append(Aborts(world))
    if Network.wanted(world):
        chosen.append(Network(world))
    if scenario.evaluation.devices is not None:
        chosen.append(DeviceEvaluation(world))
    if Attackers.wanted(world):
        chosen.append(Attackers(world))
    chosen.append(AlgorithmColumns(world))
    for config in scenario.observers:
        chosen.append(build_part(OBSERVERS.get(config.kind), f"observer {config.kind!r}", Observer, GuardedObserver,
                                 config, world))
    chosen.append(ParticipationLedger(world))
    return chosen


__all__ = ["Observer", "observers_for", "ParticipationLedger"]

"""The algorithm interface and its built-in families (each in its own module). Names map to classes in
emulator.registry.ALGORITHMS, where a plugin's algorithms go too (emulator/parts/builtins.py registers ours)."""
from __future__ import annotations

from emulator.algorithms.base import Algorithm, AlgorithmContext, ClientUpdate, RoundPlan
from emulator.algorithms.fast import Fast
from emulator.algorithms.fedavg import FedAvg, FedAvgM, FedProx
from emulator.algorithms.fsl import DataSharing, Fsl
from emulator.algorithms.safari import Safari
from emulator.algorithms.scaffold import Scaffold
from emulator.registry import ALGORITHMS

BUILT_IN = (FedAvg, FedProx, FedAvgM, Scaffold, Safari, Fsl, DataSharing, Fast)


def build_algorithm(config, context: AlgorithmContext) -> Algorithm:
    """The algorithm the scenario names, from the registry (ours or a plugin's)."""
    return ALGORITHMS.get(config.name).build(config, context)


__all__ = ["Algorithm", "AlgorithmContext", "ClientUpdate", "RoundPlan", "BUILT_IN", "build_algorithm"]

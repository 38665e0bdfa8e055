"""Algorithms by name. Each family lives in its own module; this registry maps scenario names to classes."""
from __future__ import annotations

from emulator.algorithms.base import Algorithm, AlgorithmContext, ClientUpdate, RoundPlan
from emulator.algorithms.fast import Fast
from emulator.algorithms.fedavg import FedAvg, FedAvgM, FedProx
from emulator.algorithms.fsl import DataSharing, Fsl
from emulator.algorithms.safari import Safari
from emulator.algorithms.scaffold import Scaffold

REGISTRY: dict[str, type[Algorithm]] = {cls.name: cls for cls in (
    FedAvg, FedProx, FedAvgM, Scaffold, Safari, Fsl, DataSharing, Fast)}


def build_algorithm(config, context: AlgorithmContext) -> Algorithm:
    return REGISTRY[config.name](config, context)


__all__ = ["Algorithm", "AlgorithmContext", "ClientUpdate", "RoundPlan", "REGISTRY", "build_algorithm"]

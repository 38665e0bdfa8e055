"""Algorithms by name. Each family lives in its own module; this registry maps scenario names to classes."""
from __future__ import annotations

from emulator.algorithms.base import Algorithm, AlgorithmContext, ClientUpdate, RoundPlan
from emulator.algorithms.fedavg import FedAvg

REGISTRY: dict[str, type[Algorithm]] = {"fedavg": FedAvg}


def build_algorithm(config, context: AlgorithmContext) -> Algorithm:
    return REGISTRY[config.name](config, context)


__all__ = ["Algorithm", "AlgorithmContext", "ClientUpdate", "RoundPlan", "REGISTRY", "build_algorithm"]

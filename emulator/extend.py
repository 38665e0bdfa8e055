"""Everything a plugin needs, in one stable import: `from emulator.extend import ...`.

A plugin is a module of your own that registers parts at import:

    from typing import Literal
    from emulator.extend import ClientTraining, FedAvg, register_algorithm

    class MyConfig(ClientTraining):             # the scenario's `algorithm:` section, validated
        name: Literal["mine"] = "mine"
        strength: float = 0.1

    class Mine(FedAvg):
        def server_step(self, params, mean_delta):
            return params + (1 + self.config.strength) * mean_delta

    register_algorithm("mine", Mine, config=MyConfig)

and a scenario names it: `plugins: [my_module]`, `algorithm: {name: mine, strength: 0.2}`. What each
kind's builder receives and returns is in docs/extending.md; everything here keeps its name and meaning
across releases (a change is announced in the changelog first).
"""
from __future__ import annotations

from emulator.aggregation.mean import WeightedMean, server_update
from emulator.aggregation.optimizers import ServerOptimizer
from emulator.aggregation.partial import Folding
from emulator.aggregation.robust import RobustResult
from emulator.algorithms.base import Algorithm, AlgorithmContext, Arrival, ClientUpdate, RoundKind, RoundPlan
from emulator.algorithms.fedavg import FedAvg, FedAvgConfig, local_training_from
from emulator.algorithms.hosted import Hosted
from emulator.algorithms.personalized import Personalized
from emulator.algorithms.selection import SelectionPolicy
from emulator.data.federation import ArrayDataset
from emulator.data.ragged import RaggedRows
from emulator.data.scratch import large_array
from emulator.registry import (
                               register_aggregator,
                               register_algorithm,
                               register_attack,
                               register_availability,
                               register_dataset,
                               register_model,
                               register_observer,
                               register_partition,
                               register_selection,
                               register_server_optimizer,
)
from emulator.scenario import (
                               AvailabilitySettings,
                               ClientTraining,
                               DataConfig,
                               DatasetOptions,
                               ModelConfig,
                               PartitionSettings,
                               ScenarioError,
                               SelectionSettings,
                               ServerOptimizerSettings,
                               Strict,
)
from emulator.scenario.base import Count, Fraction, PositiveFloat
from emulator.scenario.execution import ObserverSettings
from emulator.server.observers.base import Observer
from emulator.server.record import PlayedRound, RoundRecord
from emulator.system.availability import AvailabilityModel
from emulator.scenario.population import AttackSettings
from emulator.scenario.training import AggregatorSettings
from emulator.training.attacks import Attack
from emulator.training.local import LocalTraining, TrainStats
from emulator.training.personal import Personalization

__all__ = [
    "register_algorithm", "register_model", "register_dataset", "register_partition", "register_selection",
    "register_availability", "register_server_optimizer", "register_aggregator", "register_attack",
    "register_observer", "Observer", "ObserverSettings", "RoundRecord", "PlayedRound", "RoundKind", "Arrival",
    "Hosted", "RobustResult", "AggregatorSettings", "Attack", "AttackSettings",
    "Algorithm", "AlgorithmContext", "ClientUpdate", "RoundPlan", "FedAvg", "local_training_from",
    "Personalized", "Personalization",
    "LocalTraining", "TrainStats", "WeightedMean", "Folding", "server_update", "SelectionPolicy", "AvailabilityModel",
    "ArrayDataset", "RaggedRows", "large_array",
    "Strict", "Count", "Fraction", "PositiveFloat", "ClientTraining", "FedAvgConfig", "ModelConfig", "DataConfig",
    "DatasetOptions",
    "PartitionSettings", "SelectionSettings", "AvailabilitySettings", "ServerOptimizerSettings", "ServerOptimizer",
    "ScenarioError",
]

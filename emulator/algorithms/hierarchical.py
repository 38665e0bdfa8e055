"""HierFAVG (Liu, Zhang, Song, Letaief; ICC 2020): client-edge-cloud hierarchical federated averaging.

Every edge server (system.network.edges, one a region) starts a cloud round from the cloud's model and
plays `cloud_every` rounds with its own region's devices: each of its reporting devices trains locally from
the edge's model, and the edge moves to its model plus the weighted mean of their updates (plain averaging,
as the paper's edge aggregation). Then the cloud averages the edges' models, each weighted by the weight
of the reports it took in over the cloud round (the paper weighs an edge by its devices' data; here by
what reached it), and moves the global model by `server_lr` times that average's difference from it, so
FedAvg's two-sided rates and server optimizers apply at the cloud. An edge server that took no report in
the whole cloud round has nothing to add and is left out of the average.
"""
from __future__ import annotations

from typing import Iterable, Literal

import numpy as np
from pydantic import Field

from emulator.aggregation.mean import WeightedMean, server_update
from emulator.aggregation.partial import Folding
from emulator.algorithms.base import ClientUpdate, RoundKind, RoundPlan
from emulator.algorithms.fedavg import FedAvg
from emulator.scenario.training import ClientTraining


class HierFAVGConfig(ClientTraining):
    """HierFAVG: `clients_per_round` is each edge server's cohort (reports an edge round aims for);
    `cloud_every` the edge rounds between two of the cloud's averages (the paper's kappa_2)."""

    name: Literal["hierfavg"] = "hierfavg"
    server_lr: float = Field(1.0, gt=0)
    cloud_every: int = Field(2, ge=1)


class HierFAVG(FedAvg):
    """The edges average their devices, the cloud the edges (the hooks the hierarchical engine calls)."""

    name = "hierfavg"
    hierarchical = True

    @property
    def cloud_every(self) -> int:
        return self.config.cloud_every

    def plan_round(self, round_index: int) -> RoundPlan:
        self.set_round(round_index)
        return RoundPlan(RoundKind.CLOUD, self.config.clients_per_round, self.selection)

    def edge_folding(self) -> Folding | None:
        """How the runners may fold an edge round's updates (each edge's into sums of its own): when its mean is
        the plain weighted mean of edge_mean, in the unit edge_mean sums in; None where a robust rule or a
        subclass's own edge_mean or weight reads the updates."""
        if self.aggregator is not None or type(self).edge_mean is not HierFAVG.edge_mean or (
                type(self).weight is not FedAvg.weight):
            return None
        return Folding(self.config.weighting)

    def edge_mean(self, edge_params: np.ndarray, updates: Iterable[ClientUpdate]) -> WeightedMean:
        """An edge round's weighted mean of its devices' updates (algorithm.aggregator's rule, if one is set)."""
        if self.aggregator is not None:
            return self.robust_delta(edge_params, updates)
        mean = WeightedMean(len(edge_params))
        for update in updates:
            mean.add(update.delta, self.weight(update))
        return mean

    @staticmethod
    def edge_step(edge_params: np.ndarray, mean: WeightedMean) -> np.ndarray:
        """The edge's next model: its own plus the mean update (kept as it was when no report counted)."""
        return edge_params if mean.weight == 0 else server_update(edge_params, mean.mean(), 1.0)

    def aggregate_edges(self, params: np.ndarray, edges: list[tuple[np.ndarray, float]],
                        round_index: int) -> np.ndarray:
        """The cloud's step from the (edge model, weight) pairs: x + server_lr (weighted mean of the edges' - x)."""
        self.set_round(round_index)
        mean = WeightedMean(len(params))
        for edge_params, weight in edges:
            if weight > 0:
                mean.add(edge_params.astype(np.float64) - params, weight)
        return self._step(params, mean)

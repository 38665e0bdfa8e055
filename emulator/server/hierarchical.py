"""The cloud round: every edge server's rounds with its devices, then the cloud's average (HierFAVG).

The world plays the whole cloud round first (system/edges.py: who reported to which edge server in each
of its rounds, and when), since who takes part never depends on what the models learn. Then the edge
rounds are trained in order: in the k-th, every edge server's reporting devices train from that edge's
model (each edge's model put once, its devices' groups cut in draw order, results in job order) and the
edge moves to its own model plus their mean. Where the algorithm's edge mean is the plain weighted mean
and nothing on the server reads each update, the runners fold each edge's updates into sums of its own
(an edge after the other), as a flat round's; otherwise every edge's groups train as one batch and the
updates pass the uplink one by one. After the last, the cloud averages the edges' models into the global
one.
"""
from __future__ import annotations

import numpy as np

from emulator.aggregation.mean import WeightedMean
from emulator.algorithms.base import RoundPlan
from emulator.algorithms.selection import distinct_in_draw_order
from emulator.runtime.runner import DeviceJob
from emulator.seeding import rng, torch_seeds
from emulator.server.record import PlayedRound
from emulator.server.synchronous import SynchronousEngine
from emulator.system.base import CohortRequest, RoundOutcome
from emulator.system.edges import CloudRequest


class HierarchicalEngine(SynchronousEngine):
    """Plays CLOUD rounds on a `ServerWorld` whose system has edge servers."""

    def play(self, r: int, plan: RoundPlan) -> PlayedRound:
        world, algorithm = self.world, self.world.algorithm
        seed, k = world.scenario.seed, algorithm.cloud_every
        down, up = algorithm.payload

        def edge_request(edge: int, j: int) -> CohortRequest:
            return CohortRequest(
                round_index=r, target=plan.cohort, selection=plan.selection, rng=rng(seed, "selection", r, edge, j),
                bytes_down=down * world.transfer_bytes, bytes_up=world.upload_bytes(up),
                samples_processed=world.samples_processed)

        cloud = world.system.cloud_round(CloudRequest(r, k, edge_request, world.transfer_bytes))
        models = [world.params] * len(cloud.edge_rounds)
        weights = np.zeros(len(models))
        stats = []
        for j in range(k):
            models, took = self._edge_round(r, (r - 1) * k + j, cloud.round_of(j), models, stats)
            weights += took
        world.params = algorithm.aggregate_edges(world.params, list(zip(models, weights)), r)
        outcome = cloud.outcome
        operations = algorithm.server_operations()
        if operations:  # a robust rule's work at the edges, charged to the clock as the server's
            outcome.server_compute_s = world.system.charge_server(0, operations)
            outcome.end_s = world.system.now_s
        devices, counts = distinct_in_draw_order(outcome.reported)
        return PlayedRound(plan, outcome, devices, counts, stats, aggregated=devices,
                           events=[(r, t, d, e) for t, d, e in outcome.events])

    def _edge_round(self, r: int, index: int, outcomes: list[RoundOutcome], models: list[np.ndarray],
                    stats: list) -> tuple[list[np.ndarray], np.ndarray]:
        """Every edge server's round `index` (counted over the run) trained from its model: the edges' next
        models, and the weight each took in; each device's stats added to `stats`."""
        world, algorithm = self.world, self.world.algorithm
        jobs: list[list[DeviceJob]] = []
        for outcome in outcomes:
            devices, counts = distinct_in_draw_order(outcome.reported)
            seeds = torch_seeds(world.scenario.seed, "edge-train", index, devices)
            jobs.append(self._jobs(r, devices, counts, seeds))
        rule = algorithm.edge_folding() if self._may_fold() else None
        means = self._folded_edges(jobs, models, rule, stats) if rule is not None else self._streamed_edges(
            r, index, jobs, models, stats)
        after = [algorithm.edge_step(model, mean) for model, mean in zip(models, means)]
        return after, np.array([mean.weight for mean in means])

    def _folded_edges(self, jobs: list[list[DeviceJob]], models: list[np.ndarray], rule, stats: list) -> list:
        """Each edge's mean from the sums its devices' updates were folded into on the runners (an edge after
        the other, each from its own model): the same exact sums as edge_mean's, without the updates travelling."""
        means = []
        for edge_jobs, model in zip(jobs, models):
            mean = WeightedMean(len(model), rule.unit)
            if edge_jobs:
                for partial in self._folded(edge_jobs, rule, stats, self.world.pool.put(model)):
                    mean.merge(partial)
            means.append(mean)
        return means

    def _streamed_edges(self, r: int, index: int, jobs: list[list[DeviceJob]], models: list[np.ndarray],
                        stats: list) -> list:
        """Each edge's edge_mean of its devices' updates, every edge's groups trained as one batch of tasks;
        the updates pass the uplink one by one (colluders agree within an edge)."""
        world, algorithm = self.world, self.world.algorithm
        trained, hostile, means = self._train_edges(jobs, models), world.adversaries, []
        for edge, model in enumerate(models):
            updates = trained[edge] if hostile is None else hostile.colluded(trained[edge])
            updates = [world.upload.encode(update, r, (r, index, update.device)) for update in updates]
            stats.extend(update.stats for update in updates)
            means.append(algorithm.edge_mean(model, updates))
        return means

    def _train_edges(self, jobs: list[list[DeviceJob]], models: list[np.ndarray]) -> list[list]:
        """Each edge's devices' updates, in draw order: all edges' groups as one batch of runner tasks, each
        task reading its edge's model."""
        tasks = [(edge, group) for edge, edge_jobs in enumerate(jobs) for group in self._groups(edge_jobs)]
        refs = {edge: self.world.pool.put(models[edge]) for edge in {edge for edge, _ in tasks}}
        updates: list[list] = [[] for _ in jobs]
        trained = self._train([group for _, group in tasks], sum(map(len, jobs)),
                              params_ref=[refs[edge] for edge, _ in tasks])
        for (edge, _), group in zip(tasks, trained):
            updates[edge].extend(group)
        return updates

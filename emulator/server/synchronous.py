"""The synchronous round: plan, ask the world who reports, train them for real, aggregate.

A client (or snapshot) round asks the system model for an outcome, trains the devices that reported on
the runner pool (groups cut in draw order, results in job order), streams their updates through the
uplink into the algorithm's aggregation, and charges the server's own work to the clock. Where the
algorithm's round is a weighted mean, the runners fold the updates into sums they hold through the round
and the server takes one sum a runner at its end (re-training the groups of a runner that restarted and
lost its sum). A server round trains on the server's data alone.
"""
from __future__ import annotations

import uuid

import numpy as np

from emulator.aggregation.partial import Folding, FoldTask
from emulator.algorithms.base import RoundKind, RoundPlan
from emulator.algorithms.selection import distinct_in_draw_order
from emulator.runtime import inline
from emulator.runtime.grouping import group_jobs
from emulator.runtime.runner import DeviceJob
from emulator.seeding import rng, torch_seed, torch_seeds
from emulator.server.record import PlayedRound
from emulator.server.world import ServerWorld
from emulator.system import CohortRequest


class SynchronousEngine:
    """Plays CLIENT, SNAPSHOT and SERVER rounds on a `ServerWorld`."""

    def __init__(self, world: ServerWorld):
        self.world = world

    def play(self, r: int, plan: RoundPlan) -> PlayedRound:
        if plan.kind == RoundKind.SERVER:
            return self._server_round(r, plan)
        world, algorithm = self.world, self.world.algorithm
        down, up = algorithm.payload
        outcome = world.system.client_round(CohortRequest(
            round_index=r, target=plan.cohort, selection=plan.selection, rng=rng(world.scenario.seed, "selection", r),
            bytes_down=down * world.transfer_bytes, bytes_up=world.upload_bytes(up),
            samples_processed=world.samples_processed, snapshot=plan.kind == RoundKind.SNAPSHOT,
            wait_for_all=plan.wait_for_all, secure=world.secure(r)))
        devices, counts = distinct_in_draw_order(outcome.reported)
        jobs = self._jobs(r, devices, counts)  # before aggregation starts: the hooks see the round's start
        stats = []
        folding = self._folding()
        if folding is not None:  # the runners fold their updates: one sum a runner travels, at the end
            world.params = algorithm.aggregate_partials(world.params, self._folded(jobs, folding, stats), r)
        else:
            def streamed():  # colluders agree on one update: the round's updates are all in before they send it
                hostile = world.adversaries
                trained = (update for group in self._train(self._groups(jobs), len(jobs)) for update in group)
                for update in trained if hostile is None else hostile.colluded(trained):
                    update = world.upload.encode(update, r, (r, update.device))
                    stats.append(update.stats)
                    yield update

            world.params = algorithm.aggregate(world.params, streamed(), r)
        operations = algorithm.server_operations()
        if world.server_samples_this_round or operations:  # server learning (FSL), a robust rule: time too
            outcome.server_compute_s = world.system.charge_server(world.server_samples_this_round, operations)
            outcome.end_s = world.system.now_s
        return PlayedRound(plan, outcome, devices, counts, stats, aggregated=devices,
                           events=[(r, t, d, e) for t, d, e in outcome.events])

    def _jobs(self, r: int, devices: np.ndarray, counts: np.ndarray, seeds: list[int] | None = None) -> list[DeviceJob]:
        """What each reporting device trains: its spec, seed (`seeds`, else the round's), inputs, own state and
        attack."""
        world, algorithm, seed = self.world, self.world.algorithm, self.world.scenario.seed
        how, hostile = algorithm.personal, world.adversaries  # own state (FedPer, Ditto), attackers' attacks
        attack_seed = torch_seed(seed, "attack", r)  # the round's, shared by its attackers
        seeds = torch_seeds(seed, "train", r, devices) if seeds is None else seeds
        return [DeviceJob(int(d), algorithm.local_training(int(d)), s, int(c), algorithm.job_payload(int(d)), how,
                          None if how is None else algorithm.own_state(int(d)),
                          None if hostile is None else hostile.attack_of(int(d)), attack_seed)
                for d, c, s in zip(devices, counts, seeds)]

    def _folding(self) -> Folding | None:
        """The algorithm's rule for folding updates on the runners, where they may fold (_may_fold)."""
        return self.world.algorithm.partial_fold() if self._may_fold() else None

    def _may_fold(self) -> bool:
        """Whether nothing on the server must see each update: the uplink's per-report work (DP clipping,
        compression) or colluding attackers would."""
        world = self.world
        return not (world.upload.per_report or (world.adversaries is not None and world.adversaries.collude))

    def _groups(self, jobs: list[DeviceJob]) -> list[list[DeviceJob]]:
        runtime, world = self.world.scenario.runtime, self.world
        return group_jobs(jobs, runtime.group_size, runtime.vectorise, len(world.pool.runners), world.model_bytes,
                          world.device_cost.seconds)

    def _train(self, groups: list[list[DeviceJob]], devices: int, folds: list[FoldTask] | None = None,
               after_last=None, params_ref=None):
        """What the runners send back for each group (its updates, or a receipt given `folds`), in draw order;
        `after_last` as in RunnerPool.map_ordered; `params_ref`: the model they train from (the global one
        unless given), or a list of one a group."""
        world, vectorise = self.world, self.world.scenario.runtime.vectorise
        if not groups:
            return
        params_ref = world.params_ref() if params_ref is None else params_ref
        refs = params_ref if isinstance(params_ref, list) else [params_ref] * len(groups)
        tasks = list(range(len(groups)))
        with world.device_cost.timing(devices, len(world.pool.runners)):
            yield from world.pool.map_ordered(tasks, lambda runner, i: runner.train_group.remote(
                world.run, refs[i], groups[i], vectorise, None if folds is None else folds[i]), after_last)

    def _folded(self, jobs: list[DeviceJob], rule: Folding, stats: list, params_ref=None) -> list:
        """The round's updates as the sums the runners held (WeightedMeans), each device's stats added to
        `stats` in draw order (`params_ref`: the model they train from, the global one unless given). A
        runner that restarted mid-round lost the groups it had folded: they are trained again (same seeds,
        same updates) until every group is in exactly one sum."""
        world, groups = self.world, self._groups(jobs)
        ticket = uuid.uuid4().hex  # this playing of the round: a replay after a restart never meets its sums
        folds = [FoldTask(rule, ticket, i) for i in range(len(groups))]

        def take_sums() -> list:
            return [runner.take_sum.remote(world.run.key, ticket) for runner in world.pool.runners]

        queued = []  # asked for behind each runner's last task: a runner's sum travels once it is done
        for receipt in self._train(groups, len(jobs), folds, lambda: queued.extend(take_sums()), params_ref):
            stats.extend(receipt.stats)
        sums, missing = [], set(range(len(groups)))
        for _ in range(3):
            refs, queued = queued or take_sums(), []
            for held in filter(None, (inline.get(ref) for ref in refs)):
                if not set(held.groups) <= missing or len(set(held.groups)) != len(held.groups):
                    raise RuntimeError(f"a runner's sum holds groups {held.groups}: some of them twice")
                sums.append(held.mean)
                missing -= set(held.groups)
            if not missing:
                return sums
            again = sorted(missing)
            for _ in self._train([groups[i] for i in again], sum(len(groups[i]) for i in again),
                                 [folds[i] for i in again], params_ref=params_ref):
                pass
        raise RuntimeError(f"groups {sorted(missing)} of the round's updates were lost three times over")

    def _server_round(self, r: int, plan: RoundPlan) -> PlayedRound:
        world = self.world
        world.params, stats = world.algorithm.server_round(world.params, r)
        outcome = world.system.server_round(world.server_samples_this_round)
        nobody = np.zeros(0, np.int64)
        return PlayedRound(plan, outcome, nobody, nobody, [stats], aggregated=nobody)

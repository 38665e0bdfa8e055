"""What each device gets: the global model (or a device's own) on every device's own test split.

On the evaluation schedule, with evaluation.devices set: the oracle's view (every device with a split) or
the sampled devices that answered in time (emulator/system/device_evaluation.py), optionally after a few
steps of fine-tuning; the fleet statistics as columns (emulator/evaluation/fleet.py) and, with
evaluation.devices.csv, each device's scores for device_eval.csv.
"""
from __future__ import annotations

import numpy as np

from emulator.evaluation.fleet import FleetEvaluation
from emulator.runtime import inline
from emulator.runtime.runner import DeviceJob
from emulator.seeding import rng, torch_seed
from emulator.server.observers.base import Observer
from emulator.system.device_evaluation import evaluate_sample
from emulator.training.local import LocalTraining


class DeviceEvaluation(Observer):
    def __init__(self, world):
        super().__init__(world)
        config = world.scenario.evaluation.devices
        self.config = config
        self.fleet = FleetEvaluation(world.local_sizes, world.system.describe_devices(), config.oracle,
                                     config.sample is not None, config.finetune is not None)
        self.columns = tuple(self.fleet.columns)
        tuning = config.finetune
        self.tuning = None if tuning is None else LocalTraining(
            lr=tuning.lr, batch_size=tuning.batch_size, local_steps=tuning.steps, optimizer=tuning.optimizer)

    def after_round(self, record, played) -> dict:
        if not self.evaluates(record):
            return {}
        world, config, r = self.world, self.config, record.round
        outcome = None
        if config.sample is not None:  # asked at the round's end, on its own budget and random stream
            deadline = config.deadline_s if config.deadline_s is not None else world.scenario.system.deadline_s
            outcome = evaluate_sample(world.system, played.outcome.end_s, config.sample, self.fleet.local_sizes,
                                      world.transfer_bytes, deadline, rng(world.scenario.seed, "device-evaluation", r),
                                      None if self.tuning is None else self.tuning.samples_processed(world.sizes))
        devices = self.fleet.scored_devices(outcome)
        reported = world.system.ledger.counts["reported"]
        loss, correct = self._scores(devices)
        columns, table = self.fleet.score(devices, loss, correct, reported, outcome)
        if self.tuning is not None:
            tuned = table["device"]  # the devices scored: every one with a split (oracle), else those that answered
            self.fleet.score_finetuned(tuned, self._finetune(r, tuned), reported, columns, table, outcome)
        if config.csv:
            record.device_eval = table
        return columns

    def _scores(self, devices: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Each local test sample's loss and correctness for `devices` (None: all), device after device: the
        global model in one pass, except that a device with state of its own (FedPer, Ditto) is scored with
        its own model (on the runners, in chunks spread over them)."""
        world = self.world
        params_ref, batch, runner = world.params_ref(), world.scenario.evaluation.batch_size, world.pool.runners[0]
        how, sizes, algorithm = world.algorithm.personal, self.fleet.local_sizes, world.algorithm
        order = np.arange(len(sizes)) if devices is None else np.asarray(devices, np.int64)
        holding = np.isin(order, algorithm.devices_with_state()) if how is not None else np.zeros(len(order), bool)
        if not holding.any():
            return inline.get(runner.evaluate_devices.remote(world.run, params_ref, batch, devices))
        pieces: dict[int, tuple[np.ndarray, np.ndarray]] = {}

        def keep(chunk, scores) -> None:  # one runner call's per-sample arrays, cut per device
            cuts = np.cumsum(sizes[chunk])[:-1]
            pieces.update(zip(np.asarray(chunk).tolist(), zip(np.split(scores[0], cuts), np.split(scores[1], cuts))))

        shared = order[~holding]
        if len(shared):
            keep(shared, inline.get(runner.evaluate_devices.remote(world.run, params_ref, batch, shared)))
        own = order[holding & (sizes[order] > 0)].tolist()
        chunks = world.spread(own, cap=(64 << 20) // (4 * how.width))  # each chunk under 64 MiB of state
        for chunk, scores in zip(chunks, world.pool.map_ordered(chunks, lambda runner, chunk: (
                runner.evaluate_personal.remote(world.run, params_ref, batch, chunk,
                                                [algorithm.own_state(d) for d in chunk], how.mask)))):
            keep(chunk, scores)
        scored = [pieces[int(d)] for d in order if sizes[d] > 0]
        return (np.concatenate([p[0] for p in scored] or [np.zeros(0, np.float64)]),
                np.concatenate([p[1] for p in scored] or [np.zeros(0, bool)]))

    def _finetune(self, r: int, devices: np.ndarray) -> list[tuple[int, int, float]]:
        """Fine-tune, then evaluate, `devices` on the runners (chunks spread over them): per device, its
        (local test samples, correct, loss sum). Each device's seed is (seed, finetune, round, device)."""
        world, seed = self.world, self.world.scenario.seed
        jobs = [DeviceJob(int(d), self.tuning, torch_seed(seed, "finetune", r, int(d))) for d in devices]
        params_ref, batch = world.params_ref(), world.scenario.evaluation.batch_size
        scores = []
        for chunk in world.pool.map_ordered(world.spread(jobs), lambda runner, chunk: runner.finetune_evaluate.remote(
                world.run, params_ref, chunk, batch)):
            scores.extend(chunk)
        return scores

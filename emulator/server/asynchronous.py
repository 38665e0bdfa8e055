"""The asynchronous protocol's server update: one metrics row per update, no rounds.

The stream (emulator/system/stream.py) runs the clock until the plan's number of reports is in. Devices
dispatched meanwhile start training at once on the runners, from the model version they downloaded; the
reports are applied in simulated-time order, each with its staleness, so the numbers never depend on
which runner finishes first or how many there are. A checkpoint keeps the stream (the devices in flight)
and the versions they downloaded: those still to report are trained again after a resume, from the
same version with the same seed.
"""
from __future__ import annotations

import numpy as np

from emulator.algorithms import ClientUpdate
from emulator.algorithms.base import Arrival, RoundPlan
from emulator.algorithms.selection import distinct_in_draw_order
from emulator.runtime import inline
from emulator.runtime.grouping import group_jobs
from emulator.runtime.runner import DeviceJob
from emulator.seeding import torch_seed
from emulator.server.record import AsyncFigures, PlayedRound
from emulator.server.world import ServerWorld
from emulator.system.base import RoundOutcome
from emulator.system.stream import AsyncStream

ENDED = {"report": "reported", "dropped": "dropped", "abandoned": "straggler"}  # a trip's end, for events.csv


class AsynchronousEngine:
    """Plays ASYNC plans: each is one server update of `plan.cohort` reports."""

    def __init__(self, world: ServerWorld):
        self.world = world
        self.stream: AsyncStream | None = None
        self._stream_state = None  # a checkpoint's stream, loaded when the stream is first built
        self.version = 0  # server updates applied
        self._versions: dict[int, np.ndarray] = {}  # model versions devices in flight downloaded
        self._version_refs: dict[int, object] = {}
        self._pending: dict[int, tuple] = {}  # task id -> (object ref of its group's updates, index)
        self._next_runner = 0

    def play(self, r: int, plan: RoundPlan) -> PlayedRound:
        world = self.world
        stream = self._stream(plan)
        segment = stream.advance(plan.cohort, self.version)
        self._versions[self.version] = world.params  # what this segment's dispatches downloaded
        self._submit([task for task in segment.dispatched if task.outcome == "report"])
        results = [self._result(task) for task in segment.reports]
        if world.adversaries is not None:  # colluders in one buffer send one update
            results = world.adversaries.colluded(results)
        arrivals = [Arrival(world.upload.encode(update, r, ("task", task.task_id)), self.version - task.version,
                            self._versions[task.version]) for update, task in zip(results, segment.reports)]
        server_s = 0.0
        if arrivals:
            world.params = world.algorithm.apply(world.params, arrivals, r)
            self.version += 1
            operations = world.algorithm.server_operations()
            if operations:  # a robust rule's time: reports due meanwhile wait for it
                server_s = world.system.charge_server(0, operations)
        self._forget(stream)
        outcome = RoundOutcome(
            start_s=segment.start_s, end_s=segment.end_s + server_s, selected=segment.devices("dispatched"),
            reported=segment.devices("reports"), dropped=segment.devices("finished", "dropped"),
            stragglers=segment.devices("finished", "abandoned"), bytes_down=segment.bytes_down,
            bytes_up=segment.bytes_up, failed=segment.failed, server_compute_s=server_s)
        events = []
        if world.system.config.events:  # trips as events.csv rows: dispatched, then how each ended
            trips = [(t.dispatched_s, t.device, "selected") for t in segment.dispatched]
            trips += [(t.ends_s, t.device, ENDED[t.outcome]) for t in segment.finished]
            events = [(r, time, device, event) for time, device, event in sorted(trips)]
        devices, counts = distinct_in_draw_order(outcome.reported)
        staleness = [a.staleness for a in arrivals]
        figures = AsyncFigures(
            version=self.version, staleness_mean=float(np.mean(staleness)) if staleness else None,
            staleness_max=max(staleness) if staleness else None, concurrency_mean=segment.concurrency_mean,
            concurrency_max=segment.concurrency_max, wasted_compute_s=segment.wasted_compute_s)
        return PlayedRound(plan, outcome, devices, counts, [a.update.stats for a in arrivals],
                           aggregated=np.array([a.update.device for a in arrivals], np.int64),
                           asynchronous=figures, events=events)

    def _forget(self, stream: AsyncStream) -> None:
        """Keep only the model versions a device still in flight trained from, and the current one."""
        needed = {task.version for task in stream.in_flight() if task.outcome == "report"} | {self.version}
        self._versions = {v: p for v, p in self._versions.items() if v in needed}
        self._version_refs = {v: ref for v, ref in self._version_refs.items() if v in needed}

    def _stream(self, plan: RoundPlan) -> AsyncStream:
        """The stream, built at the first update (it needs the payload sizes)."""
        if self.stream is None:
            world = self.world
            down, up = world.algorithm.payload
            self.stream = AsyncStream(
                world.system, world.algorithm.concurrency, plan.selection, world.scenario.seed,
                down * world.transfer_bytes, world.upload_bytes(up), world.samples_processed,
                deadline_s=world.system.config.deadline_s)
            if self._stream_state is not None:
                self.stream.load_state(self._stream_state)
        return self.stream

    def _submit(self, tasks: list) -> None:
        """Start training the tasks that will report, from their version, on the runners (groups cut from
        the dispatch order; a task's runner follows its group's place, never a finishing order)."""
        if not tasks:
            return
        world = self.world
        runtime, seed, hostile, algorithm = world.scenario.runtime, world.scenario.seed, world.adversaries, \
            world.algorithm
        by_version: dict[int, list] = {}
        for task in tasks:
            job = DeviceJob(task.device, algorithm.local_training(task.device),
                            torch_seed(seed, "train-async", task.task_id), 1, algorithm.job_payload(task.device),
                            attack=None if hostile is None else hostile.attack_of(task.device),
                            attack_seed=torch_seed(seed, "attack", task.version))
            by_version.setdefault(task.version, []).append((task, job))
        runners = world.pool.runners
        for version, pairs in by_version.items():
            if version not in self._version_refs:
                self._version_refs[version] = world.pool.put(self._versions[version])
            for group in group_jobs(pairs, runtime.group_size, runtime.vectorise, len(runners), world.model_bytes):
                runner = runners[self._next_runner % len(runners)]
                self._next_runner += 1
                ref = runner.train_group.remote(world.run, self._version_refs[version], [job for _, job in group],
                                                runtime.vectorise)
                for index, (task, _) in enumerate(group):
                    self._pending[task.task_id] = (ref, index)

    def _result(self, task) -> ClientUpdate:
        """A reporting task's update as trained, before the uplink (trained now if it was in flight at a
        checkpoint this run resumed from)."""
        if task.task_id not in self._pending:
            self._submit([task])
        ref, index = self._pending.pop(task.task_id)
        return inline.get(ref)[index]

    # ------------------------------------------------------------------------------------ checkpoints
    def state(self) -> dict:
        return {"version": self.version, "versions": {v: p.copy() for v, p in self._versions.items()},
                "stream": self.stream.state() if self.stream is not None else self._stream_state}

    def load_state(self, state: dict) -> None:
        self.version = state["version"]
        self._versions = {int(v): np.asarray(p, np.float32).copy() for v, p in state["versions"].items()}
        self._version_refs, self._pending, self.stream = {}, {}, None
        self._stream_state = state["stream"]

"""The continuous protocol of asynchronous aggregation (FedAsync, FedBuff) on the simulated clock.

The server keeps `concurrency` devices working at once. A free slot is refilled at once with a device the
selection policy draws from those online and not already working; it downloads the current model version,
and its whole trip (download, training, upload, or the moment it is lost) is drawn up front by the
system's own timeline, so the compute, network, availability, dropout and data-tied models apply
unchanged. A task that would report later than `deadline_s` after its dispatch is abandoned then.

Tasks end in simulated-time order (ties by task id) and each end frees its slot, refilled at that instant.
`advance(K, version)` runs the clock until K more reports have arrived: one segment between two server
updates. The slot the K-th report frees is refilled at the next segment's start, with the new version.
When fewer devices are online than slots are free, the server polls every checkin_poll_s; with nothing in
flight for selection_timeout_s the segment fails.

Dispatch batch b draws from rng(seed, "async", b), so the tasks depend on the seed and the world alone,
never on training; state() holds the in-flight tasks and the counters, enough to resume bit-identically.
"""
from __future__ import annotations

import heapq
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from emulator.algorithms.selection import SelectionPolicy, distinct_in_draw_order
from emulator.seeding import rng
from emulator.system.accounting import transfer_seconds
from emulator.system.base import CohortRequest
from emulator.system.simulated import SimulatedSystem


@dataclass(frozen=True)
class Task:
    """One device's trip, known in full when it is dispatched (its timeline is drawn up front)."""

    task_id: int  # 0, 1, 2, ... in dispatch order for the whole run: a stable key for training jobs
    device: int
    version: int  # the server model version it downloaded
    dispatched_s: float
    ends_s: float  # when it reports, drops, or is abandoned
    outcome: str  # "report" | "dropped" (dropout or went offline) | "abandoned" (past the deadline)
    compute_s: float  # simulated seconds of training it did: wasted work unless it reports
    bytes_down: int  # the model, if its download finished before the task ended
    bytes_up: int  # the update, for reports only


@dataclass
class Segment:
    """What happened between two server updates.

    bytes_down counts the tasks dispatched here (the download starts then), bytes_up the reports here and
    wasted_compute_s the tasks dropped or abandoned here, so the segments of a run add up to its totals."""

    start_s: float
    end_s: float = 0.0
    dispatched: list[Task] = field(default_factory=list)  # started here, all downloading `version`
    finished: list[Task] = field(default_factory=list)  # ended here, in (ends_s, task_id) order
    reports: list[Task] = field(default_factory=list)  # the reporting subset of finished: what the server applies
    concurrency_mean: float = 0.0  # time-weighted mean number in flight
    concurrency_max: int = 0
    bytes_down: int = 0
    bytes_up: int = 0
    wasted_compute_s: float = 0.0
    failed: bool = False  # nothing in flight for selection_timeout_s: `reports` holds fewer than asked

    def devices(self, tasks: str, *outcomes: str) -> np.ndarray:
        """The device ids of `dispatched`, `finished` or `reports`, only those of `outcomes` if given."""
        return np.array([t.device for t in getattr(self, tasks) if not outcomes or t.outcome in outcomes],
                        dtype=np.int64)


class AsyncStream:
    """Keeps `concurrency` tasks in flight on a SimulatedSystem and hands out segments of K reports."""

    def __init__(self, system: SimulatedSystem, concurrency: int, selection: SelectionPolicy, seed: int,
                 bytes_down: int, bytes_up: int, samples_processed: Callable[[np.ndarray], np.ndarray],
                 deadline_s: float | None = None):
        if not 1 <= concurrency <= system.num_devices:
            raise ValueError(f"algorithm.concurrency must be between 1 and the population "
                             f"({system.num_devices} devices), got {concurrency}")
        self.system, self.concurrency, self.selection, self.seed = system, concurrency, selection, seed
        self.bytes_down, self.bytes_up, self.samples_processed = bytes_down, bytes_up, samples_processed
        self.deadline_s = deadline_s
        self._heap: list[tuple[float, int, Task]] = []  # in flight, by (ends_s, task_id)
        self._busy = np.zeros(system.num_devices, dtype=bool)  # a device holds at most one task
        self._next_task = 0
        self._batches = 0

    def in_flight(self) -> list[Task]:
        """The tasks still working, in the order they will end."""
        return [task for _, _, task in sorted(self._heap)]

    # ------------------------------------------------------------------------------------------ segments
    def advance(self, reports: int, version: int) -> Segment:
        """Run the clock from system.now_s until `reports` more reports have arrived (FedBuff's K; 1 for
        FedAsync), refilling free slots with devices that download `version`."""
        if reports < 1:
            raise ValueError(f"reports must be at least 1, got {reports}")
        config = self.system.config
        now = self.system.now_s
        segment = Segment(start_s=now)
        area, arrived, empty_since, next_poll = 0.0, 0, now, np.inf
        while True:
            self._refill(now, version, segment)
            segment.concurrency_max = max(segment.concurrency_max, len(self._heap))
            if self._heap:
                empty_since = np.inf
            else:
                empty_since = min(empty_since, now)
                if now - empty_since >= config.selection_timeout_s:
                    segment.failed = True
                    break
            if len(self._heap) == self.concurrency:
                next_poll = np.inf
            elif not now < next_poll < np.inf:  # slots free and no poll pending: look again later
                next_poll = now + config.checkin_poll_s
            # a task that ended while the server was busy (aggregating) is taken when the clock resumes
            upcoming = max(now, min(self._heap[0][0] if self._heap else np.inf, next_poll))
            area += len(self._heap) * (upcoming - now)
            now = upcoming
            arrived += self._finish_at(now, reports - arrived, segment)
            if arrived == reports:
                break
        return self._close(segment, now, area)

    def _finish_at(self, now: float, wanted: int, segment: Segment) -> int:
        """End the tasks due at `now` in task-id order, stopping at the `wanted`-th report."""
        got = 0
        while self._heap and self._heap[0][0] <= now and got < wanted:
            task = heapq.heappop(self._heap)[2]
            self._busy[task.device] = False
            segment.finished.append(task)
            if task.outcome == "report":
                segment.reports.append(task)
                got += 1
        return got

    def _close(self, segment: Segment, now: float, area: float) -> Segment:
        """Stamp the segment's totals, move the system's clock and record the ledger."""
        segment.end_s = self.system.now_s = now
        duration = now - segment.start_s
        segment.concurrency_mean = area / duration if duration > 0 else float(segment.concurrency_max)
        segment.bytes_down = sum(task.bytes_down for task in segment.dispatched)
        segment.bytes_up = sum(task.bytes_up for task in segment.reports)
        segment.wasted_compute_s = sum(task.compute_s for task in segment.finished if task.outcome != "report")
        self.system.ledger.record(segment.devices("dispatched"), segment.devices("reports"),
                                  segment.devices("finished", "dropped"), segment.devices("finished", "abandoned"))
        return segment

    # ------------------------------------------------------------------------------------------ dispatch
    def _refill(self, now: float, version: int, segment: Segment) -> None:
        """Fill the free slots from the devices online now and not in flight (fewer if too few are)."""
        free = self.concurrency - len(self._heap)
        if free == 0:
            return
        online = self.system.availability.online_devices(now)
        candidates = online[~self._busy[online]]
        if len(candidates) == 0:
            return
        batch, self._batches = self._batches, self._batches + 1
        stream = rng(self.seed, "async", batch)
        devices = self._choose(candidates, free, stream)
        if len(devices) == 0:
            return
        request = CohortRequest(round_index=batch, target=len(devices), selection=self.selection, rng=stream,
                                bytes_down=self.bytes_down, bytes_up=self.bytes_up,
                                samples_processed=self.samples_processed)
        tasks = self._dispatch(devices, now, version, request)
        for task in tasks:
            heapq.heappush(self._heap, (task.ends_s, task.task_id, task))
        self._busy[devices] = True
        segment.dispatched.extend(tasks)

    def _choose(self, candidates: np.ndarray, free: int, stream: np.random.Generator) -> np.ndarray:
        """Up to `free` distinct devices in draw order; a policy drawing with replacement draws again."""
        chosen: list[np.ndarray] = []
        while free and len(candidates):
            drawn = distinct_in_draw_order(self.selection.select(candidates, free, stream))[0][:free]
            if len(drawn) == 0:
                break
            chosen.append(drawn)
            free -= len(drawn)
            if free:
                candidates = candidates[~np.isin(candidates, drawn)]
        return np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)

    def _dispatch(self, devices: np.ndarray, now: float, version: int, request: CohortRequest) -> list[Task]:
        """The system's own timeline for the batch, cut at the deadline, as tasks."""
        plan = self.system.timeline(devices, now, request)
        cutoff = now + self.deadline_s if self.deadline_s is not None else np.inf
        reported = ~plan["dropped"] & (plan["finish"] <= cutoff)
        dropped = plan["dropped"] & (plan["lost_at"] <= cutoff)
        ends = np.minimum(plan["end"], cutoff)
        outcome = np.where(reported, "report", np.where(dropped, "dropped", "abandoned"))
        profiles = self.system.profiles
        upload = transfer_seconds(self.bytes_up, profiles.up_mbps[devices], profiles.latency_s[devices])
        trained = plan["finish"] - upload  # when its training finished (or would have)
        compute = np.clip(np.minimum(ends, trained) - plan["download_done"], 0.0, None)
        down = np.where(plan["download_done"] <= ends, self.bytes_down, 0)
        up = np.where(reported, self.bytes_up, 0)
        first, self._next_task = self._next_task, self._next_task + len(devices)
        columns = zip(range(first, self._next_task), devices.tolist(), ends.tolist(), outcome.tolist(),
                      compute.tolist(), down.tolist(), up.tolist())
        return [Task(task_id, device, version, now, end, kind, work, nd, nu)
                for task_id, device, end, kind, work, nd, nu in columns]

    # ------------------------------------------------------------------------------------------ checkpoints
    def state(self) -> dict:
        """The in-flight tasks and the counters (taken between segments; the system saves its own state)."""
        return {"in_flight": [asdict(task) for task in self.in_flight()], "next_task": self._next_task,
                "batches": self._batches}

    def load_state(self, state: dict) -> None:
        tasks = [Task(**fields) for fields in state["in_flight"]]
        self._heap = [(task.ends_s, task.task_id, task) for task in tasks]
        heapq.heapify(self._heap)
        self._busy[:] = False
        self._busy[[task.device for task in tasks]] = True
        self._next_task, self._batches = state["next_task"], state["batches"]

"""How a round's device jobs are cut into the groups one runner task trains (no Ray, no torch): the cut, a pure
function, and DeviceCost, the measured training time per device that sizes it."""
from __future__ import annotations

import math
import time
from contextlib import contextmanager
from typing import Sequence, TypeVar

Job = TypeVar("Job")

GROUP_BYTES = 64 * 2 ** 20  # an automatic group returns at most this many bytes of updates (G x model bytes)
MAX_GROUP = 64  # devices a vectorised group trains at once
# A task of devices trained one by one should hold about this much training: a task's own cost, beyond its
# devices', is several milliseconds on Ray (the call and its dispatch, the receipt back, the task's reads
# ahead and its fold), which sixteen tasks of population_100k's round (0.28 s each) paid once too often:
# eight tasks took 0.14 s a round outside training against 0.18, and 2.25 s a round against 2.36.
TASK_S = 0.5


def group_jobs(jobs: Sequence[Job], group_size: int | None, vectorise: bool, runners: int,
               model_bytes: int, device_seconds: float | None = None) -> list[list[Job]]:
    """Consecutive jobs (devices in draw order) cut into the groups one runner task trains.

    A vectorised group's composition reaches the last bits of its devices' results (batched matrix
    products sum in group-dependent order), so its cut follows the round's report count alone, never the
    runner count: four groups of near-equal size, more where a group would exceed MAX_GROUP devices or
    GROUP_BYTES of updates. Trained one at a time, a device's result is the same in any group, so the
    cut then also looks at the runners: one device a task while there are fewer than eight per runner
    (small cohorts balance best so), else eight groups per runner of near-equal size, within GROUP_BYTES;
    and, given `device_seconds` (what one device's training took in the rounds before: DeviceCost), fewer
    groups where smaller ones would hold under TASK_S of training each, down to one per runner, and as
    many for every runner (equal groups, handed to the runners as they free up, then end together).
    `runtime.group_size` fixes the size instead."""
    if not jobs:
        return []
    if group_size is not None:
        return [list(jobs[i:i + group_size]) for i in range(0, len(jobs), group_size)]
    runners = max(1, runners)
    cap = max(1, GROUP_BYTES // max(1, model_bytes))
    if vectorise:
        cap, wanted = min(cap, MAX_GROUP), 4
    elif device_seconds:  # fast devices: fewer, larger tasks (the same results in any cut)
        wanted = runners * min(8, math.ceil(len(jobs) * device_seconds / (TASK_S * runners)))
    else:
        wanted = 8 * runners
    count = min(len(jobs), max(wanted, math.ceil(len(jobs) / cap)))
    edges = [len(jobs) * g // count for g in range(count + 1)]
    return [list(jobs[a:b]) for a, b in zip(edges, edges[1:])]


def largest_group(selected: int, group_size: int | None, vectorise: bool, model_bytes: int) -> int:
    """The most devices one task of a round of `selected` jobs holds: what a vectorised runner trains at
    once (its GPU memory need, runtime/gpu_share.py). 1 unless vectorised: devices then train one by one."""
    if not vectorise:
        return 1
    return max((len(g) for g in group_jobs(range(max(1, selected)), group_size, vectorise, 1, model_bytes)), default=1)


class DeviceCost:
    """Seconds one device's training takes, as a run's rounds measured it: the wall time of a round's
    training x runners / devices (the runners' own overheads included, so it errs towards more, smaller
    tasks). group_jobs reads it for the cut of trained-one-at-a-time groups only, where a device's result
    is the same in any group: it changes the speed of a run, never its numbers."""

    def __init__(self):
        self.seconds: float | None = None

    @contextmanager
    def timing(self, devices: int, runners: int):
        """Around a round's training; a round that stops early (an error) measures nothing."""
        start = time.perf_counter()
        yield
        if devices:
            self.seconds = (time.perf_counter() - start) * max(1, runners) / devices

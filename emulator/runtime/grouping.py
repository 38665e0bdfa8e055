"""How a round's device jobs are cut into the groups one runner task trains (pure: no Ray, no torch)."""
from __future__ import annotations

import math
from typing import Sequence, TypeVar

Job = TypeVar("Job")

GROUP_BYTES = 64 * 2 ** 20  # an automatic group returns at most this many bytes of updates (G x model bytes)
MAX_GROUP = 64


def group_jobs(jobs: Sequence[Job], group_size: int | None, vectorise: bool, runners: int,
               model_bytes: int) -> list[list[Job]]:
    """Consecutive jobs (devices in draw order) cut into the groups one runner task trains.

    A vectorised group's composition reaches the last bits of its devices' results (batched matrix
    products sum in group-dependent order), so its cut follows the round's report count alone, never the
    runner count: four groups of near-equal size, more where a group would exceed MAX_GROUP devices or
    GROUP_BYTES of updates. Trained one at a time, a device's result is the same in any group, so the
    cut then also looks at the runners: one device a task while there are fewer than eight per runner
    (small cohorts balance best so), else eight groups per runner of near-equal size, within the same
    caps. `runtime.group_size` fixes the size instead."""
    if not jobs:
        return []
    if group_size is not None:
        return [list(jobs[i:i + group_size]) for i in range(0, len(jobs), group_size)]
    cap = max(1, min(MAX_GROUP, GROUP_BYTES // max(1, model_bytes)))
    wanted = 4 if vectorise else 8 * max(1, runners)
    count = min(len(jobs), max(wanted, math.ceil(len(jobs) / cap)))
    edges = [len(jobs) * g // count for g in range(count + 1)]
    return [list(jobs[a:b]) for a, b in zip(edges, edges[1:])]


def largest_group(selected: int, group_size: int | None, vectorise: bool, model_bytes: int) -> int:
    """The most devices one task of a round of `selected` jobs holds: what a vectorised runner trains at
    once (its GPU memory need, runtime/gpu_share.py). 1 unless vectorised: devices then train one by one."""
    if not vectorise:
        return 1
    return max((len(g) for g in group_jobs(range(max(1, selected)), group_size, vectorise, 1, model_bytes)), default=1)

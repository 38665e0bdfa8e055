"""Learning-rate schedules as pure functions of the round number.

Rounds are numbered as the emulator numbers them: round 1 is the first. A schedule scales a base rate
(`client_lr`, `server_lr`, ...) round by round:

- constant: the base rate.
- step: `gamma` once for each milestone reached; a milestone m takes effect at round m (rounds 1..m-1 use
  the rate, round m on the rate times gamma). `every: N` is the milestones N, 2N, 3N, ... so the factor is
  gamma ** floor(r / N); `milestones` and `every` may be combined (their counts add up).
- exponential: round 1 uses the base rate, round r the rate times gamma ** (r - 1).
- cosine: from the base rate at round 1 to `min_lr` at round T (`rounds`, default the scenario's rounds),
  lr_r = min_lr + (lr - min_lr) (1 + cos(pi (r - 1) / (T - 1))) / 2, and min_lr after T (T = 1: the rate).
- warm-up (any kind, `warmup_rounds: W`): rounds 1..W are scaled by s + (1 - s) r / W, s the
  `warmup_start_factor` (default 0), so round 1 is never at zero and round W is the first at full
  rate. Warm-up multiplies the inner schedule; it does not delay it (milestones and the cosine's span
  still count from round 1), so a milestone written as a paper states it means the same with or without
  warm-up.

Schedules are read from their scenario config (emulator/scenario.py) by attribute, so this module needs
nothing from the schema and stays free of pydantic.
"""
from __future__ import annotations

import math
from typing import Any


def warmup_factor(round_index: int, warmup_rounds: int, start_factor: float = 0.0) -> float:
    """The linear warm-up's factor for a round: s + (1 - s) r / W within the first W rounds, else 1."""
    if warmup_rounds <= 0 or round_index >= warmup_rounds:
        return 1.0
    return start_factor + (1.0 - start_factor) * round_index / warmup_rounds


def step_factor(round_index: int, gamma: float, every: int | None = None,
                milestones: list[int] | tuple[int, ...] = ()) -> float:
    """gamma to the number of milestones reached by this round (every N: milestones N, 2N, ...)."""
    reached = sum(1 for m in milestones if round_index >= m)
    if every:
        reached += round_index // every
    return gamma ** reached


def exponential_factor(round_index: int, gamma: float) -> float:
    """gamma ** (r - 1): round 1 runs at the base rate."""
    return gamma ** (round_index - 1)


def cosine_rate(base_lr: float, min_lr: float, round_index: int, span: int) -> float:
    """Half a cosine from base_lr (round 1) down to min_lr (round `span`), then min_lr."""
    progress = min(1.0, (round_index - 1) / max(span - 1, 1))
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def lr_at(base_lr: float, schedule: Any, round_index: int, total_rounds: int | None = None) -> float:
    """The rate of round `round_index` (1-based). No schedule (None): base_lr itself, unchanged.

    `total_rounds` is the scenario's rounds, the default span of a cosine schedule."""
    if round_index < 1:
        raise ValueError(f"rounds are numbered from 1, got round {round_index}")
    if schedule is None:
        return base_lr
    kind = schedule.kind
    if kind == "constant":
        lr = base_lr
    elif kind == "step":
        lr = base_lr * step_factor(round_index, schedule.gamma, schedule.every, schedule.milestones or ())
    elif kind == "exponential":
        lr = base_lr * exponential_factor(round_index, schedule.gamma)
    elif kind == "cosine":
        span = schedule.rounds if schedule.rounds is not None else total_rounds
        if span is None:
            raise ValueError("a cosine schedule without `rounds` needs the scenario's total rounds")
        lr = cosine_rate(base_lr, schedule.min_lr, round_index, span)
    else:
        raise ValueError(f"unknown schedule kind {kind!r}")
    warm = warmup_factor(round_index, schedule.warmup_rounds, schedule.warmup_start_factor)
    return lr if warm == 1.0 else lr * warm

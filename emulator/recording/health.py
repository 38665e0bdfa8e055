"""What a run's metrics rows say about it beyond "it ran": the model diverged, or no round made progress.

A run that went wrong must say so (its status and exit code), not end "completed" with a NaN model or with
nothing learned. These are pure functions of the rows (as recorded, or read back from metrics.csv), so a
resumed run is judged as the uninterrupted one would have been.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

DIVERGED, NO_PROGRESS = "diverged", "no_progress"


@dataclass(frozen=True)
class Verdict:
    status: str    # DIVERGED or NO_PROGRESS: the run's status in summary.json
    round: int     # the round that showed it
    message: str   # what happened and what to try


def _number(value) -> float | None:
    if value is None or value == "":
        return None
    return float(value)


def diverged(row: dict) -> str | None:
    """The loss that is not a finite number in this round's row (training's, or the test set's), or None."""
    for column in ("train_loss", "test_loss"):
        value = _number(row.get(column))
        if value is not None and not math.isfinite(value):
            return column
    return None


def progressed(row: dict) -> bool | None:
    """Did this round aggregate at least one device's report? None for a server round (SAFARI's, FSL's),
    which trains on the server's own data and says nothing about the devices."""
    if row.get("kind") == "server":
        return None
    return not int(_number(row.get("failed")) or 0) and int(_number(row.get("participants")) or 0) > 0


def judge_round(rows: list[dict], stop_on_divergence: bool, no_progress_rounds: int) -> Verdict | None:
    """After each round: stop the run now? `rows` are every round so far, the newest last."""
    row = rows[-1]
    loss = diverged(row) if stop_on_divergence else None
    if loss is not None:
        return Verdict(DIVERGED, int(row["round"]), (
            f"the model diverged: {loss} is {row[loss]} in round {row['round']}, so every later round would "
            "be wasted. Try a smaller learning rate (algorithm.client_lr, algorithm.server_lr) or fewer local "
            "steps, or check the data for extreme values; stop.diverged: false keeps the run going"))
    if no_progress_rounds > 0:
        streak = 0
        for earlier in reversed(rows):
            made = progressed(earlier)
            if made:
                break
            streak += made is False
        if streak >= no_progress_rounds:
            return Verdict(NO_PROGRESS, int(row["round"]), _no_progress(streak, int(row["round"])))
    return None


def judge_run(rows: list[dict]) -> Verdict | None:
    """At the end of a run: did any round at all aggregate a report?"""
    device_rounds = [made for made in map(progressed, rows) if made is not None]
    if device_rounds and not any(device_rounds):
        return Verdict(NO_PROGRESS, int(rows[-1]["round"]), _no_progress(len(device_rounds), int(rows[-1]["round"])))
    return None


def _no_progress(streak: int, round_index: int) -> str:
    return (f"no progress: {streak} round{'s' if streak > 1 else ''} in a row up to round {round_index} aggregated no "
            "device's report (none was online, none beat the deadline, or too few reported for "
            "system.min_report_fraction). Look at the world: population.availability, system.deadline_s, "
            "system.min_report_fraction, population.dropout_per_hour; stop.no_progress_rounds sets how many such "
            "rounds end a run (0: never)")

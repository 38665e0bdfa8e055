"""What happens around a round: observers, each one concern, each declaring the columns it adds.

After a round engine has played a round, the server builds its `RoundRecord` and hands it to each
observer in turn, with the `PlayedRound` the engine returned; an observer returns the values of the
columns it declared (and may set the record's evaluation tables). Observers see the record as the ones
before them left it, so an algorithm's own columns, computed last, can read everything else.
A plugin adds one by registering it (emulator.extend.register_observer); docs/extending.md shows how.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from emulator.server.record import PlayedRound, RoundRecord
    from emulator.server.world import ServerWorld


class Observer:
    """One concern around a round. Built once per run with the server's `ServerWorld`.

    `columns`: the metrics.csv columns it fills, in order (fixed once built). `after_round` returns their
    values for one round (a column it leaves out stays empty). `state` / `load_state`: what a checkpoint
    keeps of it; most observers keep nothing, or rebuild what they keep from the world on `load_state`."""

    columns: tuple[str, ...] = ()

    def __init__(self, world: "ServerWorld"):
        self.world = world

    def after_round(self, record: "RoundRecord", played: "PlayedRound") -> dict[str, Any]:
        return {}

    def state(self) -> dict:
        return {}

    def load_state(self, state: dict) -> None:
        pass

    def evaluates(self, record: "RoundRecord") -> bool:
        """Whether this round evaluates the global model (every `evaluation.every` rounds and the last)."""
        scenario = self.world.scenario
        return record.round % scenario.evaluation.every == 0 or record.round == scenario.rounds

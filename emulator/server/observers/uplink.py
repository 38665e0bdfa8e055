"""The uplink's figures of a round: secure aggregation's protocol columns (its stages' time and bytes)
and the upload pipeline's (DP's clip and epsilon so far, compression's error)."""
from __future__ import annotations

from emulator.server.observers.base import Observer
from emulator.system.simulated import SECAGG_COLUMNS


class Uplink(Observer):
    def __init__(self, world):
        super().__init__(world)
        self.columns = tuple(world.upload.columns) + (SECAGG_COLUMNS if world.secagg is not None else ())

    def after_round(self, record, played) -> dict:
        upload = self.world.upload
        reported = self.world.system.ledger.counts["reported"] if upload.dp else None
        return {**played.outcome.protocol, **upload.round_stats(reported)}

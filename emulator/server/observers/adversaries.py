"""The attackers' share of a round, and, under a robust aggregator, how often each group's honest
reports were accepted (emulator/evaluation/acceptance.py); on evaluation rounds, a backdoor's success."""
from __future__ import annotations

from emulator.algorithms.base import RoundKind
from emulator.evaluation.acceptance import acceptance_by_group, acceptance_columns
from emulator.evaluation.fleet import groupings
from emulator.runtime import inline
from emulator.server.adversaries import COLUMNS as ATTACKER_COLUMNS
from emulator.server.observers.base import Observer


class Attackers(Observer):
    def __init__(self, world):
        super().__init__(world)
        self.hostile = world.adversaries
        # with a robust aggregator: how often each group's honest reports were accepted
        self.groups = groupings(world.system.describe_devices()) \
            if world.scenario.algorithm.aggregator is not None else {}
        backdoor = self.hostile.backdoor if self.hostile is not None else None
        self.columns = (() if self.hostile is None else ATTACKER_COLUMNS + (("backdoor_success",) if backdoor else ())) \
            + tuple(acceptance_columns(self.groups, None if self.hostile is None else ~self.hostile.attacker))

    @classmethod
    def wanted(cls, world) -> bool:
        return world.adversaries is not None or world.scenario.algorithm.aggregator is not None

    def after_round(self, record, played) -> dict:
        if played.plan.kind == RoundKind.SERVER:  # no device reported: nothing accepted, nobody attacked
            return {}
        acceptance, hostile = self.world.algorithm.accepted_updates(), self.hostile
        values = {} if hostile is None else hostile.columns(played.aggregated, acceptance)
        if self.groups and acceptance is not None:
            values.update(acceptance_by_group(*acceptance, self.groups, None if hostile is None else ~hostile.attacker))
        backdoor = hostile.backdoor if hostile is not None else None
        if backdoor is not None and record.get("test_acc") is not None:
            world = self.world
            values["backdoor_success"] = inline.get(world.pool.runners[0].evaluate_backdoor.remote(
                world.run, world.params_ref(), world.scenario.evaluation.batch_size, backdoor))
        return values

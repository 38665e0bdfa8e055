"""Runners fold their devices' updates into one sum a round (aggregation/partial.py): a round's
numbers are those of updates sent one by one, and only algorithms whose round is a plain weighted mean, with
nothing on the server reading the updates one at a time, fold."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from conftest import STATEFUL, comparable, small_scenario
from emulator.aggregation.exact import FINEST_UNIT, unit_for
from emulator.aggregation.mean import WeightedMean
from emulator.algorithms.fedavg import FedAvg
from emulator.driver import run_scenario
from emulator.parts import validate_scenario
from emulator.runtime.runner import DeviceRunner
from emulator.server.synchronous import SynchronousEngine


@pytest.fixture
def folds(monkeypatch) -> list:
    """The rounds whose updates came folded (a call-through spy on the merge)."""
    calls, real = [], FedAvg.aggregate_partials

    def spy(self, params, partials, round_index):
        calls.append(round_index)
        return real(self, params, partials, round_index)
    monkeypatch.setattr(FedAvg, "aggregate_partials", spy)
    return calls


def test_folded_rounds_give_the_numbers_of_updates_sent_one_by_one(tmp_path, folds, monkeypatch):
    raw = small_scenario(**STATEFUL, **{"runtime.runners": 3, "runtime.group_size": 2})
    folded = run_scenario(validate_scenario(raw), tmp_path / "folded")
    assert folds == list(range(1, 8))
    monkeypatch.setattr(FedAvg, "partial_fold", lambda self: None)
    one_by_one = run_scenario(validate_scenario(raw), tmp_path / "one-by-one")
    assert folds == list(range(1, 8))  # no more folded rounds
    assert comparable(folded.path) == comparable(one_by_one.path)
    assert len(comparable(folded.path)) == 7


@pytest.mark.parametrize("change, folded", [
    ({}, True),
    ({"algorithm": {"name": "fast", "q": 0.5, "clients_per_round": 8}}, True),  # its host, FedAvg, aggregates
    ({"algorithm.server_optimizer": {"kind": "adam"}}, True),
    ({"algorithm.weighting": "uniform"}, True),
    ({"algorithm.aggregator": {"kind": "median"}}, False),  # a robust rule needs every update
    ({"algorithm": {"name": "scaffold", "clients_per_round": 8}}, False),  # control variates, update by update
    ({"model": "mlp", "algorithm": {"name": "fedper", "personal_layers": ["5"], "clients_per_round": 8}}, False),
    ({"privacy": {"noise_multiplier": 0.5, "clip": 1.0}}, False),  # the server clips each report
    ({"compression": {"kind": "qsgd", "levels": 4}}, False),  # and encodes it
    ({"population.types": [{"name": "honest", "share": 0.7}, {"name": "attacker", "share": 0.3, "attack": {
        "kind": "scaling", "boost": 3.0, "collude": True}}]}, False),  # colluders agree on the round's updates
], ids=["fedavg", "fast", "fedadam", "uniform", "median", "scaffold", "fedper", "dp", "qsgd", "colluders"])
def test_which_rounds_fold(tmp_path, folds, change, folded):
    raw = small_scenario(rounds=2, **change)
    result = run_scenario(validate_scenario(raw), tmp_path / "run")
    assert result.summary["status"] == "completed"
    assert folds == ([1, 2] if folded else [])


def test_each_round_sums_at_the_unit_its_last_round_sets_and_a_resumed_run_keeps_it(tmp_path, monkeypatch):
    """Round 1 sums at the finest unit; each later round at unit_for of the round before's sum, on the runners
    and in the server's merge alike; the unit is part of the algorithm's state."""
    units, real = [], FedAvg.aggregate_partials

    def spy(self, params, partials, round_index):
        partials = list(partials)
        units.append(({p.unit for p in partials}, self.sum_unit))
        stepped = real(self, params, partials, round_index)
        merged = WeightedMean(len(params), units[-1][1])
        for p in partials:
            merged.merge(p)
        assert self.sum_unit == unit_for(merged.total)
        state = self.state()
        assert state.get("sum_unit", FINEST_UNIT) == self.sum_unit
        self.load_state({})
        assert self.sum_unit == FINEST_UNIT
        self.load_state(state)
        return stepped
    monkeypatch.setattr(FedAvg, "aggregate_partials", spy)
    run_scenario(validate_scenario(small_scenario(rounds=4, **{"runtime.runners": 2})), tmp_path / "run")
    assert units[0] == ({FINEST_UNIT}, FINEST_UNIT) and len(units) == 4
    assert all(len(partial) == 1 and partial == {server} and server > FINEST_UNIT for partial, server in units[1:])


def test_a_runner_sends_one_sum_a_round_whatever_its_tasks_and_only_once():
    """What crosses the object store from a runner: a small receipt a task, and one sum for the whole round,
    however many tasks and devices it folded: one update's size (4 bytes a parameter) at the unit a round of
    its size sets, twice that at the finest unit (a run's first round)."""
    from emulator import params as param_vector
    from emulator.aggregation.partial import Folding, FoldTask
    from emulator.data import federation_for
    from emulator.models.zoo import build_model
    from emulator.runtime.run_context import DeviceJob, RunContext
    from emulator.training.local import LocalTraining

    scenario = validate_scenario(small_scenario())
    federation = federation_for(scenario.data, 40, 0)
    model = build_model("mlp", federation.train.input_shape, federation.train.num_classes, 0)
    params = param_vector.flatten(model)
    context, runner = RunContext("partial", federation, "mlp", 0), DeviceRunner()
    jobs = [DeviceJob(d, LocalTraining(lr=0.05, batch_size=16, local_steps=2), d) for d in range(12)]
    one_by_one = runner.train_group(context, params, jobs)
    update_bytes = len(pickle.dumps(one_by_one[0]))
    sizes = {}
    for ticket, cuts in (("one", [(0, 1)]), ("three", [(0, 4), (4, 8), (8, 12)])):
        receipts = [runner.train_group(context, params, jobs[a:b], False, FoldTask(Folding(), ticket, i))
                    for i, (a, b) in enumerate(cuts)]
        assert all(len(pickle.dumps(receipt)) < 0.05 * update_bytes for receipt in receipts)
        assert [d for receipt in receipts for d in receipt.devices] == [job.device for job in jobs[:cuts[-1][1]]]
        held = runner.take_sum(context.key, ticket)
        assert held.groups == list(range(len(cuts))) and runner.take_sum(context.key, ticket) is None
        sizes[ticket] = len(pickle.dumps(held))
    assert sizes["three"] < 1.01 * sizes["one"] < 2.1 * update_bytes  # twice one float32 update, any tasks
    by_hand = WeightedMean(len(params))
    Folding().fold_into(by_hand, one_by_one)
    runner.train_group(context, params, jobs, False, FoldTask(Folding(), "all", 0))
    assert np.array_equal(runner.take_sum(context.key, "all").mean.mean(), by_hand.mean())
    unit = unit_for(by_hand.total)  # the next round's unit
    coarse = WeightedMean(len(params), unit)
    Folding(unit=unit).fold_into(coarse, one_by_one)
    runner.train_group(context, params, jobs[:4], False, FoldTask(Folding(unit=unit), "coarse", 0))
    runner.train_group(context, params, jobs[4:], False, FoldTask(Folding(unit=unit), "coarse", 1))
    held = runner.take_sum(context.key, "coarse")
    assert np.array_equal(held.mean.mean(), coarse.mean()) and len(pickle.dumps(held)) < 1.02 * update_bytes
    assert runner.held_runs() == [context.key]
    runner.train_group(context, params, jobs[:2], False, FoldTask(Folding(), "forgotten", 0))
    runner.release(context.key)
    assert runner.held_runs() == [] and runner.take_sum(context.key, "forgotten") is None


def test_a_runner_restarted_holding_its_sum_costs_time_not_results(tmp_path, monkeypatch):
    """A runner that restarts (a fresh instance, as Ray restarts a dead actor) after folding its groups of
    a round, before the server took its sum: its groups are trained again, and the run's numbers are
    those of an uninterrupted one."""
    raw = small_scenario(**STATEFUL, **{"runtime.runners": 2, "runtime.group_size": 2})
    reference = run_scenario(validate_scenario(raw), tmp_path / "reference")
    real_train, tickets, trained_again = SynchronousEngine._train, [], []

    def train_then_restart(self, groups, devices, folds=None, after_last=None, params_ref=None):
        def restart_then_take():  # the third round's groups are all folded: runner 0 restarts, holding nothing
            if folds is not None and folds[0].ticket not in tickets and len(tickets) == 2:
                self.world.pool.runners[0].obj = DeviceRunner()
            if after_last is not None:  # the server asks for the sums
                after_last()
        yield from real_train(self, groups, devices, folds, restart_then_take, params_ref)
        if folds is None:
            return
        if folds[0].ticket in tickets:  # the server trains again what a runner lost
            trained_again.extend(fold.group for fold in folds)
        tickets.append(folds[0].ticket)
    monkeypatch.setattr(SynchronousEngine, "_train", train_then_restart)

    restarted = run_scenario(validate_scenario(raw), tmp_path / "restarted")
    assert len(set(tickets)) == 7 and trained_again  # runner 0's groups of round 3 were trained twice
    assert comparable(restarted.path) == comparable(reference.path)


def test_a_group_folded_twice_under_one_ticket_is_in_the_sum_once():
    """Ray retries the unfinished calls of a runner it restarted, and the server trains again what the
    restarted runner lost: a group may reach the runner's new sum twice, with the same updates. The sum
    holds it once, so the round's mean is the one of an uninterrupted round."""
    from emulator.aggregation.partial import Folding, FoldTask, HeldSums
    from emulator.algorithms.base import ClientUpdate
    from emulator.training.local import TrainStats

    rng = np.random.default_rng(0)
    updates = [ClientUpdate(d, 10 + d, rng.normal(0, 0.1, 50).astype(np.float32), TrainStats(3, 0.5, 0.5), 1)
               for d in range(4)]
    once, twice = HeldSums(), HeldSums()
    once.fold("run", FoldTask(Folding(), "ticket", 0), updates[:2], 50)
    once.fold("run", FoldTask(Folding(), "ticket", 1), updates[2:], 50)
    for group, part in ((0, updates[:2]), (1, updates[2:]), (0, updates[:2])):
        receipt = twice.fold("run", FoldTask(Folding(), "ticket", group), part, 50)
        assert receipt.devices == [u.device for u in part]
    held_once, held_twice = once.take("run", "ticket"), twice.take("run", "ticket")
    assert held_twice.groups == [0, 1]
    assert np.array_equal(held_twice.mean.mean(), held_once.mean.mean()) and held_twice.mean.count == 4


def test_a_runner_compiles_its_adds_at_a_large_run_s_start_and_not_at_a_small_one_s(monkeypatch):
    """The exact adds are compiled (about 0.5 s a process) where a runner will fold at least COMPILE_FROM
    values over the run (updates a runner times the model's size), before its first round; a small run's
    runner adds with numpy (the same bits)."""
    pytest.importorskip("numba")
    from emulator import params as param_vector
    from emulator.aggregation import exact
    from emulator.data import federation_for
    from emulator.models.zoo import build_model
    from emulator.runtime.run_context import RunContext

    federation = federation_for(validate_scenario(small_scenario()).data, 40, 0)
    size = param_vector.size(build_model("mlp", federation.train.input_shape, federation.train.num_classes, 0))
    large = exact.COMPILE_FROM / size  # updates a runner: just enough
    for updates, compiled in ((large * 0.99, False), (large, True)):
        monkeypatch.setattr(exact, "_kernels", [])
        DeviceRunner()._run(RunContext(f"run-{updates}", federation, "mlp", 0, updates_per_runner=updates))
        assert bool(exact._kernels) == compiled
    assert exact._kernels[0] is not None

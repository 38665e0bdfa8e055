"""Runners fold their devices' updates into one partial sum a task (aggregation/partial.py): a round's
numbers are those of updates sent one by one, and only algorithms whose round is a plain weighted mean, with
nothing on the server reading the updates one at a time, fold."""
from __future__ import annotations

import pickle

import numpy as np
import pytest

from conftest import STATEFUL, comparable, small_scenario
from emulator.algorithms.fedavg import FedAvg
from emulator.driver import run_scenario
from emulator.parts import validate_scenario
from emulator.runtime.runner import DeviceRunner


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


def test_a_task_sends_one_model_sized_partial_whatever_its_devices():
    """What crosses the object store from a runner: one partial of 8 bytes a parameter for the whole task."""
    from emulator import params as param_vector
    from emulator.aggregation.partial import Folding
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
    one_by_one = [len(pickle.dumps(u)) for u in runner.train_group(context, params, jobs)]
    folded = [len(pickle.dumps(runner.train_group(context, params, jobs[:n], False, Folding()))) for n in (1, 12)]
    assert folded[1] < 1.01 * folded[0] < 2.1 * one_by_one[0]  # twice one float32 update, for any group
    assert sum(one_by_one) > 5 * folded[1]

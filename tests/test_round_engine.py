"""The round engine and its observers, in process: the Algorithm base declares every hook the engines use,
a host-wrapping algorithm forwards every hook it does not override, a round is a typed record whose
columns are the observers' declared ones, and a scenario's own observer adds a column."""
from typing import Literal

import pytest
from conftest import small_scenario

from emulator.algorithms.base import ATTRIBUTES, HOOKS, Algorithm, RoundKind, RoundPlan
from emulator.algorithms.hosted import Hosted
from emulator.data import build_federation
from emulator.parts import validate_scenario
from emulator.registry import OBSERVERS, register_observer
from emulator.scenario.execution import ObserverSettings
from emulator.runtime.inline import InlineActor
from emulator.runtime.runner import DeviceRunner, RunContext
from emulator.server.observers.base import Observer
from emulator.server.record import RECORD_COLUMNS, RoundRecord
from emulator.server.server import FederatedServer

# What the engines and observers may ask of an algorithm: its declared hooks and attributes, its identity,
# its columns and its checkpoint state. Anything else is a hook the base does not declare.
DECLARED = set(HOOKS) | set(ATTRIBUTES) | {"name", "columns", "honours_rates", "state", "load_state", "config",
                                           "context"}


class DeclaredOnly:
    """An algorithm as an engine may use it: asking for anything the base does not declare fails."""

    def __init__(self, inner):
        self._inner = inner

    def __getattr__(self, name):
        if name not in DECLARED:
            raise AssertionError(f"the engine used {name!r}, which emulator.algorithms.base.Algorithm does not declare")
        return getattr(self._inner, name)


def server_for(raw: dict) -> FederatedServer:
    scenario = validate_scenario(raw)
    federation = build_federation(scenario.data, scenario.population.devices, scenario.seed)
    context = RunContext("engine-test", federation, scenario.model.name, 0, scenario.model.options())
    return FederatedServer(scenario.model_dump(mode="json"), context, runners=[InlineActor(DeviceRunner())])


ROUND_KINDS = {
    "client": {"algorithm": {"name": "fedavg", "clients_per_round": 8, "local_steps": 2}},
    "snapshot": {"algorithm": {"name": "fast", "q": 1.0, "clients_per_round": 8, "local_steps": 2}},
    "server": {"algorithm": {"name": "safari", "clients_per_round": 8, "local_steps": 2, "q": 0.0},
               "data.server_set": {"size": 40}},
    "async": {"algorithm": {"name": "fedbuff", "buffer": 4, "concurrency": 8, "local_steps": 2}},
}


@pytest.mark.parametrize("kind", sorted(ROUND_KINDS))
def test_every_hook_the_engines_call_is_declared_on_the_base(kind):
    server = server_for(small_scenario(rounds=3, **ROUND_KINDS[kind]))
    server.world.algorithm = DeclaredOnly(server.world.algorithm)
    kinds = {str(server.run_round().kind) for _ in range(3)}
    assert kind in kinds  # the round kind this case is about was played


class Recording(Algorithm):
    """A host that answers every hook with its own name."""

    def __getattribute__(self, name):
        if name in HOOKS:
            return lambda *args, **kwargs: ("host", name, args)
        return super().__getattribute__(name)


class Wrapper(Hosted):
    own_columns = ("own",)

    def __init__(self, host):
        self.host = host

    def plan_round(self, round_index):
        return "wrapper's own"


@pytest.mark.parametrize("hook", [h for h in HOOKS if h != "plan_round"])
def test_a_hosted_algorithm_forwards_every_hook_it_does_not_override(hook):
    wrapper = Wrapper(Recording.__new__(Recording))
    assert getattr(wrapper, hook)(1, 2) == ("host", hook, (1, 2))
    assert wrapper.plan_round(1) == "wrapper's own"


@pytest.mark.parametrize("attribute", ATTRIBUTES)
def test_a_hosted_algorithm_takes_its_hosts_attributes(attribute):
    host = Recording.__new__(Recording)
    host.payload, host.personal, host.shared_share, host.asynchronous, host.concurrency = (2, 2), "p", 0.5, True, 7
    host.columns = ("a", "own")
    wrapper = Wrapper(host)
    assert getattr(wrapper, attribute) == getattr(host, attribute)
    assert wrapper.columns == ("own", "a")  # its own first, the host's after, none twice


def test_fast_overrides_only_what_it_changes():
    from emulator.algorithms.fast import Fast

    own = {name for name in HOOKS if name in vars(Fast)}
    assert own == {"plan_round", "after_round"}  # the rest is the host's, generated (algorithms/hosted.py)


def test_a_round_plan_takes_a_kind_by_value_and_refuses_an_unknown_one():
    assert RoundPlan("client").kind is RoundKind.CLIENT and f"{RoundKind.SNAPSHOT}" == "snapshot"
    with pytest.raises(ValueError, match="RoundPlan.kind: 'clients' is no round kind"):
        RoundPlan("clients")


def test_a_record_is_the_observers_columns_after_the_engines():
    server = server_for(small_scenario(rounds=2))
    record = server.run_round()
    assert isinstance(record, RoundRecord) and record.kind is RoundKind.CLIENT
    assert tuple(record.row()) == RECORD_COLUMNS + tuple(record.columns)
    assert set(record.columns) <= set(server.get_columns()) and record["test_acc"] == record.columns["test_acc"]
    assert record.class_accuracy is not None and "class_accuracy" not in record.row()
    assert record.get("train_acc") == record.train_acc and 0.0 <= record.train_acc <= 1.0


def test_the_ledger_of_a_round_and_the_one_before_are_kept():
    server = server_for(small_scenario(rounds=3))
    records = [server.run_round() for _ in range(3)]
    assert server.participation_after(1) is None  # two rounds back: no longer kept
    before, after = server.participation_after(2), server.participation_after(3)
    assert (after["reported"] - before["reported"]).sum() == records[-1].participants > 0


class RunningBest(Observer):
    """An observer that carries state across rounds: the best training accuracy so far."""

    columns = ("best_train_acc",)

    def __init__(self, world):
        super().__init__(world)
        self.best = 0.0

    def after_round(self, record, played):
        self.best = max(self.best, record.train_acc or 0.0)
        return {"best_train_acc": self.best}

    def state(self):
        return {"best": self.best}

    def load_state(self, state):
        self.best = state.get("best", 0.0)


class RunningBestConfig(ObserverSettings):
    kind: Literal["running_best"] = "running_best"


def test_an_observers_state_goes_through_a_checkpoint():
    if "running_best" not in OBSERVERS:
        register_observer("running_best", lambda config, world: RunningBest(world), config=RunningBestConfig)
    raw = small_scenario(rounds=6, observers=[{"kind": "running_best"}])
    whole = server_for(raw)
    expected = [whole.run_round()["best_train_acc"] for _ in range(6)]
    first = server_for(raw)
    for _ in range(3):
        first.run_round()
    state = first.get_state()
    assert state["observers"] == {f"{len(first.observers) - 2}:RunningBest": {"best": expected[2]}}
    second = server_for(raw)
    assert second.load_state(state) == 3
    assert [second.run_round()["best_train_acc"] for _ in range(3)] == expected[3:]

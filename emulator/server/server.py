"""The federated server: one round per call, played by an engine, recorded by observers.

Each round: the algorithm plans it; the round engine (synchronous or asynchronous) plays it on the
`ServerWorld` (the system model decides who reports and when, the reporting devices train for real on the
runner pool, their updates stream into the algorithm); the round becomes a `RoundRecord`, which every
observer completes with its columns. The server never writes files: the driver's recorder does, so
results stay at the edge.
"""
from __future__ import annotations

import gc
import os
import pickle

import numpy as np
import ray
import torch

from emulator.parts.loading import load_parts
from emulator.runtime.runner import RunContext, RunHandle
from emulator.scenario import Scenario
from emulator.server.asynchronous import AsynchronousEngine
from emulator.server.hierarchical import HierarchicalEngine
from emulator.server.observers import ParticipationLedger, observers_for
from emulator.server.preflight import preflight
from emulator.server.record import RECORD_COLUMNS, RoundRecord
from emulator.server.synchronous import SynchronousEngine
from emulator.server.world import ServerWorld
from emulator.training.local import set_torch_arithmetic


_FRESH_TORCH_RNG = torch.get_rng_state()  # torch's default generator as a new process has it


class FederatedServer:
    def __init__(self, scenario: dict | None = None, run: RunContext | RunHandle | None = None,
                 runners: list | None = None, torch_threads: int | None = None):
        """Set up for a run at once when given one. The driver starts the server actor empty, so that its
        process imports torch while the driver still loads the data, and gives it the run with `setup`."""
        if scenario is not None:
            self.setup(scenario, run, runners, torch_threads)

    def ping(self) -> bool:
        return True

    def setup(self, scenario: dict, run: RunContext | RunHandle, runners: list, torch_threads: int | None = None,
              validated: bytes | None = None, state_dir: str | None = None) -> None:
        """`validated`: the driver's Scenario, pickled. Taken as it is, not validated again here: this process
        may run elsewhere (a warm instance started in another directory, another node), where a check of a
        relative path, a plugin's or ours, would look in the wrong place. `state_dir`: where a personalized
        algorithm keeps its devices' state (the run directory's device_state/; None: a temporary one)."""
        self.__dict__.clear()  # nothing of an earlier run stays (a server kept for later runs: `release`)
        set_torch_arithmetic(torch_threads)  # as the runners: server-side training and evaluation
        load_parts(scenario.get("plugins", []))  # before unpickling or validating: the plugins' classes
        scenario = pickle.loads(validated) if validated is not None else Scenario.model_validate(scenario)
        self.world = ServerWorld(scenario, run, runners, state_dir)
        algorithm = self.world.algorithm
        self.engine = (AsynchronousEngine if algorithm.asynchronous else HierarchicalEngine if algorithm.hierarchical
                       else SynchronousEngine)(self.world)
        self.observers = observers_for(self.world)
        self.ledger = next(o for o in self.observers if isinstance(o, ParticipationLedger))
        self.round = 0
        self._events: list[tuple] = []

    def release(self) -> bool:
        """Forget the run, for an actor kept for later runs (runtime/idle_servers.py): its world, observers
        and data go, and torch's global generator is back at its state when the process started, so the
        next run is served as a fresh process would serve it."""
        self.__dict__.clear()
        gc.collect()
        torch.set_rng_state(_FRESH_TORCH_RNG)
        return True

    @ray.method(concurrency_group="report")
    def serving(self) -> str | None:
        """The key of the run this server plays (None: none, an idle server kept for a later run)."""
        world = self.__dict__.get("world")
        return None if world is None else world.run.key

    def pid(self) -> int:
        return os.getpid()

    def get_columns(self) -> tuple[str, ...]:
        return RECORD_COLUMNS + tuple(c for observer in self.observers for c in observer.columns)

    def preflight(self) -> list[str]:
        return preflight(self.world)

    def run_round(self) -> RoundRecord:
        """Play the next round and return its record, complete with every observer's columns."""
        self.round += 1
        world, r = self.world, self.round
        world.server_samples_this_round = 0
        world.upload.begin_round()
        plan = world.algorithm.plan_round(r)
        played = self.engine.play(r, plan)
        self._events = played.events
        record = RoundRecord.of(r, played)
        for observer in self.observers:
            record.columns.update(observer.after_round(record, played))
        return record

    def attach_directory(self, state_dir: str) -> None:
        """A fresh run's directory exists only after the server is set up: where device state goes from now."""
        self.world.state_dir = state_dir

    # ------------------------------------------------------------------------------------ checkpoints
    def get_state(self) -> dict:
        """Everything that carries over between rounds, for a checkpoint after round `round`."""
        world = self.world
        state = {"round": self.round, "params": world.params.copy(), "algorithm": world.algorithm.state(),
                 "system": world.system.state()}
        upload = world.upload.state()
        if upload:  # residuals (device state), the clip and the accountant's releases
            state["upload"] = upload
        if isinstance(self.engine, AsynchronousEngine):  # the devices in flight and the versions they downloaded
            state["async"] = self.engine.state()
        kept = {key: observer.state() for key, observer in self._keyed_observers()}
        kept = {key: value for key, value in kept.items() if value}
        if kept:
            state["observers"] = kept
        return state

    def _keyed_observers(self):
        """Each observer with the key its checkpoint state goes under: its place and its class (a resumed run
        has the same observers: they are part of the experiment, checkpoint.py)."""
        for i, observer in enumerate(self.observers):
            inner = getattr(observer, "inner", observer)  # a plugin's, guarded
            yield f"{i}:{type(inner).__qualname__}", observer

    def load_state(self, state: dict) -> int:
        world = self.world
        self.round = state["round"]
        world.params = np.asarray(state["params"], dtype=np.float32).copy()
        world.algorithm.load_state(state["algorithm"])
        world.system.load_state(state["system"])
        world.upload.load_state(state.get("upload", {}))
        if "async" in state:
            self.engine.load_state(state["async"])
        kept = state.get("observers", {})
        for key, observer in self._keyed_observers():
            observer.load_state(kept.get(key, {}))
        self.ledger.keep(self.round)
        return self.round

    # ------------------------------------------------------------------------------------ what the recorder pulls
    def take_events(self) -> list[tuple]:
        """The last round's device events (round, time_s, device, event), when system.events is on."""
        events, self._events = self._events, []
        return events

    def participation(self) -> dict[str, np.ndarray]:
        """Per-device columns for participation.csv: counters, sample counts and the device's profile."""
        return self.participation_after(self.round)

    @ray.method(concurrency_group="report")
    def participation_after(self, round_index: int) -> dict[str, np.ndarray] | None:
        """participation.csv's columns as they stood after `round_index` (None if no longer kept).

        Answered at once, even while a round is in flight (its own concurrency group): a stopped run
        writes the participation of the last round it saved without waiting for the next one."""
        return self.ledger.columns_after(round_index)

    def get_params(self) -> np.ndarray:
        return self.world.params


# Rounds run one at a time; participation_after answers beside them (see there).
ServerActor = ray.remote(concurrency_groups={"report": 1})(FederatedServer)

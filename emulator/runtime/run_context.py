"""What a runner is handed: a run (its context, or a handle to it in the object store) and device jobs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import ray

from emulator.data.federation import Federation
from emulator.parts.plugins import guard
from emulator.registry import MODELS
from emulator.training.attacks import Attack
from emulator.training.local import LocalTraining
from emulator.training.personal import Personalization


@dataclass(frozen=True)
class RunContext:
    """Everything a runner needs to train a run's devices; put into the object store once per run."""

    key: str
    federation: Federation
    model_name: str
    model_seed: int
    model_options: dict = field(default_factory=dict)  # the model's own options (scenario `model:` fields)
    plugins: tuple[str, ...] = ()  # modules to import before building anything (they register parts)
    precision: str = "fp32"  # runtime.precision: fp32, or bf16 autocast (emulator/training/precision.py)
    updates_per_runner: float = 0.0  # about how many updates a runner adds to exact sums over the run


def model_guard(context: RunContext, stage: str):
    """A failure in the run's model (a plugin's, say) named at the model's origin, in the stage it hit."""
    return guard(MODELS.get(context.model_name).origin, f"model {context.model_name!r}", stage)


@dataclass(frozen=True)
class RunHandle:
    """A run as the runners are handed it on Ray: its key, and the object reference of its RunContext
    (inside an object, so Ray does not fetch the context for every call: a runner fetches it once and
    keeps it by key). In one process the RunContext itself is the handle."""

    key: str
    ref: Any


def unbox(run: RunContext | RunHandle) -> RunContext:
    """The run's context, from its handle."""
    return run if isinstance(run, RunContext) else ray.get(run.ref)


@dataclass(frozen=True)
class DeviceJob:
    device: int
    spec: LocalTraining
    seed: int  # derived from (scenario seed, round, device): the same whichever runner trains it
    multiplicity: int = 1
    correction: np.ndarray | None = None  # SCAFFOLD: c - c_i, added to every gradient
    personalization: Personalization | None = None  # FedPer / Ditto: the device keeps state of its own
    own: np.ndarray | None = None  # that state as it stands (None: the device has none yet)
    attack: Attack | None = None  # an attacker's device (population.types[].attack): poisoned data or update
    attack_seed: int = 0  # the round's, for attacks that collude (the same draw from every attacker)

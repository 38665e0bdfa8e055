"""What the server checks before the first round, once it holds the model, the algorithm and the world.

A deadline that no device can ever meet (the exact fastest device, now that the data is there), a
precision the server's CPU lacks, compression or secure aggregation with an algorithm whose uploads they
cannot encode (the same checks `emulator validate` runs: system/preflight.py): refused (ScenarioError)
before any round runs. Returns notes for the user (e.g. why devices train one at a time although runtime.vectorise
asks otherwise, or what a privacy figure assumes)."""
from __future__ import annotations

import platform

import numpy as np

from emulator.system import SimulatedSystem
from emulator.system.preflight import check_deadline, check_upload
from emulator.training import cohort
from emulator.training import precision as numerics


def preflight(world) -> list[str]:
    scenario = world.scenario
    numerics.require(world.precision, "cpu", f"the server on {platform.node() or 'its node'}")
    notes = []
    why_not = cohort.supports(world.model) if scenario.runtime.vectorise else None
    if why_not:
        notes.append(f"runtime.vectorise: model {scenario.model.name!r} trains one device at a time: {why_not}")
    algorithm = world.algorithm
    check_upload(scenario, algorithm.payload[1], algorithm.shared_share, len(world.params))
    if world.upload.dp is not None:
        notes.append(f"privacy: dp_epsilon is {world.upload.accountant.label}; here the system model decides who "
                     "reports, so that assumption does not hold. dp_epsilon_device_max and participation.csv's "
                     "dp_epsilon bound each device without it (docs/privacy.md)")
    if isinstance(world.system, SimulatedSystem):
        check_deadlines(world)
    return notes


def check_deadlines(world) -> None:
    """A deadline shorter than the fastest device's download, training and upload would fail every round."""
    down, up = world.algorithm.payload
    fastest = world.system.fastest_round_s(down * world.transfer_bytes, world.upload_bytes(up),
                                           world.samples_processed(np.arange(len(world.sizes))))
    check_deadline(world.scenario.system, fastest, world.model_bytes)

"""What the server checks before the first round, once it holds the model, the algorithm and the world.

A deadline that no device can ever meet, a precision the server's CPU lacks, compression or secure
aggregation with an algorithm whose uploads they cannot encode: refused (ScenarioError) before any
round runs. Returns notes for the user (e.g. why devices train one at a time although runtime.vectorise
asks otherwise, or what a privacy figure assumes)."""
from __future__ import annotations

import platform

import numpy as np

from emulator.scenario import ScenarioError
from emulator.system import SimulatedSystem
from emulator.training import cohort
from emulator.training import precision as numerics


def preflight(world) -> list[str]:
    scenario = world.scenario
    numerics.require(world.precision, "cpu", f"the server on {platform.node() or 'its node'}")
    notes = []
    why_not = cohort.supports(world.model) if scenario.runtime.vectorise else None
    if why_not:
        notes.append(f"runtime.vectorise: model {scenario.model.name!r} trains one device at a time: {why_not}")
    check_upload(scenario, world.algorithm, len(world.params), world.secagg is not None)
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
    config = world.system.config
    for field, deadline in (("system.deadline_s", config.deadline_s),
                            ("system.snapshot_deadline_s", config.snapshot_deadline_s)):
        if deadline is not None and fastest > deadline:
            raise ScenarioError(
                f"{field}: {deadline:g} s, but even the fastest device needs {fastest:.1f} s to download the "
                "model, train and upload (population.compute / population.network, "
                f"{world.model_bytes} model bytes); raise the deadline, lighten the local work, or speed up the devices")


def check_upload(scenario, algorithm, values: int, secure: bool) -> None:
    """Compression and secure aggregation need to know the model and the algorithm's uploads: k within the
    model, and one update vector to encode or mask."""
    name, scheme, vectors = scenario.algorithm.name, scenario.compression, algorithm.payload[1]
    if secure and vectors != 1:
        raise ScenarioError(f"secure_aggregation: algorithm {name!r} uploads {vectors} vectors a device, and the cost "
                            "model masks one; use a FedAvg-family algorithm with secure aggregation")
    if scheme.kind == "none":
        return
    if algorithm.shared_share < 1:
        raise ScenarioError(f"compression: algorithm {name!r} keeps part of the model on the devices, and the "
                            "encoders count every entry of the update; use compression: {kind: none} with it")
    if vectors != 1:
        raise ScenarioError(f"compression: algorithm {name!r} uploads {vectors} vectors a device (e.g. SCAFFOLD's "
                            "control variate), and only the model delta has an encoder; use compression: "
                            "{kind: none} with it")
    if scheme.kind == "top_k" and scheme.k is not None and scheme.k > values:
        raise ScenarioError(f"compression.k: {scheme.k}, but model {scenario.model.name!r} has {values} values; give "
                            f"k <= {values}, or fraction: a share of the model (e.g. 0.01)")

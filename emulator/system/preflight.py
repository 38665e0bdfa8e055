"""The checks of a scenario that need its model and algorithm built, made from the scenario and the dataset's
metadata alone (input shape, classes: no data loaded), on the CPU. validate_scenario runs them
(emulator/parts/loading.py), so `emulator validate` refuses what `emulator run` would refuse once started,
with the same message; the server, which holds the real model and algorithm, calls the same pure functions
(`upload_problem`, `deadline_problem`) in its own preflight.

- what the uplink can carry: compression with top_k's k above the model's values, or of an algorithm that
  uploads more than one vector (SCAFFOLD's control variate) or keeps part of the model on the devices
  (FedPer); secure aggregation of more than one vector a device;
- a deadline no device can meet: here a lower bound, from the network tiers alone (the model down and the
  update up on the best link, before any training, whose time depends on each device's data); the server
  checks the exact fastest device once the data is there;
- what a built-in algorithm refuses when it is built (FedPer's personal_layers the model lacks).

A plugin's model or algorithm is not built here: its code runs when the run starts, where a failure is named
at the plugin (errors.guard)."""
from __future__ import annotations

import numpy as np

from emulator import params as param_vector
from emulator.algorithms import AlgorithmContext, build_algorithm
from emulator.errors import ScenarioError, is_plugin
from emulator.models.zoo import build_model
from emulator.registry import ALGORITHMS, MODELS
from emulator.scenario import Scenario
from emulator.scenario.root import dataset_classes, dataset_input_shape
from emulator.system.accounting import transfer_seconds


def upload_problem(scenario: Scenario, uploads: int, shared_share: float, values: int) -> tuple[str, str] | None:
    """(field, problem) where the uplink cannot carry what the algorithm sends, else None: `uploads` model-sized
    vectors a device (the algorithm's payload[1]), `shared_share` of the model travelling, `values` in it."""
    scheme, name = scenario.compression, scenario.algorithm.name
    if scenario.secure_aggregation is not None and uploads != 1:
        return "secure_aggregation", (f"algorithm {name!r} uploads {uploads} vectors a device, and the cost model "
                                      "masks one; use a FedAvg-family algorithm with secure aggregation")
    if scheme.kind == "none":
        return None
    if shared_share < 1:
        return "compression", (f"algorithm {name!r} keeps part of the model on the devices, and the encoders count "
                               "every entry of the update; use compression: {kind: none} with it")
    if uploads != 1:
        return "compression", (f"algorithm {name!r} uploads {uploads} vectors a device (e.g. SCAFFOLD's control "
                               "variate), and only the model delta has an encoder; use compression: {kind: none} "
                               "with it")
    if scheme.kind == "top_k" and scheme.k is not None and scheme.k > values:
        return "compression.k", (f"{scheme.k}, but model {scenario.model.name!r} has {values} values; give k <= "
                                 f"{values}, or fraction: a share of the model (e.g. 0.01)")
    return None


def deadline_problem(system, fastest_s: float, model_bytes: int, bound: bool = False) -> tuple[str, str] | None:
    """(field, problem) where a deadline of `system` (the scenario's system section) is shorter than the fastest
    device's round, `fastest_s`: the server's exact figure, or (`bound`) a lower bound from the links alone."""
    for field in ("deadline_s", "snapshot_deadline_s"):
        deadline = getattr(system, field)
        if deadline is None or fastest_s <= deadline:
            continue
        if bound:
            return f"system.{field}", (
                f"{deadline:g} s, but even the fastest device needs at least {fastest_s:.1f} s to download the model "
                f"and upload its update, before any training (population.network, {model_bytes} model bytes); "
                "raise the deadline, send a smaller model or give the devices faster links")
        return f"system.{field}", (
            f"{deadline:g} s, but even the fastest device needs {fastest_s:.1f} s to download the model, train and "
            f"upload (population.compute / population.network, {model_bytes} model bytes); raise the deadline, "
            "lighten the local work, or speed up the devices")
    return None


def check_upload(scenario: Scenario, uploads: int, shared_share: float, values: int) -> None:
    """upload_problem as the server raises it (one line: field, problem)."""
    _raise(upload_problem(scenario, uploads, shared_share, values))


def check_deadline(system, fastest_s: float, model_bytes: int) -> None:
    """deadline_problem for the server's exact fastest device, as it raises it."""
    _raise(deadline_problem(system, fastest_s, model_bytes))


def _raise(problem: tuple[str, str] | None, source: str | None = None) -> None:
    if problem is None:
        return
    line = f"{problem[0]}: {problem[1]}"
    raise ScenarioError(line if source is None else f"{source}: 1 problem:\n  {line}")


def fastest_transfer_s(scenario: Scenario, down_bytes: int, up_bytes: int) -> float | None:
    """The least any device can take to download `down_bytes` and upload `up_bytes` (None: not known from the
    scenario: links drawn from a distribution or read from a trace)."""
    network = scenario.population.network
    if network.kind != "tiers":
        return None
    return min(float(transfer_seconds(down_bytes, t.down_mbps, t.latency_s) + transfer_seconds(up_bytes, t.up_mbps,
                                                                                               t.latency_s))
               for t in network.tiers)


def built(scenario: Scenario):
    """(model, algorithm) as the server builds them, from the dataset's metadata and on the CPU; None for a
    plugin's model or algorithm. An algorithm's own refusal (a ScenarioError) is raised as it is."""
    if is_plugin(MODELS.get(scenario.model.name).origin) or is_plugin(ALGORITHMS.get(scenario.algorithm.name).origin):
        return None
    model = build_model(scenario.model.name, dataset_input_shape(scenario.data), dataset_classes(scenario.data), 0,
                        scenario.model.options())
    values = param_vector.flatten(model)
    devices = scenario.population.devices
    algorithm = build_algorithm(scenario.algorithm, AlgorithmContext(
        num_devices=devices, device_sizes=np.zeros(devices, np.int64), num_params=len(values), seed=scenario.seed,
        parameter_mask=param_vector.parameter_mask(model), total_rounds=scenario.rounds,
        model_name=scenario.model.name, parameter_layout=param_vector.layout(model), state_dir=lambda: None))
    return model, algorithm


def preflight(scenario: Scenario, source: str = "scenario") -> None:
    """The server's checks that the scenario and the dataset's metadata decide, run at validation: a
    ScenarioError naming the field, as the schema reports one."""
    try:
        parts = built(scenario)
    except ScenarioError as exc:  # the algorithm's own refusal (FedPer's layers), already one line: field, problem
        raise ScenarioError(f"{source}: 1 problem:\n  {exc}") from None
    if parts is None:
        return
    model, algorithm = parts
    values, model_bytes = len(param_vector.flatten(model)), param_vector.nbytes(model)
    down, up = algorithm.payload
    _raise(upload_problem(scenario, up, algorithm.shared_share, values), source)
    if scenario.system.model != "simulated":
        return
    travelling = int(round(model_bytes * algorithm.shared_share))
    uploaded = up * travelling if scenario.compression.kind == "none" else (up - 1) * travelling  # encoded: >= 0
    fastest = fastest_transfer_s(scenario, down * travelling, uploaded)
    if fastest is not None:
        _raise(deadline_problem(scenario.system, fastest, model_bytes, bound=True), source)

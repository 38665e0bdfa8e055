"""What a scenario will hold in memory, estimated from the scenario alone, before anything is allocated.

`emulator validate` prints it, so a user sees what a population, a dataset or a model costs before a run
starts; a population that cannot fit is refused at start (checks.population_fits). The figures are what
the emulator's own arrays take (float32 samples, float32 parameter vectors), not Python's or Ray's
overheads, which add a few hundred MB per process whatever the scenario.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from emulator.registry import DATASETS, MODELS
from emulator.system.checks import BYTES_PER_DEVICE

FLOAT = 4  # bytes: samples and parameters are float32
# Training and test images of the built-in datasets (the real files' counts), for the data's share.
SAMPLES = {"fashion_mnist": (60000, 10000), "mnist": (60000, 10000), "cifar10": (50000, 10000),
           "emnist:balanced": (112800, 18800), "emnist:byclass": (697932, 116323),
           "emnist:bymerge": (697932, 116323), "emnist:digits": (240000, 40000),
           "emnist:letters": (124800, 20800), "emnist:mnist": (60000, 10000)}
# Copies of the parameter vector a runner holds while it trains one device: the model, its gradients,
# the global vector it started from and the update it returns, and the optimizer's state (Adam: 2).
TRAINING_COPIES = {"sgd": 4, "adam": 6}
# population.energy: each device's profile (system/energy.py: battery, training power, charger power, initial
# level as float64, the radio as a flag) and, where an eligible entry says when phones charge, its battery's
# state (system/battery.py: capacity, floor, level, time, power, until, the floor's cached answer's time as
# float64; tracked, charges, the cached answer as flags).
ENERGY_BYTES_PER_DEVICE = 4 * 8 + 1
BATTERY_BYTES_PER_DEVICE = 7 * 8 + 3
# system.network: each device's access link (int32) and its transfers' summed slowdown (float64) and rounds
# (int32) for participation.csv (system/network.py)
NETWORK_BYTES_PER_DEVICE = 4 + 8 + 4


@dataclass
class Footprint:
    parts: dict[str, int]  # what -> bytes
    unknown: list[str]     # what could not be estimated (a plugin dataset's size, say)
    on_disk: int = 0       # data.store: disk: the data's bytes in files, read through the shared page cache

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    def describe(self) -> str:
        parts = ", ".join(f"{name} {size_text(size)}" for name, size in self.parts.items())
        missing = f"; not counted: {', '.join(self.unknown)}" if self.unknown else ""
        disk = (f"; the data on disk, memory-mapped: up to {size_text(self.on_disk)} of files, shared by every process "
                "through the page cache" if self.on_disk else "")
        return f"about {size_text(self.total)} ({parts}){missing}{disk}"


def size_text(n: int) -> str:
    return f"{n / 2 ** 30:,.1f} GiB" if n >= 2 ** 30 else f"{n / 2 ** 20:,.0f} MiB"


def samples_of(data, devices: int) -> tuple[int, int] | None:
    """(training, test) samples the scenario's dataset holds, or None where only loading it would tell."""
    if data.dataset == "synthetic":
        train = devices * data.synthetic.max_samples  # at most: each device draws up to max_samples
        return train, math.ceil(train * data.synthetic.test_fraction)
    key = f"emnist:{data.emnist_split}" if data.dataset == "emnist" else data.dataset
    if key not in SAMPLES:
        return None
    train, test = SAMPLES[key]
    return train, min(test, data.test_samples or test)


def estimate(scenario, runners: int | None = None) -> Footprint:
    """The scenario's memory on the driver's machine: its population, its data (in the driver and once more
    in Ray's object store, which the runners on a machine share; or, with data.store on disk, files that
    every process maps, counted apart), each runner's training copies and the server's."""
    parts, unknown, on_disk = {}, [], 0
    devices = scenario.population.devices
    parts["population"] = devices * BYTES_PER_DEVICE
    if scenario.population.energy is not None:
        batteries = any(entry.kind == "eligible" for entry in scenario.population.availability)
        parts["energy and batteries" if batteries else "energy"] = devices * (
            ENERGY_BYTES_PER_DEVICE + (BATTERY_BYTES_PER_DEVICE if batteries else 0))
    if scenario.system.network is not None:
        parts["shared links"] = devices * NETWORK_BYTES_PER_DEVICE
    counts = samples_of(scenario.data, devices)
    entry = DATASETS.get(scenario.data.dataset)
    shape = entry.fact("input_shape")
    if counts is None or shape is None:
        unknown.append(f"the data of {scenario.data.dataset!r}")
    else:
        per_sample = math.prod(shape(scenario.data)) * FLOAT + 8  # features and the label
        if scenario.data.store.on_disk(devices):
            on_disk = sum(counts) * per_sample
        else:
            parts["data (driver and object store)"] = 2 * sum(counts) * per_sample
    params = _parameters(scenario, entry)
    if params is None:
        unknown.append(f"the model {scenario.model.name!r}")
    else:
        runtime = scenario.runtime
        count = runners or runtime.runners or max(1, int((os.cpu_count() or 1) // runtime.num_cpus))
        copies = TRAINING_COPIES.get(getattr(scenario.algorithm, "client_optimizer", "sgd"), 4)
        group = (runtime.group_size or scenario.algorithm.clients_per_round) if runtime.vectorise else 1
        parts[f"{count} runners' training"] = count * group * copies * params * FLOAT
        parts["server"] = 6 * params * FLOAT  # the global vector, the mean, its optimizer's moments, a checkpoint
    return Footprint(parts, unknown, on_disk)


def _parameters(scenario, entry) -> int | None:
    """The model's parameter count, from building it once (cheap: no data, no training); `entry`: the
    scenario's registered dataset."""
    try:
        data = scenario.data
        shape, classes = entry.fact("input_shape"), entry.fact("classes")
        if shape is None or classes is None:
            return None
        model = MODELS.get(scenario.model.name).build(tuple(shape(data)), int(classes(data)),
                                                      **scenario.model.options())
        return sum(p.numel() for p in model.parameters())
    except Exception:  # noqa: BLE001 - a plugin's model that needs its data to build: not counted
        return None

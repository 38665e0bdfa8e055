"""Datasets, partitioners and the server set: everything that turns a scenario's `data:` into a Federation."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from emulator.data.federation import ArrayDataset, Federation
from emulator.data.local_split import with_local_test, with_own_test_split
from emulator.data.partition import partition, partition_types
from emulator.data.scratch import scratch_space
from emulator.data.server_set import carve_server_set
from emulator.data.store import cache_directory, cached_federation, content_key
from emulator.data.vision import VISION_DATASETS, DataUnavailableError, default_roots, load_vision
from emulator.registry import DATASETS
from emulator.scenario import DataConfig, ScenarioError
from emulator.seeding import device_types, rng


def build_federation(data: DataConfig, devices: int, seed: int, types=None) -> Federation:
    """The scenario's data split over `devices` devices, with the server set held out; a function of the seed.

    Each step draws from its own stream (synthetic, partition, server_set, test_subset), so changing, say,
    the server set leaves the partition as it was. Problems the user must fix raise ScenarioError.
    """
    try:
        train, test, per_device = DATASETS.get(data.dataset).build(data, devices, seed)
    except ScenarioError:
        raise
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    return assemble_federation(data, devices, seed, types, train, test, per_device)


def federation_for(data: DataConfig, devices: int, seed: int, types=None,
                   notify=lambda line: None, given: Federation | None = None) -> Federation:
    """build_federation's federation (or `given`: data handed over from Python, emulator.run(data=...)), held
    as data.store says: in memory, or written once under its content key (data/store.py) and memory-mapped,
    so that no process holds the samples as memory of its own."""
    def build() -> Federation:
        return given if given is not None else build_federation(data, devices, seed, types)

    if not data.store.on_disk(devices):
        return build()
    roots = [Path(data.root)] if data.root else (default_roots(data.dataset) if data.dataset in VISION_DATASETS
                                                 else [])
    key, described = content_key(data, devices, seed, types, DATASETS.get(data.dataset).build.__module__, roots)
    cache = cache_directory(data.store)

    def build_in_scratch() -> Federation:  # its large arrays are unlinked files under the cache, not memory
        with scratch_space(cache):
            return build()

    return cached_federation(key, cache, build_in_scratch, notify, described)


def assemble_federation(data: DataConfig, devices: int, seed: int, types, train: ArrayDataset, test: ArrayDataset,
                        per_device: list[np.ndarray] | None) -> Federation:
    """Loaded samples -> a Federation: the data's own split (scheme natural) or the scenario's partition,
    the server set carved out and the test set cut to data.test_samples, each from its own random stream."""
    try:
        if data.partition.scheme != "natural":
            per_device = _split(train, devices, data.partition, seed, types)
        elif per_device is None or len(per_device) != devices:
            users = "no natural split" if per_device is None else f"{len(per_device)} users in its natural split"
            raise ScenarioError(f"population.devices: {devices}, but dataset {data.dataset} has {users}; set "
                                "population.devices to match, or choose another data.partition.scheme")
        per_device, server = carve_server_set(per_device, train.y, train.num_classes, data.server_set,
                                              rng(seed, "server_set"))
    except ScenarioError:
        raise
    except ValueError as exc:
        raise ScenarioError(str(exc)) from None
    whole_test = test
    if data.test_samples is not None and data.test_samples < len(test):  # at most test_samples
        keep = np.sort(rng(seed, "test_subset").choice(len(test), data.test_samples, replace=False))
        test = test.subset(keep)
    federation = Federation.from_lists(train, test, per_device, server)
    local = data.local_test
    if local is not None and local.split == "dataset":
        if whole_test.owner is None or data.partition.scheme != "natural":
            why = (f"dataset {data.dataset} has no per-user test split" if whole_test.owner is None
                   else f"data.partition.scheme is {data.partition.scheme}, so devices are not the data's users")
            raise ScenarioError(f"data.local_test.split: dataset, but {why}; use split: carve with a fraction")
        federation = with_own_test_split(federation, whole_test, local.min_samples)
    elif local is not None:
        federation = with_local_test(federation, local.fraction, local.min_samples, rng(seed, "local_test"))
    return federation


def _split(train: ArrayDataset, devices: int, spec, seed: int, types) -> list[np.ndarray]:
    """The partition the scenario asks for; scheme types draws each device's data from its latent type."""
    if spec.scheme == "types":
        kinds = device_types([t.share for t in types], devices, seed)
        return partition_types(train.y, train.num_classes, types, kinds, spec.size_sigma, spec.min_samples,
                               rng(seed, "partition"))
    return partition(train.y, train.num_classes, devices, spec, rng(seed, "partition"))


__all__ = ["ArrayDataset", "Federation", "build_federation", "federation_for", "load_vision", "DataUnavailableError"]

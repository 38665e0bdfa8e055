"""Splitting a labelled training pool among devices.

Every function is pure: labels and a numpy Generator in, one int64 index array per device out, with every
sample index used at most once. Impossible requests raise ValueError naming the scenario field to change, so
the caller can pass the message on to the user unchanged.
"""
from __future__ import annotations

import numpy as np

from emulator.scenario import ClassesPartition, DirichletPartition, IidPartition, ShardsPartition

MAX_DIRICHLET_ATTEMPTS = 100


def _group(indices: np.ndarray, owners: np.ndarray, devices: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Per-device index arrays from (sample, owner) pairs, each device's samples in random order."""
    shuffle = rng.permutation(len(indices))
    indices, owners = indices[shuffle], owners[shuffle]
    order = np.argsort(owners, kind="stable")
    sizes = np.bincount(owners, minlength=devices)
    return np.split(indices[order].astype(np.int64), np.cumsum(sizes)[:-1])


def _check_devices(n_samples: int, devices: int, need_each: int = 1) -> None:
    if devices < 1:
        raise ValueError(f"population.devices: must be at least 1, got {devices}")
    if devices * need_each > n_samples:
        each = "" if need_each == 1 else f" x {need_each} samples each"
        raise ValueError(f"population.devices: {devices} devices{each} need more than the {n_samples} training "
                         "samples of the dataset; lower population.devices")


def _class_pools(labels: np.ndarray, num_classes: int, rng: np.random.Generator) -> list[np.ndarray]:
    """The sample indices of every class, each in random order."""
    order = np.lexsort((rng.random(len(labels)), labels))
    counts = np.bincount(labels, minlength=num_classes)[:num_classes]
    return np.split(order.astype(np.int64), np.cumsum(counts)[:-1])


def _labels(labels: np.ndarray, num_classes: int) -> np.ndarray:
    labels = np.asarray(labels, dtype=np.int64)
    if len(labels) and (labels.min() < 0 or labels.max() >= num_classes):
        raise ValueError(f"labels must lie in [0, {num_classes}), got [{labels.min()}, {labels.max()}]")
    return labels


def partition_iid(n_samples: int, devices: int, rng: np.random.Generator) -> list[np.ndarray]:
    """A uniform random split into near-equal parts (sizes differ by at most one)."""
    _check_devices(n_samples, devices)
    return [part.astype(np.int64) for part in np.array_split(rng.permutation(n_samples), devices)]


def _dirichlet(alpha: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """Dir(alpha, ..., alpha); falls back to uniform in the (rare) case that small alpha underflows."""
    p = rng.dirichlet(np.full(size, alpha))
    if not np.all(np.isfinite(p)) or p.sum() <= 0:
        p = np.full(size, 1.0 / size)
    return p


def partition_dirichlet(labels: np.ndarray, num_classes: int, devices: int, alpha: float, balanced: bool,
                        min_samples: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Label skew controlled by alpha (smaller, stronger).

    Unbalanced (Hsu et al. / FedLab style): each class is split across the devices by a Dir(alpha) draw, so
    device sizes vary too; redrawn until every device holds at least min_samples.
    Balanced (FAST): every device gets floor(n / devices) samples with its own class mix ~ Dir(alpha), drawn
    without replacement; when a class runs out the device's remaining draws go to classes that still have data.
    """
    labels = _labels(labels, num_classes)
    n = len(labels)
    if balanced:
        return _dirichlet_balanced(labels, num_classes, devices, alpha, rng)
    if devices * min_samples > n:
        raise ValueError(f"data.partition.min_samples: {devices} devices x {min_samples} samples each exceed the "
                         f"{n} training samples; lower min_samples or population.devices")
    _check_devices(n, devices)
    pools = _class_pools(labels, num_classes, rng)
    for _ in range(MAX_DIRICHLET_ATTEMPTS):
        owners = []
        for pool in pools:
            cuts = (np.cumsum(_dirichlet(alpha, devices, rng)) * len(pool)).astype(np.int64)[:-1]
            owners.append(np.searchsorted(cuts, np.arange(len(pool)), side="right"))
        owner = np.concatenate(owners) if owners else np.zeros(0, np.int64)
        if np.bincount(owner, minlength=devices).min() >= min_samples:
            return _group(np.concatenate(pools), owner, devices, rng)
    raise ValueError(
        f"data.partition.min_samples: no Dirichlet(alpha={alpha}) split of {n} samples over {devices} devices "
        f"gave every device at least {min_samples} samples in {MAX_DIRICHLET_ATTEMPTS} attempts; raise "
        "data.partition.alpha, lower data.partition.min_samples or population.devices, or set "
        "data.partition.balanced: true")


def _dirichlet_balanced(labels: np.ndarray, num_classes: int, devices: int, alpha: float,
                        rng: np.random.Generator) -> list[np.ndarray]:
    n = len(labels)
    _check_devices(n, devices)
    size = n // devices
    pools = _class_pools(labels, num_classes, rng)
    left = np.array([len(p) for p in pools], dtype=np.int64)
    counts = np.zeros((devices, num_classes), dtype=np.int64)
    for device in rng.permutation(devices):  # random order, so no device id is the one served last
        p = _dirichlet(alpha, num_classes, rng)
        take = np.minimum(rng.multinomial(size, p), left)
        short = size - take.sum()
        while short > 0:  # redraw the shortfall over the classes that still have samples
            room = left - take
            q = np.where(room > 0, p, 0.0)
            q = q / q.sum() if q.sum() > 0 else room / room.sum()
            take += np.minimum(rng.multinomial(short, q), room)
            short = size - take.sum()
        counts[device] = take
        left -= take
    return _assemble(pools, counts, rng)


def _assemble(pools: list[np.ndarray], counts: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Deal counts[d, c] samples of class c to device d, taking each class pool front to back."""
    devices = counts.shape[0]
    indices, owners = [], []
    for c, pool in enumerate(pools):
        column = counts[:, c]
        indices.append(pool[:column.sum()])
        owners.append(np.repeat(np.arange(devices), column))
    return _group(np.concatenate(indices), np.concatenate(owners), devices, rng)


def partition_classes(labels: np.ndarray, num_classes: int, devices: int, classes_per_client: int,
                      rng: np.random.Generator) -> list[np.ndarray]:
    """SAFARI / FSL: each device holds classes_per_client distinct classes, and each class's samples are split
    evenly (without replacement) among the devices holding it.

    Classes are handed out least-held first with random tie-breaking, so how often classes are held differs by
    at most one and every class is held once devices * classes_per_client >= the number of classes.
    """
    labels = _labels(labels, num_classes)
    present = np.flatnonzero(np.bincount(labels, minlength=num_classes))
    if classes_per_client > len(present):
        raise ValueError(f"data.partition.classes_per_client: {classes_per_client} exceeds the {len(present)} "
                         "classes of the dataset")
    _check_devices(len(labels), devices)
    held = np.zeros(len(present), dtype=np.int64)
    holds = np.zeros((devices, len(present)), dtype=bool)
    for device in range(devices):
        chosen = np.argsort(held + rng.random(len(present)))[:classes_per_client]
        holds[device, chosen] = True
        held[chosen] += 1
    pools = _class_pools(labels, num_classes, rng)
    counts = np.zeros((devices, num_classes), dtype=np.int64)
    for j, c in enumerate(present):
        holders = rng.permutation(np.flatnonzero(holds[:, j]))
        if len(holders):
            counts[holders, c] = [len(part) for part in np.array_split(np.arange(len(pools[c])), len(holders))]
    sizes = counts.sum(axis=1)
    if sizes.min() == 0:
        raise ValueError(f"population.devices: {devices} devices with {classes_per_client} classes each leave some "
                         "device without samples (a class has fewer samples than devices holding it); lower "
                         "population.devices or raise data.partition.classes_per_client")
    return _assemble(pools, counts, rng)


def partition_shards(labels: np.ndarray, devices: int, shards_per_client: int,
                     rng: np.random.Generator) -> list[np.ndarray]:
    """McMahan et al.: sort by label (random tie-breaking), cut into devices * shards_per_client equal shards
    and deal them out at random. Samples beyond a whole number of shards are left out at random."""
    labels = np.asarray(labels, dtype=np.int64)
    n, shards = len(labels), devices * shards_per_client
    if devices < 1:
        raise ValueError(f"population.devices: must be at least 1, got {devices}")
    if shards > n:
        raise ValueError(f"data.partition.shards_per_client: {devices} devices x {shards_per_client} shards need "
                         f"at least {shards} samples, the dataset has {n}; lower shards_per_client or "
                         "population.devices")
    shard_size = n // shards
    keep = rng.permutation(n)[:shards * shard_size]
    keep = keep[np.lexsort((rng.random(len(keep)), labels[keep]))]
    cut = keep.reshape(shards, shard_size)
    deal = rng.permutation(shards).reshape(devices, shards_per_client)
    return [cut[row].reshape(-1).astype(np.int64) for row in deal]


def partition(labels: np.ndarray, num_classes: int, devices: int, spec, rng: np.random.Generator) -> list[np.ndarray]:
    """Dispatch on the schema's partition spec; 'natural' belongs to the data generator, not here."""
    if isinstance(spec, IidPartition):
        return partition_iid(len(labels), devices, rng)
    if isinstance(spec, DirichletPartition):
        return partition_dirichlet(labels, num_classes, devices, spec.alpha, spec.balanced, spec.min_samples, rng)
    if isinstance(spec, ClassesPartition):
        return partition_classes(labels, num_classes, devices, spec.classes_per_client, rng)
    if isinstance(spec, ShardsPartition):
        return partition_shards(labels, devices, spec.shards_per_client, rng)
    raise ValueError(f"data.partition.scheme: {getattr(spec, 'scheme', spec)!r} is not a split of a pooled "
                     "dataset; choose iid, dirichlet, classes or shards")

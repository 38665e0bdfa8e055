"""Splitting a labelled training pool among devices.

Every function is pure: labels and a numpy Generator in, one int64 index array per device out, with every
sample index used at most once. Impossible requests raise ValueError naming the scenario field to change, so
the caller can pass the message on to the user unchanged.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from emulator.errors import PluginError, guard, is_plugin
from emulator.registry import PARTITIONS
from emulator.scenario import PartitionSettings


class NaturalPartition(PartitionSettings):
    """Each device keeps the data it was generated with (synthetic only)."""

    scheme: Literal["natural"] = "natural"


class IidPartition(PartitionSettings):
    scheme: Literal["iid"] = "iid"


class DirichletPartition(PartitionSettings):
    """Label proportions per device ~ Dirichlet(alpha); smaller alpha, stronger label skew."""

    scheme: Literal["dirichlet"] = "dirichlet"
    alpha: float = Field(gt=0)
    balanced: bool = False
    min_samples: int = Field(1, ge=0)


class ClassesPartition(PartitionSettings):
    """Each device holds `classes_per_client` classes, sampled evenly within them (SAFARI / FSL)."""

    scheme: Literal["classes"] = "classes"
    classes_per_client: int = Field(gt=0)


class ShardsPartition(PartitionSettings):
    """McMahan et al.: sort by label, cut into shards, give each device `shards_per_client` of them."""

    scheme: Literal["shards"] = "shards"
    shards_per_client: int = Field(2, gt=0)


class TypesPartition(PartitionSettings):
    """Each device's data drawn from its latent type (population.types): a label mix ~ Dirichlet around the
    type's labels or prototype, and an amount weighted by the type's `samples` (times a lognormal factor
    with sigma size_sigma). A class's samples are shared among the types that hold it, so a device never
    holds another type's classes; classes no type holds are left out."""

    scheme: Literal["types"] = "types"
    size_sigma: float = Field(0.0, ge=0)
    min_samples: int = Field(1, ge=1)


MAX_DIRICHLET_ATTEMPTS = 100
REDRAW_MAX_SHORT = 20  # a draw leaving more devices below min_samples is topped up, not redrawn


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
    device sizes vary too. A draw that leaves a few devices below min_samples is redrawn (at most
    MAX_DIRICHLET_ATTEMPTS times), which keeps the Dirichlet law conditioned on the minimum. At small alpha
    many devices fall short in every draw (alpha 0.1 over 1000 devices leaves about 2% of them empty), so a
    draw that leaves more than REDRAW_MAX_SHORT devices short, or the last one, is topped up instead: each
    short device gets what it lacks from its own most likely class, taken from the devices that hold the most
    of it (see _top_up), and the label skew stays.
    Balanced (FAST): every device gets floor(n / devices) samples with its own class mix ~ Dir(alpha), drawn
    without replacement; when a class runs out the device's remaining draws go to classes that still have data.
    """
    labels = _labels(labels, num_classes)
    n = len(labels)
    _check_devices(n, devices)
    if devices * min_samples > n:
        raise ValueError(f"data.partition.min_samples: {devices} devices x {min_samples} samples each need "
                         f"{devices * min_samples} samples, but the training pool holds {n}; set "
                         f"data.partition.min_samples to at most {n // devices}, or lower population.devices to "
                         f"at most {n // min_samples}")
    if balanced:
        return _dirichlet_balanced(labels, num_classes, devices, alpha, rng)
    pools = _class_pools(labels, num_classes, rng)
    for _ in range(MAX_DIRICHLET_ATTEMPTS):
        counts = np.zeros((devices, num_classes), dtype=np.int64)
        favourite = np.zeros(devices, dtype=np.int64)  # the class each device expects most samples of
        most = np.full(devices, -1.0)
        for c, pool in enumerate(pools):
            p = _dirichlet(alpha, devices, rng)
            cuts = np.minimum((np.cumsum(p) * len(pool)).astype(np.int64)[:-1], len(pool))
            counts[:, c] = np.diff(cuts, prepend=0, append=len(pool))
            expected = p * len(pool)
            better = expected > most
            favourite[better], most[better] = c, expected[better]
        short = np.count_nonzero(counts.sum(axis=1) < min_samples)
        if short == 0 or short > REDRAW_MAX_SHORT:
            break
    if short:
        _top_up(counts, favourite, min_samples)
    return _assemble(pools, counts, rng)


def _top_up(counts: np.ndarray, favourite: np.ndarray, min_samples: int) -> None:
    """Raise every device to min_samples in place, moving samples within a class from the devices that hold
    the most of it and never taking a donor below min_samples.

    A short device first takes what it lacks from its favourite class (the one its Dirichlet draw gave the
    largest share), so a device that drew nothing ends up with a single class, as strong a skew as a draw
    gives; what that class cannot supply comes from any class with room. Possible whenever
    devices * min_samples <= the number of samples: the donors' surplus covers the shortfall.
    """
    totals = counts.sum(axis=1)
    need = np.maximum(min_samples - totals, 0)
    for c in range(counts.shape[1]):  # pass 1: each short device's favourite class
        need = _move(counts, totals, need, favourite == c, c, min_samples)
    for c in np.argsort(-counts.sum(axis=0), kind="stable"):  # pass 2: what is still missing, from any class
        if not need.any():
            break
        need = _move(counts, totals, need, np.ones(len(need), dtype=bool), c, min_samples)
    assert not need.any(), "the donors' surplus covers the shortfall when devices * min_samples <= n"


def _move(counts: np.ndarray, totals: np.ndarray, need: np.ndarray, wanting: np.ndarray, c: int,
          min_samples: int) -> np.ndarray:
    """Move class-c samples to the devices in `wanting` with need > 0, from the largest holders of class c down
    (each giving at most what keeps it at min_samples); returns the need left."""
    takers = np.flatnonzero(wanting & (need > 0))
    wanted = need[takers].sum()
    if wanted == 0:
        return need
    room = np.minimum(counts[:, c], np.maximum(totals - min_samples, 0))
    donors = np.argsort(-counts[:, c], kind="stable")
    donors = donors[room[donors] > 0]
    given_before = np.cumsum(room[donors]) - room[donors]
    give = np.clip(wanted - given_before, 0, room[donors])
    got_before = np.cumsum(need[takers]) - need[takers]
    get = np.clip(give.sum() - got_before, 0, need[takers])
    counts[donors, c] -= give
    totals[donors] -= give
    counts[takers, c] += get
    totals[takers] += get
    need = need.copy()
    need[takers] -= get
    return need


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


def type_priors(types, num_classes: int) -> np.ndarray:
    """(types x classes) label distribution of each latent type: uniform over its labels, or its prototype."""
    priors = np.zeros((len(types), num_classes))
    for k, user_type in enumerate(types):
        if user_type.labels is not None:
            priors[k, list(user_type.labels)] = 1.0
        else:
            priors[k] = user_type.prototype
    return priors / priors.sum(axis=1, keepdims=True)


def partition_types(labels: np.ndarray, num_classes: int, types, device_type: np.ndarray, size_sigma: float,
                    min_samples: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Each device's data drawn from its latent type, never from another type's classes.

    Each class's samples go to the types that hold it, in proportion to share x samples x the type's
    weight on the class (classes no type holds are left out). Within a type, device i has a label mix
    q_i ~ Dirichlet(concentration x |support| x prior) over the type's classes and a weight w_i (the
    type's samples x a lognormal(0, size_sigma) factor), and a class's budget is split among the type's
    devices in proportion to w_i q_i(c). Devices left below min_samples are topped up from the largest
    holders of their main class (see _top_up)."""
    labels = _labels(labels, num_classes)
    n, devices = len(labels), len(device_type)
    _check_devices(n, devices, min_samples)
    priors = type_priors(types, num_classes)
    members = np.bincount(device_type, minlength=len(types)).astype(np.float64)
    demand = (members * np.array([t.samples for t in types]))[:, None] * priors  # (types, classes)
    pools = _class_pools(labels, num_classes, rng)
    supply = np.array([len(p) for p in pools], dtype=np.int64)
    wanted = demand.sum(axis=0)
    budget = np.zeros_like(demand, dtype=np.int64)
    for c in np.flatnonzero(wanted > 0):
        budget[:, c] = rng.multinomial(supply[c], demand[:, c] / wanted[c])
    weight = np.array([t.samples for t in types])[device_type]
    if size_sigma > 0:
        weight = weight * np.exp(size_sigma * rng.standard_normal(devices))
    concentration = np.array([t.concentration * np.count_nonzero(p) for t, p in zip(types, priors)])
    alpha = concentration[device_type, None] * priors[device_type]
    draws = rng.gamma(np.where(alpha > 0, alpha, 1.0)) * (alpha > 0)
    totals = draws.sum(axis=1, keepdims=True)
    mix = np.where(totals > 0, draws / np.where(totals > 0, totals, 1.0), priors[device_type])
    counts = np.zeros((devices, num_classes), dtype=np.int64)
    for k in range(len(types)):
        own = np.flatnonzero(device_type == k)
        for c in np.flatnonzero(budget[k]):
            p = weight[own] * mix[own, c]
            if p.sum() > 0:
                counts[own, c] = rng.multinomial(budget[k, c], p / p.sum())
    if (counts.sum(axis=1) < min_samples).any():
        if counts.sum() < devices * min_samples:
            raise ValueError(f"data.partition.min_samples: the types' classes hold {counts.sum()} samples, fewer "
                             f"than {devices} devices x {min_samples}; lower min_samples or population.devices")
        _top_up(counts, (mix * weight[:, None]).argmax(axis=1), min_samples)
    return _assemble(pools, counts, rng)


def partition(labels: np.ndarray, num_classes: int, devices: int, spec, rng: np.random.Generator) -> list[np.ndarray]:
    """The split the scheme names (emulator.registry.PARTITIONS: ours or a plugin's; a plugin's is guarded
    and its split checked, since a wrong one would train on data twice or index past the end silently)."""
    entry, part = PARTITIONS.get(spec.scheme), f"partition {spec.scheme!r}"
    with guard(entry.origin, part, "split", code=entry.build):  # our own parts' errors pass through as they are
        split = entry.build(labels, num_classes, devices, spec, rng)
    if not is_plugin(entry.origin):
        return split
    return _checked_split(split, len(labels), devices, f"plugin {entry.origin}: {part}'s split returned")


def _checked_split(split, samples: int, devices: int, said: str) -> list[np.ndarray]:
    """One int array per device, every index in range, none given to two devices, none empty."""
    if not isinstance(split, (list, tuple)) or len(split) != devices:
        raise PluginError(f"{said} {len(split) if isinstance(split, (list, tuple)) else type(split).__name__} parts "
                          f"for {devices} devices (data.partition); return a list of one index array per device")
    arrays = [np.asarray(part) for part in split]
    if any(a.ndim != 1 or (a.size and a.dtype.kind not in "iu") for a in arrays):
        raise PluginError(f"{said} something other than 1-D integer index arrays (data.partition)")
    arrays = [a.astype(np.int64) for a in arrays]
    empty = [d for d, a in enumerate(arrays) if a.size == 0]
    if empty:
        raise PluginError(f"{said} no samples for {len(empty)} device(s), the first device {empty[0]} "
                          "(data.partition); give every device at least one sample, or lower population.devices")
    joined = np.concatenate(arrays)
    if joined.min() < 0 or joined.max() >= samples:
        raise PluginError(f"{said} index {int(joined.max() if joined.max() >= samples else joined.min())}, outside "
                          f"the {samples} training samples (data.partition)")
    if len(np.unique(joined)) != len(joined):
        raise PluginError(f"{said} a sample given to two devices or twice to one (data.partition); each index at "
                          "most once")
    return arrays

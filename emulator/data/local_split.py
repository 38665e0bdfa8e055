"""Each device's own test split: a seeded share of its samples, held out from its training data.

Works on the federation's flat layout (offsets + indices), with one sort over all samples instead of a
loop over devices, so that it costs the same at 10^6 devices as one shuffle of the data."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from emulator.data.federation import ArrayDataset, Federation
from emulator.data.ragged import offsets_of


def held_out(samples, fraction: float, min_samples: int) -> np.ndarray:
    """How many of each device's `samples` it holds out: round(fraction x samples), or 0 when that is under
    `min_samples` or would leave the device nothing to train on (such a device has no local test)."""
    samples = np.asarray(samples, dtype=np.int64)
    held = np.rint(fraction * samples).astype(np.int64)
    return np.where((held >= min_samples) & (held < samples), held, 0)


def carve_local_test(offsets: np.ndarray, indices: np.ndarray, fraction: float, min_samples: int,
                     rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Split every device's samples (device d: indices[offsets[d]:offsets[d + 1]]) into a training part and
    a local test part of held_out(...) samples drawn uniformly at random from it.

    Returns (train_offsets, train_indices, test_offsets, test_indices) in the same layout; both parts keep
    the samples' original order within the device, so a device's training sees its data as before, less
    the held-out samples."""
    sizes = np.diff(offsets)
    owner = np.repeat(np.arange(len(sizes), dtype=np.int64), sizes)
    order = np.lexsort((rng.random(len(indices)), owner))  # each device's samples, shuffled in place
    rank = np.empty(len(indices), dtype=np.int64)
    rank[order] = np.arange(len(indices), dtype=np.int64) - np.repeat(offsets[:-1], sizes)
    test = rank < np.repeat(held_out(sizes, fraction, min_samples), sizes)
    test_sizes = np.bincount(owner[test], minlength=len(sizes)).astype(np.int64)
    return (offsets_of(sizes - test_sizes), indices[~test], offsets_of(test_sizes), indices[test])


def with_local_test(federation: Federation, fraction: float, min_samples: int,
                    rng: np.random.Generator) -> Federation:
    """The federation with every device's local test split carved from its training samples."""
    train_offsets, train_indices, test_offsets, test_indices = carve_local_test(
        federation.device_offsets, federation.device_indices, fraction, min_samples, rng)
    return replace(federation, device_offsets=train_offsets, device_indices=train_indices,
                   local_test=federation.train.subset(test_indices), local_offsets=test_offsets)


def with_own_test_split(federation: Federation, test: ArrayDataset, min_samples: int) -> Federation:
    """The federation with each device's local test split taken from the data's own per-user test samples
    (`test.owner`, as LEAF splits by sample); a device with fewer than `min_samples` of them has none."""
    owner = test.owner
    counts = np.bincount(owner[owner >= 0], minlength=federation.num_devices)[:federation.num_devices]
    keep = (owner >= 0) & (counts[np.maximum(owner, 0)] >= min_samples)
    rows = np.flatnonzero(keep)
    rows = rows[np.argsort(owner[rows], kind="stable")]  # device after device, each in its own order
    sizes = np.where(counts >= min_samples, counts, 0).astype(np.int64)
    return replace(federation, local_test=test.subset(rows), local_offsets=offsets_of(sizes))

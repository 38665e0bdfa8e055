"""LEAF / FedProx synthetic(alpha, beta): every device has its own linear model and input distribution.

Device k: u_k ~ N(0, alpha), B_k ~ N(0, beta) (alpha, beta as standard deviations, as in the FedProx and
LEAF generators); W_k ~ N(u_k, 1), b_k ~ N(u_k, 1); v_k ~ N(B_k, 1);
x ~ N(v_k, Sigma) with Sigma_jj = (j + 1)^-1.2; y = argmax(W_k x + b_k). alpha controls how much the
devices' models differ, beta how much their inputs do. `iid` is FedProx's synthetic_iid: one shared
model and all inputs from N(0, Sigma).
"""
from __future__ import annotations

import numpy as np

from emulator.data.federation import ArrayDataset
from emulator.data.ragged import offsets_of
from emulator.data.scratch import large_array
from emulator.scenario import SyntheticConfig


def device_sizes(cfg: SyntheticConfig, devices: int, rng: np.random.Generator) -> np.ndarray:
    """Lognormal sample counts, clipped to [min_samples, max_samples]."""
    raw = rng.lognormal(cfg.size_log_mean, cfg.size_log_sigma, devices).astype(np.int64)
    return np.clip(raw, cfg.min_samples, cfg.max_samples)


def generate_synthetic(cfg: SyntheticConfig, devices: int, rng: np.random.Generator
                       ) -> tuple[ArrayDataset, ArrayDataset, list[np.ndarray]]:
    """(train pool, pooled test set, per-device index lists into the train pool).

    The train pool is ordered by device, so device k's indices are one contiguous range. The samples are
    drawn a chunk of devices at a time (one random stream, so the same numbers whatever the chunk) into
    large_array's, which are files when a federation is built for the disk (data/scratch.py).
    """
    d, c = cfg.dimension, cfg.classes
    sizes = device_sizes(cfg, devices, rng)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    scale = np.power(np.arange(1, d + 1, dtype=np.float32), np.float32(-0.6))  # sqrt of the diagonal Sigma
    if cfg.iid:
        shared_w = rng.normal(0, 1, (1, c, d)).astype(np.float32)[0]
        shared_b = rng.normal(0, 1, (1, c)).astype(np.float32)[0]
        weights = bias = centres = None
    else:
        u = rng.normal(0, cfg.alpha, devices)
        b_mean = rng.normal(0, cfg.beta, devices)
        weights = _drawn((devices, c, d), lambda k: rng.normal(u[k, None, None], 1, (len(k), c, d)))
        bias = _drawn((devices, c), lambda k: rng.normal(u[k, None], 1, (len(k), c)))
        centres = _drawn((devices, d), lambda k: rng.normal(b_mean[k, None], 1, (len(k), d)))

    # Hold out test_fraction of each device's samples (at least one when it has two or more): the first ones,
    # as samples are i.i.d. within a device.
    n_test = np.where(sizes >= 2, np.maximum(1, np.floor(sizes * cfg.test_fraction)), 0).astype(np.int64)
    train_offsets, test_offsets = offsets_of(sizes - n_test), offsets_of(n_test)
    train_x, train_y = large_array((train_offsets[-1], d), np.float32), large_array(train_offsets[-1], np.int64)
    test_x, test_y = large_array((test_offsets[-1], d), np.float32), large_array(test_offsets[-1], np.int64)
    zero = np.zeros(d, dtype=np.float32)
    for first, last in _chunks(offsets, d * 4):
        x = rng.standard_normal((int(offsets[last] - offsets[first]), d), dtype=np.float32)
        x *= scale
        x += zero if centres is None else np.repeat(centres[first:last], sizes[first:last], axis=0)
        y = _labels(x, sizes[first:last], (shared_w, shared_b) if weights is None else
                    (weights[first:last], bias[first:last]))
        rank = np.arange(len(x)) - np.repeat(offsets[first:last] - offsets[first], sizes[first:last])
        is_test = rank < np.repeat(n_test[first:last], sizes[first:last])
        into = slice(train_offsets[first], train_offsets[last])
        train_x[into], train_y[into] = x[~is_test], y[~is_test]
        into = slice(test_offsets[first], test_offsets[last])
        test_x[into], test_y[into] = x[is_test], y[is_test]
    train = ArrayDataset(train_x, train_y, c)
    test = ArrayDataset(test_x, test_y, c)
    per_device = [np.arange(train_offsets[k], train_offsets[k + 1], dtype=np.int64) for k in range(devices)]
    return train, test, per_device


CHUNK_BYTES = 32 << 20  # the samples drawn at once


def _labels(x: np.ndarray, sizes: np.ndarray, model: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """argmax(W_k x + b_k) for the consecutive devices of a chunk (rows of x, `sizes` each), with one shared
    (W, b) or one per device. Each device's rows are multiplied as one matrix of its own, as a device alone
    would be: BLAS may sum in another order for another row count, so devices of equal size are stacked and
    multiplied in one batched call (one matrix product per device inside it) rather than as one tall matrix;
    a loop over 10^5 devices costs seconds of Python."""
    w, b = model
    shared = w.ndim == 2
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    y = np.empty(len(x), dtype=np.int64)
    for size in np.unique(sizes):
        if size == 0:
            continue
        devices = np.flatnonzero(sizes == size)
        rows = (starts[devices, None] + np.arange(size)).ravel()
        stacked = x[rows].reshape(len(devices), size, -1)
        if shared:
            logits = stacked @ w.T + b
        else:
            logits = stacked @ w[devices].transpose(0, 2, 1) + b[devices][:, None, :]
        y[rows] = logits.argmax(2).ravel()
    return y


def _chunks(offsets: np.ndarray, row_bytes: int) -> list[tuple[int, int]]:
    """Consecutive device ranges [first, last) of about CHUNK_BYTES of samples each (one device at least)."""
    rows = max(1, CHUNK_BYTES // row_bytes)
    chunks, first = [], 0
    while first < len(offsets) - 1:
        last = max(first + 1, int(np.searchsorted(offsets, offsets[first] + rows, side="right")) - 1)
        chunks.append((first, last))
        first = last
    return chunks


def _drawn(shape: tuple, draw) -> np.ndarray:
    """A per-device float32 array of float64 draws, `draw(devices)` a chunk of devices at a time (the same
    numbers as one draw of the whole: the stream is consumed in the same order)."""
    out = large_array(shape, np.float32)
    per_device = max(1, int(np.prod(shape[1:], dtype=np.int64)) * 8)
    step = max(1, CHUNK_BYTES // per_device)
    for start in range(0, shape[0], step):
        out[start:start + step] = draw(np.arange(start, min(shape[0], start + step)))
    return out

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
from emulator.scenario import SyntheticConfig


def device_sizes(cfg: SyntheticConfig, devices: int, rng: np.random.Generator) -> np.ndarray:
    """Lognormal sample counts, clipped to [min_samples, max_samples]."""
    raw = rng.lognormal(cfg.size_log_mean, cfg.size_log_sigma, devices).astype(np.int64)
    return np.clip(raw, cfg.min_samples, cfg.max_samples)


def generate_synthetic(cfg: SyntheticConfig, devices: int, rng: np.random.Generator
                       ) -> tuple[ArrayDataset, ArrayDataset, list[np.ndarray]]:
    """(train pool, pooled test set, per-device index lists into the train pool).

    The train pool is ordered by device, so device k's indices are one contiguous range.
    """
    d, c = cfg.dimension, cfg.classes
    sizes = device_sizes(cfg, devices, rng)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    owner = np.repeat(np.arange(devices), sizes)
    total = int(offsets[-1])
    scale = np.power(np.arange(1, d + 1, dtype=np.float32), np.float32(-0.6))  # sqrt of the diagonal Sigma
    if cfg.iid:
        weights = np.broadcast_to(rng.normal(0, 1, (1, c, d)), (devices, c, d))
        bias = np.broadcast_to(rng.normal(0, 1, (1, c)), (devices, c))
        centres = np.zeros((devices, d), dtype=np.float32)
    else:
        u = rng.normal(0, cfg.alpha, devices)
        b_mean = rng.normal(0, cfg.beta, devices)
        weights = rng.normal(u[:, None, None], 1, (devices, c, d))
        bias = rng.normal(u[:, None], 1, (devices, c))
        centres = rng.normal(b_mean[:, None], 1, (devices, d)).astype(np.float32)
    x = rng.standard_normal((total, d), dtype=np.float32)
    x *= scale
    y = np.empty(total, dtype=np.int64)
    w32, b32 = weights.astype(np.float32), bias.astype(np.float32)
    for k in range(devices):  # one small matmul per device; a gathered (n, c, d) tensor would not fit
        rows = slice(offsets[k], offsets[k + 1])
        x[rows] += centres[k]
        y[rows] = (x[rows] @ w32[k].T + b32[k]).argmax(1)

    # Hold out test_fraction of each device's samples (at least one when it has two or more).
    n_test = np.where(sizes >= 2, np.maximum(1, np.floor(sizes * cfg.test_fraction)), 0).astype(np.int64)
    rank = np.arange(total) - offsets[owner]
    is_test = rank < n_test[owner]  # samples are i.i.d. within a device, so the first ones will do
    train = ArrayDataset(x[~is_test], y[~is_test], c)
    test = ArrayDataset(x[is_test], y[is_test], c)
    bounds = np.concatenate([[0], np.cumsum(sizes - n_test)])
    per_device = [np.arange(bounds[k], bounds[k + 1], dtype=np.int64) for k in range(devices)]
    return train, test, per_device

"""Upload compression as pure functions: what a device sends, decoded as the server sees it, and its size on
the wire in bytes, counted from the encoded payload (values and indices), so upload time can follow it.
Sources: ../shared/papers/privacy-compression.md (QSGD, top-k with error feedback, signSGD).

Each encoder takes an update vector (float32) and returns (decoded vector, payload bytes). Sizes:
- qsgd(s, bucket B): per bucket one float32 norm, per coordinate ceil(log2(2s + 1)) bits for its signed level
  in -s..s (the dense bucketed form most code ships): ceil(m / B) * 32 + m * ceil(log2(2s + 1)) bits.
- top_k(k): k float32 values and k indices of ceil(log2 m) bits each.
- sign: m sign bits and one float32 scale, ||v||_1 / m (EF-signSGD's scaled sign).
Payloads are whole bytes: ceil(bits / 8).
"""
from __future__ import annotations

import math

import numpy as np

FLOAT_BITS = 32


def payload_bytes(bits: int) -> int:
    return math.ceil(bits / 8)


def qsgd(vector: np.ndarray, levels: int, rng: np.random.Generator, bucket: int = 512) -> tuple[np.ndarray, int]:
    """QSGD (Alistarh et al. 2017): per bucket, |v_i| / ||v|| rounded stochastically to one of `levels` levels,
    unbiased; decoded as ||v|| sign(v_i) level / s. One uniform draw per value, in order."""
    if levels < 1:
        raise ValueError(f"quantisation levels must be >= 1, got {levels}")
    v = np.asarray(vector, dtype=np.float64)
    m = len(v)
    buckets = math.ceil(m / bucket)
    padded = np.zeros(buckets * bucket)
    padded[:m] = v
    parts = padded.reshape(buckets, bucket)
    norms = np.linalg.norm(parts, axis=1, keepdims=True)
    scaled = np.abs(parts) / np.where(norms > 0, norms, 1.0) * levels
    lower = np.floor(scaled)
    level = lower + (rng.random(parts.shape) < scaled - lower)
    decoded = (norms * np.sign(parts) * level / levels).reshape(-1)[:m]
    bits = buckets * FLOAT_BITS + m * math.ceil(math.log2(2 * levels + 1))
    return decoded.astype(np.float32), payload_bytes(bits)


def top_k(vector: np.ndarray, k: int, residual: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Top-k sparsification with error feedback (Stich et al. 2018): the k largest entries of update +
    residual are sent; what was left out becomes the next residual (device state). Returns (decoded, new
    residual, bytes); ties between equal magnitudes go to the lower index."""
    v = np.asarray(vector, dtype=np.float64)
    m = len(v)
    if not 1 <= k <= m:
        raise ValueError(f"top-k: k must be between 1 and the model's {m} values, got {k}")
    corrected = v if residual is None else v + residual
    magnitude = np.abs(corrected)
    kth = np.partition(magnitude, m - k)[m - k]  # the k-th largest magnitude, in linear time
    above = np.flatnonzero(magnitude > kth)
    keep = np.sort(np.concatenate([above, np.flatnonzero(magnitude == kth)[:k - len(above)]]))
    decoded = np.zeros(m)
    decoded[keep] = corrected[keep]
    index_bits = max(1, math.ceil(math.log2(m)))
    return decoded.astype(np.float32), corrected - decoded, payload_bytes(k * (FLOAT_BITS + index_bits))


def sign(vector: np.ndarray) -> tuple[np.ndarray, int]:
    """Scaled sign compression (EF-signSGD's message): (||v||_1 / m) sign(v); m bits plus one float."""
    v = np.asarray(vector, dtype=np.float64)
    m = len(v)
    scale = np.abs(v).sum() / m if m else 0.0
    return (scale * np.sign(v)).astype(np.float32), payload_bytes(m + FLOAT_BITS)

"""Independent random streams derived from the scenario seed.

Every random choice draws from a stream named by (seed, use, *keys) - e.g. ("train", round, device) - so
results never depend on which runner did the work, in what order, or how many runners there are.
"""
from __future__ import annotations

import zlib

import numpy as np


def _key(part: int | str) -> int:
    if isinstance(part, str):
        return zlib.crc32(part.encode())
    if isinstance(part, (int, np.integer)) and part >= 0:
        return int(part)
    raise ValueError(f"stream keys are names or non-negative integers, got {part!r}")


def seed_sequence(seed: int, use: str, *keys: int | str) -> np.random.SeedSequence:
    return np.random.SeedSequence([_key(seed), _key(use), *(_key(k) for k in keys)])


def rng(seed: int, use: str, *keys: int | str) -> np.random.Generator:
    """A numpy Generator for one use, e.g. rng(seed, "sampling", round)."""
    return np.random.Generator(np.random.PCG64(seed_sequence(seed, use, *keys)))


def torch_seed(seed: int, use: str, *keys: int | str) -> int:
    """A 63-bit integer seed for torch.Generator / torch.manual_seed for one use."""
    high, low = seed_sequence(seed, use, *keys).generate_state(2, np.uint32).tolist()
    return ((high << 32) | low) & ((1 << 63) - 1)


def assign_by_share(shares: list[float], count: int, rng: np.random.Generator) -> np.ndarray:
    """Group index per device: exactly round(share x count) devices per group (the largest remainders
    get the leftovers), in random order."""
    shares = np.asarray(shares, dtype=np.float64)
    exact = shares / shares.sum() * count
    sizes = np.floor(exact).astype(np.int64)
    leftover = count - sizes.sum()
    sizes[np.argsort(-(exact - sizes), kind="stable")[:leftover]] += 1
    groups = np.repeat(np.arange(len(shares), dtype=np.uint8 if len(shares) < 256 else np.int32), sizes)
    return rng.permutation(groups)


def device_types(shares: list[float], devices: int, seed: int) -> np.ndarray:
    """Each device's latent type (exactly round(share x devices) per type, in random order): one deal that
    the partitioner (its data) and the system model (its behaviour) both read."""
    return assign_by_share(shares, devices, rng(seed, "types")).astype(np.int64)

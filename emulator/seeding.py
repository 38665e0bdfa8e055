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


# numpy's SeedSequence (pool of 4 words) and generate_state, as torch_seeds repeats them across many keys at once
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R, _MASK = 0xCA01F9DD, 0x4973F715, 0xFFFFFFFF


def torch_seeds(seed: int, use: str, key: int | str, lasts: np.ndarray) -> list[int]:
    """[torch_seed(seed, use, key, last) for last in lasts], for a round's thousand devices at once: numpy's
    SeedSequence hashing run on arrays (its constants do not depend on the data), the same integers (tested
    against torch_seed). Keys of more than 32 bits take torch_seed one by one."""
    words = [_key(seed), _key(use), _key(key)]
    lasts = np.asarray(lasts, dtype=np.int64)
    if any(w >= 2 ** 32 for w in words) or (len(lasts) and (lasts.min() < 0 or lasts.max() >= 2 ** 32)):
        return [torch_seed(seed, use, key, int(last)) for last in lasts]
    hash_const = _INIT_A

    def hashmix(value: np.ndarray) -> np.ndarray:
        nonlocal hash_const
        value = value ^ np.uint32(hash_const)
        hash_const = (hash_const * _MULT_A) & _MASK
        value = value * np.uint32(hash_const)
        return value ^ (value >> np.uint32(16))

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        result = np.uint32(_MIX_L) * x - np.uint32(_MIX_R) * y
        return result ^ (result >> np.uint32(16))

    pool = [hashmix(np.full(len(lasts), w, dtype=np.uint32)) for w in words] + [hashmix(lasts.astype(np.uint32))]
    for source in range(4):
        for target in range(4):
            if source != target:
                pool[target] = mix(pool[target], hashmix(pool[source]))
    state, hash_const = [], _INIT_B
    for word in pool[:2]:
        value = word ^ np.uint32(hash_const)
        hash_const = (hash_const * _MULT_B) & _MASK
        value = value * np.uint32(hash_const)
        state.append((value ^ (value >> np.uint32(16))).astype(np.uint64))
    return (((state[0] << np.uint64(32)) | state[1]) & np.uint64((1 << 63) - 1)).tolist()


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

"""Per-device hardware: compute speed and network link, drawn once per device from the scenario.

Stored as flat float32 arrays (16 bytes a device), so a population of 10^6 devices costs 16 MB.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


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


@dataclass
class DeviceProfiles:
    s_per_sample: np.ndarray  # seconds of compute per training sample
    down_mbps: np.ndarray
    up_mbps: np.ndarray
    latency_s: np.ndarray
    compute_tier: np.ndarray | None = None  # tier index per device when drawn from tiers
    network_tier: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.s_per_sample)

    @classmethod
    def draw(cls, population, rng: np.random.Generator) -> "DeviceProfiles":
        n = population.devices
        compute, network = population.compute, population.network
        compute_tier = network_tier = None
        if compute.kind == "lognormal":
            speed = compute.median_s_per_sample * np.exp(compute.sigma * rng.standard_normal(n))
        else:
            compute_tier = assign_by_share([t.share for t in compute.tiers], n, rng)
            speed = np.array([t.s_per_sample for t in compute.tiers])[compute_tier]
        if network.kind == "lognormal":
            down = network.down_mbps * np.exp(network.sigma * rng.standard_normal(n))
            up = network.up_mbps * np.exp(network.sigma * rng.standard_normal(n))
            latency = np.full(n, network.latency_s)
        else:
            network_tier = assign_by_share([t.share for t in network.tiers], n, rng)
            down = np.array([t.down_mbps for t in network.tiers])[network_tier]
            up = np.array([t.up_mbps for t in network.tiers])[network_tier]
            latency = np.array([t.latency_s for t in network.tiers])[network_tier]
        as32 = lambda a: np.asarray(a, dtype=np.float32)
        return cls(as32(speed), as32(down), as32(up), as32(latency), compute_tier, network_tier)

"""Per-device hardware: compute speed and network link, drawn once per device from the scenario.

Stored as flat float32 arrays (16 bytes a device), so a population of 10^6 devices costs 16 MB.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulator.scenario import ScenarioError
from emulator.seeding import assign_by_share
from emulator.system.ties import KEEP, entry_index, link_seconds
from emulator.system.traces import assign_rows, read_capacity


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

    def columns(self) -> dict[str, np.ndarray]:
        """participation.csv's hardware columns: compute speed, link, and the tiers where drawn from tiers."""
        columns = {"s_per_sample": self.s_per_sample, "down_mbps": self.down_mbps, "up_mbps": self.up_mbps,
                   "latency_s": self.latency_s}
        if self.compute_tier is not None:
            columns["compute_tier"] = self.compute_tier
        if self.network_tier is not None:
            columns["network_tier"] = self.network_tier
        return columns

    @classmethod
    def draw(cls, population, rng: np.random.Generator, world=None) -> "DeviceProfiles":
        """Every device's hardware, drawn independently of its data; then `world` (population.ties and
        .types, see system/ties.py) re-deals or sets compute and network where they are tied to data."""
        profiles = cls._draw(population, rng)
        if world is not None:
            profiles._tie(population, world)
        return profiles

    COLUMNS = {"compute": ("s_per_sample",), "network": ("down_mbps", "up_mbps", "latency_s")}

    def _tie(self, population, world) -> None:
        """Compute, then network, follow the data as population.ties say (see emulator/system/ties.py)."""
        coupled = _one_capacity_file(population)  # a capacity row is one phone: its compute and link move together
        for kind, other in (("compute", "network"), ("network", "compute")):
            self._tie_kind(kind, getattr(population, kind), world, self.COLUMNS[other] if coupled else ())

    def _tie_kind(self, kind: str, config, world, coupled: tuple[str, ...]) -> None:
        """A rank tie re-deals the drawn columns (and the tier, and any coupled columns) among the devices; a
        group tie sets chosen devices' tier and the tier's values."""
        everyone, columns = np.arange(len(self)), self.COLUMNS[kind]
        cost = (lambda: link_seconds(self.down_mbps, self.up_mbps, self.latency_s)) if kind == "network" else None
        source = world.order(kind, everyone, getattr(self, columns[0]), cost)  # cost: lower is better
        if source is not None:
            for column in (*columns, f"{kind}_tier", *coupled):
                if getattr(self, column) is not None:
                    setattr(self, column, getattr(self, column)[source])
        tiers = getattr(config, "tiers", None)
        tier = world.values(kind, everyone, lambda v: entry_index(tiers, v, kind, "tier"))
        if tier is not None:
            chosen, current = tier != KEEP, getattr(self, f"{kind}_tier")
            setattr(self, f"{kind}_tier", np.where(chosen, tier, current).astype(current.dtype))
            for column in columns:
                table = np.array([getattr(t, column) for t in tiers], dtype=np.float32)
                setattr(self, column, np.where(chosen, table[np.maximum(tier, 0)], getattr(self, column)))

    @classmethod
    def _draw(cls, population, rng: np.random.Generator) -> "DeviceProfiles":
        n = population.devices
        compute, network = population.compute, population.network
        compute_tier = network_tier = None
        rows: dict = {}  # capacity trace file -> (table, row per device): one file, one row per device
        if compute.kind == "lognormal":
            speed = compute.median_s_per_sample * np.exp(compute.sigma * rng.standard_normal(n))
        elif compute.kind == "trace":
            table, row = capacity_rows(compute, n, rng, rows)
            speed = table.s_per_sample[row]
        else:
            compute_tier = assign_by_share([t.share for t in compute.tiers], n, rng)
            speed = np.array([t.s_per_sample for t in compute.tiers])[compute_tier]
        if network.kind == "lognormal":
            down = network.down_mbps * np.exp(network.sigma * rng.standard_normal(n))
            up = network.up_mbps * np.exp(network.sigma * rng.standard_normal(n))
            latency = np.full(n, network.latency_s)
        elif network.kind == "trace":
            table, row = capacity_rows(network, n, rng, rows)
            down, up = table.down_mbps[row], table.up_mbps[row]
            latency = np.where(np.isnan(table.latency_s[row]), network.latency_s, table.latency_s[row])
        else:
            network_tier = assign_by_share([t.share for t in network.tiers], n, rng)
            down = np.array([t.down_mbps for t in network.tiers])[network_tier]
            up = np.array([t.up_mbps for t in network.tiers])[network_tier]
            latency = np.array([t.latency_s for t in network.tiers])[network_tier]
        as32 = lambda a: np.asarray(a, dtype=np.float32)
        return cls(as32(speed), as32(down), as32(up), as32(latency), compute_tier, network_tier)


def capacity_rows(config, n: int, rng: np.random.Generator, rows: dict):
    """(capacity table, the trace row each of n devices plays) for a compute or network entry of kind
    trace: device k plays row k mod T (assign: cycle) or a random row drawn from `rng` (assign: random).
    `rows` remembers each file's answer, so compute and network read from one file give a device the same
    row (the network entry then keeps the compute entry's assignment)."""
    key = (str(config.file), config.format)
    if key in rows:
        table, row, assign = rows[key]
        if assign != config.assign:
            raise ScenarioError(f"population.network.assign: {config.assign!r}, but population.compute reads the "
                                f"same file {config.file} with assign {assign!r}; give both the same assign")
        return table, row
    table = read_capacity(config.file, config.format)
    row = assign_rows(n, table.count, config.assign, rng)
    rows[key] = (table, row, config.assign)
    return table, row


def _one_capacity_file(population) -> bool:
    """Compute and network both read from one capacity trace file (each row: one phone's speed and link)."""
    compute, network = population.compute, population.network
    return compute.kind == "trace" and network.kind == "trace" and compute.file == network.file

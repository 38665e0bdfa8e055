"""What a round's work costs each device's battery: training on its CPU and moving the model over its radio.

A selected device downloads, trains and uploads (simulated.py's timeline); it stops when it reports, when
it is lost (offline, dropout) or when the round closes without it. Its energy is the part of each phase it
got through: training at its `compute_w`; a transfer at its radio's base_w + w/Mbps x its link's Mbit/s,
then the radio's tail after every transfer it began (LTE holds a high-power state for seconds; Wi-Fi's
is negligible). A device that never checked in (a snapshot round's late device) spends nothing. Energy is
in joules; pure functions of the round's timeline and the devices' profiles.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ENERGY_COLUMNS = ("energy_j", "energy_wasted_j", "energy_cancelled_j", "energy_radio_j")


@dataclass
class EnergyProfiles:
    """Each device's battery (Wh), power while training (W), whether it works over cellular, its charger's
    power (W) and its state of charge at time 0."""

    battery_wh: np.ndarray
    compute_w: np.ndarray
    cellular: np.ndarray  # bool
    charge_w: np.ndarray
    initial_soc: np.ndarray

    @classmethod
    def draw(cls, config, devices: int, rng: np.random.Generator, unmetered: np.ndarray) -> "EnergyProfiles":
        """`unmetered`: the devices that only ever train on Wi-Fi (their eligibility requires it)."""
        battery = config.battery_wh * np.exp(config.battery_sigma * rng.standard_normal(devices))
        compute = config.compute_w * np.exp(config.compute_sigma * rng.standard_normal(devices))
        cellular = (rng.random(devices) < config.cellular_share) & ~unmetered
        charge = config.charge_w * np.exp(config.charge_sigma * rng.standard_normal(devices))
        initial = rng.uniform(config.initial_soc_min, config.initial_soc_max, devices)
        return cls(battery, compute, cellular, charge, initial)


def _done(begin: np.ndarray, end: np.ndarray, stop: np.ndarray) -> np.ndarray:
    """Seconds of [begin, end) a device got through before it stopped."""
    return np.clip(np.minimum(end, stop) - begin, 0.0, end - begin)


def round_energy(plan: dict, closed: float, compute_w: np.ndarray, cellular: np.ndarray, down_mbps: np.ndarray,
                 up_mbps: np.ndarray, wifi, lte) -> tuple[np.ndarray, np.ndarray]:
    """(compute J, radio J) of each selected device in one round. `plan`: the round's timeline (started,
    download_done, compute_s, finish, end; inf start: never checked in), `closed`: when the round closed."""
    started = np.isfinite(plan["start"])
    stop = np.where(started, np.minimum(plan["end"], closed), -np.inf)
    download_done, finish = plan["download_done"], plan["finish"]
    compute_done = download_done + plan["compute_s"]
    with np.errstate(invalid="ignore"):  # inf - inf of devices that never started: no energy
        down_s = np.where(started, _done(download_done - plan["down_s"], download_done, stop), 0.0)
        train_s = np.where(started, _done(download_done, compute_done, stop), 0.0)
        up_s = np.where(started, _done(compute_done, finish, stop), 0.0)
    radio = [np.where(cellular, getattr(lte, name), getattr(wifi, name))
             for name in ("base_w", "down_w_per_mbps", "up_w_per_mbps", "tail_s", "tail_w")]
    base, per_down, per_up, tail_s, tail_w = radio
    transfers = (down_s > 0).astype(np.float64) + (up_s > 0)
    radio_j = (base + per_down * down_mbps) * down_s + (base + per_up * up_mbps) * up_s + transfers * tail_s * tail_w
    return compute_w * train_s, radio_j


def work_phases(plan: dict, compute_w: np.ndarray, cellular: np.ndarray, down_mbps: np.ndarray,
                up_mbps: np.ndarray, wifi, lte) -> dict[str, np.ndarray]:
    """The round's work as its battery sees it (system/battery.py): when each device checked in (`begin`),
    its phases' edges (download begins, download done, training done, upload done), each phase's power and
    one radio tail's energy; the same powers round_energy charges."""
    radio = [np.where(cellular, getattr(lte, name), getattr(wifi, name))
             for name in ("base_w", "down_w_per_mbps", "up_w_per_mbps", "tail_s", "tail_w")]
    base, per_down, per_up, tail_s, tail_w = radio
    download_done = plan["download_done"]
    compute_done = download_done + plan["compute_s"]
    edges = np.stack([download_done - plan["down_s"], download_done, compute_done, plan["finish"]], axis=1)
    power = np.stack([base + per_down * down_mbps, compute_w * np.ones(len(base)), base + per_up * up_mbps], axis=1)
    return {"begin": plan["start"], "edges": edges, "power": power, "tail_j": tail_s * tail_w}


def round_columns(compute_j: np.ndarray, radio_j: np.ndarray, reported: np.ndarray,
                  cancelled: np.ndarray) -> dict[str, float]:
    """metrics.csv's energy columns of a round: all energy spent, that of devices whose work was not used
    (dropped, stragglers, cancelled, or every device of a failed round), the part of it the cancelled spent
    (over-selection's price: told to stop once enough reports were in), and the radio's share of it all."""
    spent = compute_j + radio_j
    return {"energy_j": float(spent.sum()), "energy_wasted_j": float(spent[~reported].sum()),
            "energy_cancelled_j": float(spent[cancelled].sum()), "energy_radio_j": float(radio_j.sum())}

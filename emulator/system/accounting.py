"""Simulated time and bytes as pure functions, and the per-device participation ledger.

A device's round time = download + compute + upload, where a transfer takes latency + bits / bandwidth and
compute takes samples processed x seconds per sample x a per-round jitter factor. None of it depends on
how long the real PyTorch work took.
"""
from __future__ import annotations

import numpy as np


def transfer_seconds(nbytes, mbps, latency_s):
    """Seconds to move `nbytes` over a link of `mbps` megabits per second with a fixed latency."""
    return np.asarray(latency_s, dtype=np.float64) + np.asarray(nbytes, dtype=np.float64) * 8.0 / (
        np.asarray(mbps, dtype=np.float64) * 1e6)


def compute_seconds(samples, s_per_sample, jitter=1.0):
    """Seconds of local training: samples processed x the device's seconds per sample x jitter."""
    return np.asarray(samples, dtype=np.float64) * np.asarray(s_per_sample, dtype=np.float64) * jitter


class ParticipationLedger:
    """Per-device counters: how often each device was selected, reported in time, dropped, straggled (still
    working when the deadline passed) and was cancelled (still working when the round closed because enough
    reports had arrived).

    Five int32 arrays: 20 bytes a device, so 10^6 devices cost 20 MB."""

    fields = ("selected", "reported", "dropped", "straggled", "cancelled")

    def __init__(self, num_devices: int, energy: bool = False, aborts: bool = False):
        """`energy`: also each device's joules spent on learning (a world with population.energy); `aborts`:
        also how often it aborted, its policy lapsing mid-round (a world with eligible entries): a part of
        `dropped`."""
        names = self.fields + (("aborted",) if aborts else ())
        self.counts = {name: np.zeros(num_devices, dtype=np.int32) for name in names}
        self.energy_j = np.zeros(num_devices) if energy else None

    def record(self, selected: np.ndarray, reported: np.ndarray, dropped: np.ndarray, straggled: np.ndarray,
               cancelled: np.ndarray = (), aborted: np.ndarray = ()) -> None:
        """Add one round; each array lists distinct device ids."""
        for name, ids in zip(self.counts, (selected, reported, dropped, straggled, cancelled, aborted)):
            np.add.at(self.counts[name], np.asarray(ids, dtype=np.int64), 1)

    def charge(self, devices: np.ndarray, joules: np.ndarray) -> None:
        """Add one round's energy of each device it lists (distinct ids)."""
        np.add.at(self.energy_j, np.asarray(devices, dtype=np.int64), joules)

    def state(self) -> dict[str, np.ndarray]:
        state = {name: array.copy() for name, array in self.counts.items()}
        if self.energy_j is not None:
            state["energy_j"] = self.energy_j.copy()
        return state

    def load(self, state: dict[str, np.ndarray]) -> None:
        """Restore the counters; a counter missing from an older checkpoint (`cancelled`) restarts at zero."""
        for name in self.counts:
            self.counts[name][:] = state[name] if name in state else 0
        if self.energy_j is not None:
            self.energy_j[:] = state["energy_j"]

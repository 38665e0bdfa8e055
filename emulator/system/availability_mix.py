"""The population's availability: every device answers to one model (ours or a plugin's) by the scenario's
shares and ties, and a plugin's model is guarded, so the clock gets answers it can use or the user one line
naming their own code."""
from __future__ import annotations

import numpy as np

from emulator.seeding import assign_by_share, rng
from emulator.system.availability import AvailabilityModel, Never, Trace
from emulator.system.availability_parts import build_availability
from emulator.system.diurnal import Diurnal
from emulator.system.eligibility import Eligible
from emulator.system.ties import KEEP, entry_index


class AvailabilityMix:
    """The population's availability: each device belongs to one model, by the scenario's shares."""

    def __init__(self, entries, num_devices: int, seed: int, world=None):
        self.num_devices = num_devices
        if len(entries) == 1:
            self.group = np.zeros(num_devices, dtype=np.uint8)
        else:
            self.group = assign_by_share([e.share for e in entries], num_devices, rng(seed, "availability-groups"))
        tied = None if world is None else world.values(
            "availability", np.arange(num_devices), lambda v: entry_index(entries, v, "availability", "entry"))
        if tied is not None:  # the entry each device belongs to follows its data: the shares follow the groups
            self.group = np.where(tied != KEEP, tied, self.group).astype(self.group.dtype)
        # each device's index within its group (one entry: the device id itself, so nothing is stored)
        self._local = np.zeros(num_devices, dtype=np.int64) if len(entries) > 1 else None
        self.models: list[AvailabilityModel] = []
        for g, entry in enumerate(entries):
            members = np.flatnonzero(self.group == g) if len(entries) > 1 else np.arange(num_devices)
            if self._local is not None:
                self._local[members] = np.arange(len(members))
            stream, key = rng(seed, "availability", g), seed * 1000003 + g
            self.models.append(build_availability(entry, members, stream, key, world))

    @property
    def local(self) -> np.ndarray:
        """Each device's index within its group's model."""
        return np.arange(self.num_devices) if self._local is None else self._local

    def local_of(self, devices: np.ndarray) -> np.ndarray:
        """These devices' indices within their groups' models (one entry: the ids themselves, nothing made)."""
        return devices if self._local is None else self._local[devices]

    def state(self) -> list[dict]:
        return [model.state() for model in self.models]

    def load_state(self, state: list[dict]) -> None:
        for model, saved in zip(self.models, state):
            model.load_state(saved)

    def timezone_h(self) -> np.ndarray | None:
        """Each device's time zone in hours from UTC (NaN outside diurnal and eligible entries); None without
        any."""
        zoned = [m for m in self.models if isinstance(m, (Diurnal, Eligible))]
        if not zoned:
            return None
        out = np.full(self.num_devices, np.nan)
        for model in zoned:
            out[model.members] = model.zone_s / 3600.0
        return out

    def unmetered(self) -> np.ndarray:
        """Which devices only ever train on an unmetered network: those of eligible entries requiring it."""
        out = np.zeros(self.num_devices, dtype=bool)
        for model in self.models:
            if isinstance(model, Eligible) and "unmetered" in model.requires:
                out[model.members] = True
        return out

    def eligible_members(self) -> np.ndarray | None:
        """Which devices belong to eligible entries (their going offline is a policy's clause lapsing); None
        without any."""
        groups = [g for g, m in enumerate(self.models) if isinstance(m, Eligible)]
        return np.isin(self.group, groups) if groups else None

    def habits(self) -> dict[str, np.ndarray]:
        """Which daily habits each device has, where an eligible entry gives it habits (-1 elsewhere)."""
        eligible = [m for m in self.models if isinstance(m, Eligible)]
        out: dict[str, np.ndarray] = {}
        for model in eligible:
            for column, values in model.habit_columns().items():
                out.setdefault(column, np.full(self.num_devices, -1, dtype=np.int8))[model.members] = values
        return out

    def columns(self, entries) -> dict[str, np.ndarray]:
        """participation.csv's first behaviour column: each device's availability entry."""
        return {"availability": self.label_of(np.arange(self.num_devices), entries)}

    def zone_and_habits(self) -> dict[str, np.ndarray]:
        """participation.csv's columns of when devices are reachable: time zone, habits, the trace played."""
        columns = {}
        timezone = self.timezone_h()
        if timezone is not None:
            columns["timezone_h"] = timezone
        columns.update(self.habits())
        played = self.trace_device()
        if played is not None:
            columns["trace_device"] = played
        return columns

    def label_of(self, devices: np.ndarray, entries) -> np.ndarray:
        """Each device's availability entry: its name where the scenario gives one, else its kind."""
        labels = np.array([entry.name or model.kind for entry, model in zip(entries, self.models)])
        return labels[self.group[devices]]

    def trace_device(self) -> np.ndarray | None:
        """Which trace device each device replays (-1 outside trace entries); None without any."""
        traces = [m for m in self.models if isinstance(m, Trace)]
        if not traces:
            return None
        out = np.full(self.num_devices, -1, dtype=np.int64)
        for model in traces:
            out[model.members] = model.trace_device
        return out

    def kind_of(self, devices: np.ndarray) -> np.ndarray:
        kinds = np.array([m.kind for m in self.models])
        return kinds[self.group[devices]]

    def online_devices(self, t: float) -> np.ndarray:
        """Global ids of every device online at t (group by group, in id order within a group)."""
        if self._local is None:  # one entry: its members are the ids 0..n-1 (faster than gathering them)
            model = self.models[0]
            return np.zeros(0, np.int64) if isinstance(model, Never) else np.flatnonzero(model.online_all(t))
        parts = [m.members[m.online_all(t)] for m in self.models if not isinstance(m, Never)]
        return np.concatenate(parts) if parts else np.zeros(0, np.int64)

    def _dispatch(self, method: str, devices: np.ndarray, t: float, dtype) -> np.ndarray:
        devices = np.asarray(devices, dtype=np.int64)
        if len(self.models) == 1:
            return getattr(self.models[0], method)(devices, t)
        out = np.empty(len(devices), dtype=dtype)
        groups = self.group[devices]
        for g, model in enumerate(self.models):
            mask = groups == g
            if mask.any():  # t: one time, or one per device
                out[mask] = getattr(model, method)(self._local[devices[mask]], t if np.ndim(t) == 0 else t[mask])
        return out

    def online(self, devices, t):
        return self._dispatch("online", devices, t, bool)

    def next_offline(self, devices, t):
        return self._dispatch("next_offline", devices, t, np.float64)

    def next_online(self, devices, t):
        return self._dispatch("next_online", devices, t, np.float64)

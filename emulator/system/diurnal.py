"""The diurnal availability model: online in a daily window of local time, jittered day by day.

Each device has its time zone, a fixed start offset and a fresh N(0, jitter_h) shift of its window every
local day, drawn from a hash of (device, day) so that nothing is stored per device and a question asked
twice gets the same answer.
"""
from __future__ import annotations

import math

import numpy as np

from emulator.system.availability import INF, JITTER_BOUND, AvailabilityModel

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a fast, well-mixed hash of uint64 values (wrapping arithmetic)."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def hashed_normal(key: int, devices: np.ndarray, days: np.ndarray) -> np.ndarray:
    """A standard normal per (device, day), the same every time it is asked: jitter without stored state."""
    with np.errstate(over="ignore"):
        base = _mix64(devices.astype(np.uint64) * np.uint64(1 << 20) + (days + (1 << 19)).astype(np.uint64)
                      + _mix64(np.array([key], dtype=np.uint64)))
        u1 = (_mix64(base) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
        u2 = (_mix64(base ^ np.uint64(0x5851F42D4C957F2D)) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    normal = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)
    return np.clip(normal, -JITTER_BOUND, JITTER_BOUND, out=normal)


def draw_zones(zones, members: np.ndarray, rng: np.random.Generator, world=None) -> np.ndarray:
    """Each member's time zone in seconds from UTC: drawn by the shares of `zones` (a TimeZones config), or
    tied to its data (population.ties / .types: see system/ties.py)."""
    shares = zones.shares if zones.shares is not None else [1 / len(zones.offsets_h)] * len(zones.offsets_h)
    zone_s = 3600.0 * np.asarray(zones.offsets_h, dtype=np.float64)[rng.choice(len(shares), len(members), p=shares)]
    if world is not None:
        source = world.order("timezone", members, zone_s)
        if source is not None:
            zone_s = zone_s[source]
        offsets = world.values("timezone", members)
        if offsets is not None:
            zone_s = np.where(np.isnan(offsets), zone_s, 3600.0 * offsets)
    return zone_s


class Diurnal(AvailabilityModel):
    """Online in a daily window of local time; each device has its time zone, a fixed start offset and a
    fresh N(0, jitter_h) shift of its window every local day. Computed in seconds throughout, so a window's
    opening time, once reported, is exactly inside that window when asked again."""

    kind = "diurnal"
    day_s = 86400.0

    def __init__(self, members, config, rng: np.random.Generator, key: int, world=None,
                 zone_s: np.ndarray | None = None):
        """`zone_s`: the members' time zones, drawn already (several daily habits of one device share its
        zone, system/eligibility.py); else drawn here from config.timezones."""
        super().__init__(members)
        n = len(members)
        self.zone_s = draw_zones(config.timezones, members, rng, world) if zone_s is None else zone_s
        spread = rng.uniform(-config.start_spread_h / 2, config.start_spread_h / 2, n) if config.start_spread_h else 0.0
        self.base_s = 3600.0 * (config.start_hour + spread) - self.zone_s  # local day 0's opening, in UTC seconds
        self.length_s = 3600.0 * config.hours
        self.jitter_s = 3600.0 * config.jitter_h
        self.key = key
        # Which neighbouring days' windows can reach into a given local day, given the bounded jitter:
        reach = config.start_spread_h / 2 + JITTER_BOUND * config.jitter_h
        earliest, latest = config.start_hour - reach, config.start_hour + reach + config.hours
        # the window of local day k + s can hold a time of local day k only for these s:
        low, high = math.floor(-latest / 24) + 1, math.ceil((24 - earliest) / 24) - 1
        self.containing_shifts = tuple(range(low, high + 1))
        self.opening_shifts = tuple(range(low, high + 3))  # the next opening is among these
        self.may_overlap = latest - earliest >= 24  # a window may open before the previous one closes
        self._online: np.ndarray | None = None  # online_all's last answer, per member ...
        self._holds_until: np.ndarray | None = None  # ... and until when it holds
        self._asked_at = -INF

    def _window_starts(self, local: np.ndarray, t: float, shift: int) -> np.ndarray:
        """When each device's window opens on (its local day at time t) + shift."""
        day = np.floor((t + self.zone_s[local]) / self.day_s).astype(np.int64) + shift
        return self._starts_of(local, day)

    def _starts_of(self, local: np.ndarray, day: np.ndarray) -> np.ndarray:
        start = self.day_s * day + self.base_s[local]
        if self.jitter_s:
            start = start + self.jitter_s * hashed_normal(self.key, self.members[local], day)
        return start

    def _containing(self, local, t):
        """(online at t, end of the window holding t), merging a window with the next when they overlap."""
        online = np.zeros(len(local), dtype=bool)
        end = np.full(len(local), -INF)
        for shift in self.containing_shifts:
            start = self._window_starts(local, t, shift)
            inside = (start <= t) & (t < start + self.length_s)
            online |= inside
            end = np.where(inside, np.maximum(end, start + self.length_s), end)
        if self.may_overlap:
            for shift in (1, 2):
                start = self._window_starts(local, t, shift)
                end = np.where(online & (start <= end), np.maximum(end, start + self.length_s), end)
        return online, end

    CHUNK = 1 << 18  # devices recomputed at once: bounds the temporaries of a full pass (~25 MB)

    def online_all(self, t):
        """The whole group at once. A device's answer holds until one of its windows opens or closes, or
        its local day ends (other windows come into view): rounds are minutes, days are long, so each call
        recomputes only the few devices whose answer may have changed since the last (all of them when
        asked about an earlier time, e.g. after a checkpoint was loaded)."""
        if self._online is None or t < self._asked_at:
            self._online = np.zeros(len(self.members), dtype=bool)
            self._holds_until = np.full(len(self.members), -INF)
        self._asked_at = t
        stale = np.flatnonzero(self._holds_until <= t)
        for begin in range(0, len(stale), self.CHUNK):
            local = stale[begin:begin + self.CHUNK]
            self._online[local], self._holds_until[local] = self._online_until(local, t)
        return self._online.copy()

    def _online_until(self, local, t):
        """(online at t, the time until which that answer holds) for the windows of the local day at t.

        The answer is (start <= t < start + length) over the containing shifts: it can only change when t
        reaches a start or an end, or when the local day (and so the windows looked at) changes. The day's
        end is taken a second early so that rounding in t + zone_s never lets a stale day through."""
        zone = self.zone_s[local]
        day_now = np.floor((t + zone) / self.day_s).astype(np.int64)
        online = np.zeros(len(local), dtype=bool)
        holds_until = (day_now + 1) * self.day_s - zone - 1.0
        for shift in self.containing_shifts:
            starts = self._starts_of(local, day_now + shift)
            ends = starts + self.length_s
            online |= (starts <= t) & (t < ends)
            holds_until = np.minimum(holds_until, np.where(starts > t, starts, np.where(ends > t, ends, INF)))
        return online, holds_until

    def online(self, local, t):
        return self._containing(local, t)[0]

    # The point questions take one time for all, or one per device (an array as long as `local`).
    def next_offline(self, local, t):
        online, end = self._containing(local, t)
        return np.where(online, end, t)

    def next_online(self, local, t):
        online, _ = self._containing(local, t)
        return np.where(online, t, self._next_opening(local, t))

    def flips(self, local, t):
        """(online at t, when that answer next changes), in one pass over the windows."""
        online, end = self._containing(local, t)
        return online, np.where(online, end, self._next_opening(local, t))

    def _next_opening(self, local, t):
        following = np.full(len(local), INF)
        for shift in self.opening_shifts:
            start = self._window_starts(local, t, shift)
            following = np.where((start > t) & (start < following), start, following)
        return following

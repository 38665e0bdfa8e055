"""When devices are online: always, never, Markov on/off, a diurnal window, or a trace of intervals.

Availability is evaluated lazily and vectorised: nothing runs for a device until someone asks about it, and
three questions cover everything the round protocol needs, for an array of devices at once:

- online(devices, t):       is each device online at time t?
- next_offline(devices, t): when does each (online) device go offline?
- next_online(devices, t):  the earliest time >= t at which each device is online (inf: never)

Models answer for their own members by local index; `AvailabilityMix` splits the population by share and
dispatches by global device id. Times are simulated seconds since the run started (t = 0 is midnight UTC).
"""
from __future__ import annotations

from typing import Literal, Optional

import numpy as np
from pydantic import Field, model_validator

from emulator.scenario import AvailabilitySettings, ScenarioError, Strict
from emulator.system.traces import assign_rows, read_availability, read_trace  # noqa: F401 (read_trace: re-exported)


class AlwaysAvailable(AvailabilitySettings):
    kind: Literal["always"] = "always"
    share: float = Field(1.0, gt=0, le=1)
    name: Optional[str] = None

    def long_run_online_share(self) -> float:
        return 1.0


class NeverAvailable(AvailabilitySettings):
    """Devices that never take part (they never check in)."""

    kind: Literal["never"] = "never"
    share: float = Field(gt=0, le=1)
    name: Optional[str] = None

    def long_run_online_share(self) -> float:
        return 0.0


class MarkovAvailability(AvailabilitySettings):
    """On/off periods with exponential durations; the long-run online share is mean_on / (mean_on + mean_off)."""

    kind: Literal["markov"] = "markov"
    share: float = Field(1.0, gt=0, le=1)
    name: Optional[str] = None
    mean_on_s: float = Field(gt=0)
    mean_off_s: float = Field(gt=0)

    def long_run_online_share(self) -> float:
        return self.mean_on_s / (self.mean_on_s + self.mean_off_s)


class TimeZones(Strict):
    offsets_h: list[float] = Field(default_factory=lambda: [0.0], min_length=1)
    shares: Optional[list[float]] = None

    @model_validator(mode="after")
    def _shares(self):
        if self.shares is not None:
            if len(self.shares) != len(self.offsets_h):
                raise ValueError(f"shares has {len(self.shares)} entries, offsets_h has {len(self.offsets_h)}")
            if any(x < 0 for x in self.shares) or abs(sum(self.shares) - 1) > 1e-6:
                raise ValueError("shares must be non-negative and add up to 1")
        if any(not -14 <= x <= 14 for x in self.offsets_h):
            raise ValueError("offsets_h are hours from UTC, between -14 and 14")
        return self


class DiurnalAvailability(AvailabilitySettings):
    """Online in a daily window of local time (e.g. 22:00 for 8 h, charging on Wi-Fi at night).

    Each device's window starts at start_hour + a fixed offset in [-start_spread_h/2, start_spread_h/2]
    plus a fresh N(0, jitter_h) shift every day, in the device's own time zone."""

    kind: Literal["diurnal"] = "diurnal"
    share: float = Field(1.0, gt=0, le=1)
    name: Optional[str] = None
    start_hour: float = Field(22.0, ge=0, lt=24)
    hours: float = Field(8.0, gt=0, le=24)
    start_spread_h: float = Field(0.0, ge=0, le=24)
    jitter_h: float = Field(0.0, ge=0)
    timezones: TimeZones = TimeZones()

    def long_run_online_share(self) -> float:
        return self.hours / 24.0


class TraceAvailability(AvailabilitySettings):
    """Online intervals from a trace file: a CSV (device_id, start_s, end_s) or FedScale's
    client_behave_trace pickle (format: fedscale; each device's own finish_time is its period).

    Population devices are mapped onto the trace's devices: device i plays trace device i mod T
    (`assign: cycle`), a seeded random one (`assign: random`), or the one a tie in population.ties picks.
    With repeat_s the trace repeats with that period. With fewer trace devices than population devices,
    trace devices are reused, unless `reuse: false`, which makes that an error."""

    kind: Literal["trace"] = "trace"
    share: float = Field(1.0, gt=0, le=1)
    name: Optional[str] = None
    file: str
    format: Literal["csv", "fedscale"] = "csv"
    repeat_s: Optional[float] = Field(None, gt=0)
    assign: Literal["cycle", "random"] = "cycle"
    reuse: bool = True


INF = np.inf
JITTER_BOUND = 6.0  # diurnal jitter is a normal clipped at 6 sigma, so a window's reach is bounded


class AvailabilityModel:
    kind = "base"

    def __init__(self, members: np.ndarray):
        self.members = members  # global device ids, by local index

    def online(self, local: np.ndarray, t: float) -> np.ndarray:
        raise NotImplementedError

    def online_all(self, t: float) -> np.ndarray:
        """online() for every member: the one question asked of the whole population each round."""
        return self.online(np.arange(len(self.members)), t)

    def next_offline(self, local: np.ndarray, t: float) -> np.ndarray:
        raise NotImplementedError

    def next_online(self, local: np.ndarray, t: float) -> np.ndarray:
        raise NotImplementedError

    def flips(self, local: np.ndarray, t) -> tuple[np.ndarray, np.ndarray]:
        """(online at t, when that answer next changes): a daily habit's question (system/eligibility.py)."""
        online = self.online(local, t)
        return online, np.where(online, self.next_offline(local, t), self.next_online(local, t))

    def state(self) -> dict:
        """What the model carries between rounds (for checkpoints); most models carry nothing."""
        return {}

    def load_state(self, state: dict) -> None:
        pass


class Always(AvailabilityModel):
    kind = "always"

    def online(self, local, t):
        return np.ones(len(local), dtype=bool)

    def next_offline(self, local, t):
        return np.full(len(local), INF)

    def next_online(self, local, t):
        return np.full(len(local), float(t))


class Never(AvailabilityModel):
    """Devices that never check in: they exist, hold data, and never take part."""

    kind = "never"

    def online(self, local, t):
        return np.zeros(len(local), dtype=bool)

    def next_offline(self, local, t):
        return np.full(len(local), float(t))

    def next_online(self, local, t):
        return np.full(len(local), INF)


class Markov(AvailabilityModel):
    """Alternating on/off periods with exponential durations (means mean_on_s, mean_off_s).

    Each device keeps its current period [start, until) and remembers where the previous one began, so
    questions about any time from the previous period onwards are answered exactly. The state starts in
    the stationary distribution (online with probability mean_on / (mean_on + mean_off))."""

    kind = "markov"

    def __init__(self, members, config, rng: np.random.Generator, online_share: np.ndarray | None = None):
        super().__init__(members)
        n = len(members)
        self.mean_on, self.mean_off = config.mean_on_s, config.mean_off_s
        if online_share is not None:  # tied to data: each member's own share, on periods kept as configured
            share = np.where(np.isnan(online_share), config.long_run_online_share(), online_share)
            self.mean_on = np.full(n, float(config.mean_on_s))
            self.mean_off = self.mean_on * (1.0 - share) / share
        self.rng = rng
        self.on = rng.random(n) < self.mean_on / (self.mean_on + self.mean_off)
        self.until = rng.exponential(np.where(self.on, self.mean_on, self.mean_off))  # memoryless residual
        self.start = np.zeros(n)
        self.previous_start = np.full(n, -INF)

    def state(self) -> dict:
        return {"on": self.on.copy(), "until": self.until.copy(), "start": self.start.copy(),
                "previous_start": self.previous_start.copy(), "rng": self.rng.bit_generator.state}

    def load_state(self, state: dict) -> None:
        self.on, self.until = state["on"].copy(), state["until"].copy()
        self.start, self.previous_start = state["start"].copy(), state["previous_start"].copy()
        self.rng.bit_generator.state = state["rng"]

    def _advance(self, local: np.ndarray, t: float) -> None:
        stale = local[self.until[local] <= t]
        while len(stale):
            self.previous_start[stale] = self.start[stale]
            self.start[stale] = self.until[stale]
            self.on[stale] = ~self.on[stale]
            self.until[stale] += self.rng.exponential(np.where(self.on[stale], self._mean(self.mean_on, stale),
                                                               self._mean(self.mean_off, stale)))
            stale = stale[self.until[stale] <= t]

    @staticmethod
    def _mean(mean, local):
        return mean[local] if isinstance(mean, np.ndarray) else mean

    def online_share(self) -> np.ndarray:
        """Each member's long-run share of time online."""
        share = self.mean_on / (self.mean_on + self.mean_off)
        return np.broadcast_to(share, (len(self.members),))

    def _state(self, local: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
        """(online at t, end of the period holding t)."""
        self._advance(local, t)
        in_previous = t < self.start[local]
        if np.any(t < self.previous_start[local][in_previous]):
            raise RuntimeError("Markov availability was asked about a time before its remembered history")
        online = np.where(in_previous, ~self.on[local], self.on[local])
        ends = np.where(in_previous, self.start[local], self.until[local])
        return online, ends

    def online(self, local, t):
        return self._state(local, t)[0]

    def next_offline(self, local, t):
        online, ends = self._state(local, t)
        return np.where(online, ends, float(t))

    def next_online(self, local, t):
        online, ends = self._state(local, t)
        return np.where(online, float(t), ends)


# ---------------------------------------------------------------------------------------------- trace
class Trace(AvailabilityModel):
    """Online exactly inside a trace's windows (system/traces.py reads CSV and FedScale files).

    Population device k plays trace device k mod T (`assign: cycle`), a seeded random one (`assign: random`),
    or the one a rank tie on "trace" picks. With more members than trace devices, trace devices are reused
    (several members replay the same one) unless `reuse: false`, which makes that an error. Each trace device
    repeats with its own period (FedScale: its finish_time; or the scenario's repeat_s; a CSV without
    repeat_s does not repeat). Answers are stateless: a binary search for the window holding t mod period,
    unlike FedScale's per-client pointer (see docs/system-model.md, "Traces")."""

    kind = "trace"

    def __init__(self, members, config, stream: np.random.Generator | None = None, world=None,
                 index: int | None = None):
        super().__init__(members)
        windows = read_availability(config.file, config.format, config.repeat_s)
        traced = windows.count
        if not config.reuse and traced < len(members):
            field = f"population.availability.{'N' if index is None else index}.reuse"
            raise ScenarioError(f"{field}: the trace {config.file} has {traced} devices for the entry's "
                                f"{len(members)} devices; with reuse: false each device needs its own trace "
                                "device: use a larger trace, fewer devices, or reuse: true")
        self._index(windows)
        self.trace_device = assign_rows(len(members), traced, config.assign, stream)
        if world is not None:  # which trace device a member plays follows its data: see system/ties.py
            source = world.order("trace", members, self.online_s[self.trace_device])
            if source is not None:
                self.trace_device = self.trace_device[source]

    @classmethod
    def of_windows(cls, members, windows, trace_device: np.ndarray) -> "Trace":
        """Members playing the given windows (a habit of a behaviour trace, system/habit_traces.py)."""
        model = cls.__new__(cls)
        AvailabilityModel.__init__(model, members)
        model._index(windows)
        model.trace_device = trace_device
        return model

    def _index(self, windows) -> None:
        traced = windows.count
        # one empty window of a phantom device T at the end, so every index below stays inside the arrays
        self.starts = np.append(windows.starts, 0.0)
        self.ends = np.append(windows.ends, 0.0)
        device = np.append(windows.device, traced)
        period = windows.period
        self.repeating = np.isfinite(period)  # per trace device
        self.divisor = period                 # t / inf = 0: one cycle only
        self.multiplier = np.where(self.repeating, period, 0.0)
        furthest = max(float(self.ends.max()), float(period[self.repeating].max(initial=0.0)))
        self.span = furthest + 2.0
        self.keys = device * self.span + self.starts
        self.first = np.searchsorted(device, np.arange(traced))  # first window of each trace device
        self.last = np.searchsorted(device, np.arange(traced), side="right")
        self.has_windows = self.last > self.first
        # Where an online window really ends: a window reaching the end of the period runs on into the next
        # period's window from 0 (a window covering the whole period never ends).
        self.reach = self.ends.copy()
        final = self.last[self.has_windows] - 1
        opening = self.first[self.has_windows]
        wraps = self.repeating[self.has_windows] & (self.ends[final] >= period[self.has_windows]) \
            & (self.starts[opening] <= 0.0)
        self.reach[final[wraps]] = np.where(final[wraps] == opening[wraps], INF,
                                            period[self.has_windows][wraps] + self.ends[opening[wraps]])
        self.online_s = windows.online_s()  # per trace device, per period

    def _locate(self, local, t):
        """(cycle start, trace device, window index, whether a window starts before t in the cycle, online)."""
        dev = self.trace_device[local]
        # many devices at one time: answer once per trace device, in order, then gather
        if np.ndim(t) == 0 and len(dev) > len(self.first) // 4:
            # (searching keys in order is several times faster than at random for large traces)
            cycle, _, j, valid, online = self._answer(np.arange(len(self.first)), t)
            return cycle[dev], dev, j[dev], valid[dev], online[dev]
        return self._answer(dev, t)

    def _answer(self, dev, t):
        cycle = np.floor(t / self.divisor[dev]) * self.multiplier[dev]
        tt = t - cycle
        query = dev * self.span + np.minimum(tt, self.span - 1.0)  # past a trace's end: its last window
        j = np.searchsorted(self.keys, query, side="right") - 1
        valid = j >= self.first[dev]
        j = np.where(valid, j, self.first[dev])
        online = valid & (self.ends[j] > tt)
        return cycle, dev, j, valid, online

    def online(self, local, t):
        return self._locate(local, t)[-1]

    def next_offline(self, local, t):
        cycle, _, j, _, online = self._locate(local, t)
        return np.where(online, cycle + self.reach[j], t)  # t: one time, or one per device

    def next_online(self, local, t):
        cycle, dev, j, valid, online = self._locate(local, t)
        after = np.where(valid, j + 1, self.first[dev])
        has_next = after < self.last[dev]
        wrap = self.repeating[dev] & self.has_windows[dev]  # to the first window of the next period
        result = np.where(has_next, cycle + self.starts[after],
                          np.where(wrap, cycle + self.multiplier[dev] + self.starts[self.first[dev]], INF))
        return np.where(online, t, result)

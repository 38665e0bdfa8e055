"""Eligibility: a device checks in only while its owner's habits make it eligible, as deployed FL does it.

Production systems train only on a phone that is charging, idle and on an unmetered network (Bonawitz et
al., SysML 2019; FLASH's trace applies the same rule, ../shared/traces.md). Who takes part then follows
*why* a phone is online: nightly charging in its time zone, Wi-Fi at home, a screen that wakes in the
morning; the phones that never charge at night or have no home Wi-Fi never train, and a phone that is
unplugged, leaves Wi-Fi or is picked up mid-round is lost.

Each habit is a daily window of local time (the diurnal model's window: a start hour, a length, a fixed
per-device offset and a fresh jitter every day), held by a share of the devices; a device's habits share
its time zone. The policy (`requires`) names the clauses that must all hold. Every question is answered in
closed form from the windows, vectorised over the devices asked about; nothing is stored per device beyond
its zone, offsets and which habits it has.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

import numpy as np
from pydantic import Field, TypeAdapter, field_validator, model_validator

from emulator.scenario import AvailabilitySettings, ScenarioFieldError, Strict
from emulator.system.availability import INF, AvailabilityModel, TimeZones, Trace
from emulator.system.availability_parts import build_availability
from emulator.system.diurnal import Diurnal, draw_zones
from emulator.system.habit_traces import read_habits
from emulator.system.traces import assign_rows

CLAUSES = ("charging", "unmetered", "idle")
HABITS = ("charging", "unmetered", "in_use")  # the daily windows the clauses read (idle: outside in_use)
DEFAULT_MIN_SOC = 0.2  # the battery floor in a world with batteries (population.energy), unless min_soc says
SEARCH_DAYS = 400  # next_online looks this far ahead for a time every clause holds; beyond it: never


class DailyHabit(Strict):
    """A daily window of local time held by a share of the devices (the others never have it)."""

    start_hour: float = Field(ge=0, lt=24)
    hours: float = Field(gt=0, le=24)
    start_spread_h: float = Field(0.0, ge=0, le=24)  # each device's fixed offset, in +-spread/2
    jitter_h: float = Field(0.0, ge=0)               # a fresh N(0, jitter) shift of the window every day
    share: float = Field(1.0, ge=0, le=1)            # the devices that have this habit at all


class HabitTrace(Strict):
    """The habits as recorded: a behaviour trace (system/habit_traces.py: csv, or FLASH's state_traces.json).
    Device k plays trace device k mod T (`assign: cycle`) or a seeded random one (`random`)."""

    file: str
    format: Literal["csv", "flash"] = "csv"
    repeat_s: Optional[float] = Field(None, gt=0)  # csv: every device repeats with this period
    assign: Literal["cycle", "random"] = "cycle"


class EligibleAvailability(AvailabilitySettings):
    """Online while the policy holds: by default charging, idle (not in use) and on an unmetered network.

    Defaults: plugged in overnight from about 23:00 for 7 h (85% of phones charge at night), on home
    Wi-Fi from about 18:00 for 14 h (75% have it), in use from about 07:00 for 15.5 h; every window
    spread over 2-3 h between devices and shifted by under an hour from day to day."""

    kind: Literal["eligible"] = "eligible"
    share: float = Field(1.0, gt=0, le=1)
    name: Optional[str] = None
    charging: DailyHabit = DailyHabit(start_hour=23, hours=7, start_spread_h=3, jitter_h=0.75, share=0.85)
    unmetered: DailyHabit = DailyHabit(start_hour=18, hours=14, start_spread_h=2, jitter_h=0.5, share=0.75)
    in_use: DailyHabit = DailyHabit(start_hour=7, hours=15.5, start_spread_h=3, jitter_h=0.75, share=1.0)
    requires: list[Literal[CLAUSES]] = Field(default_factory=lambda: list(CLAUSES), min_length=1)
    # and the battery at least this state of charge: a clause only where the world has batteries
    # (population.energy; default DEFAULT_MIN_SOC there), checked by system/battery.py
    min_soc: Optional[float] = Field(None, ge=0, le=1)
    timezones: TimeZones = TimeZones()
    trace: Optional[HabitTrace] = None  # the habits from a behaviour trace instead of daily windows
    # more clauses of your own: availability entries (ours or a plugin's kinds) that must hold as well
    also: list[Any] = Field(default_factory=list)

    @field_validator("also", mode="before")
    @classmethod
    def _entries(cls, value):
        from emulator.scenario.population import Availability  # the same entries as population.availability

        entries = TypeAdapter(list[Availability]).validate_python(value)
        for k, entry in enumerate(entries):
            if entry.kind == "markov":
                raise ScenarioFieldError(f"also.{k}.kind", "a markov chain remembers only its last period, and an "
                                         "eligibility search looks hours ahead; a clause must answer about any "
                                         "time: use a diurnal window, a trace or a stateless model of your own")
        return entries

    @model_validator(mode="after")
    def _distinct(self):
        if len(set(self.requires)) != len(self.requires):
            raise ScenarioFieldError("requires", f"names a clause twice: {self.requires}; each of "
                                     f"{', '.join(CLAUSES)} at most once")
        if self.trace is not None:
            for name in (*HABITS, "timezones"):
                if name in self.model_fields_set:
                    raise ScenarioFieldError(name, f"the habits come from trace.file {self.trace.file}, which "
                                             f"says when; leave {name} out (a trace plays on the simulation's clock "
                                             "as recorded)")
        return self

    def floor(self) -> float:
        """The state of charge below which a device of this entry is not eligible (with batteries)."""
        return DEFAULT_MIN_SOC if self.min_soc is None else self.min_soc


class Eligible(AvailabilityModel):
    """Online while every required clause holds; see the module docstring."""

    kind = "eligible"

    def __init__(self, members, config: EligibleAvailability, rng: np.random.Generator, key: int, world=None):
        super().__init__(members)
        self.also = [build_availability(entry, members, rng, key * 4 + 4 + k, world)
                     for k, entry in enumerate(config.also)]
        self.requires = tuple(config.requires) + tuple(f"also:{k}" for k in range(len(self.also)))
        self.habits: dict[str, AvailabilityModel] = {}
        self.has: dict[str, np.ndarray] = {}
        if config.trace is not None:
            self._replay(config.trace, rng)
            return
        self.zone_s = draw_zones(config.timezones, members, rng, world)
        for index, name in enumerate(HABITS):
            habit = getattr(config, name)
            self.has[name] = rng.random(len(members)) < habit.share
            self.habits[name] = Diurnal(members, habit, rng, key * 4 + index + 1, zone_s=self.zone_s)

    def _replay(self, trace: HabitTrace, rng: np.random.Generator) -> None:
        """Each habit from the behaviour trace: a device has a habit if its trace device ever shows it."""
        windows = read_habits(trace.file, trace.format, trace.repeat_s)
        played = assign_rows(len(self.members), windows["charging"].count, trace.assign, rng)
        self.zone_s = np.zeros(len(self.members))  # the trace's own clock
        for name in HABITS:
            self.habits[name] = Trace.of_windows(self.members, windows[name], played)
            self.has[name] = (windows[name].online_s() > 0)[played]

    # ---------------------------------------------------------------------------------- the clauses
    def _holds(self, clause: str, local, t, everyone: bool = False) -> np.ndarray:
        """Whether each device meets the clause at t (its habit's window: open, or for idle, closed)."""
        if clause.startswith("also:"):
            model = self.also[int(clause[5:])]
            return model.online_all(t) if everyone else _ask(model.online, local, t, bool)
        if clause == "idle":
            habit, has = self.habits["in_use"], self.has["in_use"][local]
            return ~(has & (habit.online_all(t) if everyone else habit.online(local, t)))
        habit, has = self.habits[clause], self.has[clause][local]
        return has & (habit.online_all(t) if everyone else habit.online(local, t))

    def _lapses(self, clause: str, local, t) -> np.ndarray:
        """When the clause stops holding for devices that meet it at t (inf: never)."""
        if clause.startswith("also:"):
            return _ask(self.also[int(clause[5:])].next_offline, local, t, np.float64)
        if clause == "idle":  # the phone is picked up when its in-use window next opens
            habit, has = self.habits["in_use"], self.has["in_use"][local]
            return np.where(has, habit.next_online(local, t), INF)
        return np.where(self.has[clause][local], self.habits[clause].next_offline(local, t), INF)

    def _next_holds(self, clause: str, local, t) -> np.ndarray:
        """The earliest time >= t at which the clause holds (inf: never)."""
        if clause.startswith("also:"):
            return _ask(self.also[int(clause[5:])].next_online, local, t, np.float64)
        if clause == "idle":
            habit, has = self.habits["in_use"], self.has["in_use"][local]
            return np.where(has, habit.next_offline(local, t), t)
        return np.where(self.has[clause][local], self.habits[clause].next_online(local, t), INF)

    # ------------------------------------------------------------------------------------ the model
    def online(self, local, t):
        local = np.asarray(local, dtype=np.int64)
        holds = np.ones(len(local), dtype=bool)
        for clause in self.requires:
            holds &= self._holds(clause, local, t)
        return holds

    def online_all(self, t):
        local = np.arange(len(self.members))
        holds = np.ones(len(local), dtype=bool)
        for clause in self.requires:
            holds &= self._holds(clause, local, t, everyone=True)
        return holds

    def next_offline(self, local, t):
        """For a device online at t, the first lapse of any clause; t itself for one offline at t."""
        local = np.asarray(local, dtype=np.int64)
        online = self.online(local, t)
        end = np.full(len(local), INF)
        for clause in self.requires:
            end = np.minimum(end, self._lapses(clause, local, t))
        return np.where(online, end, float(t))

    def next_online(self, local, t):
        """The earliest time >= t at which every clause holds: each clause in turn moves a device's time to
        when it next holds, until none moves it (all hold) or the search passes SEARCH_DAYS (never)."""
        local = np.asarray(local, dtype=np.int64)
        at = np.broadcast_to(np.asarray(t, dtype=np.float64), (len(local),)).copy()  # one time, or one each
        open_ = np.arange(len(local))  # devices still searching
        horizon = at + SEARCH_DAYS * Diurnal.day_s
        while len(open_):
            who, when = local[open_], at[open_]
            moved = when.copy()
            for clause in self.requires:
                going = np.isfinite(moved)  # a device that never meets one clause is done
                moved[going] = np.maximum(moved[going], self._next_holds(clause, who[going], moved[going]))
            settled = (moved == when) & self.online(who, when)
            never = ~settled & (moved > horizon[open_])
            at[open_] = np.where(never, INF, moved)
            open_ = open_[~settled & ~never]
        return at

    def habit_columns(self) -> dict[str, np.ndarray]:
        """participation.csv's columns of which habits each member has (1) or lacks (0)."""
        return {f"has_{name}": self.has[name].astype(np.int8) for name in HABITS}

    def plugged_and_used(self, local, t) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(charging, in use, when either next changes) of each device at t (one time, or one per device):
        what its battery sees between events (system/battery.py)."""
        local = np.asarray(local, dtype=np.int64)
        states, change = [], np.full(len(local), INF)
        for name in ("charging", "in_use"):
            has = self.has[name][local]
            on, flips = self.habits[name].flips(local, t)
            change = np.minimum(change, np.where(has, flips, INF))
            states.append(has & on)
        return states[0], states[1], change


def _ask(question, local, t, dtype) -> np.ndarray:
    """A clause's model asked about one time, or about one time per device: then once per distinct time,
    since a model (a plugin's, a Markov chain's) may take only one."""
    if np.ndim(t) == 0:
        return question(local, t)
    out = np.empty(len(local), dtype=dtype)
    for when in np.unique(t):
        mask = t == when
        out[mask] = question(local[mask], float(when))
    return out

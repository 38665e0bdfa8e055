"""Each device's battery on the simulated clock: its charge, in closed form between events.

Between events a phone's power is constant: it gains its charger's power while plugged in, loses its
standby power always and its screen's while its owner uses it (its habits, system/eligibility.py); while
it works for a round its work's power is added phase by phase (download, training, upload), and a radio's
tail energy is taken when each transfer it began ends (system/energy.py). So its charge is piecewise
linear, clipped to [0, capacity]: a walk moves it from one change to the next in one step, visiting only
the times a habit or a work phase changes, vectorised over the devices it is asked about. Nothing ticks:
most of a large fleet changes nothing between two rounds, and is not touched.

The state kept per device is its charge at its last event, that event's time, the power since then and
until when that power holds; it moves only at events (a habit changing, a round's work), never at the
times it is looked at, so a run's charges do not depend on who asked when.

A device's battery is modelled where its availability says when it charges (members of `eligible`
entries); elsewhere its level is unknown (NaN) and no floor applies.
"""
from __future__ import annotations

import numpy as np

from emulator.system.availability import INF
from emulator.system.eligibility import Eligible

CHUNK = 1 << 18  # phones whose power is read at once when the world is built (bounds the temporaries)
REACH_DAYS = 400  # how far ahead a battery below its floor is followed to when it climbs back (beyond: never)


class Batteries:
    """The batteries of the members of eligible entries, and the floor each entry's policy sets."""

    def __init__(self, profiles, config, availability, floors: np.ndarray, initial: np.ndarray):
        """`profiles`: system/energy.py's EnergyProfiles; `floors`: each device's min_soc (0 where its
        policy has none: it still stops at an empty battery); `initial`: its state of charge at time 0."""
        self.capacity_j = profiles.battery_wh * 3600.0
        self.charge_w, self.idle_w, self.in_use_w = profiles.charge_w, config.idle_w, config.in_use_w
        self._group, self._local_of = availability.group, availability.local_of
        self._sources = [(g, m) for g, m in enumerate(availability.models) if isinstance(m, Eligible)]
        self.tracked = np.zeros(len(self.capacity_j), dtype=bool)
        self.charges = np.zeros(len(self.capacity_j), dtype=bool)  # ever plugged in: a level that can climb
        for g, model in self._sources:
            members = self._group == g
            self.tracked |= members
            self.charges[members] = model.has["charging"]
        self.floor_j = floors * self.capacity_j
        self.level_j = np.where(self.tracked, initial * self.capacity_j, np.nan)
        self.at = np.zeros(len(self.capacity_j))
        self.power_w = np.zeros(len(self.capacity_j))
        self.until = np.full(len(self.capacity_j), INF)
        tracked = np.flatnonzero(self.tracked)
        for begin in range(0, len(tracked), CHUNK):  # each phone's power at time 0, once, as the world is built
            chunk = tracked[begin:begin + CHUNK]
            self.power_w[chunk], self.until[chunk] = self._background(chunk, np.zeros(len(chunk)))
        # the floor's answer for everyone, and until when each holds (recomputed only where it may have changed)
        self._above = ~self.tracked
        self._above_until = np.where(self.tracked, -INF, INF)
        self._asked_at = -INF

    # ------------------------------------------------------------------------------------------- habits
    def _background(self, ids: np.ndarray, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(power W, until when it holds) of each device from time t (one per device), from its habits."""
        power, until = np.zeros(len(ids)), np.full(len(ids), INF)
        for g, model in self._sources:
            mask = self._group[ids] == g
            if mask.any():
                charging, in_use, change = model.plugged_and_used(self._local_of(ids[mask]), t[mask])
                power[mask] = (np.where(charging, self.charge_w[ids[mask]], 0.0) - self.idle_w
                               - np.where(in_use, self.in_use_w, 0.0))
                until[mask] = change
        return power, until

    def _settle(self, ids: np.ndarray, t: float) -> None:
        """Move each device's state through the habit changes it passed by t (t is the clock: never ahead)."""
        stale = ids[self.tracked[ids] & (self.until[ids] <= t)]
        while len(stale):
            step = self.until[stale] - self.at[stale]
            self.level_j[stale] = np.clip(self.level_j[stale] + self.power_w[stale] * step, 0.0,
                                          self.capacity_j[stale])
            self.at[stale] = self.until[stale]
            self.power_w[stale], self.until[stale] = self._background(stale, self.at[stale])
            stale = stale[self.until[stale] <= t]

    def level(self, ids: np.ndarray, t: float) -> np.ndarray:
        """Each device's charge (J) at the clock's time t (NaN where untracked)."""
        ids = np.asarray(ids, dtype=np.int64)
        self._settle(ids, t)
        return np.clip(self.level_j[ids] + self.power_w[ids] * (t - self.at[ids]), 0.0, self.capacity_j[ids])

    def above_floor(self, ids: np.ndarray, t: float) -> np.ndarray:
        """Whether each device's battery meets its policy's floor at the clock's time t (untracked devices
        always do). An answer holds until the device's power changes or its level crosses the floor, so
        each call recomputes only the devices asked about whose answer may have changed since (a phone is
        first looked at when it first comes online)."""
        if t < self._asked_at:  # asked about an earlier time (a checkpoint was loaded): everyone afresh
            self._forget()
        self._asked_at = t
        ids = np.asarray(ids, dtype=np.int64)
        stale = ids[self._above_until[ids] <= t]
        if len(stale):
            level, floor, power = self.level(stale, t), self.floor_j[stale], self.power_w[stale]
            above = level >= floor
            with np.errstate(divide="ignore", invalid="ignore"):
                crossing = np.where((power < 0) & above, t + (level - floor) / -power,
                                    np.where((power > 0) & ~above, t + (floor - level) / power, INF))
            self._above[stale] = above
            self._above_until[stale] = np.minimum(self.until[stale], crossing)
        return self._above[ids]

    def _forget(self, ids: np.ndarray | None = None) -> None:
        """The floor's answers of these devices (None: all) are to be found afresh at the next look."""
        self._above_until[self.tracked if ids is None else ids] = -INF

    # ------------------------------------------------------------------------------------- the walks
    def _copy(self, ids):
        return self.level_j[ids].copy(), self.at[ids].copy(), self.power_w[ids].copy(), self.until[ids].copy()

    def reaches_floor(self, ids: np.ndarray, t: np.ndarray) -> np.ndarray:
        """The earliest time >= t (one per device, not before the clock) at which each device's battery
        meets its floor; inf if not within REACH_DAYS. Looks ahead without moving the state."""
        ids = np.asarray(ids, dtype=np.int64)
        out = np.asarray(t, dtype=np.float64).copy()
        todo = np.flatnonzero(self.tracked[ids])
        level, at, power, until = self._copy(ids[todo])
        target, floor = out[todo], self.floor_j[ids[todo]]
        cap, horizon = self.capacity_j[ids[todo]], target + REACH_DAYS * 86400.0
        charges = self.charges[ids[todo]]
        while len(todo):
            ahead = np.where(at < target, np.minimum(until, target), until)  # first to t, then to each change
            gained = level + power * (ahead - at)
            climbs = (ahead >= target) & (level < floor) & (power > 0) & (gained >= floor)
            crossing = at + (floor - level) / np.where(power > 0, power, 1.0)
            met_at_target = (at >= target) & (level >= floor)
            hopeless = (level < floor) & ~charges  # below it, and never plugged in: it only drains
            done = met_at_target | climbs | hopeless | (ahead >= horizon)
            out[todo[done]] = np.where(met_at_target, at, np.where(climbs, np.maximum(crossing, target),
                                                                    INF))[done]
            keep = ~done
            level = np.clip(gained, 0.0, cap)[keep]
            at, power, until, target, floor, cap, horizon, charges, todo = (
                ahead[keep], power[keep], until[keep], target[keep], floor[keep], cap[keep], horizon[keep],
                charges[keep], todo[keep])
            changed = until <= at
            if changed.any():
                power[changed], until[changed] = self._background(ids[todo[changed]], at[changed])
        return out

    def work(self, ids: np.ndarray, phases: dict, stop: np.ndarray, commit: bool) -> np.ndarray:
        """Walk each device through its round's work until it stops; returns when its battery hit its floor
        while it worked (inf: never). `phases` (system/energy.py's work_phases): `begin` (it checked in),
        `edges` (n x 4: download begins, download done, training done, upload done), `power` (n x 3) and
        `tail_j`. With `commit` the battery keeps the walk (the round is over); else it only looks ahead."""
        ids = np.asarray(ids, dtype=np.int64)
        hit = np.full(len(ids), INF)
        rows = np.flatnonzero(self.tracked[ids] & np.isfinite(phases["begin"]) & (stop > phases["begin"]))
        if not commit:
            rows = rows[self._may_empty(ids[rows], phases, rows, stop[rows])]
        if not len(rows):
            return hit
        if commit:  # most phones' habits hold through their work: one fixed sequence of steps, no search
            mine = ids[rows]
            stale = mine[self.until[mine] <= self.at[mine]]  # a walk that ended just as its power changed
            if len(stale):
                self.power_w[stale], self.until[stale] = self._background(stale, self.at[stale])
            steady = self.until[mine] > stop[rows]
            self._through_work(mine[steady], phases, rows[steady], stop[rows[steady]])
            rows = rows[~steady]
            if not len(rows):
                return hit
        mine = ids[rows]
        level, at, power, until = self._copy(mine)
        edges, work_w, tail_j = phases["edges"][rows], phases["power"][rows], phases["tail_j"][rows]
        stop, begin, floor, cap = stop[rows], phases["begin"][rows], self.floor_j[mine], self.capacity_j[mine]
        tails = np.stack([np.where(stop > edges[:, 0], np.minimum(edges[:, 1], stop), INF),
                          np.where(stop > edges[:, 2], np.minimum(edges[:, 3], stop), INF)], axis=1)
        live = np.arange(len(rows))
        while len(live):
            a = at[live]
            changed = until[live] <= a
            if changed.any():
                who = live[changed]
                power[who], until[who] = self._background(mine[who], at[who])
            e = edges[live]
            phase = (a[:, None] >= e).sum(axis=1)  # 1..3: inside download, training, upload
            working = (phase >= 1) & (phase <= 3) & (a < stop[live])
            p = power[live] - np.where(working, work_w[live, np.clip(phase - 1, 0, 2)], 0.0)
            nexts = np.where(e > a[:, None], e, INF).min(axis=1)
            nexts = np.minimum.reduce([nexts, until[live], np.where(stop[live] > a, stop[live], INF),
                                       np.where(a < begin[live], begin[live], INF)])
            to = np.minimum(nexts, stop[live])
            moved = level[live] + p * (to - a)
            watched = (a >= begin[live]) & (a < stop[live]) & (p < 0) & (not commit)
            hits = watched & (moved < floor[live])
            hit[rows[live[hits]]] = a[hits] + np.maximum(level[live][hits] - floor[live][hits], 0.0) / -p[hits]
            level[live] = np.clip(moved, 0.0, cap[live])
            at[live] = to
            for j in (0, 1):  # a tail's energy when the transfer ends (or the work stops mid-transfer)
                due = tails[live, j] == to
                who = live[due]
                level[who] = np.maximum(level[who] - tail_j[who], 0.0)
                tails[who, j] = INF
                struck = due & (to < stop[live]) & (level[live] < floor[live]) & ~hits & (not commit)
                hit[rows[live[struck]]] = to[struck]
                hits |= struck
            live = live[(at[live] < stop[live]) & ~hits]
        if commit:
            self.level_j[mine], self.at[mine], self.power_w[mine], self.until[mine] = level, at, power, until
            self._forget(mine)
        return hit

    def _through_work(self, ids, phases, rows, stop) -> None:
        """Commit the walk of devices whose power holds from their last event through their work: the same
        steps as `work`'s search, in their fixed order (to check-in, to the download, download, training,
        upload, each cut at `stop`; a tail after each transfer begun)."""
        edges, work_w, tail_j = phases["edges"][rows], phases["power"][rows], phases["tail_j"][rows]
        points = [self.at[ids], np.minimum(phases["begin"][rows], stop)] + [np.minimum(edges[:, k], stop)
                                                                             for k in range(4)]
        background, level, cap = self.power_w[ids], self.level_j[ids], self.capacity_j[ids]
        for k in range(5):
            power = background if k < 2 else background - work_w[:, k - 2]
            level = np.clip(level + power * (points[k + 1] - points[k]), 0.0, cap)
            if k in (2, 4):  # a tail when the transfer ends, or the work stops inside it
                level = np.where(stop > edges[:, k - 2], np.maximum(level - tail_j, 0.0), level)
        self.level_j[ids], self.at[ids] = level, stop
        self._forget(ids)

    def _may_empty(self, ids, phases, rows, stop) -> np.ndarray:
        """Whether a device's battery could reach its floor while it works: not where its level as it
        begins (known in one step when its power holds until then) minus every watt it could draw until
        `stop` and two radio tails stays above the floor. Spares most devices the walk."""
        begin = phases["begin"][rows]
        known = self.until[ids] > begin
        start = np.clip(self.level_j[ids] + self.power_w[ids] * (begin - self.at[ids]), 0.0, self.capacity_j[ids])
        drain = (self.idle_w + self.in_use_w + phases["power"][rows].max(axis=1)) * (stop - begin)
        safe = known & (start - drain - 2.0 * phases["tail_j"][rows] > self.floor_j[ids])
        return ~safe

    # ----------------------------------------------------------------------------------- the record
    def soc_of(self, ids: np.ndarray, t: float) -> np.ndarray:
        """Each device's state of charge at the clock's time t (NaN where untracked)."""
        ids = np.asarray(ids, dtype=np.int64)
        return self.level(ids, t) / self.capacity_j[ids]

    def soc(self, t: float) -> np.ndarray:
        """Every device's state of charge at the clock's time t (NaN where untracked)."""
        return self.soc_of(np.arange(len(self.capacity_j)), t)

    def state(self) -> dict:
        return {"level_j": self.level_j.copy(), "at": self.at.copy(), "power_w": self.power_w.copy(),
                "until": self.until.copy()}

    def load_state(self, state: dict) -> None:
        self.level_j[:], self.at[:], self.power_w[:], self.until[:] = (
            state["level_j"], state["at"], state["power_w"], state["until"])
        self._forget()
        self._asked_at = -INF


def batteries_for(profiles, config, availability, entries) -> Batteries | None:
    """The batteries of a world with energy, with each eligible entry's floor; None where no entry says when
    its phones charge (then no level is known)."""
    floors = np.zeros(availability.num_devices)
    eligible = [(g, entry) for g, (entry, model) in enumerate(zip(entries, availability.models))
                if isinstance(model, Eligible)]
    for g, entry in eligible:
        floors[availability.group == g] = entry.floor()
    return Batteries(profiles, config, availability, floors, profiles.initial_soc) if eligible else None

"""Readers for behaviour traces: when each phone was charging, on an unmetered network and in use, as recorded.

An `eligible` entry with `trace:` takes its habits from such a file instead of daily windows
(system/eligibility.py). Formats (docs/system-model.md, "Behaviour from traces"):

- csv: columns device_id,habit,start_s,end_s; one row per interval [start_s, end_s) in which the habit held,
  habit one of charging, unmetered, in_use. With repeat_s every device repeats with that period.
- flash: FLASH's state_traces.json (Yang et al., WWW 2021; ../shared/traces.md): {key: {'guid', 'model',
  'messages': "YYYY-MM-DD HH:MM:SS<TAB>state" lines}}. battery_charged_on/_off set charging; wifi sets
  unmetered, 2g/3g/4g/5g/unknown clear it; screen_unlock starts use, screen_lock and screen_off end it
  (FLASH's ready rule: charging, Wi-Fi and the screen locked); an "NN%" level is read and ignored; any
  other token is an error naming the device and the line. Each state holds from its event to the next
  change (before a device's first event: not charging, not on Wi-Fi, not in use). The clock's 0 is the
  midnight starting the file's first day, so time of day is kept; each device repeats after the whole days
  its record spans.

Pure functions from a file to per-habit `Windows` (system/traces.py) sharing one device order; cached by the
file's path, size and modification time.
"""
from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path

import numpy as np

from emulator.scenario import ScenarioError
from emulator.system.traces import Windows, _cached, _csv_rows, _frozen, _merged, _number, _read_bytes, _stamp

HABIT_NAMES = ("charging", "unmetered", "in_use")
DAY_S = 86400.0
FLASH_TOKENS = {"battery_charged_on": ("charging", True), "battery_charged_off": ("charging", False),
                "wifi": ("unmetered", True), "2g": ("unmetered", False), "3g": ("unmetered", False),
                "4g": ("unmetered", False), "5g": ("unmetered", False), "unknown": ("unmetered", False),
                "screen_unlock": ("in_use", True), "screen_lock": ("in_use", False),
                "screen_off": ("in_use", False), "screen_on": None}


def read_habits(path: str | Path, format: str = "csv", repeat_s: float | None = None) -> dict[str, Windows]:
    """Each habit's windows of the trace's devices (the same devices, in the same order, for every habit)."""
    path = Path(path)
    return _cached(_read_habits, path, _stamp(path), format, repeat_s)


def _read_habits(path: Path, format: str, repeat_s: float | None) -> dict[str, Windows]:
    rows, names, period = _flash_rows(path) if format == "flash" else _csv_habit_rows(path, repeat_s)
    out = {}
    for habit in HABIT_NAMES:
        mine = [r for r in rows if r[1] == habit]
        device = np.asarray([r[0] for r in mine], dtype=np.int64)
        starts = np.asarray([r[2] for r in mine], dtype=np.float64)
        ends = np.asarray([r[3] for r in mine], dtype=np.float64)
        device, starts, ends = _merged(device, starts, ends)
        out[habit] = _frozen(Windows(device, starts, ends, period.copy(), names))
    return out


def _csv_habit_rows(path: Path, repeat_s: float | None):
    ids, rows = [], []
    for line, row in _csv_rows(path, ("device_id", "habit", "start_s", "end_s"), "a behaviour trace"):
        habit = row["habit"]
        if habit not in HABIT_NAMES:
            raise ScenarioError(f"{path}, line {line}: habit {habit!r} is not one of {', '.join(HABIT_NAMES)}")
        start, end = _number(row, "start_s", path, line), _number(row, "end_s", path, line)
        if not (0 <= start < end < math.inf):
            raise ScenarioError(f"{path}, line {line}: needs 0 <= start_s < end_s (finite seconds), got "
                                f"{start:g}, {end:g}")
        if repeat_s is not None and end > repeat_s:
            raise ScenarioError(f"{path}, line {line}: the interval ends at {end:g} s, after repeat_s = "
                                f"{repeat_s:g}; raise repeat_s or trim the trace")
        ids.append(row["device_id"])
        rows.append([habit, start, end])
    if not rows:
        raise ScenarioError(f"{path}: the trace holds no intervals (only a header); add rows "
                            "device_id,habit,start_s,end_s")
    names, device = np.unique(np.asarray(ids), return_inverse=True)
    period = np.full(len(names), np.inf if repeat_s is None else float(repeat_s))
    return [(int(d), *r) for d, r in zip(device, rows)], tuple(str(n) for n in names), period


def _flash_rows(path: Path):
    try:
        record = json.loads(_read_bytes(path))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{path}: not FLASH's state_traces.json (JSON: {exc}); give its path, or format: csv")
    if not isinstance(record, dict) or not record:
        raise ScenarioError(f"{path}: FLASH's trace is a JSON object of devices, {{key: {{'guid', 'messages'}}}}")
    events, names = [], []
    for key, entry in record.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("messages"), str):
            raise ScenarioError(f"{path}: device {key!r} has no 'messages' string of events")
        names.append(str(entry.get("guid", key)))
        events.append(_flash_events(path, key, entry["messages"]))
    stamped = [e for device in events for e in device]
    if not stamped:
        raise ScenarioError(f"{path}: no device has any event")
    epoch = min(when for when, _, _ in stamped).replace(hour=0, minute=0, second=0, microsecond=0)
    rows, period = [], np.empty(len(names))
    for d, device in enumerate(events):
        times = [(when - epoch).total_seconds() for when, _, _ in device]
        last = max(times, default=0.0)
        period[d] = DAY_S * max(1, math.ceil((last + 1.0) / DAY_S))
        state = dict.fromkeys(HABIT_NAMES, None)  # when each habit began holding (None: it does not hold)
        for t, (_, habit, holds) in zip(times, device):
            if holds and state[habit] is None:
                state[habit] = t
            elif not holds and state[habit] is not None:
                if t > state[habit]:
                    rows.append((d, habit, state[habit], t))
                state[habit] = None
        for habit, began in state.items():  # a habit still holding at the record's end holds to its period's end
            if began is not None and period[d] > began:
                rows.append((d, habit, began, float(period[d])))
    return rows, tuple(names), period


def _flash_events(path: Path, key: str, messages: str) -> list:
    out = []
    for number, line in enumerate(messages.splitlines(), start=1):
        if not line.strip():
            continue
        stamp, _, token = line.partition("\t")
        try:
            when = dt.datetime.strptime(stamp.strip(), "%Y-%m-%d %H:%M:%S")
        except ValueError:
            raise ScenarioError(f"{path}: device {key!r}, event {number}: {stamp!r} is not a time "
                                "YYYY-MM-DD HH:MM:SS followed by a tab and a state") from None
        token = token.strip()
        if token.endswith("%") and token[:-1].isdigit():
            continue  # a battery level: the world's battery model keeps its own
        if token not in FLASH_TOKENS:
            raise ScenarioError(f"{path}: device {key!r}, event {number}: unknown state {token!r}; FLASH's states "
                                f"are {', '.join(sorted(FLASH_TOKENS))} and NN% levels: clean the trace first")
        if FLASH_TOKENS[token] is not None:
            out.append((when, *FLASH_TOKENS[token]))
    out.sort(key=lambda e: e[0])
    return out

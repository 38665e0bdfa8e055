"""Readers for trace files: when devices are online, and how fast they compute and communicate.

Pure functions from a file to arrays; every bad input raises `ScenarioError` naming the file, the line (CSV)
or key (pickle) and what would fix it. Formats (docs/system-model.md, "Traces"):

- availability, CSV: columns device_id,start_s,end_s; one row per online interval [start_s, end_s).
- availability, FedScale's client_behave_trace pickle: {key: {'active': [s], 'inactive': [s],
  'finish_time': s, 'duration': s, 'model': str}}. Window i is [active[i], inactive[i]] in whole seconds,
  both ends included, so it is read as [active[i], inactive[i] + 1); finish_time is the device's period.
- capacity, FedScale's client_device_capacity pickle: {key: {'computation': ms per sample (inference),
  'communication': kbit/s}}.
- capacity, CSV: columns device_id,s_per_sample,down_mbps,up_mbps and optionally latency_s.

Pickles are read by an unpickler that builds nothing but dicts, lists, tuples, sets, numbers and strings:
a trace file can never run code.
"""
from __future__ import annotations

import csv
import io
import math
import os
import pickle
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from emulator.scenario import ScenarioError

# FedScale's 'computation' is inference time per sample; training (forward + backward) costs about 3x that
# (fedscale/cloud/internal/client_metadata.py, get_completion_time: 3 x batch x steps x computation).
TRAINING_FACTOR = 3.0


class TraceWarning(UserWarning):
    """A trace that reads fine but holds something odd (e.g. a FedScale duration that disagrees with the
    windows)."""


# ------------------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class Windows:
    """Online windows [starts, ends) of `count` trace devices, sorted by (device, start), merged where they
    overlap or touch, each inside [0, period) of its device. period[d] = inf: device d does not repeat."""

    device: np.ndarray  # trace device index of each window
    starts: np.ndarray
    ends: np.ndarray
    period: np.ndarray  # per trace device
    names: tuple        # per trace device: its CSV device_id or pickle key, as a string

    @property
    def count(self) -> int:
        return len(self.names)

    def online_s(self) -> np.ndarray:
        """Online seconds of each trace device per period (the whole trace where it does not repeat)."""
        return np.bincount(self.device, weights=self.ends - self.starts, minlength=self.count)


@dataclass(frozen=True)
class Capacity:
    """One row per trace device: seconds per training sample, link speeds, latency (NaN: not given)."""

    s_per_sample: np.ndarray
    down_mbps: np.ndarray
    up_mbps: np.ndarray
    latency_s: np.ndarray
    names: tuple

    @property
    def count(self) -> int:
        return len(self.names)


def assign_rows(n: int, rows: int, assign: str, stream: np.random.Generator | None) -> np.ndarray:
    """Which trace row each of n devices plays. cycle: device k plays row k mod rows. random (seeded by
    `stream`): every row is used floor(n / rows) or ceil(n / rows) times, which rows get the extra use and
    who plays which are random; with n <= rows, a random subset of distinct rows."""
    if assign == "random" and stream is not None:
        order = stream.permutation(rows)
        return stream.permutation(order[np.arange(n) % rows])
    return np.arange(n, dtype=np.int64) % rows


# -------------------------------------------------------------------------------------- availability
def read_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(trace device index, start_s, end_s) from a CSV with columns device_id,start_s,end_s.

    Overlapping or touching intervals of one device are merged; rows are sorted by (device, start)."""
    windows = _read_csv_windows(Path(path))
    return windows[0], windows[1], windows[2]


def read_availability(path: str | Path, format: str = "csv", repeat_s: float | None = None) -> Windows:
    """The online windows of a trace file (format csv or fedscale). With repeat_s every device repeats with
    that period; else a FedScale device repeats with its own finish_time and a CSV trace does not repeat.
    Cached by the file's path, size and modification time (the arrays are read-only)."""
    path = Path(path)
    return _cached(_read_availability, path, _stamp(path), format, repeat_s)


def _read_availability(path: Path, format: str, repeat_s: float | None) -> Windows:
    if format == "fedscale":
        return _fedscale_windows(path, repeat_s)
    device, starts, ends, names = _read_csv_windows(path)
    if repeat_s is not None and ends.max() > repeat_s:
        line = int(np.argmax(ends))
        raise ScenarioError(f"{path}: device {names[device[line]]} is online until {ends[line]:g} s, after "
                            f"repeat_s = {repeat_s:g}; raise repeat_s or trim the trace")
    period = np.full(len(names), np.inf if repeat_s is None else float(repeat_s))
    return _frozen(Windows(device, starts, ends, period, names))


def _read_csv_windows(path: Path):
    ids, starts, ends = [], [], []
    for line, row in _csv_rows(path, ("device_id", "start_s", "end_s"), "an availability trace"):
        start, end = _number(row, "start_s", path, line), _number(row, "end_s", path, line)
        if not (0 <= start < end < math.inf):
            raise ScenarioError(f"{path}, line {line}: needs 0 <= start_s < end_s (finite seconds), got "
                                f"{start:g}, {end:g}")
        ids.append(row["device_id"])
        starts.append(start)
        ends.append(end)
    if not ids:
        raise ScenarioError(f"{path}: the trace holds no intervals (only a header); add rows "
                            "device_id,start_s,end_s")
    names, device = np.unique(np.asarray(ids), return_inverse=True)
    device, starts, ends = _merged(device.astype(np.int64), np.asarray(starts), np.asarray(ends))
    return device, starts, ends, tuple(str(n) for n in names)


def _fedscale_windows(path: Path, repeat_s: float | None) -> Windows:
    data = _load_pickle(path, "FedScale's client_behave_trace")
    keys, lengths, actives, inactives, finishes, durations = [], [], [], [], [], []
    numbers, sequences = {int, float}, (list, tuple)
    for key, entry in data.items():  # structure and types here (fast path first); invariants below, at once
        try:
            active, inactive, finish = entry["active"], entry["inactive"], entry["finish_time"]
            fine = (type(entry) is dict and type(active) in sequences and type(inactive) in sequences
                    and len(active) == len(inactive) and type(finish) in numbers and 0 < finish < math.inf
                    and set(map(type, active)) <= numbers and set(map(type, inactive)) <= numbers)
        except (TypeError, KeyError, IndexError):
            fine = False
        if not fine:
            _diagnose_behave(f"{path}, key {key!r}", entry)
        duration = entry.get("duration")
        keys.append(key)
        lengths.append(len(active))
        actives.extend(active)
        inactives.extend(inactive)
        finishes.append(finish)
        durations.append(float(duration) if type(duration) in numbers else math.nan)
    if not keys:
        raise ScenarioError(f"{path}: the behave trace holds no devices (an empty dict)")
    device = np.repeat(np.arange(len(keys), dtype=np.int64), lengths)
    active, inactive = np.asarray(actives, dtype=np.float64), np.asarray(inactives, dtype=np.float64)
    finish = np.asarray(finishes, dtype=np.float64)
    infinite = ~np.isfinite(active) | ~np.isfinite(inactive)
    if infinite.any():
        _diagnose_behave(f"{path}, key {keys[device[np.argmax(infinite)]]!r}", data[keys[device[np.argmax(infinite)]]])
    _check_windows(path, keys, device, active, inactive, finish)
    online = np.bincount(device, weights=inactive - active, minlength=len(keys))
    durations = np.asarray(durations)
    odd = np.flatnonzero(~np.isnan(durations) & ~np.isclose(durations, online, rtol=0, atol=1e-6))
    if len(odd):
        warnings.warn(f"{path}: {len(odd)} of {len(keys)} devices have a 'duration' other than the sum of "
                      f"inactive - active over their windows (first: key {keys[odd[0]]!r}); duration is not used",
                      TraceWarning, stacklevel=4)
    period = finish if repeat_s is None else np.full(len(keys), float(repeat_s))
    ends = np.minimum(inactive + 1.0, period[device])  # inclusive whole seconds, clipped to the period
    keep = active < ends  # windows from repeat_s on are cut away
    device, starts, ends = _merged(device[keep], active[keep], ends[keep])
    return _frozen(Windows(device, starts, ends, period, tuple(str(k) for k in keys)))


def _diagnose_behave(where: str, entry) -> None:
    """Raise the ScenarioError that says what is wrong with a behave-trace entry's structure or types."""
    if not isinstance(entry, dict):
        raise ScenarioError(f"{where}: each entry must be a dict with 'active', 'inactive' and 'finish_time' "
                            f"(FedScale's client_behave_trace), got a {type(entry).__name__}")
    missing = [k for k in ("active", "inactive", "finish_time") if k not in entry]
    if missing:
        raise ScenarioError(f"{where}: the entry lacks {', '.join(repr(k) for k in missing)}; a FedScale "
                            "behave trace entry holds 'active', 'inactive' (lists of seconds) and 'finish_time'")
    _check_seconds(entry["active"], where, "active")
    _check_seconds(entry["inactive"], where, "inactive")
    if len(entry["active"]) != len(entry["inactive"]):
        raise ScenarioError(f"{where}: 'active' has {len(entry['active'])} entries, 'inactive' "
                            f"{len(entry['inactive'])}; each window needs both its start and its end")
    finish = _scalar(entry["finish_time"], where, "finish_time")
    if not 0 < finish < math.inf:
        raise ScenarioError(f"{where}: 'finish_time' must be a positive number of seconds, got {finish:g}")
    raise ScenarioError(f"{where}: not a FedScale behave trace entry")  # not reached for the checks above


def _check_windows(path, keys, device, active, inactive, finish) -> None:
    """FedScale's invariants: 0 <= active[i] <= inactive[i] <= finish_time, inactive[i] <= active[i + 1]."""
    first = np.concatenate([[0], np.cumsum(np.bincount(device, minlength=len(keys)))])[device]
    i = np.arange(len(device)) - first  # position of each window within its device
    same_next = np.append(device[1:] == device[:-1], False)
    follow = np.append(active[1:], np.inf)
    checks = [
        (active < 0, lambda j: f"active[{i[j]}] = {active[j]:g} is negative"),
        (active > inactive, lambda j: f"active[{i[j]}] = {active[j]:g} is after inactive[{i[j]}] = {inactive[j]:g}"),
        (inactive > finish[device],
         lambda j: f"inactive[{i[j]}] = {inactive[j]:g} is after finish_time = {finish[device[j]]:g}"),
        (same_next & (inactive > follow),
         lambda j: f"inactive[{i[j]}] = {inactive[j]:g} is after active[{i[j] + 1}] = {follow[j]:g} (windows must "
                   "be sorted and must not overlap)"),
    ]
    broken = [(int(np.argmax(bad)), say) for bad, say in checks if bad.any()]
    if broken:
        j, say = min(broken, key=lambda b: b[0])
        raise ScenarioError(f"{path}, key {keys[device[j]]!r}: {say(j)}; fix the entry or drop it")


def _merged(device, starts, ends):
    """Sorted by (device, start), with overlapping or touching windows of one device merged."""
    if not len(device):
        return device, starts, ends
    step = np.diff(device)
    if (step < 0).any() or ((step == 0) & (np.diff(starts) < 0)).any():  # FedScale's windows come sorted
        order = np.lexsort((starts, device))
        device, starts, ends = device[order], starts[order], ends[order]
    # reach[i]: the furthest end among the device's windows up to i (a running maximum within each device:
    # devices are sorted, so offsetting each device's ends by device x span keeps the maxima apart)
    span = 2.0 * float(np.abs(ends).max()) + 1.0
    key = device * span + ends
    record = np.maximum.accumulate(np.where(key >= np.maximum.accumulate(key), np.arange(len(key)), 0))
    reach = ends[record]
    new = np.ones(len(device), dtype=bool)
    new[1:] = (device[1:] != device[:-1]) | (starts[1:] > reach[:-1])
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(device)) - 1
    return device[first], starts[first], reach[last]


# ------------------------------------------------------------------------------------------ capacity
def read_capacity(path: str | Path, format: str = "fedscale") -> Capacity:
    """Device capacities, one row per trace device in file order (format fedscale or csv). Cached like
    read_availability."""
    path = Path(path)
    return _cached(_read_capacity, path, _stamp(path), format)


def _read_capacity(path: Path, format: str) -> Capacity:
    if format == "fedscale":
        return _fedscale_capacity(path)
    names, columns = [], {"s_per_sample": [], "down_mbps": [], "up_mbps": [], "latency_s": []}
    seen: dict[str, int] = {}
    for line, row in _csv_rows(path, ("device_id", "s_per_sample", "down_mbps", "up_mbps"), "a capacity trace"):
        if row["device_id"] in seen:
            raise ScenarioError(f"{path}, line {line}: device_id {row['device_id']!r} already appeared on line "
                                f"{seen[row['device_id']]}; give each device one row")
        seen[row["device_id"]] = line
        for column in ("s_per_sample", "down_mbps", "up_mbps"):
            value = _number(row, column, path, line)
            if not 0 < value < math.inf:
                raise ScenarioError(f"{path}, line {line}: {column} must be a positive number, got {value:g}")
            columns[column].append(value)
        latency = math.nan
        if (row.get("latency_s") or "").strip():
            latency = _number(row, "latency_s", path, line)
            if not 0 <= latency < math.inf:
                raise ScenarioError(f"{path}, line {line}: latency_s must be >= 0 seconds, got {latency:g}")
        columns["latency_s"].append(latency)
        names.append(row["device_id"])
    if not names:
        raise ScenarioError(f"{path}: the capacity trace holds no devices (only a header); add rows "
                            "device_id,s_per_sample,down_mbps,up_mbps")
    arrays = {k: np.asarray(v, dtype=np.float64) for k, v in columns.items()}
    return _frozen(Capacity(names=tuple(names), **arrays))


def _fedscale_capacity(path: Path) -> Capacity:
    """FedScale's 'computation' is milliseconds of inference per sample: a training sample (forward and
    backward pass) takes TRAINING_FACTOR = 3 times that, so s_per_sample = 3 x computation / 1000.
    'communication' is kbit/s, the same both ways: down_mbps = up_mbps = communication / 1000."""
    data = _load_pickle(path, "FedScale's client_device_capacity")
    names, compute, link = [], [], []
    for key, entry in data.items():
        where = f"{path}, key {key!r}"
        if not isinstance(entry, dict) or not {"computation", "communication"} <= set(entry):
            raise ScenarioError(f"{where}: each entry must be a dict with 'computation' (ms per sample) and "
                                "'communication' (kbit/s), as in FedScale's client_device_capacity")
        speeds = [_scalar(entry[k], where, k) for k in ("computation", "communication")]
        for name, value in zip(("computation", "communication"), speeds):
            if not 0 < value < math.inf:
                raise ScenarioError(f"{where}: '{name}' must be a positive number, got {value:g}")
        names.append(str(key))
        compute.append(speeds[0])
        link.append(speeds[1])
    if not names:
        raise ScenarioError(f"{path}: the capacity trace holds no devices (an empty dict)")
    mbps = np.asarray(link) / 1000.0
    return _frozen(Capacity(TRAINING_FACTOR * np.asarray(compute) / 1000.0, mbps, mbps.copy(),
                            np.full(len(names), np.nan), tuple(names)))


# ------------------------------------------------------------------------------------------- helpers
class _PlainUnpickler(pickle.Unpickler):
    """Builds only what needs no import: dicts, lists, tuples, numbers, strings, bytes, sets."""

    ALLOWED = {("builtins", "set"), ("builtins", "frozenset"), ("__builtin__", "set"),
               ("__builtin__", "frozenset")}

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return set if name == "set" else frozenset
        raise _Refused(f"{module}.{name}")


class _Refused(Exception):
    pass


def _load_pickle(path: Path, what: str) -> dict:
    raw = _read_bytes(path)
    try:
        data = _PlainUnpickler(io.BytesIO(raw)).load()
    except _Refused as refused:
        raise ScenarioError(f"{path}: the pickle refers to {refused}, which a trace file may not hold (only "
                            "dicts, lists, numbers and strings are read, so a trace can never run code); "
                            "save the trace with plain Python types") from None
    except Exception as exc:  # any failure to unpickle means the file is not a (whole) pickle
        raise ScenarioError(f"{path}: not a readable pickle ({type(exc).__name__}: {exc}); give {what} "
                            "pickle, or set format: csv for a CSV file") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: {what} is a dict of devices, but the pickle holds a {type(data).__name__}")
    return data


def _csv_rows(path: Path, columns: tuple[str, ...], what: str):
    """(line number, row) of a CSV file whose header holds `columns`."""
    raw = _read_bytes(path)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not a text CSV file; for FedScale's pickle set format: fedscale") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [c for c in columns if c not in (reader.fieldnames or [])]
    if missing:
        raise ScenarioError(f"{path}, line 1: {what} needs the columns {','.join(columns)}; missing "
                            f"{', '.join(missing)}")
    for row in reader:
        yield reader.line_num, row


def _read_bytes(path: Path) -> bytes:
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise ScenarioError(f"{path}: no such trace file; check the path") from None
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read the trace file ({exc.strerror or exc})") from None
    if not raw.strip():
        raise ScenarioError(f"{path}: the trace file is empty")
    return raw


def _number(row: dict, column: str, path: Path, line: int) -> float:
    try:
        return float(row[column])
    except (TypeError, ValueError):
        raise ScenarioError(f"{path}, line {line}: {column} must be a number, got {row[column]!r}") from None


def _scalar(value, where: str, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ScenarioError(f"{where}: '{name}' must be a number, got {value!r}")
    return float(value)


def _check_seconds(value, where: str, name: str) -> None:
    if not isinstance(value, (list, tuple)):
        raise ScenarioError(f"{where}: '{name}' must be a list of seconds, got a {type(value).__name__}")
    if not set(map(type, value)) <= {int, float} or not all(map(math.isfinite, value)):  # fast, C-level
        i, x = next((i, x) for i, x in enumerate(value)
                    if not (type(x) is int or (type(x) is float and math.isfinite(x))))
        raise ScenarioError(f"{where}: '{name}'[{i}] must be a number of seconds, got {x!r}")


def _stamp(path: Path):
    try:
        info = os.stat(path)
    except OSError:
        return None  # the reader reports the problem
    return info.st_size, info.st_mtime_ns


@lru_cache(maxsize=8)
def _cached(reader, path: Path, stamp, *args):
    return reader(path, *args)


def _frozen(result):
    for value in vars(result).values():
        if isinstance(value, np.ndarray):
            value.setflags(write=False)
    return result

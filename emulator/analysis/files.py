"""A run directory's files read back, each checked against what a run writes: a report never believes a
damaged one.

A run writes metrics.csv a whole row at a time (round 1, 2, 3, ... in order, numbers where numbers belong,
accuracies in [0, 1]), summary.json and scenario.yaml atomically, participation.csv once per device, and
class_accuracy.csv, device_eval.csv and events.csv a row per evaluation or event. A file that is none of
these (cut short, garbled, binary, emptied, edited by hand into rows a run never writes: a round twice, out of
order or missing, a word where a number belongs, an accuracy of 1.3) raises `DamagedRunError`, a
`ScenarioError` naming the file, the line and what is wrong. Only a run still going may end in a line it has
not finished writing (`cut_ok`): that line is not read.
"""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from emulator.errors import ScenarioError

FIX = "restore the file, or leave this run out and run it again"


class NotARunError(ScenarioError):
    """Not something a report can read: no run directory there, a bad option, or a damaged run."""


class DamagedRunError(NotARunError):
    """A file of a run directory that a run does not write so: `file`, what is wrong (`problem`)."""

    def __init__(self, file: str | Path, problem: str):
        self.file, self.problem = Path(file), problem
        super().__init__(f"{file}: {problem}; {FIX}")


# ------------------------------------------------------------------------------- what each column holds
REQUIRED_METRICS = ("round", "kind", "sim_time_s", "round_duration_s", "bytes_down", "bytes_up", "test_acc")
WHOLE = "a whole number >= 0"
SPAN = "a number >= 0"
FRACTION = "empty or a fraction in [0, 1]"
NUMBER = "empty or a number"
COUNTS = ("failed", "selected", "participants", "dropped", "stragglers", "cancelled", "worst_class",
          "devices_never_reported", "attackers_reported", "attackers_accepted", "version", "staleness_max",
          "concurrency_max")
NUMBERS = ("sim_start_s", "server_compute_s", "train_loss", "test_loss", "wall_time_s", "dp_epsilon",
           "dp_epsilon_device_max", "staleness_mean", "concurrency_mean", "wasted_compute_s")
FRACTIONS = ("unseen_share", "label_tv", "label_tv_floor", "attacker_accepted_share", "attacker_population_share",
             "backdoor_success", "q")


def metrics_rule(column: str) -> tuple[str, bool] | None:
    """(what a metrics.csv column holds, whether every row has a value), or None: free (a plugin's column may
    hold words)."""
    if column in ("sim_time_s", "round_duration_s"):
        return SPAN, True
    if column in ("bytes_down", "bytes_up"):
        return WHOLE, True
    if column in COUNTS:
        return WHOLE, False
    if column in FRACTIONS or column.endswith("_acc") or "_acc_" in column:
        return FRACTION, False
    if column in NUMBERS:
        return NUMBER, False
    return None


# ------------------------------------------------------------------------------------------ the readers
def read_metrics_table(path: str | Path, cut_ok: bool = False) -> pd.DataFrame:
    """metrics.csv, checked: every required column, one whole row per round from round 1 on, in order,
    numbers where numbers belong, accuracies and shares in [0, 1], a clock that never runs back."""
    path = Path(path)
    text, table, lines = _csv(path, cut_ok)
    _require(path, table, REQUIRED_METRICS)
    _rounds(path, table["round"], lines, consecutive=True)
    _first(path, lines, table["kind"].str.strip() == "", lambda i: "kind is empty (a run writes the round's kind: "
                                                                     "client, snapshot, async, ...)")
    for column in table:
        rule = metrics_rule(column)
        if rule is not None:
            _column(path, table[column], lines, column, *rule)
        elif column != "kind":
            _mixed(path, table[column], lines, column)
    clock = pd.to_numeric(table["sim_time_s"]).to_numpy()
    back = np.concatenate([[False], np.diff(clock) < 0])
    _first(path, lines, back, lambda i: f"sim_time_s {table['sim_time_s'].iloc[i]} is earlier than the round "
                                        f"before's {table['sim_time_s'].iloc[i - 1]} (a run's clock never runs back)")
    return _frame(text)


def read_participation_table(path: str | Path) -> pd.DataFrame:
    """participation.csv, checked: one row per device (0, 1, 2, ... in order), its counters whole numbers."""
    path = Path(path)
    text, table, lines = _csv(path)
    counters = ("selected", "reported", "dropped", "straggled")
    _require(path, table, ("device",) + counters)
    devices = table["device"]
    numbers = pd.to_numeric(devices.where(devices.str.fullmatch(r"\d+"), "-1")).to_numpy()
    _first(path, lines, numbers != np.arange(len(table)),
           lambda i: f"device {devices.iloc[i][:40]!r} where a run writes device {i} (one row per device, in order)")
    for column in counters + (("cancelled",) if "cancelled" in table else ()):
        _column(path, table[column], lines, column, WHOLE, True)
    return _frame(text)


def read_class_accuracy_table(path: str | Path, cut_ok: bool = False) -> pd.DataFrame:
    """class_accuracy.csv, checked: round, sim_time_s, acc_0 ... acc_(C-1); evaluated rounds in order."""
    path = Path(path)
    text, table, lines = _csv(path, cut_ok)
    header = list(table)
    classes = header[2:]
    if header[:2] != ["round", "sim_time_s"] or classes != [f"acc_{c}" for c in range(len(classes))] or not classes:
        raise DamagedRunError(path, f"line 1: the header is {','.join(header)[:80]!r}; a run writes round, "
                                    "sim_time_s, acc_0, acc_1, ... (one per class)")
    _rounds(path, table["round"], lines, consecutive=False)
    _column(path, table["sim_time_s"], lines, "sim_time_s", SPAN, True)
    for column in classes:
        _column(path, table[column], lines, column, FRACTION, False)
    return _frame(text)


def read_device_eval_table(path: str | Path, cut_ok: bool = False) -> pd.DataFrame:
    """device_eval.csv, checked: round, sim_time_s, device, ...; rounds in order, accuracies in [0, 1]."""
    path = Path(path)
    text, table, lines = _csv(path, cut_ok)
    _require(path, table, ("round", "sim_time_s", "device"))
    _rounds(path, table["round"], lines, consecutive=False, repeats=True)
    _column(path, table["device"], lines, "device", WHOLE, True)
    _column(path, table["sim_time_s"], lines, "sim_time_s", SPAN, True)
    for column in ("accuracy", "samples", "reported"):
        if column in table:
            _column(path, table[column], lines, column, FRACTION if column == "accuracy" else WHOLE, False)
    return _frame(text)


EVENT_HEADER = ["round", "time_s", "device", "event"]


def read_events_table(path: str | Path, cut_ok: bool = False) -> pd.DataFrame:
    """events.csv, checked: round, time_s, device, event; rounds in order, an event a word."""
    path = Path(path)
    text, table, lines = _csv(path, cut_ok)
    if list(table) != EVENT_HEADER:
        raise DamagedRunError(path, f"line 1: the header is {','.join(table)[:80]!r}; a run writes "
                                    f"{','.join(EVENT_HEADER)}")
    _rounds(path, table["round"], lines, consecutive=False, repeats=True)
    _column(path, table["time_s"], lines, "time_s", SPAN, True)
    _column(path, table["device"], lines, "device", WHOLE, True)
    events = table["event"]
    _first(path, lines, ~events.str.fullmatch(r"[A-Za-z_]\w*").to_numpy(dtype=bool),
           lambda i: f"event {events.iloc[i][:40]!r} is not an event name (a run writes words such as report, drop)")
    return _frame(text)


SUMMARY_FIELDS = {"status": str, "error": str, "finished_at": str, "name": str, "rounds": int,
                  "rounds_completed": int, "seed": int}


def read_summary_file(path: str | Path) -> dict:
    """summary.json, checked: a JSON object whose status, rounds, error, ... have the types a run writes."""
    path = Path(path)
    text = _text(path)  # JSON cut short is not JSON
    try:
        value = json.loads(text)
    except ValueError as exc:
        where = f" at line {exc.lineno}, column {exc.colno}" if hasattr(exc, "lineno") else ""
        raise DamagedRunError(path, f"not JSON ({getattr(exc, 'msg', exc)}{where})") from None
    if not isinstance(value, dict):
        raise DamagedRunError(path, f"holds a JSON {_json_kind(value)}, not the object a run writes")
    _typed_fields(path, value, SUMMARY_FIELDS)
    return value


SCENARIO_FIELDS = {"name": str, "seed": int, "rounds": int}


def read_scenario_file(path: str | Path) -> dict:
    """scenario.yaml as a dict (not validated against the schema: a run from an older version reads),
    checked: YAML, a mapping, its name, seed and rounds of the types a run writes."""
    path = Path(path)
    text = _whole(path)
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise DamagedRunError(path, f"not YAML ({getattr(exc, 'problem', None) or exc}{where})") from None
    if not isinstance(value, dict):
        raise DamagedRunError(path, f"holds a YAML {type(value).__name__}, not the mapping a run writes")
    missing = [name for name in SCENARIO_FIELDS if name not in value]
    if missing:
        raise DamagedRunError(path, f"no {', '.join(missing)} (a run writes its whole scenario)")
    _typed_fields(path, value, SCENARIO_FIELDS)
    if value["rounds"] < 1:
        raise DamagedRunError(path, f"rounds: {value['rounds']} (a run has at least one round)")
    return value


# ------------------------------------------------------------------------------------------ the checks
def _text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DamagedRunError(path, f"cannot be read ({exc.strerror or exc})") from None
    if not data.strip():
        raise DamagedRunError(path, "empty (a run never leaves this file empty)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise DamagedRunError(path, f"not text: byte {exc.start} (line {line}) is not UTF-8 (binary data?)") from None
    if "\x00" in text:
        line = text[:text.index("\x00")].count("\n") + 1
        raise DamagedRunError(path, f"not text: a NUL byte at line {line} (binary data?)")
    return text


def _whole(path: Path) -> str:
    """A file a run writes at once, ending in a newline (YAML cut at a line's end may still be YAML: its
    missing keys tell)."""
    text = _text(path)
    if not text.endswith("\n"):
        raise DamagedRunError(path, f"line {text.count(chr(10)) + 1}: cut short (a run ends this file with a "
                                    "newline: it was truncated)")
    return text


def _csv(path: Path, cut_ok: bool = False) -> tuple[str, pd.DataFrame, np.ndarray]:
    """(the text read, its cells as strings, the line each row is on): every row whole, with the header's
    number of fields."""
    text = _text(path)
    if not text.endswith("\n"):
        if cut_ok:  # a run still going: the line it is writing now is not read
            text = text[:text.rfind("\n") + 1]
        else:
            raise DamagedRunError(path, f"line {text.count(chr(10)) + 1}: cut short (the file ends inside a line: "
                                        "it was truncated, or its writer killed)")
    if not text.strip():
        raise DamagedRunError(path, "line 1: no header (a run writes the column names first)")
    header, rows, lines = _fields(path, text)
    if any(not name.strip() for name in header) or len(set(header)) != len(header):
        raise DamagedRunError(path, f"line 1: the header {','.join(header)[:80]!r} has an empty or repeated column "
                                    "name")
    if rows is None:  # no quoted field: each line is a row, and pandas reads the cells
        table = pd.read_csv(io.StringIO(text), dtype=str, keep_default_na=False, index_col=False)
    else:
        table = pd.DataFrame(rows, columns=header, dtype=object).astype("str")
    return text, table, lines


def _fields(path: Path, text: str) -> tuple[list[str], list | None, np.ndarray]:
    """(header, the rows where a field is quoted (else None: pandas reads them), each row's line). A file
    without quotes is checked a line at a time by counting commas; one with quotes by the csv module."""
    header = next(csv.reader([text[:text.index("\n")]]), [])
    if '"' not in text:
        raw = np.frombuffer(text.encode(), dtype=np.uint8)
        ends = np.flatnonzero(raw == 10)
        fields = np.diff(np.concatenate([[0], np.searchsorted(np.flatnonzero(raw == 44), ends)])) + 1
        wrong = np.flatnonzero(fields[1:] != len(header))
        if len(wrong):
            line = int(wrong[0]) + 2
            raise DamagedRunError(path, f"line {line}: {fields[line - 1]} fields, the header has {len(header)} (a row "
                                        "cut short, or two run together)")
        return header, None, np.arange(2, len(ends) + 1)
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows, lines = [], []
    try:
        next(reader)
        start = reader.line_num + 1
        for values in reader:
            if len(values) != len(header):
                raise DamagedRunError(path, f"line {start}: {len(values)} fields, the header has {len(header)} (a "
                                            "row cut short, or two run together)")
            rows.append(values)
            lines.append(start)
            start = reader.line_num + 1
    except csv.Error as exc:
        raise DamagedRunError(path, f"line {reader.line_num}: not CSV ({exc})") from None
    return header, rows, np.asarray(lines, dtype=np.int64)


def _first(path: Path, lines: np.ndarray, bad, problem) -> None:
    """Raise for the first row where `bad` holds: `problem(its position)`, at its line."""
    found = np.flatnonzero(np.asarray(bad, dtype=bool))
    if len(found):
        raise DamagedRunError(path, f"line {lines[found[0]]}: {problem(int(found[0]))}")


def _require(path: Path, table: pd.DataFrame, columns) -> None:
    missing = [c for c in columns if c not in table]
    if missing:
        raise DamagedRunError(path, f"line 1: no {', '.join(missing)} column{'s' if len(missing) > 1 else ''} (the "
                                    f"header is {','.join(table)[:80]!r})")


def _rounds(path: Path, values: pd.Series, lines: np.ndarray, consecutive: bool, repeats: bool = False) -> None:
    """Round numbers as a run writes them: whole numbers from 1; metrics.csv's 1, 2, 3, ... (`consecutive`);
    an evaluation's rounds increasing; a table of devices or events per round never going back (`repeats`)."""
    _first(path, lines, ~values.str.fullmatch(r"0*[1-9]\d*").to_numpy(dtype=bool),
           lambda i: f"round {values.iloc[i][:40]!r} is not a round number (1, 2, 3, ...)")
    rounds = values.astype(np.int64).to_numpy()
    before = np.concatenate([[0], rounds])[:-1]
    if consecutive:
        def problem(i: int) -> str:
            r, previous = int(rounds[i]), int(before[i])
            gap = f"{previous + 1}{f'..{r - 1}' if r > previous + 2 else ''}"
            what = (f"round {r} again" if r == previous else
                    f"round {r} after round {previous}: out of order" if r < previous or previous + 1 in rounds
                    else f"round {r} after round {previous}: round{'s' if r > previous + 2 else ''} {gap} missing")
            return f"{what} (a run writes every round once, 1, 2, 3, ... in order)"
        _first(path, lines, rounds != np.arange(1, len(rounds) + 1), problem)
    going_back = rounds < before if repeats else rounds <= before
    _first(path, lines, going_back, lambda i: f"round {rounds[i]} after round {before[i]} (a run writes the rounds in "
                                              "order" + ("" if repeats else ", each once") + ")")


def _column(path: Path, values: pd.Series, lines: np.ndarray, column: str, kind: str, required: bool) -> None:
    empty = (values == "").to_numpy()
    if required:
        _first(path, lines, empty, lambda i: f"{column} is empty (a run writes {kind} on every row)")
    if kind == WHOLE:
        ok = values.str.fullmatch(r"\d+").to_numpy(dtype=bool)
    else:
        numbers, nan = _numbers(values)
        ok = np.isfinite(numbers) & (numbers >= 0) & ((numbers <= 1) if kind == FRACTION else True)
        if kind == NUMBER:
            ok = ~np.isnan(numbers) | nan
    _first(path, lines, ~(ok | empty), lambda i: f"{column} is {values.iloc[i][:40]!r}, not {kind}")


def _mixed(path: Path, values: pd.Series, lines: np.ndarray, column: str) -> None:
    """A column the report does not read may hold words (an algorithm's phase) or numbers; not both."""
    numbers, nan = _numbers(values)
    number = ~np.isnan(numbers) | nan
    word = ~number & (values != "").to_numpy()
    if word.any() and number.any():
        first = int(np.flatnonzero(number)[0])
        _first(path, lines, word, lambda i: f"{column} is {values.iloc[i][:40]!r}, not a number like the rest of "
                                            f"the column (line {lines[first]})")


def _numbers(values: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(each cell as a float, NaN where it is no number; whether the cell says nan)."""
    numbers = pd.to_numeric(values.where(values != "", "nan"), errors="coerce").to_numpy(dtype=float)
    nan = values.str.strip().str.lower().isin(("nan", "+nan", "-nan")).to_numpy(dtype=bool)
    return numbers, nan


def _frame(text: str) -> pd.DataFrame:
    """The checked text as pandas reads a run's CSV (numbers as numbers, an empty cell NaN)."""
    return pd.read_csv(io.StringIO(text))


def _json_kind(value) -> str:
    return {list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(value), "number")


def _typed_fields(path: Path, value: dict, fields: dict) -> None:
    for name, kind in fields.items():
        found = value.get(name)
        if found is None:
            continue
        if not isinstance(found, kind) or isinstance(found, bool):
            word = "a whole number" if kind is int else "text"
            raise DamagedRunError(path, f"{name}: {str(found)[:40]!r} is not {word}")

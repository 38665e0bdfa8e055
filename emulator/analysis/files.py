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
import math
import re
from pathlib import Path

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
    text, header, rows, lines = _csv(path, cut_ok)
    _require(path, header, REQUIRED_METRICS)
    _rounds(path, rows, lines, header.index("round"), consecutive=True)
    kind = header.index("kind")
    for row, line in zip(rows, lines):
        if not row[kind].strip():
            raise DamagedRunError(path, f"line {line}: kind is empty (a run writes the round's kind: client, "
                                        "snapshot, async, ...)")
    for index, column in enumerate(header):
        rule = metrics_rule(column)
        if rule is not None:
            _column(path, rows, lines, index, column, *rule)
        elif column != "kind":
            _mixed(path, rows, lines, index, column)
    clock = header.index("sim_time_s")
    previous = -math.inf
    for row, line in zip(rows, lines):
        now = float(row[clock])
        if now < previous:
            raise DamagedRunError(path, f"line {line}: sim_time_s {row[clock]} is earlier than the round before's "
                                        f"{previous!r} (a run's clock never runs back)")
        previous = now
    return _frame(text)


def read_participation_table(path: str | Path) -> pd.DataFrame:
    """participation.csv, checked: one row per device (0, 1, 2, ... in order), its counters whole numbers."""
    path = Path(path)
    text, header, rows, lines = _csv(path)
    counters = ("selected", "reported", "dropped", "straggled")
    _require(path, header, ("device",) + counters)
    device = header.index("device")
    for position, (row, line) in enumerate(zip(rows, lines)):
        if row[device] != str(position):
            raise DamagedRunError(path, f"line {line}: device {row[device]!r} where a run writes device {position} "
                                        "(one row per device, in order)")
    for column in counters + (("cancelled",) if "cancelled" in header else ()):
        _column(path, rows, lines, header.index(column), column, WHOLE, True)
    return _frame(text)


def read_class_accuracy_table(path: str | Path, cut_ok: bool = False) -> pd.DataFrame:
    """class_accuracy.csv, checked: round, sim_time_s, acc_0 ... acc_(C-1); evaluated rounds in order."""
    path = Path(path)
    text, header, rows, lines = _csv(path, cut_ok)
    classes = [c for c in header[2:]]
    if header[:2] != ["round", "sim_time_s"] or classes != [f"acc_{c}" for c in range(len(classes))] or not classes:
        raise DamagedRunError(path, f"line 1: the header is {','.join(header)[:80]!r}; a run writes round, "
                                    "sim_time_s, acc_0, acc_1, ... (one per class)")
    _rounds(path, rows, lines, 0, consecutive=False)
    _column(path, rows, lines, 1, "sim_time_s", SPAN, True)
    for index, column in enumerate(classes, start=2):
        _column(path, rows, lines, index, column, FRACTION, False)
    return _frame(text)


def read_device_eval_table(path: str | Path, cut_ok: bool = False) -> pd.DataFrame:
    """device_eval.csv, checked: round, sim_time_s, device, ...; rounds in order, accuracies in [0, 1]."""
    path = Path(path)
    text, header, rows, lines = _csv(path, cut_ok)
    _require(path, header, ("round", "sim_time_s", "device"))
    _rounds(path, rows, lines, header.index("round"), consecutive=False, repeats=True)
    _column(path, rows, lines, header.index("device"), "device", WHOLE, True)
    _column(path, rows, lines, header.index("sim_time_s"), "sim_time_s", SPAN, True)
    for column in ("accuracy", "samples", "reported"):
        if column in header:
            _column(path, rows, lines, header.index(column), column,
                    FRACTION if column == "accuracy" else WHOLE, False)
    return _frame(text)


EVENT_HEADER = ["round", "time_s", "device", "event"]


def read_events_table(path: str | Path, cut_ok: bool = False) -> pd.DataFrame:
    """events.csv, checked: round, time_s, device, event; rounds in order, an event a word."""
    path = Path(path)
    text, header, rows, lines = _csv(path, cut_ok)
    if header != EVENT_HEADER:
        raise DamagedRunError(path, f"line 1: the header is {','.join(header)[:80]!r}; a run writes "
                                    f"{','.join(EVENT_HEADER)}")
    _rounds(path, rows, lines, 0, consecutive=False, repeats=True)
    _column(path, rows, lines, 1, "time_s", SPAN, True)
    _column(path, rows, lines, 2, "device", WHOLE, True)
    for row, line in zip(rows, lines):
        if not row[3].isidentifier():
            raise DamagedRunError(path, f"line {line}: event {row[3][:40]!r} is not an event name (a run writes "
                                        "words such as report, drop)")
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


def _csv(path: Path, cut_ok: bool = False) -> tuple[str, list[str], list[list[str]], list[int]]:
    """(the text read, header, rows, the line each row starts on): every row whole, with the header's number
    of fields."""
    text = _text(path)
    if not text.endswith("\n"):
        if cut_ok:  # a run still going: the line it is writing now is not read
            text = text[:text.rfind("\n") + 1]
        else:
            raise DamagedRunError(path, f"line {text.count(chr(10)) + 1}: cut short (the file ends inside a line: "
                                        "it was truncated, or its writer killed)")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows, lines = [], []
    try:
        header = next(reader, None)
        if not header:
            raise DamagedRunError(path, "line 1: no header (a run writes the column names first)")
        if any(not name.strip() for name in header) or len(set(header)) != len(header):
            raise DamagedRunError(path, f"line 1: the header {','.join(header)[:80]!r} has an empty or repeated "
                                        "column name")
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
    return text, header, rows, lines


def _require(path: Path, header: list[str], columns) -> None:
    missing = [c for c in columns if c not in header]
    if missing:
        raise DamagedRunError(path, f"line 1: no {', '.join(missing)} column{'s' if len(missing) > 1 else ''} (the "
                                    f"header is {','.join(header)[:80]!r})")


def _rounds(path: Path, rows, lines, index: int, consecutive: bool, repeats: bool = False) -> None:
    """Round numbers as a run writes them: whole numbers from 1; metrics.csv's 1, 2, 3, ... (`consecutive`);
    an evaluation's rounds increasing; a table of devices or events per round never going back (`repeats`)."""
    for row, line in zip(rows, lines):
        if not row[index].isdigit() or int(row[index]) < 1:
            raise DamagedRunError(path, f"line {line}: round {row[index][:40]!r} is not a round number (1, 2, 3, ...)")
    previous, later = 0, {int(row[index]) for row in rows}
    for row, line in zip(rows, lines):
        r = int(row[index])
        if consecutive and r != previous + 1:
            gap = f"{previous + 1}{f'..{r - 1}' if r > previous + 2 else ''}"
            problem = (f"round {r} again" if r == previous else
                       f"round {r} after round {previous}: out of order" if r < previous or previous + 1 in later
                       else f"round {r} after round {previous}: round{'s' if r > previous + 2 else ''} {gap} missing")
            raise DamagedRunError(path, f"line {line}: {problem} (a run writes every round once, 1, 2, 3, ... "
                                        "in order)")
        if r < previous or (r == previous and not repeats and not consecutive):
            raise DamagedRunError(path, f"line {line}: round {r} after round {previous} (a run writes the rounds "
                                        "in order, each once)")
        previous = r


_WHOLE = re.compile(r"\d+")


def _column(path: Path, rows, lines, index: int, column: str, kind: str, required: bool) -> None:
    for row, line in zip(rows, lines):
        text = row[index]
        if text == "":
            if required:
                raise DamagedRunError(path, f"line {line}: {column} is empty (a run writes {kind} on every row)")
            continue
        if kind == WHOLE:
            ok = _WHOLE.fullmatch(text) is not None
        else:
            value = _float(text)
            ok = value is not None and (kind == NUMBER or (math.isfinite(value) and value >= 0 and (
                kind != FRACTION or value <= 1)))
        if not ok:
            raise DamagedRunError(path, f"line {line}: {column} is {text[:40]!r}, not {kind}")


def _mixed(path: Path, rows, lines, index: int, column: str) -> None:
    """A column the report does not read may hold words (an algorithm's phase) or numbers; not both."""
    numbers = words = None
    for row, line in zip(rows, lines):
        text = row[index]
        if text == "":
            continue
        if _float(text) is not None:
            numbers = numbers or line
        else:
            words = words or (line, text)
        if numbers and words:
            raise DamagedRunError(path, f"line {words[0]}: {column} is {words[1][:40]!r}, not a number like the "
                                        f"rest of the column (line {numbers})")


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


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

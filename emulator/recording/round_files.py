"""The files that hold one row set per round (metrics, events, class accuracies, device scores): which rows
are whole, and taking them back to a round.

A rewind keeps the rounds up to a checkpoint's and drops the later ones, which are run again. Until they
are on record again the files as they were stay aside (`keep_aside`), so that a run that stops first (a
failed resume, a server that dies again) puts them back (`put_back`): a recorded round is never lost.
"""
from __future__ import annotations

import csv
import os
from pathlib import Path

from emulator.recording.atomic import atomic_file

EVENT_COLUMNS = ("round", "time_s", "device", "event")
CLASS_ACCURACY_FILE = "class_accuracy.csv"
DEVICE_EVAL_FILE = "device_eval.csv"
ROUND_FILES = ("metrics.csv", "events.csv", CLASS_ACCURACY_FILE, DEVICE_EVAL_FILE)  # one row set per round
ASIDE = ".before-rewind"  # where a rewind keeps them until the rounds it dropped are on record again


def class_accuracy_columns(classes: int) -> list[str]:
    return ["round", "sim_time_s"] + [f"acc_{c}" for c in range(classes)]


def _number(text) -> bool:
    if text is None:
        return False
    if text == "":
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


def metrics_row_ok(row: dict, expected_round: int) -> bool:
    """A whole metrics row: every column present, the next round, numbers where numbers belong."""
    if row.get("round") != str(expected_round) or row.get("kind", "x") == "":
        return False
    return all(_number(value) for key, value in row.items() if key not in ("kind",) and not _is_text(value))


def _is_text(value: str) -> bool:
    """Algorithm columns may hold words (e.g. a phase name); only a bare fragment is damage."""
    return value[:1].isalpha() and value not in ("nan", "inf", "-inf")


def event_row_ok(row: dict, _position: int) -> bool:
    return (row["round"].isdigit() and _number(row["time_s"]) and row["device"].isdigit()
            and row["event"].isidentifier())


def class_row_ok(row: dict, _position: int) -> bool:
    return row["round"].isdigit() and row["sim_time_s"] != "" and all(_number(v) for v in row.values())


def device_row_ok(row: dict, _position: int) -> bool:
    return row["round"].isdigit() and row["device"].isdigit() and all(
        _number(v) or _is_text(v) for v in row.values())


def valid_rows(path: Path, row_ok) -> tuple[list[str], list[dict]]:
    """The header and the rows of a CSV file up to the first damaged one (and a line without its
    newline is damaged: the process stopped before finishing it)."""
    with open(path, newline="") as handle:
        text = handle.read()
    lines = text.splitlines(keepends=True)
    if not lines or not lines[0].endswith("\n"):
        return [], []
    columns = next(csv.reader([lines[0]]))
    rows: list[dict] = []
    for line in lines[1:]:
        values = next(csv.reader([line]), []) if line.endswith("\n") else []
        if len(values) != len(columns) or not row_ok(dict(zip(columns, values)), len(rows) + 1):
            break
        rows.append(dict(zip(columns, values)))
    return columns, rows


def read_metrics(path: str | Path) -> list[dict]:
    """The rows of a run's metrics.csv as dicts of strings (empty string where not evaluated)."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.csv"
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def rewind_files(path: Path, round_done: int) -> list[dict]:
    """Keep the metrics (and events, class accuracies, device scores) of rounds up to `round_done`, the
    checkpoint's. Rows are kept only up to the first damaged one (a line cut short by a full disk or a
    kill, whatever the fragment). Returns the kept metrics rows."""
    kept: list[dict] = []
    metrics = path / "metrics.csv"
    if metrics.exists():
        columns, rows = valid_rows(metrics, metrics_row_ok)
        kept = [r for r in rows if int(r["round"]) <= round_done]
        rewrite_csv(metrics, kept, columns)
    for name, row_ok, default in (("events.csv", event_row_ok, list(EVENT_COLUMNS)),
                                  (CLASS_ACCURACY_FILE, class_row_ok, []), (DEVICE_EVAL_FILE, device_row_ok, [])):
        if (path / name).exists():
            columns, rows = valid_rows(path / name, row_ok)
            rewrite_csv(path / name, [r for r in rows if int(r["round"]) <= round_done], columns or default)
    return kept


def rewrite_csv(path: Path, rows: list[dict], columns: list[str]) -> None:
    if not columns:  # nothing valid was ever written: start the file afresh
        path.unlink()
        return
    with atomic_file(path) as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)


def keep_aside(path: Path) -> None:
    aside = path / ASIDE
    aside.mkdir(exist_ok=True)
    for name in ROUND_FILES:
        if (path / name).exists() and not (aside / name).exists():
            with atomic_file(aside / name, "wb") as handle:  # byte for byte
                handle.write((path / name).read_bytes())


def put_back(path: Path) -> None:
    aside = path / ASIDE
    if not aside.is_dir():
        return
    for name in ROUND_FILES:
        if (aside / name).exists():
            os.replace(aside / name, path / name)
    drop_aside(path)


def drop_aside(path: Path) -> None:
    aside = path / ASIDE
    if aside.is_dir():
        for name in ROUND_FILES:
            (aside / name).unlink(missing_ok=True)
        aside.rmdir()

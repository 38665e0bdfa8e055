"""The run directory: the resolved scenario, one metrics row per round, and a summary.

Every row is flushed to disk as its round ends, and files that are rewritten (the summary, the
scenario) are replaced atomically, so an interrupted run keeps everything it finished. One process at
a time writes a run directory (an advisory lock), and a finished run's summary is never replaced by one
that holds less.
"""
from __future__ import annotations

import csv
import errno
import json
import os
import time
from pathlib import Path

from emulator.errors import MachineError
from emulator.recording.atomic import atomic_file, write_atomic  # noqa: F401  (atomic_file: re-exported)
from emulator.recording.round_files import (CLASS_ACCURACY_FILE, DEVICE_EVAL_FILE, EVENT_COLUMNS,  # noqa: F401
                                            class_accuracy_columns, device_row_ok, metrics_row_ok, read_metrics, rewind_files, rewrite_csv,
                                            valid_rows)
from emulator.scenario import Scenario, ScenarioError, dump_scenario


def default_run_dir(scenario: Scenario) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(scenario.output.dir) / f"{scenario.name}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
SUMMARY_ROOM = 16 * 1024  # a summary is 1-3 KB; its atomic replacement needs room for a second copy
PARTICIPATION_CHUNK = 5_000  # participation.csv rows turned into text at once (5,000: ~6 MB of strings)


class OutputError(MachineError):
    """The run directory cannot be written (disk full, permissions): the run stops cleanly."""


def check_writable(out: str | Path | None, default_parent: str | Path) -> None:
    """Refuse, before Ray starts, an output path that is a file or cannot be written."""
    target = Path(out) if out is not None else Path(default_parent)
    field = "--out" if out is not None else "output.dir"
    if target.exists() and not target.is_dir():
        raise ScenarioError(f"{field} {target}: is a file, not a directory; give a directory path")
    existing = target
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise ScenarioError(f"{field} {target}: {existing} is a file, not a directory; give a directory path")
    probe = existing / f".emulator-write-test-{os.getpid()}"
    try:
        probe.write_text("")
    except OSError as exc:
        raise ScenarioError(f"{field} {target}: cannot write in {existing} ({exc.strerror}); choose a "
                            "directory you can write to") from None
    finally:
        try:
            probe.unlink(missing_ok=True)
        except OSError:
            pass


class RunDirectory:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._metrics = None
        self._writer = None
        self._lock = None

    # ------------------------------------------------------------------------------------------ lock
    def lock(self) -> "RunDirectory":
        """Hold the directory for this process; a second process writing it is refused (exit 2)."""
        import fcntl


        handle = open(self.path / ".lock", "a+")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.seek(0)
            owner = handle.read().strip() or "another process"
            handle.close()
            raise ScenarioError(f"{self.path}: another emulator process (pid {owner}) is writing this run "
                                "directory; wait for it to finish or stop it, then --resume") from None
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._lock = handle
        return self

    def unlock(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing releases the flock
            self._lock = None

    @staticmethod
    def check_free(scenario: Scenario, out: str | Path | None) -> None:
        """Refuse, before anything starts, a directory that is not new or empty: a run directory is the
        emulator's alone, so nothing in it was written by anyone else and nothing of theirs is overwritten
        (a user's hand-written scenario.yaml, an earlier run)."""
        if out is None or not Path(out).is_dir():
            return
        if (Path(out) / "metrics.csv").exists():
            raise ScenarioError(f"--out {out}: this directory already holds a run (metrics.csv); choose another "
                                "directory, leave --out unset for a fresh one, or continue it with --resume")
        held = sorted(entry.name for entry in Path(out).iterdir() if entry.name != ".lock")
        if held:
            shown = ", ".join(held[:3]) + (f" and {len(held) - 3} more" if len(held) > 3 else "")
            raise ScenarioError(f"--out {out}: this directory already holds files ({shown}); a run writes only into "
                                f"a new or empty directory, so that nothing of yours is overwritten: choose e.g. "
                                f"--out {Path(out) / 'run'}, or leave --out unset for a fresh one")

    @classmethod
    def create(cls, scenario: Scenario, out: str | Path | None = None, header: str = "") -> "RunDirectory":
        cls.check_free(scenario, out)
        path = Path(out) if out else default_run_dir(scenario)
        path.mkdir(parents=True, exist_ok=True)
        directory = cls(path).lock()
        cls.check_free(scenario, out)  # again, under the lock: a second process may have started here
        directory.write_scenario(scenario, header)
        return directory

    def write_scenario(self, scenario: Scenario, header: str = "") -> None:
        """scenario.yaml, after `header` (comment lines, e.g. where in-memory data came from)."""
        write_atomic(self.path / "scenario.yaml", header + dump_scenario(scenario))

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.csv"

    def whole_metrics(self) -> tuple[list[str], list[dict]]:
        """metrics.csv's header and its rows up to the first damaged one (none if there is no file)."""
        return valid_rows(self.metrics_path, metrics_row_ok) if self.metrics_path.exists() else ([], [])

    def open_metrics(self, columns: tuple[str, ...]) -> None:
        """Open metrics.csv for appending rows of `columns`. A file on record keeps its columns, in its order
        (a column no longer written stays, empty from here); columns it lacks are added after them."""
        header, rows = self.whole_metrics()
        columns = header + [c for c in columns if c not in header] if header else list(columns)
        if header and header != columns:
            rewrite_csv(self.metrics_path, [{c: r.get(c, "") for c in columns} for r in rows], columns)
        self.keep_room_for_the_summary()
        self._metrics = open(self.metrics_path, "a", newline="")
        self._writer = csv.DictWriter(self._metrics, fieldnames=list(columns), extrasaction="raise")
        if self._metrics.tell() == 0:
            self._writer.writeheader()
            self._metrics.flush()

    def append(self, row: dict) -> None:
        self._writer.writerow({k: _cell(v) for k, v in row.items()})
        self._metrics.flush()
        os.fsync(self._metrics.fileno())

    def append_events(self, events: list[tuple]) -> None:
        """Device events of one round: round, time_s, device, event (selected, checked_in, reported, ...)."""
        path = self.path / "events.csv"
        new = not path.exists()
        with open(path, "a", newline="") as handle:
            writer = csv.writer(handle)
            if new:
                writer.writerow(EVENT_COLUMNS)
            writer.writerows(events)
            handle.flush()
            os.fsync(handle.fileno())

    def append_class_accuracy(self, round_index: int, sim_time_s: float, accuracy: list) -> None:
        """One evaluation's per-class test accuracy (None for a class without test samples): round,
        sim_time_s, acc_0 ... acc_{C-1}. On disk when this returns, as metrics rows are."""
        path = self.path / CLASS_ACCURACY_FILE
        new = not path.exists()
        with open(path, "a", newline="") as handle:
            writer = csv.writer(handle)
            if new:
                writer.writerow(class_accuracy_columns(len(accuracy)))
            writer.writerow([round_index, _cell(float(sim_time_s))] + [_cell(a) for a in accuracy])
            handle.flush()
            os.fsync(handle.fileno())

    def append_device_eval(self, round_index: int, sim_time_s: float, table: dict) -> None:
        """One evaluation on the devices' own test splits: a row per device that has one (round, sim_time_s,
        then the table's columns: device, samples, accuracy, loss, reported, ..., its groups). Fsynced. A
        file written by an older version with other columns (a run resumed after an upgrade) is rewritten
        with these first, its rows blank where a column is new, so no row is read as damaged later."""
        path = self.path / DEVICE_EVAL_FILE
        names = list(table)
        header = ["round", "sim_time_s", *names]
        if path.exists():
            with open(path, newline="") as handle:
                found = next(csv.reader([handle.readline()]), [])
            if found != header:
                _, rows = valid_rows(path, device_row_ok)
                rewrite_csv(path, [{c: r.get(c, "") for c in header} for r in rows], header)
        new = not path.exists()
        columns = [table[name].tolist() for name in names]
        stamp = _cell(float(sim_time_s))
        with open(path, "a", newline="") as handle:
            writer = csv.writer(handle)
            if new:
                writer.writerow(header)
            writer.writerows([round_index, stamp, *(_cell(v) for v in values)] for values in zip(*columns))
            handle.flush()
            os.fsync(handle.fileno())

    def write_participation(self, columns: dict) -> None:
        """One row per device: its counters (selected, reported, dropped, straggled) and profile.

        Written with the csv module (no pandas import), so a stopping run writes it in milliseconds, and
        PARTICIPATION_CHUNK rows at a time: at 10^6 devices, text for all rows at once took ~900 MB."""
        import numpy as np

        names = list(columns)
        arrays = [np.asarray(columns[name]) for name in names]
        rows = len(arrays[0]) if arrays else 0
        with atomic_file(self.path / "participation.csv") as handle:
            writer = csv.writer(handle, lineterminator="\n")
            writer.writerow(names)
            for start in range(0, rows, PARTICIPATION_CHUNK):
                chunk = [values[start:start + PARTICIPATION_CHUNK] for values in arrays]
                cells = [[f"{v:.6g}" for v in part.tolist()] if part.dtype.kind == "f" else
                         [str(v) for v in part.tolist()] for part in chunk]
                writer.writerows(zip(*cells))

    # ------------------------------------------------------------------------------------- rewinding
    def rewind(self, round_done: int) -> list[dict]:
        """Every round file taken back to round `round_done` (round_files.py); the kept metrics rows."""
        self.close()  # the metrics file is replaced: reopen it afterwards
        return rewind_files(self.path, round_done)

    def read_summary(self) -> dict:
        try:
            summary = json.loads((self.path / "summary.json").read_text())
        except (OSError, ValueError):
            return {}
        return summary if isinstance(summary, dict) else {}

    def write_summary(self, summary: dict) -> None:
        """Replace summary.json atomically, never with one that claims fewer rounds than a finished run's
        summary held (a running summary claims none: the rounds are in metrics.csv)."""
        old = self.read_summary()
        if old.get("status") == "completed" and "rounds_completed" in summary and int(
                summary["rounds_completed"] or 0) < int(old.get("rounds_completed") or 0):
            raise OutputError(f"{self.path}/summary.json: refusing to replace a finished run's summary "
                              f"({old.get('rounds_completed')} rounds) with one of {summary.get('rounds_completed')}")
        text = json.dumps(summary, indent=2, sort_keys=False) + "\n"
        try:
            write_atomic(self.path / "summary.json", text)
        except OSError as exc:
            if exc.errno not in NO_SPACE or not self._room.exists():
                raise
            self._room.unlink()  # the disk is full: the room kept for this moment is the summary's now
            write_atomic(self.path / "summary.json", text)

    # ------------------------------------------------------------------------------------------ room
    @property
    def _room(self) -> Path:
        return self.path / ".summary-room"

    def keep_room_for_the_summary(self) -> None:
        """Hold SUMMARY_ROOM bytes of real blocks while the run writes, given back to the final summary if
        the disk fills: a run stopped by a full disk still ends with a summary that says so."""
        try:
            with open(self._room, "wb") as handle:
                handle.write(bytes(SUMMARY_ROOM))
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            self._room.unlink(missing_ok=True)  # no room even for this: the run will say the disk is full
            if exc.errno not in NO_SPACE:
                raise

    def close(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None
        self._room.unlink(missing_ok=True)


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return value



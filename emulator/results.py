"""The run directory: the resolved scenario, one metrics row per round, and a summary.

Every row is flushed to disk as its round ends, and files that are rewritten (the summary) are replaced
atomically, so an interrupted run keeps everything it finished.
"""
from __future__ import annotations

import csv
import json
import os
import time
from pathlib import Path

from emulator.scenario import Scenario, ScenarioError, dump_scenario


def default_run_dir(scenario: Scenario) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = Path(scenario.output.dir) / f"{scenario.name}-{stamp}"
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class RunDirectory:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._metrics = None
        self._writer = None

    @staticmethod
    def check_free(scenario: Scenario, out: str | Path | None) -> None:
        """Refuse, before anything starts, a directory that already holds a run: nothing is overwritten."""
        if out is not None and (Path(out) / "metrics.csv").exists():
            raise ScenarioError(f"--out {out}: this directory already holds a run (metrics.csv); choose another "
                                "directory, leave --out unset for a fresh one, or continue it with --resume")

    @classmethod
    def create(cls, scenario: Scenario, out: str | Path | None = None) -> "RunDirectory":
        cls.check_free(scenario, out)
        path = Path(out) if out else default_run_dir(scenario)
        path.mkdir(parents=True, exist_ok=True)
        directory = cls(path)
        write_atomic(path / "scenario.yaml", dump_scenario(scenario))
        return directory

    @property
    def metrics_path(self) -> Path:
        return self.path / "metrics.csv"

    def open_metrics(self, columns: tuple[str, ...]) -> None:
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
                writer.writerow(["round", "time_s", "device", "event"])
            writer.writerows(events)

    def write_participation(self, columns: dict) -> None:
        """One row per device: its counters (selected, reported, dropped, straggled) and profile."""
        import pandas as pd

        tmp = self.path / ".participation.csv.tmp"
        pd.DataFrame(columns).to_csv(tmp, index=False, float_format="%.6g")
        os.replace(tmp, self.path / "participation.csv")

    # --------------------------------------------------------------------------------- checkpoints
    @property
    def checkpoint_path(self) -> Path:
        return self.path / "checkpoint.pkl"

    def write_checkpoint(self, state: dict) -> None:
        """The server's state after round state['round'], replaced atomically (a crash mid-write keeps
        the previous checkpoint)."""
        import pickle

        tmp = self.path / ".checkpoint.pkl.tmp"
        with open(tmp, "wb") as handle:
            pickle.dump(state, handle, protocol=pickle.HIGHEST_PROTOCOL)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.checkpoint_path)

    def load_checkpoint(self) -> dict | None:
        import pickle

        if not self.checkpoint_path.exists():
            return None
        with open(self.checkpoint_path, "rb") as handle:
            return pickle.load(handle)

    def rewind(self, round_done: int) -> list[dict]:
        """Keep the metrics (and events) of rounds up to `round_done`, the checkpoint's: later rounds are
        run again, with the same results. Returns the kept metrics rows."""
        rows = read_metrics(self.path) if self.metrics_path.exists() else []
        kept = [r for r in rows if int(r["round"]) <= round_done]
        if self.metrics_path.exists():
            self._rewrite(self.metrics_path, kept, list(rows[0].keys()) if rows else [])
        events = self.path / "events.csv"
        if events.exists():
            with open(events, newline="") as handle:
                event_rows = [r for r in csv.DictReader(handle) if int(r["round"]) <= round_done]
            self._rewrite(events, event_rows, ["round", "time_s", "device", "event"])
        return kept

    @staticmethod
    def _rewrite(path: Path, rows: list[dict], columns: list[str]) -> None:
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            writer.writerows(rows)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)

    def write_summary(self, summary: dict) -> None:
        write_atomic(self.path / "summary.json", json.dumps(summary, indent=2, sort_keys=False) + "\n")

    def close(self) -> None:
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return value


def read_metrics(path: str | Path) -> list[dict]:
    """The rows of a run's metrics.csv as dicts of strings (empty string where not evaluated)."""
    path = Path(path)
    if path.is_dir():
        path = path / "metrics.csv"
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))

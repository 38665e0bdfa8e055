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

    @classmethod
    def create(cls, scenario: Scenario, out: str | Path | None = None) -> "RunDirectory":
        path = Path(out) if out else default_run_dir(scenario)
        if (path / "metrics.csv").exists():
            raise ScenarioError(f"--out {path}: this directory already holds a run (metrics.csv); choose another "
                                "directory or leave --out unset for a fresh one")
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

"""What the Python API returns: `Run`, a run directory read as it is now, and `Sweep`, the runs of a sweep.

Every file is read through emulator/analysis/files.py, checked as a run writes it: a damaged one raises
`DamagedRunError` (a ScenarioError) naming the file, the line and what is wrong, never a table built from
what is left of it. A file a run has not written (yet) is None (or an empty table, or {})."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Mapping

from emulator.scenario import Scenario, ScenarioError


class Run:
    """A run directory, finished, interrupted or still going: what `run`, `resume` and `load` return.

    Every property reads the directory as it is now (cached while the file is unchanged)."""

    def __init__(self, path: str | os.PathLike, grid: Mapping[str, Any] | None = None):
        self.path = Path(path)
        self.grid = dict(grid or {})  # in a sweep: this run's grid values
        self._cache: dict[str, tuple] = {}

    def __fspath__(self) -> str:
        return str(self.path)

    def __repr__(self) -> str:
        try:
            summary = self.summary
        except ScenarioError as exc:  # a damaged summary.json: said, not shown as a run
            return f"Run({str(self.path)!r}: damaged: {getattr(exc, 'problem', exc)})"
        parts = [summary.get("status", "no summary")]
        if summary.get("rounds_completed") is not None:
            parts.append(f"{summary['rounds_completed']}/{summary.get('rounds', '?')} rounds")
        if summary.get("final_test_acc") is not None:
            parts.append(f"test_acc {summary['final_test_acc']:.4f}")
        return f"Run({str(self.path)!r}: {', '.join(parts)})"

    @property
    def name(self) -> str:
        return self.summary.get("name") or self.path.name

    @property
    def summary(self) -> dict:
        """summary.json: status, rounds, final and best test accuracy, simulated time, bytes, ... ({} if none)."""
        from emulator.analysis.files import read_summary_file

        value = self._read("summary.json", read_summary_file)
        summary = dict(value) if value is not None else {}
        if summary.get("status") == "running" and "rounds_completed" not in summary:
            summary.update(self._figures_so_far())  # a run going (or killed): its rounds are in metrics.csv
        return summary

    def _figures_so_far(self) -> dict:
        from emulator.recording.recorder import progress
        from emulator.recording.rundir import RunDirectory

        try:
            rows = RunDirectory(self.path).whole_metrics()[1]
        except (OSError, ValueError):
            rows = []
        return progress(rows) if rows else {"rounds_completed": 0}

    @property
    def status(self) -> str | None:
        """completed, interrupted, failed or running (None without a summary)."""
        return self.summary.get("status")

    @property
    def scenario(self) -> Scenario:
        """The resolved scenario the run used (scenario.yaml)."""
        from emulator.parts import load_scenario

        found = self.summary.get("plugin_paths") or []  # where its plugins were found when it ran
        scenario = load_scenario(self.path / "scenario.yaml", search=[Path(p) for p in found])
        _check_recorded(self.path / "scenario.yaml", scenario, self.summary)
        return scenario

    @property
    def metrics(self):
        """metrics.csv as a pandas DataFrame: one row per round (test_acc is NaN where not evaluated)."""
        import pandas as pd

        frame = self._table("metrics.csv")
        return pd.DataFrame() if frame is None else frame.copy()

    def evaluated(self):
        """The rounds with a test evaluation."""
        metrics = self.metrics
        return metrics.dropna(subset=["test_acc"]) if "test_acc" in metrics else metrics

    @property
    def participation(self):
        """participation.csv: one row per device (selected, reported, dropped, ... and its profile), or None."""
        return self._table("participation.csv")

    @property
    def class_accuracy(self):
        """class_accuracy.csv: per-class test accuracy at each evaluation, or None."""
        return self._table("class_accuracy.csv")

    @property
    def events(self):
        """events.csv (with system.events: true), or None."""
        return self._table("events.csv")

    @property
    def data(self) -> dict | None:
        """Where an in-memory run's data came from (data.json: form, fingerprint, split), else None."""
        from emulator.data.custom import memory_record

        return memory_record(self.path)

    def plot(self, x: str = "sim_time_s", y: str = "test_acc", ax=None, **kwargs):
        """y against x over the evaluated rounds (matplotlib); returns the axes."""
        return self.evaluated().plot(x=x, y=y, ax=ax, label=kwargs.pop("label", self.name), **kwargs)

    def resume(self, **kwargs) -> "Run":
        """emulator.resume(self.path, **kwargs)."""
        from emulator.api import resume

        return resume(self.path, **kwargs)

    def _table(self, name: str):
        """A CSV file of the run, checked (a copy: the caller may change it), or None when there is none. A run
        still going may end in a line it is writing: that line is not read."""
        from emulator.analysis import files

        readers = {"metrics.csv": files.read_metrics_table, "participation.csv": files.read_participation_table,
                   "class_accuracy.csv": files.read_class_accuracy_table, "events.csv": files.read_events_table}
        reader = readers[name]
        if name == "metrics.csv" and not (self.path / name).exists() and (self.path / "summary.json").exists():
            raise files.DamagedRunError(self.path / name, "missing, beside the run's summary.json (a run writes "
                                                          "both when it starts)")
        if name != "participation.csv":  # written once at the end; the others a row at a time
            going = self.summary.get("status") in (None, "running")
            reader = (lambda path, read=reader: read(path, cut_ok=going))
        frame = self._read(name, reader)
        return None if frame is None else frame.copy()

    def _read(self, name: str, reader: Callable[[Path], Any]):
        path = self.path / name
        try:
            stat = path.stat()
        except OSError:
            return None
        key = (stat.st_mtime_ns, stat.st_size)
        cached = self._cache.get(name)
        if cached is None or cached[0] != key:
            cached = self._cache[name] = (key, reader(path))
        return cached[1]


class Sweep:
    """The runs of `emulator.sweep`, in grid order (seeds innermost), with the sweep's report."""

    def __init__(self, path: Path, runs: list[Run], failed: dict[str, str], report: Path | None):
        self.path, self.runs, self.failed, self.report = Path(path), runs, failed, report

    def __iter__(self):
        return iter(self.runs)

    def __len__(self) -> int:
        return len(self.runs)

    def __getitem__(self, key: int | str) -> Run:
        if isinstance(key, str):
            for run_ in self.runs:
                if run_.path.name == key:
                    return run_
            raise KeyError(key)
        return self.runs[key]

    def __repr__(self) -> str:
        failed = f", {len(self.failed)} failed" if self.failed else ""
        return f"Sweep({str(self.path)!r}: {len(self.runs)} runs{failed})"

    def table(self):
        """One row per run: its name, grid values, seed, status and headline numbers (a DataFrame); a run
        whose summary.json is damaged has status `damaged: ...` and no numbers."""
        import pandas as pd

        rows = []
        for run_ in self.runs:
            try:
                summary = run_.summary
            except ScenarioError as exc:
                summary = {"status": f"damaged: {getattr(exc, 'problem', exc)}"}
            rows.append({"name": run_.path.name, **run_.grid, "seed": summary.get("seed"),
                         "status": summary.get("status"), "rounds_completed": summary.get("rounds_completed"),
                         "final_test_acc": summary.get("final_test_acc"), "best_test_acc": summary.get("best_test_acc"),
                         "sim_time_s": summary.get("sim_time_s"), "path": str(run_.path)})
        return pd.DataFrame(rows)


def _check_recorded(path: Path, scenario: Scenario, summary: dict) -> None:
    """Refuse a scenario.yaml that no longer describes the run summary.json recorded at its start (a file
    cut short can still parse, its lost sections taking their defaults). Trace files enter the record by
    their content, so a trace moved or gone since is no reason to refuse the scenario."""
    from emulator.driver.resume import RESULTS_FIELDS
    from emulator.recording import checkpoint

    recorded = summary.get(RESULTS_FIELDS)
    if not isinstance(recorded, dict):
        return  # a run from before the record was kept
    changed = [key for key in checkpoint.differing_fields(recorded, checkpoint.results_fields(scenario))
               if not key.endswith(".file")]
    if changed:
        raise ScenarioError(f"{path}: does not describe the run summary.json recorded ({', '.join(changed[:6])} "
                            "differ): it was edited or cut short; restore it from a copy")

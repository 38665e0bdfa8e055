"""A live progress bar for a run: round, latest test accuracy, simulated time."""
from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class RunProgress:
    def __init__(self, scenario, enabled: bool = True):
        self.scenario = scenario
        self.enabled = enabled
        self._progress = None
        self._task = None
        self._acc = None

    def __enter__(self) -> "RunProgress":
        if self.enabled:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("acc {task.fields[acc]}"), TextColumn("sim {task.fields[sim]}"),
                TimeElapsedColumn(), console=Console(stderr=True), transient=False)
            self._progress.__enter__()
            self._task = self._progress.add_task(self.scenario.name, total=self.scenario.rounds, acc="-", sim="0s")
        return self

    def update(self, row: dict) -> None:
        if row.get("test_acc") is not None:
            self._acc = row["test_acc"]
        if self._progress is not None:
            self._progress.update(self._task, completed=int(row["round"]),
                                  acc="-" if self._acc is None else f"{self._acc:.3f}",
                                  sim=format_duration(row["sim_time_s"]))

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)


def format_duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"

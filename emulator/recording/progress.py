"""A live progress bar for a run: round, latest test accuracy, simulated time.

In a terminal, a rich bar on stderr; in a Jupyter notebook, rich's notebook display when ipywidgets is
installed, else plain text lines (`LineProgress`), which every notebook front end shows."""
from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class RunProgress:
    def __init__(self, scenario, enabled: bool = True, console: Console | None = None):
        self.scenario = scenario
        self.enabled = enabled
        self.console = console
        self._progress = None
        self._task = None
        self._acc = None

    def __enter__(self) -> "RunProgress":
        if self.enabled:
            # in process (runtime.backend: inline) a plugin's breakpoint() owns the terminal mid-round: the bar
            # is drawn only after each round and leaves stdout alone, so pdb's prompt is never drawn over
            live = getattr(self.scenario.runtime, "backend", "ray") != "inline"
            self._progress = Progress(
                TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("acc {task.fields[acc]}"), TextColumn("sim {task.fields[sim]}"),
                TimeElapsedColumn(), console=self.console or Console(stderr=True), transient=False,
                auto_refresh=live, redirect_stdout=live, redirect_stderr=live)
            self._progress.__enter__()
            self._task = self._progress.add_task(self.scenario.name, total=self.scenario.rounds, acc="-", sim="0s")
        return self

    def update(self, row: dict) -> None:
        if row.get("test_acc") is not None:
            self._acc = row["test_acc"]
        if self._progress is not None:
            self._progress.update(self._task, completed=int(row["round"]),
                                  acc="-" if self._acc is None else f"{self._acc:.3f}",
                                  sim=format_duration(row["sim_time_s"]), refresh=True)

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)


class LineProgress:
    """Progress as plain text lines: at most one every `every_s` seconds, and the last round's."""

    def __init__(self, scenario, stream=None, every_s: float = 2.0):
        self.scenario, self.stream, self.every_s = scenario, stream, every_s
        self._acc = None
        self._last_line = 0.0
        self._started = 0.0
        self._pending = None

    def __enter__(self) -> "LineProgress":
        self._started = time.monotonic()
        return self

    def update(self, row: dict) -> None:
        if row.get("test_acc") is not None:
            self._acc = row["test_acc"]
        self._pending = row
        now = time.monotonic()
        if now - self._last_line >= self.every_s or int(row["round"]) >= self.scenario.rounds:
            self._write(row, now)

    def _write(self, row: dict, now: float) -> None:
        self._last_line, self._pending = now, None
        acc = "-" if self._acc is None else f"{self._acc:.3f}"
        print(f"{self.scenario.name}: round {int(row['round'])}/{self.scenario.rounds}, acc {acc}, sim "
              f"{format_duration(row['sim_time_s'])}, wall {now - self._started:.0f} s",
              file=self.stream or sys.stdout, flush=True)

    def __exit__(self, *exc) -> None:
        if self._pending is not None:  # stopped between lines: say where
            self._write(self._pending, time.monotonic())


def in_notebook() -> bool:
    """True inside a Jupyter (IPython kernel) session; never imports IPython itself."""
    ipython = sys.modules.get("IPython")
    shell = getattr(ipython, "get_ipython", lambda: None)() if ipython is not None else None
    return shell is not None and (type(shell).__name__ == "ZMQInteractiveShell" or hasattr(shell, "kernel"))


def progress_for(scenario, show: bool | str | None):
    """The progress display for a run started from Python: None (auto: a notebook, or stderr a
    terminal), True, False, or "text" (plain lines)."""
    if show is None:
        show = in_notebook() or sys.stderr.isatty()
    if not show:
        return RunProgress(scenario, enabled=False)
    if show == "text":
        return LineProgress(scenario)
    if in_notebook():
        try:
            import ipywidgets  # noqa: F401  rich's live display in a notebook needs it
        except ImportError:
            return LineProgress(scenario)
        return RunProgress(scenario, console=Console())
    return RunProgress(scenario)


def format_duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.1f}min"
    return f"{seconds / 3600:.1f}h"

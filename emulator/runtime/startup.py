"""Where a run's start-up goes: each phase's start and end, from the process's own start to the first round.

`emulator run --profile-startup` prints the table; benchmarks/quickstart.py reads it. Phases may overlap
(the data loads while Ray and the actor processes start), so each has its own start and end, measured
from the moment the operating system started the process (interpreter start-up and imports included).
"""
from __future__ import annotations

import time
from contextlib import contextmanager


def process_start() -> float:
    """When this process started (epoch seconds), as the kernel records it."""
    try:
        import psutil  # a dependency of Ray's

        return psutil.Process().create_time()
    except Exception:  # no psutil, or a platform without it: measure from the first import of this module
        return _IMPORTED


_IMPORTED = time.time()


class StartupProfile:
    """Phases as (name, start, end) in epoch seconds, in the order they began."""

    def __init__(self, origin: float | None = None):
        self.origin = process_start() if origin is None else origin
        self.phases: list[list] = []

    @contextmanager
    def phase(self, name: str):
        entry = [name, time.time(), None]
        self.phases.append(entry)
        try:
            yield
        finally:
            entry[2] = time.time()

    def span(self, name: str, start: float, end: float | None = None) -> None:
        """A phase measured elsewhere (e.g. from the process's start to now)."""
        self.phases.append([name, start, time.time() if end is None else end])

    def as_rows(self) -> list[dict]:
        return [{"phase": name, "start_s": round(start - self.origin, 3), "end_s": round(end - self.origin, 3),
                 "seconds": round(end - start, 3)} for name, start, end in self.phases if end is not None]

    def table(self) -> str:
        rows = self.as_rows()
        width = max([len(r["phase"]) for r in rows] + [5])
        lines = [f"{'phase':<{width}}  {'from':>7}  {'to':>7}  {'seconds':>7}"]
        lines += [f"{r['phase']:<{width}}  {r['start_s']:7.2f}  {r['end_s']:7.2f}  {r['seconds']:7.2f}" for r in rows]
        return "\n".join(lines)

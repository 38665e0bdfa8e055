"""One scratch directory per test session, shared by its xdist workers and removed when the session ends.

The stored federations the tests build (population_100k's alone is over 1 GB) go there, not to the user's
cache. Each worker making a directory of its own wrote the same data two or three times and left gigabytes
in /tmp after every session, until a disk ran full mid-suite. The session that made the directory (the
xdist controller, or a lone pytest) removes it when it ends; a directory whose maker died without doing so
(kill -9) is removed by the next session.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from emulator.runtime.warm_state import alive

SCRATCH_ENV = "EMULATOR_TESTS_SCRATCH"  # inherited by the workers, which use the controller's directory
PREFIX = "emulator-tests-"
OWNER_FILE = "owner.pid"


def session_scratch() -> tuple[Path, bool]:
    """(this session's scratch directory, whether this process made it and so must remove it)."""
    inherited = os.environ.get(SCRATCH_ENV)
    if inherited and Path(inherited).is_dir():
        return Path(inherited), False
    remove_orphans(Path(tempfile.gettempdir()))
    directory = Path(tempfile.mkdtemp(prefix=PREFIX))
    (directory / OWNER_FILE).write_text(str(os.getpid()))
    os.environ[SCRATCH_ENV] = str(directory)
    return directory, True


def remove_orphans(parent: Path) -> list[Path]:
    """Remove the scratch directories under `parent` whose session is gone; returns them."""
    removed = []
    for directory in parent.glob(f"{PREFIX}*"):
        try:
            owner = int((directory / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue  # not one of ours, or being made right now
        if not alive(owner):
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory)
    return removed

"""The test session's scratch directory (tests/session_scratch.py): one for all workers, gone after the session,
and an orphan of a killed session removed by the next one, never a live session's."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from session_scratch import OWNER_FILE, PREFIX, SCRATCH_ENV, remove_orphans


def test_the_stored_federations_and_warm_state_go_to_the_session_s_scratch_directory():
    scratch = Path(os.environ[SCRATCH_ENV])
    assert Path(os.environ["EMULATOR_DATA_CACHE"]).parent == scratch
    assert Path(os.environ["EMULATOR_WARM_STATE"]).parent.parent == scratch
    owner = int((scratch / OWNER_FILE).read_text())
    if os.environ.get("PYTEST_XDIST_WORKER"):
        assert owner != os.getpid()  # a worker uses its controller's directory instead of making its own
    else:
        assert owner == os.getpid()


def test_a_killed_session_s_scratch_is_removed_and_a_live_one_s_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    orphan, live, foreign = (tmp_path / f"{PREFIX}orphan"), (tmp_path / f"{PREFIX}live"), (tmp_path / f"{PREFIX}x")
    for directory, owner in ((orphan, dead.stdout.strip()), (live, str(os.getpid())), (foreign, None)):
        (directory / "federations").mkdir(parents=True)
        if owner is not None:
            (directory / OWNER_FILE).write_text(owner)
    assert remove_orphans(tmp_path) == [orphan]
    assert not orphan.exists() and live.exists() and foreign.exists()  # a directory without an owner is not ours

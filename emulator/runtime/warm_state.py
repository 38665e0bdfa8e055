"""Where the warm instance (`emulator up`, runtime/warm.py) is: its state file, read by any run that may
attach to it (runtime/cluster.py), and the code fingerprint that decides whether its actors can serve a run.

The state file is ~/.cache/fl-emulator/warm.json (EMULATOR_WARM_STATE moves it; the test suite keeps its
own, so a developer's warm instance never joins the tests).
"""
from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

STATE_ENV = "EMULATOR_WARM_STATE"


def state_path() -> Path:
    return Path(os.environ.get(STATE_ENV) or Path.home() / ".cache" / "fl-emulator" / "warm.json")


def code_fingerprint() -> str:
    """The emulator's source as it is on disk now (paths, sizes, modification times): warm actors that
    imported other code are not used."""
    root = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(root)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class WarmInstance:
    address: str
    pid: int
    code: str
    runners: int
    shape: tuple  # (num_cpus, num_gpus, torch_threads) of the warm runners

    def matches(self, num_cpus: float, num_gpus: float, torch_threads: int | None) -> bool:
        return self.shape == (num_cpus, num_gpus, torch_threads) and self.code == code_fingerprint()


def find() -> WarmInstance | None:
    """The warm instance this user started, when its holder is alive; a stale state file is removed."""
    path = state_path()
    try:
        state = json.loads(path.read_text())
        instance = WarmInstance(state["address"], int(state["pid"]), state["code"], int(state["runners"]),
                                tuple(state["shape"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not alive(instance.pid):
        path.unlink(missing_ok=True)
        return None
    return instance


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

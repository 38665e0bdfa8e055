"""Per-device state that lasts across rounds (personal layers, personal models), on disk, not on the heap.

At 10^5 devices a model per device does not fit in memory, and most devices never train. So only devices
that have state hold any, each as one fixed-width float32 slot in an append-only file under the run
directory: a write appends a new slot and points the device at it; nothing written is ever overwritten.
A checkpoint records only the index (device -> slot), the slot count and the file's generation, after an
fsync of the file, so the slots it points at are on disk before it is. Resuming truncates the file back to
the checkpoint's slot count (dropping what later rounds appended) and reloads the index: the same bytes
as before the interruption, kill -9 included.

The file grows by one slot per device update; when it holds more dead slots than live ones, a checkpoint
compacts the live slots into the next generation's file. The previous generation stays until the
checkpoint after (the one before may still be the newest on disk), then goes.
"""
from __future__ import annotations

import atexit
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

DEVICE_STATE_DIR = "device_state"  # under the run directory
_FILE = re.compile(r"^slots-(\d+)\.f32$")
COMPACT_AFTER_SLOTS = 64  # below this, never compact: a small file is not worth a new generation


class DeviceStateStore:
    """device -> a float32 vector of `width` entries, for the devices that have one."""

    def __init__(self, directory: str | Path | Callable[[], str | Path | None] | None, num_devices: int, width: int):
        """`directory`: where the files go, or a callable that says so when the first file is made (a fresh
        run's directory is created after its server); None there: a temporary directory."""
        self._locate = directory if callable(directory) else (lambda: directory)  # None: a temporary directory
        self._directory: Path | None = None
        self.width = int(width)
        self.slot_of = np.full(num_devices, -1, dtype=np.int64)  # -1: no state
        self.slots = 0
        self.generation: int | None = None  # chosen with the directory: a fresh run never reuses an old file
        self._kept: int | None = None  # the generation the last state() named: kept for one more checkpoint
        self._file = None

    @property
    def directory(self) -> Path:
        if self._directory is None:
            found = self._locate()
            self._directory = Path(found) if found is not None else _temporary_directory()
            self._directory.mkdir(parents=True, exist_ok=True)
            if self.generation is None:
                self.generation = max(self._generations(), default=-1) + 1
                self._kept = self.generation
        return self._directory

    def __len__(self) -> int:
        return int(np.sum(self.slot_of >= 0))

    def devices(self) -> np.ndarray:
        """The devices that hold state, in device order."""
        return np.flatnonzero(self.slot_of >= 0)

    def get(self, device: int) -> np.ndarray | None:
        """The device's vector (a copy), or None if it has none."""
        slot = int(self.slot_of[device])
        if slot < 0:
            return None
        handle = self._handle()
        handle.flush()
        data = os.pread(handle.fileno(), self.width * 4, slot * self.width * 4)
        return np.frombuffer(data, dtype=np.float32).copy()

    def put(self, device: int, vector: np.ndarray) -> None:
        vector = np.ascontiguousarray(vector, dtype=np.float32)
        if vector.shape != (self.width,):
            raise ValueError(f"device state: expected {self.width} values, got {vector.shape}")
        handle = self._handle()
        handle.seek(self.slots * self.width * 4)
        handle.write(vector.tobytes())
        self.slot_of[device] = self.slots
        self.slots += 1

    def state(self) -> dict:
        """For a checkpoint: the index, after the slots it names are on disk (compacted first if most are dead)."""
        live = len(self)
        if self.slots >= COMPACT_AFTER_SLOTS and self.slots - live > live:
            self._compact()
        handle = self._handle()
        handle.flush()
        os.fsync(handle.fileno())
        for generation in self._generations():  # the one the last checkpoint named stays for one more
            if generation not in (self.generation, self._kept):
                self._path(generation).unlink(missing_ok=True)
        self._kept = self.generation
        devices = self.devices()
        return {"generation": self.generation, "slots": self.slots, "width": self.width, "devices": devices,
                "slot": self.slot_of[devices].copy(), "directory": str(self.directory)}

    def load_state(self, state: dict) -> None:
        """Back to a checkpoint: its generation's file cut to its slot count, every other generation gone."""
        if int(state["width"]) != self.width:
            raise ValueError(f"device state: the checkpoint's vectors have {state['width']} values, this run's "
                             f"{self.width}")
        self.close()
        self.generation, self.slots = int(state["generation"]), int(state["slots"])
        if self._directory is None and self._locate() is None and state.get("directory"):
            self._directory = Path(state["directory"])  # no run directory (in process): where it was written
        self.directory  # noqa: B018 (resolves the directory; the checkpoint's generation stands)
        path = self._path(self.generation)
        if not path.exists() or path.stat().st_size < self.slots * self.width * 4:
            raise ValueError(f"device state: {path} is missing or shorter than the checkpoint says "
                             f"({self.slots} slots of {self.width} values)")
        os.truncate(path, self.slots * self.width * 4)
        for generation in self._generations():
            if generation != self.generation:
                self._path(generation).unlink(missing_ok=True)
        self._kept = self.generation
        self.slot_of[:] = -1
        self.slot_of[np.asarray(state["devices"], np.int64)] = np.asarray(state["slot"], np.int64)

    def file_bytes(self) -> int:
        """Bytes on disk now, every generation counted."""
        if self._directory is None:
            return 0
        return sum(self._path(g).stat().st_size for g in self._generations())

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def _compact(self) -> None:
        """The live slots, in device order, into the next generation's file (fsynced before it is used)."""
        devices = self.devices()
        target = self._path(self.generation + 1)
        with open(target, "wb") as out:
            for device in devices:
                out.write(self.get(int(device)).tobytes())
            out.flush()
            os.fsync(out.fileno())
        self.close()
        self.generation += 1
        self.slot_of[devices] = np.arange(len(devices))
        self.slots = len(devices)

    def _handle(self):
        if self._file is None:
            self.directory  # noqa: B018 (resolves the directory and the generation)
            path = self._path(self.generation)
            self._file = open(path, "r+b" if path.exists() else "w+b")
        return self._file

    def _path(self, generation: int) -> Path:
        return self._directory / f"slots-{generation}.f32"

    def _generations(self) -> list[int]:
        found = (_FILE.match(p.name) for p in self._directory.iterdir()) if self._directory.exists() else ()
        return sorted(int(m.group(1)) for m in found if m)


def _temporary_directory() -> Path:
    """For a run without a run directory (in process): removed when the process exits, the last moment an
    in-memory checkpoint naming it could still be resumed."""
    directory = Path(tempfile.mkdtemp(prefix="device-state-"))
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    return directory


def within(state_dir, name: str) -> Callable[[], str | None]:
    """A directory of its own under a run's device state (`state_dir`: a path, a callable giving one, or None
    for a temporary directory), asked for when the store makes its first file."""
    def locate():
        found = state_dir() if callable(state_dir) else state_dir
        return None if found is None else str(Path(found) / name)

    return locate

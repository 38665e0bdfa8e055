"""Scratch space for building a federation larger than memory: big arrays as unlinked memory-mapped files.

While data.store writes a federation to disk (data/store.py), building it runs inside `scratch_space(dir)`,
and a builder's `large_array(...)` is then a memory-mapped file in that directory, removed from it at once
(it lives as long as the array), so a dataset of tens of gigabytes is generated, split and partitioned
through the page cache instead of anonymous memory. Outside a scratch space it is plain np.empty: the
in-memory path is unchanged. A plugin's dataset may call it too (emulator.extend exports it).
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

import numpy as np

LARGE_BYTES = 64 << 20  # smaller arrays stay in memory: a file per array would cost more than it saves
_SCRATCH: ContextVar[Path | None] = ContextVar("emulator_scratch", default=None)


@contextmanager
def scratch_space(parent: Path):
    """Within this block, large_array maps files in a fresh directory under `parent` (removed at the end)."""
    Path(parent).mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix=".scratch-", dir=parent))
    token = _SCRATCH.set(directory)
    try:
        yield directory
    finally:
        _SCRATCH.reset(token)
        shutil.rmtree(directory, ignore_errors=True)


def large_array(shape, dtype) -> np.ndarray:
    """An uninitialised array: np.empty, or inside scratch_space and over LARGE_BYTES, a writable memory map
    of a file already unlinked (its pages go back to the disk, not to swap, and vanish with the array)."""
    shape = tuple(int(n) for n in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    dtype = np.dtype(dtype)
    directory = _SCRATCH.get()
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if directory is None or size < LARGE_BYTES:
        return np.empty(shape, dtype)
    handle, path = tempfile.mkstemp(dir=directory, suffix=".bin")
    try:
        os.ftruncate(handle, size)
        array = np.memmap(path, dtype=dtype, mode="r+", shape=shape)
    finally:
        os.close(handle)
        os.unlink(path)
    return array

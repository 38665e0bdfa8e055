"""A stored federation's rows read from their files: each device's block with one pread, and a task's devices
read ahead of their use.

A device's rows are one contiguous block of a memory-mapped column. Copied through the map, each page of
it costs the process a fault (about 25 µs on a virtual machine, four or five pages a device of 60 floats);
read with pread into memory of its own, the whole block costs one system call (about 8 µs from the page
cache). The bytes are the same either way.

Reading ahead: a runner tells the kernel which devices' rows its task will read, and the disk reads (where the
rows are not in the page cache: a population larger than memory, or files not read since they were written)
overlap the training of the devices before them instead of stalling each device's first read of its rows.
Only memory-mapped arrays (np.load(..., mmap_mode="r")) are read ahead; an array in memory has nothing to read.
The advice is posix_fadvise(WILLNEED) on the file: it changes when bytes are read, never which, so a run's
numbers are the same with it or without it.
"""
from __future__ import annotations

import mmap
import os

import numpy as np

_FILES: dict[str, int] = {}  # path -> a read-only descriptor, opened once per process


def _descriptor(path) -> int | None:
    path = str(path)
    fd = _FILES.get(path)
    if fd is None:
        try:
            fd = _FILES[path] = os.open(path, os.O_RDONLY)
        except OSError:
            return None
    return fd


def read_ahead(array: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> int:
    """Advise the kernel to read rows [start, stop) of a memory-mapped `array` for each pair, in order; returns
    how many ranges were advised (0 where the array is in memory, or the platform has no posix_fadvise)."""
    if not isinstance(array, np.memmap) or array.filename is None or not hasattr(os, "posix_fadvise"):
        return 0
    fd = _descriptor(array.filename)
    if fd is None or len(array) == 0:
        return 0
    row = array.strides[0]
    advised = 0
    for start, stop in zip(starts.tolist(), stops.tolist()):
        if stop > start:
            os.posix_fadvise(fd, array.offset + start * row, (stop - start) * row, os.POSIX_FADV_WILLNEED)
            advised += 1
    return advised


def rows(array: np.ndarray, indices: np.ndarray | slice) -> np.ndarray:
    """array[indices], in memory of its own where `array` is a whole memory-mapped file's array and `indices`
    a slice of its rows (read with one pread); otherwise the plain indexing (a view of a map stays a view)."""
    if (not isinstance(indices, slice) or indices.step not in (None, 1) or not isinstance(array, np.memmap)
            or not isinstance(array.base, mmap.mmap) or array.filename is None or not array.flags.c_contiguous
            or not hasattr(os, "preadv")):  # a platform without preadv reads through the map
        return array[indices]
    fd = _descriptor(array.filename)
    if fd is None:
        return array[indices]
    start, stop, _ = indices.indices(len(array))
    out = np.empty((max(stop - start, 0), *array.shape[1:]), dtype=array.dtype)
    if out.nbytes and os.preadv(fd, [out], array.offset + start * array.strides[0]) != out.nbytes:
        return array[indices]  # the file shorter than its map says: read through the map, which fails plainly
    return out

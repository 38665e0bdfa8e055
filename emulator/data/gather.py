"""out[i] = source[rows[i]] for a memory-mapped source larger than memory: an out-of-core gather.

data.store writes a federation's samples in device order, `source[rows]`, a chunk of rows at a time. When
`source` is a file bigger than the page cache (a synthetic pool of tens of gigabytes, data/scratch.py), each
chunk's rows lie all over the file, every miss faults in a whole read-around window (megabytes for one row),
and the copy reads the file from disk many times over: it thrashes and never finishes.

gather_rows instead reads the source once, front to back, and writes each part of `out` twice, in blocks:

1. `out` is cut into buckets, contiguous ranges of `step` rows (about memory_bytes / 2 of data each). The
   source is read in consecutive chunks of `step` rows; the rows that a chunk supplies are written into their
   bucket's range of `out`, after those the earlier chunks wrote there (in place, but not yet in order), and
   `dest[j]` notes the position in `out` that the row now at `out[j]` belongs at.
2. Each bucket is read back, put in order in memory (block[dest - start] = out[start:end]) and written back.

`out` itself is the spill space, so no scratch file and no disk beyond `out` are needed. Reads of the source
are sequential and total its size once; `out` is written in about (source chunks x buckets) contiguous
pieces, then read and rewritten block by block. Anonymous memory stays near memory_bytes (two chunks in
pass 1, one bucket in pass 2) plus int64 arrays of len(rows): rows, a sort key, its order, dest (four at most).
A source in memory, or small enough to stay in the page cache (nbytes <= memory_bytes), takes the plain
chunked gather, which is fastest there.
"""
from __future__ import annotations

import mmap
import os
import shutil

import numpy as np

INDEX_BYTES = 48  # the int64 temporaries a row costs while a chunk of pass 1 is sorted into buckets


def gather_rows(out: np.ndarray, source: np.ndarray, rows, memory_bytes: int = 1 << 30) -> None:
    """out[i] = source[rows[i]] for every i: the same bytes as `out[:] = source[rows]`, reading a large
    memory-mapped source sequentially (see the module's docstring). `rows` is any int array of indices into
    source (repeats, omissions, any order, negatives as in numpy); out has shape (len(rows), *source.shape[1:]).
    Raises OSError before writing when `out` is a file map that its disk has no room left for."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    if out.shape != (len(rows), *source.shape[1:]):
        raise ValueError(f"out has shape {out.shape}, the gather gives {(len(rows), *source.shape[1:])}")
    if len(rows) == 0:
        return
    least, most = int(rows.min()), int(rows.max())
    if least < -len(source) or most >= len(source):
        raise IndexError(f"rows must lie in [-{len(source)}, {len(source)}): min {least}, max {most}")
    if least < 0:
        rows = np.where(rows < 0, rows + len(source), rows)
    _check_disk(out)
    row_bytes = max(1, source.itemsize * int(np.prod(source.shape[1:], dtype=np.int64)))
    step = max(1, memory_bytes // (2 * row_bytes + INDEX_BYTES))
    if source.nbytes <= memory_bytes or not _mapped(source):
        for start in range(0, len(rows), step):
            out[start:start + step] = source[rows[start:start + step]]
        return
    dest = _into_buckets(out, source, rows, step)
    for start in range(0, len(rows), step):  # pass 2: one bucket at a time into order
        end = min(len(rows), start + step)
        block = np.empty((end - start, *out.shape[1:]), out.dtype)
        block[dest[start:end] - start] = out[start:end]
        out[start:end] = block


def _into_buckets(out: np.ndarray, source: np.ndarray, rows: np.ndarray, step: int) -> np.ndarray:
    """Pass 1: each source chunk's rows appended to the ranges of `out` of the buckets they belong in; returns
    dest, where dest[j] is the position in `out` of the row that this put at out[j]."""
    key = rows // step  # the source chunk that each position of out reads
    edges = np.concatenate([[0], np.cumsum(np.bincount(key, minlength=-(-len(source) // step)))]).tolist()
    key *= -(-len(rows) // step)
    key += np.arange(len(rows)) // step  # then its bucket
    order = np.argsort(key)  # out's positions by source chunk, then by bucket
    del key
    dest = np.empty(len(rows), np.int64)
    filled = np.arange(0, len(rows), step)  # the next free position of each bucket
    for chunk, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        if lo == hi:
            continue  # no row wanted from here: not read
        first = chunk * step
        data = np.array(source[first:first + step])  # sequential read
        for at in range(lo, hi, step):  # a chunk's rows may repeat: step of them at a time
            positions = order[at:min(at + step, hi)]
            values = data[rows[positions] - first]
            bucket = positions // step
            cuts = [0, *(np.flatnonzero(np.diff(bucket)) + 1).tolist(), len(positions)]
            for start, end in zip(cuts[:-1], cuts[1:]):  # one run of a bucket's rows each
                begin = filled[bucket[start]]
                out[begin:begin + end - start] = values[start:end]
                dest[begin:begin + end - start] = positions[start:end]
                filled[bucket[start]] += end - start
        del data
    return dest


def _mapped(array) -> bool:
    """Whether `array` is a view of a memory-mapped file (np.memmap, or a slice of one)."""
    while array is not None:
        if isinstance(array, mmap.mmap):
            return True
        array = getattr(array, "base", None)
    return False


def _check_disk(out: np.ndarray) -> None:
    """Writing through a file map onto a full disk kills the process (SIGBUS): refuse beforehand instead."""
    name = getattr(out, "filename", None)
    if not isinstance(out, np.memmap) or name is None:
        return
    directory = os.path.dirname(os.path.abspath(name))
    needed = out.nbytes - os.stat(name).st_blocks * 512  # a new .npy is sparse: its blocks come as written
    free = shutil.disk_usage(directory).free
    if needed > free:
        raise OSError(f"{directory} has {free:,} bytes free; writing {name} needs {needed:,} more")

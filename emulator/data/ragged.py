"""Rows of different lengths (a text corpus's token sequences) as one flat array and an offsets index.

Row i is values[offsets[i]:offsets[i + 1]]: the second offsets level of the data format (data/store.py writes
`values` and `offsets` as two files and maps them like any column), so a corpus of short and long sequences
costs its tokens, not rows x the longest row. Rows taken from it come out as a fixed-width 2-D array of
`length` tokens, left-padded with `pad` (a row longer than `length` keeps its last `length` tokens): models
and the vectorised cohort see one input shape, (length,), and a model that reads the last position (char_lstm)
reads each sequence's own last token.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class RaggedRows:
    """An ArrayDataset's x whose rows differ in length: indexing it gives padded 2-D arrays."""

    values: np.ndarray   # 1-D integer token ids, row after row
    offsets: np.ndarray  # int64, rows + 1
    length: int          # the width rows are padded (or cut, keeping their end) to
    pad: int = 0         # the token id padding is made of

    @classmethod
    def from_sequences(cls, sequences, length: int | None = None, pad: int = 0, dtype=None) -> "RaggedRows":
        """Rows from a sequence of 1-D integer arrays; `length` defaults to the longest row."""
        rows = [np.asarray(s).reshape(-1) for s in sequences]
        sizes = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        offsets = offsets_of(sizes)
        kind = dtype or (np.result_type(*[r.dtype for r in rows]) if rows else np.int64)
        values = np.concatenate(rows).astype(kind, copy=False) if rows else np.zeros(0, kind)
        return cls(values, offsets, int(length if length is not None else sizes.max(initial=1)), int(pad))

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def shape(self) -> tuple[int, int]:
        return (len(self), self.length)

    @property
    def ndim(self) -> int:
        return 2

    @property
    def dtype(self) -> np.dtype:
        return self.values.dtype

    @property
    def itemsize(self) -> int:
        return self.values.itemsize

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.offsets)

    def __getitem__(self, index) -> np.ndarray:
        if isinstance(index, (int, np.integer)):
            return self.padded(np.array([index]))[0]
        rows = np.arange(len(self))[index] if isinstance(index, slice) else np.asarray(index, dtype=np.int64)
        return self.padded(rows)

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        padded = self.padded(np.arange(len(self)))
        return padded if dtype is None else padded.astype(dtype)

    def padded(self, rows: np.ndarray) -> np.ndarray:
        """rows as a (len(rows), length) array: each row's last `length` tokens, right-aligned, after `pad`."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        out = np.full((len(rows), self.length), self.pad, dtype=self.values.dtype)
        ends = self.offsets[rows + 1]
        kept = np.minimum(ends - self.offsets[rows], self.length)
        total = int(kept.sum())
        if total == 0:
            return out
        owner = np.repeat(np.arange(len(rows), dtype=np.int64), kept)
        from_end = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(kept) - kept, kept) - np.repeat(kept, kept)
        out[owner, self.length + from_end] = self.values[np.repeat(ends, kept) + from_end]
        return out

    def take(self, rows: np.ndarray) -> "RaggedRows":
        """The given rows, in that order, as rows of their own (copied)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        sizes = self.offsets[rows + 1] - self.offsets[rows]
        return RaggedRows(self.values[gather_index(self.offsets[rows], sizes)], offsets_of(sizes), self.length,
                          self.pad)


def offsets_of(sizes: np.ndarray) -> np.ndarray:
    """The flat layout's offsets for groups of `sizes` (a row's tokens, a device's samples): group k is
    [offsets[k], offsets[k + 1])."""
    offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
    np.cumsum(sizes, out=offsets[1:])
    return offsets


def gather_index(starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The flat positions of the runs starts[k] .. starts[k] + sizes[k], run after run (one vector op)."""
    sizes = np.asarray(sizes, dtype=np.int64)
    total = int(sizes.sum())
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    run_starts = np.cumsum(sizes) - sizes
    return np.repeat(np.asarray(starts, dtype=np.int64) - run_starts, sizes) + np.arange(total, dtype=np.int64)

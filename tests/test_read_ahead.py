"""Reading a stored federation's rows ahead (data/read_ahead.py): advice on the mapped files' byte ranges,
never a change to what is read."""
from __future__ import annotations

import numpy as np

from emulator.data import read_ahead as ahead
from emulator.data.federation import ArrayDataset, Federation


def test_rows_of_a_mapped_array_are_advised_and_an_array_in_memory_is_left_alone(tmp_path, monkeypatch):
    rows = np.arange(60, dtype=np.float32).reshape(20, 3)
    np.save(tmp_path / "x.npy", rows)
    mapped = np.load(tmp_path / "x.npy", mmap_mode="r")
    advised = []
    real = ahead.os.posix_fadvise
    monkeypatch.setattr(ahead.os, "posix_fadvise",
                        lambda fd, offset, length, advice: advised.append((offset, length)) or real(fd, offset,
                                                                                                    length, advice))
    assert ahead.read_ahead(mapped, np.array([4, 10, 7]), np.array([6, 10, 20])) == 2  # an empty range is skipped
    assert advised == [(mapped.offset + 4 * 12, 2 * 12), (mapped.offset + 7 * 12, 13 * 12)]
    assert ahead.read_ahead(rows, np.array([0]), np.array([5])) == 0
    assert np.array_equal(mapped, rows)


def test_a_stored_federation_reads_its_devices_rows_ahead_in_their_order(tmp_path, monkeypatch):
    x, y = np.random.default_rng(0).normal(size=(12, 2)).astype(np.float32), np.arange(12) % 3
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    train = ArrayDataset(np.load(tmp_path / "x.npy", mmap_mode="r"), np.load(tmp_path / "y.npy", mmap_mode="r"), 3)
    offsets = np.array([0, 5, 5, 9, 12])
    stored = Federation(train, train, offsets, None)
    calls = []
    monkeypatch.setattr("emulator.data.federation.read_ahead",
                        lambda column, starts, stops: calls.append((column.filename, starts.tolist(), stops.tolist())))
    stored.read_ahead([3, 1, 0])
    assert [c[1:] for c in calls] == [([9, 5, 0], [12, 5, 5])] * 2
    assert [str(c[0]).endswith(n) for c, n in zip(calls, ("x.npy", "y.npy"))] == [True, True]
    calls.clear()
    Federation(train, train, offsets, np.arange(12)).read_ahead([0, 1])  # rows gathered by index: not sorted
    assert calls == []

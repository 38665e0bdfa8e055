"""Reading a stored federation's rows (data/stored_rows.py): a device's block read with pread, the same bytes
as through the map; a task's devices read ahead (advice on the mapped files' byte ranges, never a change to
what is read)."""
from __future__ import annotations

import numpy as np

from emulator.data import stored_rows as ahead
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


def test_a_block_of_a_mapped_files_rows_is_read_with_one_pread_and_equals_the_map(tmp_path, monkeypatch):
    x = np.random.default_rng(1).normal(size=(50, 4, 3)).astype(np.float32)
    y = np.arange(50, dtype=np.int64) % 7
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    mapped_x, mapped_y = np.load(tmp_path / "x.npy", mmap_mode="r"), np.load(tmp_path / "y.npy", mmap_mode="r")
    reads = []
    real = ahead.os.preadv
    monkeypatch.setattr(ahead.os, "preadv", lambda fd, buffers, offset: reads.append(offset) or real(fd, buffers, offset))
    for block in (slice(0, 50), slice(13, 29), slice(49, 50), slice(20, 20), slice(40, 99)):
        got_x, got_y = ahead.rows(mapped_x, block), ahead.rows(mapped_y, block)
        assert type(got_x) is np.ndarray and got_x.flags.writeable and got_x.flags.owndata
        assert np.array_equal(got_x, x[block]) and np.array_equal(got_y, y[block])
    assert reads[2:4] == [mapped_x.offset + 13 * 48, mapped_y.offset + 13 * 8]
    reads.clear()
    view = mapped_x[10:]  # a view of a map: its own offset is its parent's, so it is indexed, never read by offset
    assert np.array_equal(ahead.rows(view, slice(2, 5)), x[12:15]) and reads == []
    assert np.array_equal(ahead.rows(mapped_x, np.array([3, 1])), x[[3, 1]]) and reads == []  # rows by index
    assert np.array_equal(ahead.rows(mapped_x, slice(0, 10, 2)), x[0:10:2]) and reads == []
    assert np.array_equal(ahead.rows(x, slice(2, 5)), x[2:5]) and reads == []  # in memory: a view, as indexing gives


def test_a_stored_federations_device_tensors_are_the_same_read_by_pread_as_through_the_map(tmp_path, monkeypatch):
    x = (np.random.default_rng(2).random((30, 5)) * 255).astype(np.uint8)
    y = np.arange(30) % 4
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    stored = ArrayDataset(np.load(tmp_path / "x.npy", mmap_mode="r"), np.load(tmp_path / "y.npy", mmap_mode="r"), 4,
                          mean=(0.5,), std=(0.25,))
    in_memory = ArrayDataset(x, y, 4, mean=(0.5,), std=(0.25,))
    federation = Federation(stored, stored, np.array([0, 7, 7, 30]), None)
    for device in range(3):
        got, want = stored.tensors(federation.device_rows(device)), in_memory.tensors(federation.device_rows(device))
        assert all(a.dtype == b.dtype and a.shape == b.shape and bool((a == b).all()) for a, b in zip(got, want))


def test_a_tasks_devices_are_read_in_batches_ahead_of_their_use_in_job_order():
    from emulator.runtime.runner import read_in_batches

    reads = []

    def read(job):
        reads.append(job)
        return np.zeros(job, dtype=np.float32), np.zeros(1, dtype=np.int64)  # job's 4 x job bytes of inputs

    batches = read_in_batches(list(range(1, 11)), read, count=4, budget=1000)
    seen = []
    for job, (x, _) in zip(range(1, 11), batches):
        seen.append((job, len(reads)))
        assert len(x) == job  # each job's own samples, in job order
    # read four at a time ahead of use, the last batch short
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4), (5, 8), (6, 8), (7, 8), (8, 8), (9, 10), (10, 10)]
    reads.clear()
    big = read_in_batches([100, 200, 300, 1], read, count=4, budget=1000)  # 408 then 808 bytes pass 1000
    assert [len(next(big)[0]) for _ in range(2)] == [100, 200] and reads == [100, 200]
    assert len(next(big)[0]) == 300 and reads == [100, 200, 300]  # alone past the budget
    assert len(next(big)[0]) == 1 and reads == [100, 200, 300, 1]
    assert list(read_in_batches([], read)) == []

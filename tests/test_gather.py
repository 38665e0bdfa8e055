"""emulator/data/gather.py: the out-of-core gather gives the bytes of source[rows], whatever the rows."""
from __future__ import annotations

import numpy as np
import pytest

from emulator.data import gather
from emulator.data.gather import gather_rows


def _memmap(path, array):
    mapped = np.lib.format.open_memmap(path, mode="w+", dtype=array.dtype, shape=array.shape)
    mapped[:] = array
    mapped.flush()
    return np.lib.format.open_memmap(path, mode="r")


def _source(tmp_path, shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        array = rng.standard_normal(shape).astype(dtype)
    else:
        array = rng.integers(0, 256, shape).astype(dtype)
    return _memmap(tmp_path / "source.npy", array)


def _gathered(tmp_path, source, rows, memory_bytes):
    out = np.lib.format.open_memmap(tmp_path / "out.npy", mode="w+", dtype=source.dtype,
                                    shape=(len(rows), *source.shape[1:]))
    gather_rows(out, source, rows, memory_bytes=memory_bytes)
    out.flush()
    return np.load(tmp_path / "out.npy")


def _same(got, want):
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


ROWS = {
    "permutation": lambda rng, n: rng.permutation(n),
    "repeats and omissions": lambda rng, n: rng.integers(0, n, int(n * 1.3)),
    "subset in any order": lambda rng, n: rng.choice(n, n // 3, replace=False),
    "one row many times": lambda rng, n: np.full(n // 2, n // 2),
    "sorted": lambda rng, n: np.sort(rng.integers(0, n, n)),
    "negatives": lambda rng, n: rng.integers(-n, n, n),
}


@pytest.mark.parametrize("kind", ROWS)
@pytest.mark.parametrize("shape,dtype", [((1000,), np.int64), ((1000, 3, 4), np.uint8), ((1000, 7), np.float32)])
@pytest.mark.parametrize("memory_bytes", [1, 700, 5000, 1 << 30])  # from a row a step to the in-memory gather
def test_the_bytes_of_source_rows(tmp_path, kind, shape, dtype, memory_bytes):
    source = _source(tmp_path, shape, dtype)
    rows = ROWS[kind](np.random.default_rng(1), len(source))
    _same(_gathered(tmp_path, source, rows, memory_bytes), source[rows])


def test_a_source_in_memory_and_an_out_in_memory(tmp_path):
    source = np.random.default_rng(0).standard_normal((500, 5)).astype(np.float32)
    rows = np.random.default_rng(1).integers(0, 500, 800)
    out = np.empty((800, 5), np.float32)
    gather_rows(out, source, rows, memory_bytes=64)
    _same(out, source[rows])
    mapped = _memmap(tmp_path / "source.npy", source)
    gather_rows(out := np.zeros_like(out), mapped, rows, memory_bytes=64)
    _same(out, source[rows])


def test_empty_rows(tmp_path):
    source = _source(tmp_path, (100, 3), np.float32)
    _same(_gathered(tmp_path, source, np.zeros(0, np.int64), 64), source[np.zeros(0, np.int64)])


class _Recording(np.memmap):
    keys: list = []

    def __getitem__(self, key):
        _Recording.keys.append(key)
        return super().__getitem__(key)


def test_a_large_mapped_source_is_read_once_front_to_back_in_chunks(tmp_path):
    source = _source(tmp_path, (2000, 6), np.float32)
    rows = np.random.default_rng(2).permutation(2000)
    _Recording.keys = []
    recording = source.view(_Recording)
    got = _gathered(tmp_path, recording, rows, memory_bytes=2000)
    _same(got, np.asarray(source)[rows])
    starts = [key.start for key in _Recording.keys]
    assert all(isinstance(key, slice) for key in _Recording.keys), "no fancy indexing into the source"
    assert len(starts) > 10 and starts == sorted(starts) and len(set(starts)) == len(starts)


def test_leaves_no_files_behind(tmp_path):
    source = _source(tmp_path, (3000, 4), np.float32)
    rows = np.random.default_rng(3).permutation(3000)
    _gathered(tmp_path, source, rows, memory_bytes=1000)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npy", "source.npy"]


def test_refuses_an_out_file_its_disk_has_no_room_for(tmp_path, monkeypatch):
    source = _source(tmp_path, (100, 4), np.float32)
    rows = np.arange(100).repeat(1000)
    out = np.lib.format.open_memmap(tmp_path / "out.npy", mode="w+", dtype=np.float32, shape=(len(rows), 4))
    monkeypatch.setattr(gather.shutil, "disk_usage", lambda path: type("Usage", (), {"free": 4096})())
    with pytest.raises(OSError, match=str(tmp_path)):
        gather_rows(out, source, rows)
    assert not out.any(), "refused before writing"


def test_refuses_rows_out_of_range_and_a_wrong_out(tmp_path):
    source = _source(tmp_path, (100, 4), np.float32)
    with pytest.raises(IndexError):
        gather_rows(np.empty((2, 4), np.float32), source, [0, 100])
    with pytest.raises(IndexError):
        gather_rows(np.empty((1, 4), np.float32), source, [-101])
    with pytest.raises(ValueError):
        gather_rows(np.empty((3, 4), np.float32), source, [0, 1])

"""The naive chunked gather against emulator/data/gather.py's out-of-core one, on a source file on disk.

data.store wrote a federation as `out[a:b] = source[rows[a:b]]`, 64 MB of output at a time: random reads of a
memory-mapped source. Fine while the source stays in the page cache; with a source bigger than the cache
(2 x 10^6 synthetic devices: a 17 GB pool on a 24 GiB machine) it thrashed. This writes a source of --gb GB
of (N, --features) float32 rows (the synthetic pool's layout), takes rows = a random permutation (the pool
sorted by device after a Dirichlet partition is as scattered) and times each gather into a new .npy map,
flush included, starting with the source evicted from the page cache. For each it reports wall seconds,
bytes read and written (/proc/self/io: read_bytes, write_bytes) and the peak anonymous memory above the
one before the call (RssAnon of /proc/self/status, sampled every 5 ms).

A smaller page cache is emulated, as a machine with RAM to spare cannot be made short of it here: a thread
drops all the source's pages (madvise MADV_DONTNEED on the map, then posix_fadvise DONTNEED on the file)
each time the process has read --cache-fraction x the source's size from disk since the last drop. That is
a cache of that size which, when full, empties at once (LRU would keep some hits more; with one disk read
of megabytes per miss (the map's read-around, read_ahead_kb) the difference is small). "cache: all" rows
run without the thread. The naive gather stops after --naive-seconds; its totals are then projected from
the rows done (marked ~). The naive gather steps 1 MB of output at a time to be stoppable: the source is
visited in the same order as with 64 MB chunks. Other processes may share the disk: compare ratios within
one run. Files go to a fresh directory under --dir, removed at the end.

    .venv/bin/python benchmarks/gather.py [--gb 3] [--memory-mb 256] [--cache-fraction 0.5]
"""
from __future__ import annotations

import argparse
import mmap
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from emulator.data.gather import gather_rows


def _proc(name: str, keys: tuple[str, ...]) -> dict[str, int]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/self/{name}").read_text().splitlines())
    return {key: int(fields[key].split()[0]) for key in keys}


def _evict(array: np.memmap) -> None:
    """Drop the file's pages from the page cache: unmap them from this process first, as fadvise spares
    mapped pages. Writes back what is dirty before."""
    array.flush()
    array._mmap.madvise(mmap.MADV_DONTNEED)
    with open(array.filename, "rb") as handle:
        os.fsync(handle.fileno())
        os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


class Monitor(threading.Thread):
    """Samples peak RssAnon; with `cache` set, evicts `source` each time `cache` bytes were read from disk."""

    def __init__(self, source: np.memmap, cache: int | None):
        super().__init__(daemon=True)
        self.source, self.cache, self.stop, self.evictions = source, cache, threading.Event(), 0
        self.peak = self.base = _proc("status", ("RssAnon",))["RssAnon"] * 1024
        self.mark = _proc("io", ("read_bytes",))["read_bytes"]

    def run(self):
        while not self.stop.wait(0.005):
            self.peak = max(self.peak, _proc("status", ("RssAnon",))["RssAnon"] * 1024)
            read = _proc("io", ("read_bytes",))["read_bytes"]
            if self.cache is not None and read - self.mark >= self.cache:
                self.source._mmap.madvise(mmap.MADV_DONTNEED)
                with open(self.source.filename, "rb") as handle:
                    os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
                self.mark, self.evictions = read, self.evictions + 1


def naive(out, source, rows, memory_bytes, deadline):
    step = max(1, (1 << 20) // (source.itemsize * source.shape[1]))
    for start in range(0, len(rows), step):
        out[start:start + step] = source[rows[start:start + step]]
        if time.perf_counter() > deadline:
            return start + step
    return len(rows)


def ours(out, source, rows, memory_bytes, deadline):
    gather_rows(out, source, rows, memory_bytes=memory_bytes)
    return len(rows)


def measure(gather, source, rows, directory: Path, memory_bytes: int, cache: int | None, seconds: float):
    path = directory / "out.npy"
    out = np.lib.format.open_memmap(path, mode="w+", dtype=source.dtype, shape=(len(rows), *source.shape[1:]))
    _evict(source)
    monitor = Monitor(source, cache)
    io = _proc("io", ("read_bytes", "write_bytes"))
    began = time.perf_counter()
    monitor.start()
    done = gather(out, source, rows, memory_bytes, began + seconds)
    out.flush()
    wall = time.perf_counter() - began
    monitor.stop.set()
    monitor.join()
    after = _proc("io", ("read_bytes", "write_bytes"))
    check = np.random.default_rng(0).integers(0, done, 20_000)
    assert np.array_equal(out[check], source[rows[check]]), f"{gather.__name__} gave wrong rows"
    del out
    path.unlink()
    scale = len(rows) / done
    return {"wall": wall * scale, "read": (after["read_bytes"] - io["read_bytes"]) * scale,
            "written": (after["write_bytes"] - io["write_bytes"]) * scale, "anon": monitor.peak - monitor.base,
            "projected": done < len(rows), "done": done / len(rows), "evictions": monitor.evictions}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gb", type=float, default=3.0, help="the source's size (the output's is the same)")
    parser.add_argument("--features", type=int, default=60, help="float32 values a row")
    parser.add_argument("--memory-mb", type=int, default=256, help="gather_rows' memory_bytes")
    parser.add_argument("--cache-fraction", type=float, default=0.5, help="the emulated cache / source size")
    parser.add_argument("--naive-seconds", type=float, default=60.0)
    parser.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()))
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="gather-bench-", dir=args.dir))
    try:
        n = int(args.gb * 1e9) // (4 * args.features)
        source = np.lib.format.open_memmap(directory / "source.npy", mode="w+", dtype=np.float32,
                                           shape=(n, args.features))
        rng = np.random.default_rng(0)
        for start in range(0, n, 1 << 20):
            source[start:start + (1 << 20)] = rng.random((min(n - start, 1 << 20), args.features), np.float32)
        _evict(source)
        source = np.lib.format.open_memmap(directory / "source.npy", mode="r")
        rows = rng.permutation(n)
        memory, cache = args.memory_mb << 20, int(args.cache_fraction * source.nbytes)
        print(f"source {source.nbytes / 1e9:.2f} GB, {n:,} rows of {4 * args.features} B, rows a permutation; "
              f"memory_bytes {args.memory_mb} MB; read_ahead_kb {_read_ahead(directory)}")
        print(f"{'gather':<8} {'cache':>8} {'wall s':>9} {'read GB':>9} {'written GB':>11} {'peak anon MB':>13} "
              f"{'evictions':>10} {'done':>6}")
        results = {}
        for cached in (None, cache):
            for gather in (naive, ours):
                r = results[gather.__name__, cached] = measure(gather, source, rows, directory, memory, cached,
                                                               args.naive_seconds)
                mark = "~" if r["projected"] else " "
                label = "all" if cached is None else f"{cached / 1e9:.2f} GB"
                print(f"{gather.__name__:<8} {label:>8} {mark}{r['wall']:>8.1f} {mark}{r['read'] / 1e9:>8.2f} "
                      f"{mark}{r['written'] / 1e9:>10.2f} {r['anon'] / 2**20:>13.0f} {r['evictions']:>10} "
                      f"{r['done']:>6.2%}", flush=True)
        for cached in (None, cache):
            label = "all" if cached is None else f"{cached / 1e9:.2f} GB"
            a, b = results["naive", cached], results["ours", cached]
            print(f"cache {label}: naive / ours = {a['wall'] / b['wall']:.2f}x wall, "
                  f"{a['read'] / max(b['read'], 1):.2f}x bytes read")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _read_ahead(directory: Path) -> str:
    try:
        device = os.stat(directory).st_dev
        return Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}/queue/read_ahead_kb").read_text().strip()
    except OSError:
        return "?"


if __name__ == "__main__":
    main()

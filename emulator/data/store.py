"""The federation on disk: samples sorted by device in flat array files, read through memory maps.

A run's data is written once per (dataset, partition, seed, format) into a directory named by a content key,
and every later run, sweep member and runner process opens it memory-mapped: device d's training samples
are rows offsets[d] to offsets[d + 1] of `train_x.npy` / `train_y.npy`, an O(1) slice; the operating system
shares the pages between processes and can drop them under pressure, so no process holds the data as
memory of its own and the object store carries the directory's path, not the arrays.

Layout (format 1): `train_x.npy`, `train_y.npy` (device after device, then the server set's rows),
`device_offsets.npy` (int64, devices + 1), `label_counts.npy` (int32, devices x classes), `test_x.npy`,
`test_y.npy` (`test_owner.npy` where the data splits its test set by user), and with data.local_test
`local_x.npy`, `local_y.npy`, `local_offsets.npy`; `meta.json` last, naming every file with its shape, dtype,
size and a digest. Plain `.npy` files: numpy maps them without a dependency, each column is one file, and a
text corpus's fixed-width token rows are a 2-D column like any other. Token sequences of different lengths
(data/ragged.py) take a second offsets level: `train_x.values.npy` (the tokens, row after row) and
`train_x.offsets.npy` (row i is values[offsets[i]:offsets[i + 1]]), with meta.json's `ragged` giving the
width rows are padded to (see docs/scenarios.md, "data.store").

Writing goes to a temporary directory renamed into place, so a run killed mid-write leaves no cache; opening
checks sizes and digests (all of a small file, 256 spread blocks of a large one) and a directory that fails
is removed and rebuilt, never read.
"""
from __future__ import annotations

import errno
import hashlib
import json
import mmap
import os
import shutil
import time
from pathlib import Path
from typing import Callable

import numpy as np

from emulator.data.cache_upkeep import stamp_used
from emulator.data.federation import ArrayDataset, Federation
from emulator.data.gather import gather_rows
from emulator.data.ragged import RaggedRows, gather_index, offsets_of

FORMAT_VERSION = 1
CHUNK_BYTES = 64 << 20  # what one step of a write copies at most, whatever the data's size
GATHER_BYTES = 1 << 30  # the out-of-core gather's working memory at most (data/gather.py)
FULL_DIGEST_BYTES = 64 << 20  # files up to this size are hashed whole; larger ones by SAMPLED_BLOCKS blocks
SAMPLED_BLOCKS, BLOCK = 256, 64 << 10
CACHE_ENV = "EMULATOR_DATA_CACHE"


class StoreDamaged(Exception):
    """A stored federation that must not be read (missing, truncated, altered or of another key)."""


def default_cache() -> Path:
    """$EMULATOR_DATA_CACHE, else ~/.cache/emulator/federations (beside the datasets' own files)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    return Path.home() / ".cache" / "emulator" / "federations"


def cache_directory(store) -> Path:
    """Where a scenario's data.store keeps federations."""
    return Path(store.cache).expanduser() if store.cache else default_cache()


def cache_space(store) -> tuple[Path, int]:
    """(the cache directory, the bytes free on its disk), measured at its nearest existing ancestor."""
    directory = cache_directory(store)
    probe = directory
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return directory, shutil.disk_usage(probe).free


# ----------------------------------------------------------------------------------------------- writing
def write_federation(federation: Federation, directory: Path, key: str, described: dict | None = None) -> Path:
    """Write `federation` as the format under `directory` (replacing what is there), in chunks of at most
    CHUNK_BYTES, so the writing adds no copy of the data. Returns the directory."""
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    temporary = directory.with_name(f".{directory.name}.{os.getpid()}.{time.monotonic_ns()}")
    temporary.mkdir()
    try:
        files, ragged = {}, {}
        train = federation.train
        device_rows = _device_rows(federation)
        server = np.asarray(federation.server_indices, dtype=np.int64)
        everything = np.arange(len(federation.test))
        columns = [("train_x", train.x, (device_rows, server)), ("train_y", train.y, (device_rows, server)),
                   ("test_x", federation.test.x, (everything,)), ("test_y", federation.test.y, (everything,))]
        if federation.local_test is not None:
            local = np.arange(len(federation.local_test))
            columns += [("local_x", federation.local_test.x, (local,)), ("local_y", federation.local_test.y, (local,))]
        for name, source, row_sets in columns:
            if isinstance(source, RaggedRows):
                files.update(_write_ragged(temporary, name, source, *row_sets))
                ragged[name] = {"length": source.length, "pad": source.pad}
            else:
                files[name] = _write_gathered(temporary / f"{name}.npy", source, *row_sets)
        files["device_offsets"] = _write_array(temporary / "device_offsets.npy", federation.device_offsets)
        files["label_counts"] = _write_array(temporary / "label_counts.npy",
                                             federation.label_counts().astype(np.int32))
        if federation.test.owner is not None:
            files["test_owner"] = _write_array(temporary / "test_owner.npy", federation.test.owner)
        if federation.local_test is not None:
            files["local_offsets"] = _write_array(temporary / "local_offsets.npy", federation.local_offsets)
        meta = {"format": FORMAT_VERSION, "key": key, "described": described or {},
                "num_classes": int(train.num_classes), "mean": _floats(train.mean), "std": _floats(train.std),
                "test_mean": _floats(federation.test.mean), "test_std": _floats(federation.test.std),
                "devices": federation.num_devices, "server_samples": int(len(server)), "files": files,
                "ragged": ragged,
                "written_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (temporary / "meta.json").write_text(json.dumps(meta, indent=1))
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise
    _place(temporary, directory)
    return directory


def _place(temporary: Path, directory: Path) -> None:
    """Rename the written directory into place: what was there is moved aside first and removed after, so a
    reader finds the old directory or the new one, never half of either. Where another process placed the same
    key between the two renames, its copy (the same bytes: the key names the content) stays and this one goes."""
    aside = temporary.with_name(temporary.name + ".old")
    try:
        os.rename(directory, aside)
    except FileNotFoundError:
        pass
    try:
        os.replace(temporary, directory)
    except OSError as error:
        if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    shutil.rmtree(temporary, ignore_errors=True)
    shutil.rmtree(aside, ignore_errors=True)


def _device_rows(federation: Federation) -> np.ndarray | slice:
    if federation.device_indices is None:
        return slice(0, int(federation.device_offsets[-1]))
    return federation.device_indices


def _write_gathered(path: Path, source: np.ndarray, *row_sets) -> dict:
    """source's rows, set after set, into a new .npy file at `path`: a chunk at a time, or where the source is
    a file too large to stay in the page cache, by the out-of-core gather (data/gather.py), which reads it
    once, front to back, instead of at random."""
    rows = _rows(len(source), row_sets)
    out = np.lib.format.open_memmap(path, mode="w+", dtype=source.dtype, shape=(len(rows), *source.shape[1:]))
    room = available_memory()
    if source.nbytes > room // 2:
        gather_rows(out, source, rows, memory_bytes=min(GATHER_BYTES, max(CHUNK_BYTES, room // 4)))
    else:
        row_bytes = max(1, source.itemsize * int(np.prod(source.shape[1:], dtype=np.int64)))
        step = max(1, CHUNK_BYTES // row_bytes)
        for start in range(0, len(rows), step):
            out[start:start + step] = source[rows[start:start + step]]
    out.flush()
    del out
    return _describe(path)


def _rows(length: int, row_sets) -> np.ndarray:
    """The row sets (index arrays, or slices of a column of `length` rows) one after the other, as int64."""
    return np.concatenate([np.arange(length)[rows] if isinstance(rows, slice) else np.asarray(rows, np.int64)
                           for rows in row_sets])


def available_memory() -> int:
    """Bytes the kernel could give without swapping (MemAvailable): what the page cache can hold of a source."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def _write_ragged(directory: Path, name: str, source: RaggedRows, *row_sets) -> dict:
    """A column of token sequences as two files: `name`.values (the rows' tokens, row after row) and
    `name`.offsets (row i is values[offsets[i]:offsets[i + 1]]), the rows taken set after set, in chunks."""
    rows = _rows(len(source), row_sets)
    sizes = source.offsets[rows + 1] - source.offsets[rows]
    offsets = offsets_of(sizes)
    values_path = directory / f"{name}.values.npy"
    out = np.lib.format.open_memmap(values_path, mode="w+", dtype=source.values.dtype, shape=(int(offsets[-1]),))
    step = max(1, CHUNK_BYTES // max(1, source.itemsize * max(1, int(sizes.mean()) if len(sizes) else 1)))
    for start in range(0, len(rows), step):
        chunk = slice(start, start + step)
        out[offsets[start]:offsets[min(start + step, len(rows))]] = source.values[
            gather_index(source.offsets[rows[chunk]], sizes[chunk])]
    out.flush()
    del out
    return {f"{name}.values": _describe(values_path),
            f"{name}.offsets": _write_array(directory / f"{name}.offsets.npy", offsets)}


def _write_array(path: Path, array: np.ndarray) -> dict:
    np.save(path, np.ascontiguousarray(array))
    return _describe(path)


def _floats(values) -> list[float] | None:
    return None if values is None else [float(v) for v in values]


# ----------------------------------------------------------------------------------------------- reading
def open_federation(directory: Path | str, verify: bool = True, key: str | None = None) -> Federation:
    """The stored federation at `directory`, its arrays memory-mapped read-only. `verify` checks every
    file's size and digest against meta.json, `key` that it is the data asked for: StoreDamaged otherwise."""
    directory = Path(directory)
    meta = read_meta(directory)
    if meta.get("format") != FORMAT_VERSION:
        raise StoreDamaged(f"format {meta.get('format')}, this emulator reads format {FORMAT_VERSION}")
    if key is not None and meta.get("key") != key:
        raise StoreDamaged(f"it holds the data of key {meta.get('key')}, not {key}")
    if verify:
        for name, recorded in meta["files"].items():
            found = _describe(directory / f"{name}.npy") if (directory / f"{name}.npy").is_file() else None
            if found != recorded:
                why = "missing" if found is None else "changed since it was written"
                raise StoreDamaged(f"{name}.npy is {why}")
    files = meta["files"]

    def mapped(name: str) -> np.ndarray | RaggedRows | None:
        if name in meta.get("ragged", {}):
            form = meta["ragged"][name]
            return RaggedRows(mapped(f"{name}.values"), mapped(f"{name}.offsets"), form["length"], form["pad"])
        return np.load(directory / f"{name}.npy", mmap_mode="r") if name in files else None

    train_x, train_y = mapped("train_x"), mapped("train_y")
    for column in (train_x, train_y):  # read a device at a time: a fault reads its pages, not megabytes ahead
        for array in (column.values, column.offsets) if isinstance(column, RaggedRows) else (column,):
            _random_access(array)

    classes = meta["num_classes"]
    train = ArrayDataset(train_x, train_y, classes, _tuple(meta["mean"]), _tuple(meta["std"]))
    test = ArrayDataset(mapped("test_x"), mapped("test_y"), classes, _tuple(meta["test_mean"]),
                        _tuple(meta["test_std"]), mapped("test_owner"))
    offsets = np.load(directory / "device_offsets.npy")  # devices + 1 integers: in memory, read at every job
    placed = int(offsets[-1])
    server = np.arange(placed, placed + meta["server_samples"], dtype=np.int64)
    local = local_offsets = None
    if "local_x" in files:
        local = ArrayDataset(mapped("local_x"), mapped("local_y"), classes, train.mean, train.std)
        local_offsets = np.load(directory / "local_offsets.npy")
    return Federation(train, test, offsets, None, server, local, local_offsets,
                      counts=mapped("label_counts"), stored=str(directory), reopen=reopen)


def reopen(directory: str) -> Federation:
    """A stored federation in another process (how it unpickles): the same files, already checked by the
    driver, or this node's copy of them (runtime/data_nodes.py makes it where a node cannot see the driver's
    directory); a process that finds neither is told where the data is and what to do."""
    for candidate in stored_places(directory):
        if (candidate / "meta.json").is_file():
            return open_federation(candidate, verify=False)
    import socket

    raise FileNotFoundError(
        f"the run's data is stored in {directory} on the driver's machine, and {socket.gethostname()} can see "
        f"neither it nor a copy in its own data cache ({node_copy(directory).parent}): set data.store.cache (or "
        "$EMULATOR_DATA_CACHE) to a directory every node mounts, or data.store: memory to ship the data through "
        "the object store (docs/cluster.md)")


def node_copy(directory: str | Path) -> Path:
    """Where this machine keeps its own copy of the stored data at `directory` (its data cache, same key)."""
    return default_cache() / Path(directory).name


def stored_places(directory: str | Path) -> tuple[Path, Path]:
    """Where a process may find the stored data the driver wrote at `directory`, in the order to look: that
    directory (the same machine, or a file system every node mounts), then this machine's own copy."""
    return Path(directory), node_copy(directory)


def _random_access(column: np.ndarray) -> None:
    """Tell the kernel a mapping is read at random (no read-ahead): a device's rows are kilobytes, and the
    disk's read-ahead (megabytes) on every cold fault would read the neighbours' data for nothing."""
    mapping = getattr(column, "_mmap", None)
    if mapping is not None and hasattr(mmap, "MADV_RANDOM"):
        mapping.madvise(mmap.MADV_RANDOM)


def read_meta(directory: Path) -> dict:
    """meta.json, checked to hold what write_federation writes (StoreDamaged otherwise: the directory is
    rebuilt, never read from what is left of it)."""
    try:
        meta = json.loads((Path(directory) / "meta.json").read_text())
    except FileNotFoundError:
        raise StoreDamaged("meta.json is missing (an unfinished write)") from None
    except (OSError, ValueError) as exc:
        raise StoreDamaged(f"meta.json is unreadable ({exc})") from None
    if not isinstance(meta, dict):
        raise StoreDamaged(f"meta.json is not an object but a {type(meta).__name__}")
    if meta.get("format") != FORMAT_VERSION:  # another format's fields are not this one's: said as such
        return meta
    for name, ok, what in _META:
        if not ok(meta.get(name)):
            raise StoreDamaged(f"meta.json's {name} is not {what}")
    return meta


def _whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _floats_or_none(value) -> bool:
    return value is None or isinstance(value, list) and all(isinstance(v, (int, float)) for v in value)


_META = (  # (field, check, what it holds) of format 1's meta.json
    ("files", lambda v: isinstance(v, dict) and all(isinstance(f, dict) for f in v.values()),
     "a mapping of file names to their facts"),
    ("num_classes", lambda v: _whole(v) and v > 0, "a whole number of classes"),
    ("devices", _whole, "a whole number of devices"),
    ("server_samples", _whole, "a whole number of samples"),
    ("mean", _floats_or_none, "a list of numbers (or null)"), ("std", _floats_or_none, "a list of numbers (or null)"),
    ("test_mean", _floats_or_none, "a list of numbers (or null)"),
    ("test_std", _floats_or_none, "a list of numbers (or null)"),
    ("ragged", lambda v: v is None or isinstance(v, dict) and all(
        isinstance(f, dict) and _whole(f.get("length")) and isinstance(f.get("pad"), int) for f in v.values()),
     "a mapping of columns to their length and pad"),
)


def _tuple(values) -> tuple[float, ...] | None:
    return None if values is None else tuple(values)


def _describe(path: Path) -> dict:
    """A file's header facts, size and digest: whole up to FULL_DIGEST_BYTES, else SAMPLED_BLOCKS spread blocks
    (the first and last among them), so opening 10 GB of data reads 16 MB of it."""
    size = path.stat().st_size
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as handle:
        if size <= FULL_DIGEST_BYTES:
            digest.update(handle.read())
        else:
            for start in np.linspace(0, size - BLOCK, SAMPLED_BLOCKS).astype(np.int64):
                handle.seek(int(start))
                digest.update(handle.read(BLOCK))
    facts = {"bytes": size, "digest": digest.hexdigest(), "shape": None, "dtype": None}
    try:
        array = np.load(path, mmap_mode="r")
    except ValueError:  # a header that does not match the file's size (truncated): unreadable as an array
        return facts
    facts.update(shape=list(array.shape), dtype=str(array.dtype))
    return facts


# ----------------------------------------------------------------------------------------------- the cache
def content_key(data, devices: int, seed: int, types, builder_module: str | None,
                roots: list[Path] = ()) -> tuple[str, dict]:
    """(key, what it was made of) for a scenario's data: the data section (less where the cache is), the
    population's size and latent types, the seed, the format, the source of the code that makes the data
    (this package, the seeding and the dataset's own module) and the files it reads (names, sizes, times)."""
    described = {"format": FORMAT_VERSION, "data": data.model_dump(mode="json", exclude={"store", "download"}),
                 "devices": int(devices), "seed": int(seed),
                 "types": None if types is None else [t.model_dump(mode="json") for t in types]}
    described["code"] = _code_digest(builder_module)
    described["files"] = _files_signature(roots)
    blob = json.dumps(described, sort_keys=True, default=str).encode()
    name = str(data.dataset).replace("/", "_")[:40]
    return f"{name}-{devices}-{hashlib.sha256(blob).hexdigest()[:20]}", described


def _code_digest(builder_module: str | None) -> str:
    """The content of the modules that make a federation: a change to any of them is other data."""
    import sys

    package = Path(__file__).resolve().parent
    paths = sorted(package.glob("*.py")) + [package.parent / "seeding.py"]
    module = sys.modules.get(builder_module or "")
    if getattr(module, "__file__", None):
        paths.append(Path(module.__file__))
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:20]


def _files_signature(roots, limit: int = 500) -> list:
    """(path, size, modification time) of the files under `roots` (at most `limit`): data read from files is
    other data when they change."""
    found = []
    for root in roots:
        root = Path(root).expanduser()
        if root.is_file():
            stat = root.stat()
            found.append([str(root), stat.st_size, stat.st_mtime_ns])
            continue
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*"))[:limit]:
            if path.is_file():
                stat = path.stat()
                found.append([str(path), stat.st_size, stat.st_mtime_ns])
    return found


def cached_federation(key: str, cache: Path, build: Callable[[], Federation], notify: Callable[[str], None],
                      described: dict | None = None) -> Federation:
    """The federation stored under `cache`/`key`: opened when it is there and whole; otherwise (never
    written, damaged, stale) built, written and opened. A damaged or stale directory is named, removed and
    rebuilt."""
    directory = Path(cache) / key
    if directory.exists():
        try:
            federation = open_federation(directory, verify=True, key=key)
            stamp_used(directory)  # the cache's upkeep removes the least recently used first
            return federation
        except StoreDamaged as why:
            notify(f"note: the data cache at {directory} cannot be used ({why}); rebuilding it")
            shutil.rmtree(directory, ignore_errors=True)
    started = time.perf_counter()
    federation = build()
    if directory.exists():  # another process (a sweep's member, a test worker) stored it while this one built
        try:
            return open_federation(directory, verify=True, key=key)
        except StoreDamaged:
            pass
    write_federation(federation, directory, key, described)
    notify(f"data written to {directory} in {time.perf_counter() - started:.1f} s; later runs of the same data "
           "read it from there")
    return open_federation(directory, verify=False, key=key)

"""The on-disk federation (data.store: disk, emulator/data/store.py): the same samples as in memory, a path in
the object store instead of the data, a cache keyed by content, and damaged or stale caches rebuilt, never read.

That whole runs give the same metrics from either store is checked scenario by scenario in
test_shipped_scenarios.py (its Ray runs read the on-disk format, its in-process runs hold the data in memory).
"""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest

from emulator.data import build_federation, federation_for
from emulator.data.store import (StoreDamaged, cached_federation, content_key, open_federation, read_meta,
                                 write_federation)
from emulator.driver import run_scenario
from emulator.parts import validate_scenario


def scenario(**overrides):
    base = {"name": "store", "seed": 3, "rounds": 2,
            "data": {"dataset": "synthetic", "synthetic": {"min_samples": 8, "max_samples": 60},
                     "partition": {"scheme": "dirichlet", "alpha": 0.5, "min_samples": 4},
                     "server_set": {"size": 40}, "local_test": {"fraction": 0.25, "min_samples": 1}},
            "population": {"devices": 60}, "model": "mlp",
            "algorithm": {"name": "fedavg", "clients_per_round": 6, "local_steps": 2, "batch_size": 8},
            "system": {"model": "ideal"}, "runtime": {"backend": "inline"}}
    for dotted, value in overrides.items():
        node = base
        *path, last = dotted.split(".")
        for key in path:
            node = node.setdefault(key, {})
        node[last] = value
    return validate_scenario(base)


def built(run):
    return build_federation(run.data, run.population.devices, run.seed, run.population.types)


def same_tensors(a, b) -> bool:
    return all(np.array_equal(x.numpy(), y.numpy()) for x, y in zip(a, b))


def test_the_stored_federation_holds_every_device_s_samples_as_memory_did(tmp_path):
    run = scenario()
    memory = built(run)
    stored = open_federation(write_federation(memory, tmp_path / "k", "k"), key="k")

    assert stored.device_indices is None and isinstance(stored.train.x, np.memmap)
    assert np.array_equal(stored.sizes, memory.sizes)
    for device in range(memory.num_devices):
        assert same_tensors(memory.train.tensors(memory.device_samples(device)),
                            stored.train.tensors(stored.device_samples(device))), device
        rows = stored.device_rows(device)  # what a CPU runner reads: one block of rows
        assert isinstance(rows, slice) and same_tensors(stored.train.tensors(rows),
                                                        memory.train.tensors(memory.device_rows(device))), device
    assert same_tensors(memory.train.tensors(memory.server_indices), stored.train.tensors(stored.server_indices))
    assert len(stored.server_indices) == 40
    assert same_tensors(memory.test.tensors(), stored.test.tensors())
    assert same_tensors(memory.local_test.tensors(), stored.local_test.tensors())
    assert np.array_equal(memory.local_offsets, stored.local_offsets)
    assert np.array_equal(memory.label_counts(), stored.label_counts())


def test_a_stored_federation_travels_as_its_path_and_its_rows_are_read_only(tmp_path):
    memory = built(scenario())
    stored = open_federation(write_federation(memory, tmp_path / "k", "k"))
    shipped = pickle.dumps(stored)
    assert len(shipped) < 1000 < len(pickle.dumps(memory))  # the object store carries a path, not the data
    received = pickle.loads(shipped)
    assert received.stored == str(tmp_path / "k")
    assert np.array_equal(received.train.y, memory.train.y[np.concatenate(
        [memory.device_indices, memory.server_indices])])
    with pytest.raises(ValueError):
        received.train.x[0] = 1.0  # mapped read-only: no process can change what the others read
    # tensors are copies of the rows asked for: training may change them in place
    x, _ = received.train.tensors(received.device_samples(0))
    x.add_(1.0)
    assert same_tensors(received.train.tensors(received.device_samples(0)), memory.train.tensors(
        memory.device_samples(0)))


def test_the_cache_is_reused_for_the_same_data_and_keyed_by_what_makes_it(tmp_path):
    run = scenario(**{"data.store": {"mode": "disk", "cache": str(tmp_path)}})
    lines = []
    first = federation_for(run.data, run.population.devices, run.seed, None, lines.append)
    assert len(lines) == 1 and lines[0].startswith("data written to")
    second = federation_for(run.data, run.population.devices, run.seed, None, lines.append)
    assert len(lines) == 1 and second.stored == first.stored  # read, not written again

    key = content_key(run.data, 60, 3, None, "emulator.parts.builtins")[0]
    assert key == content_key(scenario(**{"data.store": {"mode": "disk", "cache": "/elsewhere"}}).data, 60, 3,
                              None, "emulator.parts.builtins")[0]  # where the cache is: not part of the data
    for other in (content_key(run.data, 60, 4, None, "emulator.parts.builtins"),
                  content_key(run.data, 61, 3, None, "emulator.parts.builtins"),
                  content_key(scenario(**{"data.partition.alpha": 0.6}).data, 60, 3, None, "emulator.parts.builtins")):
        assert other[0] != key


def damage_train_rows(directory):
    with open(directory / "train_x.npy", "r+b") as handle:
        handle.seek(-8, 2)
        handle.write(b"\x7f" * 8)


def truncate_labels(directory):
    with open(directory / "train_y.npy", "r+b") as handle:
        handle.truncate(handle.seek(0, 2) - 16)


def remove_meta(directory):
    (directory / "meta.json").unlink()


def older_format(directory):
    meta = read_meta(directory)
    meta["format"] = 0
    (directory / "meta.json").write_text(json.dumps(meta))


def meta_as(change):
    """meta.json rewritten by `change` (its text -> new text)."""
    def spoil(directory):
        path = directory / "meta.json"
        path.write_text(change(path.read_text()))
    return spoil


def meta_field(name, value):
    return meta_as(lambda text: json.dumps({**json.loads(text), name: value}))


@pytest.mark.parametrize("spoil, why", [(damage_train_rows, "train_x.npy is changed since it was written"),
                                        (truncate_labels, "train_y.npy is changed since it was written"),
                                        (remove_meta, "meta.json is missing"),
                                        (older_format, "format 0"),
                                        (meta_as(lambda text: ""), "meta.json is unreadable"),
                                        (meta_as(lambda text: text[:len(text) // 2]), "meta.json is unreadable"),
                                        (meta_as(lambda text: "[1, 2]"), "meta.json is not"),
                                        (meta_field("files", ["train_x"]), "meta.json's files is not"),
                                        (meta_field("files", {"train_x": 3}), "meta.json's files is not"),
                                        (meta_field("num_classes", "ten"), "meta.json's num_classes is not"),
                                        (meta_field("server_samples", None), "meta.json's server_samples is not"),
                                        (meta_field("mean", "0.5"), "meta.json's mean is not"),
                                        (meta_field("ragged", {"train_x": 1}), "meta.json's ragged is not")])
def test_a_damaged_or_stale_cache_is_named_and_rebuilt_never_read(tmp_path, spoil, why):
    memory = built(scenario())
    builds, lines = [], []

    def build():
        builds.append(1)
        return memory

    cached_federation("k", tmp_path, build, lines.append)
    spoil(tmp_path / "k")
    with pytest.raises(StoreDamaged, match=why.split(" is ")[0] if " is " in why else why):
        open_federation(tmp_path / "k", key="k")
    again = cached_federation("k", tmp_path, build, lines.append)

    assert len(builds) == 2
    assert any(why in line and "rebuilding" in line for line in lines), lines
    rows = np.concatenate([memory.device_indices, memory.server_indices])
    assert np.array_equal(again.train.x, memory.train.x[rows]) and np.array_equal(again.train.y, memory.train.y[rows])
    assert open_federation(tmp_path / "k", key="k").num_devices == memory.num_devices  # whole again


def test_a_cache_holding_other_data_under_the_key_is_not_read(tmp_path):
    write_federation(built(scenario()), tmp_path / "k", "another key")
    with pytest.raises(StoreDamaged, match="another key"):
        open_federation(tmp_path / "k", key="k")


def test_a_write_that_fails_midway_leaves_no_cache(tmp_path, monkeypatch):
    import emulator.data.store as store

    def failing(path, array):
        raise OSError("No space left on device")

    monkeypatch.setattr(store, "_write_array", failing)
    with pytest.raises(OSError):
        write_federation(built(scenario()), tmp_path / "k", "k")
    assert list(tmp_path.iterdir()) == []  # neither the directory nor its temporary twin


def test_processes_storing_the_same_data_at_once_write_it_once_and_both_read_it(tmp_path):
    """A sweep's members or a test session's workers may build the same key at the same time: the one that
    finishes building second finds the first's copy and reads it instead of writing the data again."""
    import threading

    run = scenario()
    memory = built(run)
    both_building, first_stored = threading.Barrier(2), threading.Event()
    written: list[str] = []
    got = [None, None]

    def store(index):
        def build():
            both_building.wait(timeout=30)  # both have found the cache empty
            if index == 1:
                first_stored.wait(timeout=30)  # the second finishes building after the first has stored
            return built(run)

        got[index] = cached_federation("k", tmp_path, build, notify=written.append)
        if index == 0:
            first_stored.set()

    workers = [threading.Thread(target=store, args=(index,)) for index in range(2)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert len(written) == 1 and "data written" in written[0]
    assert [path.name for path in tmp_path.iterdir()] == ["k"]  # no temporary twin left behind
    for federation in got:
        assert np.array_equal(federation.sizes, memory.sizes)
        assert same_tensors(federation.train.tensors(federation.device_samples(3)),
                            memory.train.tensors(memory.device_samples(3)))


def test_rewriting_a_stored_federation_leaves_an_open_reader_its_samples(tmp_path):
    memory = built(scenario())
    reader = open_federation(write_federation(memory, tmp_path / "k", "k"), key="k")
    write_federation(memory, tmp_path / "k", "k")
    assert [path.name for path in tmp_path.iterdir()] == ["k"]
    assert same_tensors(reader.train.tensors(reader.device_samples(5)), memory.train.tensors(memory.device_samples(5)))


def test_a_run_from_the_disk_gives_the_metrics_of_a_run_from_memory(tmp_path):
    rows = {}
    for mode in ("memory", "disk"):
        run = scenario(**{"data.store": {"mode": mode, "cache": str(tmp_path / "cache")},
                          "evaluation": {"every": 1, "devices": {}}})
        result = run_scenario(run, tmp_path / mode)
        assert result.summary["status"] == "completed"
        rows[mode] = [{k: v for k, v in row.items() if "wall" not in k} for row in result.rows]
    assert rows["disk"] == rows["memory"]
    assert (tmp_path / "cache").is_dir()


def test_auto_keeps_small_populations_in_memory_and_writes_large_ones(tmp_path):
    from emulator.scenario.data import DISK_FROM_DEVICES

    small = scenario(**{"data.store": {"cache": str(tmp_path)}})
    assert small.data.store.mode == "auto" and not small.data.store.on_disk(small.population.devices)
    assert federation_for(small.data, 60, 3).stored is None
    assert small.data.store.on_disk(DISK_FROM_DEVICES)
    assert scenario(**{"data.store": "disk"}).data.store.mode == "disk"  # the shorthand


def test_a_federation_larger_than_memory_is_built_in_unlinked_scratch_files(tmp_path, monkeypatch):
    """Under scratch_space a builder's large arrays are memory maps of files already removed, and the data
    drawn a chunk at a time into them is the data drawn at once into memory."""
    import emulator.data.scratch as scratch
    import emulator.data.synthetic as synthetic
    from emulator.scenario import SyntheticConfig

    for iid in (True, False):
        cfg = SyntheticConfig(iid=iid, min_samples=5, max_samples=40)
        whole = synthetic.generate_synthetic(cfg, 300, np.random.default_rng(11))
        monkeypatch.setattr(scratch, "LARGE_BYTES", 1024)
        monkeypatch.setattr(synthetic, "CHUNK_BYTES", 3000)  # a few devices a chunk, a device split never
        with scratch.scratch_space(tmp_path) as directory:
            train, test, per_device = synthetic.generate_synthetic(cfg, 300, np.random.default_rng(11))
            assert isinstance(train.x, np.memmap) and isinstance(test.x, np.memmap)
            assert list(directory.iterdir()) == []  # unlinked: nothing left behind if the process dies
        assert not directory.exists()
        monkeypatch.undo()
        assert np.array_equal(train.x, whole[0].x) and np.array_equal(train.y, whole[0].y)
        assert np.array_equal(test.x, whole[1].x) and np.array_equal(test.y, whole[1].y)
        assert all(np.array_equal(a, b) for a, b in zip(per_device, whole[2]))


def test_a_pool_larger_than_the_page_cache_is_stored_by_the_sequential_gather_with_the_same_bytes(tmp_path,
                                                                                                monkeypatch):
    """A scratch-built pool that memory could not cache is written by data/gather.py's two passes (the source
    read once, in order); the stored federation is the one the plain chunked gather writes."""
    import emulator.data.gather as gather
    import emulator.data.scratch as scratch
    import emulator.data.store as store

    run = scenario(**{"population.devices": 200})
    plain = open_federation(write_federation(built(run), tmp_path / "plain", "k"))
    monkeypatch.setattr(scratch, "LARGE_BYTES", 1024)  # the pool in unlinked scratch files
    monkeypatch.setattr(store, "available_memory", lambda: 8192)  # too large to cache: the two-pass gather
    monkeypatch.setattr(store, "CHUNK_BYTES", 2048)  # ... in many chunks and buckets
    passes = []
    monkeypatch.setattr(gather, "_into_buckets", lambda *a, original=gather._into_buckets: passes.append(1) or
                        original(*a))
    with scratch.scratch_space(tmp_path / "scratch"):
        federation = built(run)
        assert isinstance(federation.train.x, np.memmap)
        stored = open_federation(write_federation(federation, tmp_path / "gathered", "k"))
    assert passes  # the sequential gather wrote the training columns
    for name in ("train_x", "train_y", "device_offsets", "label_counts", "test_x", "local_x", "local_offsets"):
        assert np.array_equal(np.load(tmp_path / "plain" / f"{name}.npy"),
                              np.load(tmp_path / "gathered" / f"{name}.npy")), name
    assert np.array_equal(stored.train.x, plain.train.x)


def test_a_process_that_cannot_see_the_stored_data_opens_its_node_s_copy_or_says_what_to_do(tmp_path, monkeypatch):
    stored = open_federation(write_federation(built(scenario()), tmp_path / "k", "k"))
    shipped = pickle.dumps(stored)
    (tmp_path / "k").rename(tmp_path / "elsewhere")  # as a node without the driver's file system sees it
    with pytest.raises(FileNotFoundError, match=r"data.store.cache .* every node mounts.*docs/cluster.md"):
        pickle.loads(shipped)
    monkeypatch.setenv("EMULATOR_DATA_CACHE", str(tmp_path / "node"))  # this node's own copy, made for a run
    (tmp_path / "node").mkdir()
    (tmp_path / "elsewhere").rename(tmp_path / "node" / "k")
    copy = pickle.loads(shipped)
    assert copy.stored == str(tmp_path / "node" / "k") and np.array_equal(copy.train.y, stored.train.y)

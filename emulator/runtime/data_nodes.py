"""A run's stored data on every node of a Ray cluster: found where the driver wrote it, or copied there once.

data.store: disk hands each process the directory of the run's data (data/store.py), and every runner maps
its files. On a cluster whose nodes share a file system the driver's directory is the same everywhere and
nothing moves. A node that cannot see it gets a copy in its own data cache (its $EMULATOR_DATA_CACHE, else
~/.cache/emulator/federations), sent in chunks through the object store once per node and data, and checked
against the driver's sizes and digests before it is renamed into place; a later run of the same data finds
it there. A process on that node then opens its copy (store.reopen looks there when the driver's path is
missing).
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from emulator.data.store import StoreDamaged, default_cache, open_federation, read_meta, stored_places

CHUNK_BYTES = 32 << 20  # one object in the store at a time per chunk: bounded, whatever the data's size
IN_FLIGHT = 4           # chunks on their way to a node at once


def place_on_every_node(directory: str, notify) -> list[str]:
    """Make the stored data at `directory` readable on every alive node; returns the ids of the nodes it was
    copied to. Raises OSError naming the node and what to do when a node has no room for it."""
    key = Path(directory).name
    meta = read_meta(Path(directory))
    copied = []
    here = None if ray.util.client.ray.is_connected() else ray.get_runtime_context().get_node_id()
    for node in _alive_nodes():
        if node == here:  # the driver wrote or opened the directory on this node itself
            continue
        keeper = NodeKeeper.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
        try:
            if ray.get(keeper.find.remote(directory, key)) is not None:
                continue
            started = time.perf_counter()
            target = _copy(Path(directory), meta, keeper)
            notify(f"data copied to node {node[:12]} ({_size(meta) / 1e9:.2f} GB, {time.perf_counter() - started:.1f}"
                   f" s): {target}")
            copied.append(node)
        finally:
            ray.kill(keeper)  # its process (torch imported: ~320 MB) goes: nothing of it is needed after
    return copied


def _alive_nodes() -> list[str]:
    return sorted(node["NodeID"] for node in ray.nodes() if node.get("Alive"))


def _size(meta: dict) -> int:
    """The stored data's bytes, as its meta.json gives them."""
    return sum(f["bytes"] for f in meta["files"].values())


def _copy(directory: Path, meta: dict, keeper) -> str:
    temporary = ray.get(keeper.begin.remote(directory.name, _size(meta)))
    try:
        for path in [directory / f"{name}.npy" for name in meta["files"]] + [directory / "meta.json"]:  # meta last
            pending = []
            with open(path, "rb") as source:
                for offset in range(0, max(1, path.stat().st_size), CHUNK_BYTES):
                    pending.append(keeper.write.remote(temporary, path.name, offset, source.read(CHUNK_BYTES)))
                    if len(pending) >= IN_FLIGHT:
                        done, pending = ray.wait(pending, num_returns=1)
                        ray.get(done)
            ray.get(pending)
        return ray.get(keeper.finish.remote(temporary, directory.name))
    except BaseException:
        ray.get(keeper.discard.remote(temporary))
        raise


# ------------------------------------------------------------------------------------- on the node
@ray.remote(num_cpus=0, max_restarts=0)
class NodeKeeper:
    """One process on a node for one placement: it looks for the data there and, when missing, receives the
    copy chunk by chunk (one process start per node, not one per chunk)."""

    def find(self, directory: str, key: str) -> str | None:
        """Where this node holds the data of `key`, whole (sizes and digests): the driver's path, or its copy."""
        for candidate in stored_places(directory):
            try:
                open_federation(candidate, verify=True, key=key)
                return str(candidate)
            except (StoreDamaged, OSError):
                continue
        return None

    def begin(self, key: str, needed: int) -> str:
        """A fresh temporary directory in this node's data cache, after checking that the data fits there."""
        import socket

        cache = default_cache()
        cache.mkdir(parents=True, exist_ok=True)
        free = shutil.disk_usage(cache).free
        if free < needed:
            raise OSError(f"node {socket.gethostname()} cannot see the run's data and has {free / 1e9:.1f} GB free "
                          f"in its data cache {cache}, {needed / 1e9:.1f} GB needed for a copy: free space there, "
                          "point its $EMULATOR_DATA_CACHE at a larger disk, or set data.store.cache to a directory "
                          "every node mounts")
        temporary = cache / f".{key}.copy.{os.getpid()}.{time.monotonic_ns()}"
        temporary.mkdir()
        return str(temporary)

    def write(self, temporary: str, name: str, offset: int, chunk: bytes) -> None:
        handle = os.open(Path(temporary) / name, os.O_WRONLY | os.O_CREAT, 0o644)  # chunks land in any order
        try:
            os.pwrite(handle, chunk, offset)
        finally:
            os.close(handle)

    def finish(self, temporary: str, key: str) -> str:
        """The copy checked against the driver's meta.json (sizes, digests, key), then renamed into place."""
        final = default_cache() / key
        try:
            open_federation(Path(temporary), verify=True, key=key)
        except StoreDamaged as exc:
            shutil.rmtree(temporary, ignore_errors=True)
            raise OSError(f"the copy of the run's data on this node does not match the driver's ({exc})") from None
        if final.exists():  # another run copied the same data meanwhile: the key says it is the same
            shutil.rmtree(temporary, ignore_errors=True)
        else:
            os.replace(temporary, final)
        return str(final)

    def discard(self, temporary: str) -> None:
        shutil.rmtree(temporary, ignore_errors=True)

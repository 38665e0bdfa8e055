"""What the data cache holds, and pruning it (`emulator cache`). A federation is written once per content key
(emulator/data/store.py), and the key names the code that made the data, so each version of the emulator that
changes emulator/data/ adds a copy beside the last (1.1 GB for population_100k): nothing else removes them.
A run that opens a federation stamps its directory's time, so the copies can be told apart by last use.

Removing a federation is always safe for results: a run that needs it again builds and writes it again. A
process that has it open keeps reading its files (the system frees them when the last map closes)."""
from __future__ import annotations

import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

DAY_S = 86_400.0
UNFINISHED_AFTER_S = DAY_S  # a temporary directory older than this is a write that was cut short


@dataclass(frozen=True)
class CachedFederation:
    path: Path
    bytes: int
    last_used: float  # the directory's time: when it was written, or last opened by a run
    dataset: str = "?"
    devices: int = 0
    unfinished: bool = False  # a write under way, or cut short (a killed process's), or damaged


# what the store writes (data/store.py, data/scratch.py, runtime/data_nodes.py): a federation under its key, and
# while writing, the key's temporary directory (.KEY.PID.NS, a node's .KEY.copy.PID.NS, one moved aside .old)
# or a build's scratch (.scratch-...); nothing else in a cache is listed or ever removed
KEY = re.compile(r"[^.][^/]*-\d+-[0-9a-f]{20}")
UNFINISHED = re.compile(r"\.(" + KEY.pattern + r")(\.copy)?\.\d+\.\d+(\.old)?|\.scratch-.+")


def holdings(cache: Path) -> list[CachedFederation]:
    """The federations (and unfinished writes) in `cache`, least recently used first."""
    cache = Path(cache)
    if not cache.is_dir():
        return []
    found = []
    for entry in cache.iterdir():
        if not entry.is_dir() or not (KEY.fullmatch(entry.name) or UNFINISHED.fullmatch(entry.name)):
            continue
        size, used = _size(entry), entry.stat().st_mtime
        try:
            meta = json.loads((entry / "meta.json").read_text()) if KEY.fullmatch(entry.name) else None
        except (OSError, ValueError):  # a federation's directory without its meta.json: damaged, never read
            meta = None
        if meta is None or meta.get("key") != entry.name:
            found.append(CachedFederation(entry, size, used, unfinished=True))
            continue
        dataset = str(meta.get("described", {}).get("data", {}).get("dataset", "?"))
        found.append(CachedFederation(entry, size, used, dataset, int(meta.get("devices", 0))))
    return sorted(found, key=lambda held: (held.last_used, held.path.name))


def to_remove(held: list[CachedFederation], keep_bytes: int | None = None, unused_days: float | None = None,
              now: float | None = None) -> list[CachedFederation]:
    """Which of `held` (least recently used first) to remove: unfinished writes older than a day, those unused
    for `unused_days`, then the least recently used until the rest fit in `keep_bytes`."""
    now = time.time() if now is None else now
    gone = [h for h in held if (h.unfinished and now - h.last_used > UNFINISHED_AFTER_S)
            or (unused_days is not None and now - h.last_used > unused_days * DAY_S)]
    if keep_bytes is not None:
        kept = sum(h.bytes for h in held if h not in gone)
        for h in held:
            if kept <= keep_bytes:
                break
            if h not in gone and not (h.unfinished and now - h.last_used <= UNFINISHED_AFTER_S):
                gone.append(h)
                kept -= h.bytes
    return [h for h in held if h in gone]


def remove(held: list[CachedFederation]) -> int:
    """Remove them; the bytes freed."""
    freed = 0
    for h in held:
        shutil.rmtree(h.path, ignore_errors=True)
        freed += 0 if h.path.exists() else h.bytes
    return freed


def stamp_used(directory: Path) -> None:
    """Mark a federation as used now (its directory's time); a cache on a read-only disk keeps its times."""
    try:
        os.utime(directory)
    except OSError:
        pass


def upkeep(cache: Path, keep_bytes: int | None, unused_days: float | None, prune: bool) -> str:
    """`emulator cache`: what `cache` holds, those the criteria pick marked, and with `prune` removed."""
    held = holdings(cache)
    if not held:
        return f"the data cache {cache} holds no federations"
    picked = to_remove(held, keep_bytes, unused_days)
    lines = [f"the data cache {cache}: {len(held)} directories, {gigabytes(sum(h.bytes for h in held))}, "
             "least recently used first", table(held, picked)]
    if not picked:
        lines.append("nothing to remove" + ("" if keep_bytes is not None or unused_days is not None else
                                            " (--keep-gb or --unused-days picks what to)"))
    elif prune:
        lines.append(f"removed {len(picked)} ({gigabytes(remove(picked))}); a run that needs one again writes it "
                     "again")
    else:
        lines.append(f"- would be removed: {len(picked)}, {gigabytes(sum(h.bytes for h in picked))} "
                     "(add --prune to remove them)")
    return "\n".join(lines)


def table(held: list[CachedFederation], marked: list[CachedFederation] = ()) -> str:
    """The holdings as lines, those `marked` flagged (to be removed)."""
    lines = [f"{'':2}{'last used':16}  {'size':>9}  {'devices':>10}  {'dataset':14}  directory"]
    for h in held:
        used = time.strftime("%Y-%m-%d %H:%M", time.localtime(h.last_used))
        what = "(unfinished write)" if h.unfinished else h.dataset
        lines.append(f"{'- ' if h in marked else '  '}{used:16}  {gigabytes(h.bytes):>9}  "
                     f"{h.devices:>10,}  {what:14}  {h.path.name}")
    return "\n".join(lines)


def gigabytes(count: int) -> str:
    return f"{count / 1e9:.2f} GB"


def _size(directory: Path) -> int:
    total = 0
    for root, _, files in os.walk(directory):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:  # removed while we looked (another process's write, or a prune)
                pass
    return total

"""The data cache's upkeep (emulator/data/cache_upkeep.py, `emulator cache`): what it holds by last use, and
pruning it by size or age without touching what it keeps; a pruned federation is written again when needed."""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from emulator.cli import main
from emulator.data import federation_for
from emulator.data.cache_upkeep import DAY_S, CachedFederation, holdings, to_remove
from test_store import scenario


def stored(cache, seed: int):
    """A small federation written to (or read from) `cache` for this seed; its directory."""
    run = scenario(seed=seed, **{"data.store": {"mode": "disk", "cache": str(cache)}})
    return federation_for(run.data, run.population.devices, run.seed, None, lambda line: None).stored


def aged(directory, days: float) -> None:
    when = time.time() - days * DAY_S
    os.utime(directory, (when, when))


def test_the_cache_lists_its_federations_least_recently_used_first_and_a_run_s_open_counts_as_use(tmp_path):
    first, second = stored(tmp_path, 1), stored(tmp_path, 2)
    aged(first, 3)
    aged(second, 2)
    held = holdings(tmp_path)
    assert [h.path.name for h in held] == [os.path.basename(first), os.path.basename(second)]
    assert all(h.dataset == "synthetic" and h.devices == 60 and not h.unfinished for h in held)
    assert held[0].bytes == sum(f.stat().st_size for f in held[0].path.iterdir()) > 0

    assert stored(tmp_path, 1) == first  # read again, not rewritten: now the most recently used
    assert [h.path.name for h in holdings(tmp_path)] == [os.path.basename(second), os.path.basename(first)]


def test_pruning_picks_the_least_recently_used_until_the_rest_fit_and_those_unused_too_long():
    now = 1e9
    old, middle, new = (CachedFederation(Path(name), 10, now - days * DAY_S)
                        for name, days in (("old", 40), ("middle", 10), ("new", 1)))
    cut_short = CachedFederation(Path(".old.123.4"), 5, now - 2 * DAY_S, unfinished=True)
    being_written = CachedFederation(Path(".new.123.5"), 5, now - 60, unfinished=True)
    held = [old, middle, new]
    assert to_remove(held, now=now) == []
    assert to_remove(held, keep_bytes=20, now=now) == [old]
    assert to_remove(held, keep_bytes=10, now=now) == [old, middle]
    assert to_remove(held, keep_bytes=0, now=now) == held
    assert to_remove(held, unused_days=30, now=now) == [old]
    assert to_remove(held, keep_bytes=15, unused_days=5, now=now) == [old, middle]
    # a write cut short over a day ago goes with any prune; one under way is never picked, even to fit
    mixed = [cut_short, old, being_written, new]
    assert to_remove(mixed, now=now) == [cut_short]
    assert to_remove(mixed, keep_bytes=0, now=now) == [cut_short, old, new]


def test_emulator_cache_marks_then_prunes_and_a_pruned_federation_is_written_again(tmp_path, capsys):
    first, second = stored(tmp_path, 1), stored(tmp_path, 2)
    aged(first, 5)
    leftover = tmp_path / f".{os.path.basename(first)}.999.1"  # a write a killed process left two days ago
    leftover.mkdir()
    (leftover / "train_x.npy").write_bytes(b"x" * 100)
    aged(leftover, 2)
    yours = tmp_path / "notes"  # not the store's: never listed, never removed, whatever the budget
    yours.mkdir()
    (yours / "a.txt").write_text("mine")
    aged(yours, 90)

    assert main(["cache", "--dir", str(tmp_path), "--unused-days", "1"]) == 0
    listing = capsys.readouterr().out
    assert "3 directories" in listing and "(unfinished write)" in listing and "would be removed: 2" in listing
    assert os.path.isdir(first) and leftover.is_dir()  # only listed

    assert main(["cache", "--dir", str(tmp_path), "--unused-days", "1", "--prune"]) == 0
    assert "removed 2" in capsys.readouterr().out
    assert not os.path.exists(first) and not leftover.exists() and os.path.isdir(second)
    assert main(["cache", "--dir", str(tmp_path), "--keep-gb", "0", "--prune"]) == 0
    assert "notes" not in capsys.readouterr().out and (yours / "a.txt").read_text() == "mine"
    assert not os.path.exists(second)

    lines = []
    run = scenario(seed=1, **{"data.store": {"mode": "disk", "cache": str(tmp_path)}})
    again = federation_for(run.data, run.population.devices, run.seed, None, lines.append)
    assert again.stored == first and lines[0].startswith("data written to")


def test_emulator_cache_refuses_a_negative_budget_naming_the_option(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["cache", "--dir", str(tmp_path), "--keep-gb", "-1"])
    assert stop.value.code == 2 and "--keep-gb: -1 is too small" in capsys.readouterr().err

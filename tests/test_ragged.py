"""Token sequences of different lengths (emulator/data/ragged.py): stored as tokens plus a second offsets level,
read as fixed-width left-padded rows, the same from memory and from the disk format."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import emulator
from conftest import small_scenario
from emulator.data.federation import ArrayDataset, Federation
from emulator.data.ragged import RaggedRows
from emulator.data.store import open_federation, write_federation
from emulator.errors import ScenarioError


def sequences(seed: int, n: int, vocab: int = 12, longest: int = 15) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, size=rng.integers(0, longest + 1)).astype(np.int32) for _ in range(n)]


def padded_by_hand(rows, length: int, pad: int) -> np.ndarray:
    out = np.full((len(rows), length), pad)
    for i, row in enumerate(rows):
        tail = row[-length:] if len(row) else row
        out[i, length - len(tail):] = tail
    return out


@pytest.mark.parametrize("length", [4, 15, 20])
def test_rows_are_left_padded_or_cut_to_their_last_tokens(length):
    rows = sequences(0, 50)
    ragged = RaggedRows.from_sequences(rows, length=length, pad=-1)
    picked = np.array([7, 0, 7, 49, 3])
    assert np.array_equal(ragged[picked], padded_by_hand([rows[i] for i in picked], length, -1))
    assert np.array_equal(ragged[2], padded_by_hand([rows[2]], length, -1)[0])
    assert np.array_equal(np.asarray(ragged), padded_by_hand(rows, length, -1))
    taken = ragged.take(picked)  # rows of their own: the same tokens, no padding stored
    assert np.array_equal(taken[:], ragged[picked]) and len(taken.values) == sum(len(rows[i]) for i in picked)
    assert ragged.shape == (50, length) and RaggedRows.from_sequences(rows).length == max(map(len, rows))


def test_the_disk_format_stores_tokens_and_offsets_and_reads_the_rows_memory_gives(tmp_path):
    rows, labels = sequences(1, 300), np.arange(300) % 3
    train = ArrayDataset(RaggedRows.from_sequences(rows, length=10), labels, 3)
    test = ArrayDataset(RaggedRows.from_sequences(rows[:40], length=10), labels[:40], 3)
    per_device = [np.random.default_rng(d).permutation(np.arange(d * 25, d * 25 + 25)) for d in range(11)]
    federation = Federation.from_lists(train, test, per_device, np.arange(275, 300))
    stored = open_federation(write_federation(federation, tmp_path / "k", "k"))

    for device in range(11):  # device after device, in each device's own order
        assert all(np.array_equal(a, b) for a, b in zip(federation.train.tensors(federation.device_samples(device)),
                                                        stored.train.tensors(stored.device_samples(device))))
    assert np.array_equal(federation.train.x[federation.server_indices], stored.train.x[stored.server_indices])
    assert np.array_equal(np.asarray(federation.test.x), np.asarray(stored.test.x))
    meta = json.loads((tmp_path / "k" / "meta.json").read_text())
    assert meta["ragged"]["train_x"] == {"length": 10, "pad": 0}
    tokens = meta["files"]["train_x.values"]["shape"][0]
    assert tokens == sum(len(r) for r in rows) < 300 * 10  # the tokens themselves, not padded rows
    inputs, _ = stored.train.tensors(stored.device_samples(0))
    assert inputs.dtype.is_floating_point is False and tuple(inputs.shape) == (25, 10)


def text_task(seed: int, n: int):
    """Label: the last token (12 classes, the vocabulary), which an LSTM reading the last position can learn."""
    rows = [row if len(row) else np.array([1], np.int32) for row in sequences(seed, n)]
    return rows, np.array([int(row[-1]) for row in rows])


def test_token_sequences_from_python_train_the_same_from_memory_and_from_disk(tmp_path):
    rows, labels = text_task(2, 480)
    test_rows, test_labels = text_task(3, 120)
    devices = [np.arange(d * 12, d * 12 + 12) for d in range(40)]
    labels[0] = test_labels[0] = 0  # every class 0..11 can occur: the vocabulary is the 12 classes
    scenario = small_scenario(rounds=2, model={"name": "char_lstm", "embedding": 4, "hidden": 8, "layers": 1})
    scenario["data"].pop("partition")
    metrics = {}
    for mode in ("memory", "disk"):
        result = emulator.run(scenario, data=(rows, labels, test_rows, test_labels), devices=devices,
                              out=tmp_path / mode, progress=False,
                              overrides={"data.store": {"mode": mode, "cache": str(tmp_path / "cache")}})
        assert result.summary["status"] == "completed"
        with open(tmp_path / mode / "metrics.csv") as handle:
            metrics[mode] = [{k: v for k, v in row.items() if "wall" not in k} for row in csv.DictReader(handle)]
    assert metrics["disk"] == metrics["memory"] and len(metrics["disk"]) == 2
    (stored,) = (tmp_path / "cache").iterdir()
    assert (stored / "train_x.values.npy").is_file() and (stored / "test_x.offsets.npy").is_file()


def test_sequences_that_are_not_token_ids_are_refused_by_name():
    floats = [np.zeros(3, np.float32), np.zeros(5, np.float32)]
    with pytest.raises(ScenarioError, match="token sequences"):
        emulator.run(small_scenario(), data=(floats, [0, 1], floats, [0, 1]), progress=False)

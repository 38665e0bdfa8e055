"""LEAF's JSON data sets (FEMNIST, Shakespeare) from small files written in LEAF's format; char_lstm; int inputs."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch

import emulator.data.leaf as leaf
from emulator.data import DataUnavailableError, Federation
from emulator.data.federation import ArrayDataset
from emulator.data.leaf import (ALL_LETTERS, decode_text, encode_text, leaf_classes, leaf_input_shape, load_leaf,
                                read_leaf_file)
from emulator.scenario import ScenarioError
from emulator.models.text import char_lstm
from emulator.training.local import LocalTraining, as_device_tensors, evaluate, seeded_generator, train_locally
from leaf_fixtures import SHAKESPEARE_TEXT, femnist_users, shakespeare_users, windows, write_leaf

SIZES = {"writer_b": (5, 2), "writer_a": (3, 1), "writer_d": (1, 1), "writer_c": (4, 2), "writer_e": (6, 2)}


@pytest.fixture
def femnist(tmp_path):
    users = femnist_users(SIZES)
    return write_leaf(tmp_path / "femnist", users, hierarchies=True), users


@pytest.fixture
def shakespeare(tmp_path):
    users = shakespeare_users({"HAMLET": (30, 6), "OPHELIA": (12, 3), "GHOST": (2, 1), "POLONIUS": (20, 4)})
    return write_leaf(tmp_path / "shakespeare", users, files=3), users


# --------------------------------------------------------------------------------------------- vocabulary
def test_vocabulary_is_leafs_80_characters_and_round_trips():
    assert len(ALL_LETTERS) == 80 and len(set(ALL_LETTERS)) == 80
    assert ALL_LETTERS[0] == "\n" and ALL_LETTERS[-1] == "}" and ALL_LETTERS.index("a") == 53
    assert leaf_classes("shakespeare") == 80 and leaf_input_shape("shakespeare") == (80,)
    assert leaf_classes("femnist") == 62 and leaf_input_shape("femnist") == (1, 28, 28)
    tokens = encode_text(ALL_LETTERS)
    assert tokens.dtype == np.int16 and tokens.tolist() == list(range(80))
    assert decode_text(encode_text(SHAKESPEARE_TEXT)) == SHAKESPEARE_TEXT
    # outside the vocabulary (LEAF's find() = -1): the last character, which Shakespeare does not use
    assert encode_text("a|\u00e6b").tolist() == [53, 79, 79, 54]


# --------------------------------------------------------------------------------------------- users = devices
def test_femnist_users_become_devices_with_exactly_their_samples(femnist):
    root, users = femnist
    train, test, per_device = load_leaf("femnist", root)
    order = sorted(users)  # devices in sorted user-id order
    assert len(per_device) == len(order)
    assert train.x.dtype == np.uint8 and train.x.shape[1:] == (1, 28, 28) and train.num_classes == 62
    assert train.mean is None and train.input_shape == leaf_input_shape("femnist")
    for device, user in enumerate(order):
        idx = per_device[device]
        assert idx.dtype == np.int64 and len(idx) == SIZES[user][0]
        expected = np.asarray(users[user][0], np.float32).reshape(-1, 1, 28, 28)
        np.testing.assert_array_equal(train.x[idx], np.rint(expected * 255).astype(np.uint8))
        assert train.y[idx].tolist() == users[user][1]
    flat = np.concatenate(per_device)
    assert sorted(flat.tolist()) == list(range(len(train)))  # every sample is one device's
    # the pooled test set: every user's held-out samples, in device order
    assert len(test) == sum(n for _, n in SIZES.values())
    assert test.y.tolist() == sum((users[u][3] for u in order), [])
    # uint8 images still reach models as floats in [0, 1], exactly LEAF's values
    x, _ = train.tensors(per_device[0])
    assert x.dtype == torch.float32
    np.testing.assert_allclose(x.numpy().reshape(len(x), -1), np.asarray(users[order[0]][0]), atol=1e-6)


def test_shakespeare_users_become_devices_and_tokens_reach_models_as_int64(shakespeare):
    root, users = shakespeare
    train, test, per_device = load_leaf("shakespeare", root)
    order = sorted(users)
    assert train.x.dtype == np.int16 and train.x.shape[1:] == (80,) and train.num_classes == 80
    for device, user in enumerate(order):
        idx = per_device[device]
        assert [decode_text(row) for row in train.x[idx]] == users[user][0]
        assert decode_text(train.y[idx]) == "".join(users[user][1])
    assert decode_text(test.y) == "".join("".join(users[u][3]) for u in order)
    federation = Federation.from_lists(train, test, per_device)
    x, y = as_device_tensors(*federation.train.tensors(federation.device_samples(1)), torch.device("cpu"))
    assert x.dtype == torch.int64 and y.dtype == torch.int64 and x.shape == (len(users[order[1]][0]), 80)
    assert federation.label_counts().sum() == len(train)


def test_users_min_samples_and_pick_are_deterministic(femnist):
    root, users = femnist
    order = sorted(users)
    picked = {}
    for seed in range(6):
        train, _, per_device = load_leaf("femnist", root, users=3, seed=seed)
        again = load_leaf("femnist", root, users=3, seed=seed)
        np.testing.assert_array_equal(train.x, again[0].x)
        assert [p.tolist() for p in per_device] == [p.tolist() for p in again[2]]
        picked[seed] = tuple(int(train.y[p[0]]) for p in per_device)
        assert len(per_device) == 3
    assert len(set(picked.values())) > 1  # the seed picks the users
    train, test, per_device = load_leaf("femnist", root, users=2, pick="first")
    assert [len(p) for p in per_device] == [SIZES["writer_a"][0], SIZES["writer_b"][0]]
    assert test.y.tolist() == users["writer_a"][3] + users["writer_b"][3]  # only the kept users' test data
    # min_samples counts training samples; users below it are never devices
    train, _, per_device = load_leaf("femnist", root, min_samples=4)
    assert [len(p) for p in per_device] == [SIZES[u][0] for u in order if SIZES[u][0] >= 4]
    with pytest.raises(DataUnavailableError, match=r"data.options.users: 6 users asked for.*holds 5"):
        load_leaf("femnist", root, users=6)


def test_test_users_held_out_whole_are_pooled(tmp_path):
    users = femnist_users(SIZES)
    root = write_leaf(tmp_path, users, split="user")
    _, test, per_device = load_leaf("femnist", root, users=2, pick="first")
    assert len(per_device) == 2 and len(test) == sum(n for _, n in SIZES.values())


def test_files_may_sit_under_data_and_num_samples_is_optional(tmp_path, monkeypatch):
    users = shakespeare_users({"A": (3, 1), "B": (2, 1)})
    write_leaf(tmp_path / "data", users, num_samples=False)
    train, test, per_device = load_leaf("shakespeare", tmp_path)
    assert [len(p) for p in per_device] == [3, 2] and len(test) == 2
    monkeypatch.setenv("EMULATOR_DATA", str(tmp_path / "cache"))  # the default root: $EMULATOR_DATA/<name>
    write_leaf(tmp_path / "cache" / "shakespeare", users)
    assert len(load_leaf("shakespeare")[0]) == 5


@pytest.mark.heavy
# --------------------------------------------------------------------------------------------- int tokens train
def test_char_lstm_is_leafs_model_and_learns_a_repeating_text():
    model = char_lstm((80,), 80)
    assert sum(p.numel() for p in model.parameters()) == 819_920  # LEAF's 817,872 + PyTorch's second biases
    assert model.embed.embedding_dim == 8 and model.lstm.hidden_size == 256 and model.lstm.num_layers == 2
    x, y = windows("abcdefg" * 30)
    data = ArrayDataset(np.stack([encode_text(s) for s in x]), encode_text("".join(y)).astype(np.int64), 80)
    federation = Federation.from_lists(data, data, [np.arange(len(data))])
    inputs, labels = as_device_tensors(*federation.train.tensors(federation.device_samples(0)), torch.device("cpu"))
    assert inputs.dtype == torch.int64
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as runners train
    try:
        torch.manual_seed(0)
        model = char_lstm((80,), 80)
        before, _ = evaluate(model, inputs, labels, 64)  # ln 80 = 4.38
        spec = LocalTraining(lr=0.02, batch_size=8, local_steps=10, optimizer="adam")  # a second on one thread
        stats = train_locally(model, inputs, labels, spec, seeded_generator(0))
        after, _ = evaluate(model, inputs, labels, 64)
    finally:
        torch.set_num_threads(threads)
    assert stats.steps == 10 and after < 0.6 * before  # at least down to the 7 letters' ln 7 = 1.95 or so


def test_char_lstm_refuses_images_clearly():
    with pytest.raises(ValueError, match=r"char_lstm: needs sequences of token ids.*\(1, 28, 28\)"):
        char_lstm((1, 28, 28), 62)
    with pytest.raises(TypeError, match="integer token ids"):
        char_lstm((80,), 80)(torch.zeros(2, 80))


def test_float_and_uint8_inputs_are_unchanged():
    images = ArrayDataset(np.full((2, 1, 2, 2), 255, np.uint8), np.zeros(2, np.int64), 2, (0.5,), (0.5,))
    x, _ = images.tensors()
    assert x.dtype == torch.float32 and torch.all(x == 1.0)
    features = ArrayDataset(np.ones((2, 3), np.float64), np.zeros(2, np.int64), 2)
    assert features.tensors()[0].dtype == torch.float32
    tokens = ArrayDataset(np.array([[1, 2], [3, 4]], np.int32), np.zeros(2, np.int64), 5, (0.5,), (0.5,))
    x, _ = tokens.tensors(np.array([1]))
    assert x.dtype == torch.int64 and x.tolist() == [[3, 4]]  # never normalised


# --------------------------------------------------------------------------------------------- bad input
def test_missing_root_says_where_leaf_data_comes_from(tmp_path):
    with pytest.raises(ScenarioError) as info:
        load_leaf("shakespeare", tmp_path / "nowhere")
    message = str(info.value)
    assert "data.root" in message and str(tmp_path / "nowhere") in message
    assert "preprocess.sh" in message and "github.com/TalwalkarLab/leaf" in message
    (tmp_path / "only" / "train").mkdir(parents=True)
    (tmp_path / "only" / "train" / "a.json").write_text("{}")
    with pytest.raises(DataUnavailableError, match=r"test holds no .json files.*-t sample"):
        load_leaf("shakespeare", tmp_path / "only")
    with pytest.raises(DataUnavailableError, match="not a LEAF data set; choose one of femnist, shakespeare"):
        load_leaf("sent140", tmp_path)


def _corrupt(root, user, edit):
    """Edit the train file that holds `user`; returns its path."""
    path = next(p for p in sorted((root / "train").glob("*.json")) if user in json.loads(p.read_text())["users"])
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("edit, field, problem", [
    (lambda d: d.pop("user_data"), "user_data", "missing"),
    (lambda d: d.__setitem__("users", "HAMLET"), "users", "must be a list"),
    (lambda d: d["users"].append("NOBODY") or d["num_samples"].append(3), r"user_data\['NOBODY'\]", "missing"),
    (lambda d: d["user_data"]["GHOST"]["x"].pop(), r"user_data\['GHOST'\]", "x has 1 samples but y has 2"),
    (lambda d: d["user_data"]["GHOST"]["x"].__setitem__(1, "too short"), r"user_data\['GHOST'\].x\[1\]",
     "string of 80 characters, got 9 characters"),
    (lambda d: d["user_data"]["GHOST"]["y"].__setitem__(0, "ab"), r"user_data\['GHOST'\].y\[0\]", "one character"),
    (lambda d: d["num_samples"].__setitem__(0, 99), r"num_samples\[0\]", "says 99 samples"),
])
def test_malformed_shakespeare_file_names_file_and_field(shakespeare, edit, field, problem):
    root, _ = shakespeare
    path = _corrupt(root, "GHOST", edit)
    with pytest.raises(DataUnavailableError, match=problem) as info:
        load_leaf("shakespeare", root)
    assert str(info.value).startswith(f"data.root: {path}: ")
    assert info.match(field)


@pytest.mark.parametrize("edit, field, problem", [
    (lambda d: d["user_data"]["writer_b"]["x"][1].pop(), r"user_data\['writer_b'\].x\[1\]", "list of 784"),
    (lambda d: d["user_data"]["writer_b"]["x"][0].__setitem__(3, 7.0), r"user_data\['writer_b'\].x\[0\]",
     r"in \[0, 1\]"),
    (lambda d: d["user_data"]["writer_b"]["y"].__setitem__(2, 62), r"user_data\['writer_b'\].y\[2\]",
     "label 62 is outside 0..61"),
    (lambda d: d["user_data"]["writer_b"]["y"].__setitem__(2, "A"), r"user_data\['writer_b'\].y\[2\]",
     "integer class"),
])
def test_malformed_femnist_file_names_file_and_field(femnist, edit, field, problem):
    root, _ = femnist
    path = _corrupt(root, "writer_b", edit)
    with pytest.raises(DataUnavailableError, match=problem) as info:
        load_leaf("femnist", root)
    assert str(info.value).startswith(f"data.root: {path}: ") and info.match(field)


def test_invalid_json_and_duplicate_users_are_named(femnist):
    root, _ = femnist
    paths = sorted((root / "train").glob("*.json"))
    first = json.loads(paths[0].read_text())
    second = json.loads(paths[1].read_text())
    second["users"].append(first["users"][0])
    second["num_samples"].append(first["num_samples"][0])
    second["user_data"][first["users"][0]] = first["user_data"][first["users"][0]]
    paths[1].write_text(json.dumps(second))
    with pytest.raises(DataUnavailableError, match=re.escape(f"user '{first['users'][0]}' is also in {paths[0]}")):
        load_leaf("femnist", root)
    paths[1].write_text('{"users": [')
    with pytest.raises(DataUnavailableError, match=re.escape(f"{paths[1]}: not valid JSON")):
        read_leaf_file("femnist", paths[1])


def test_parsed_files_are_cached_until_they_change(shakespeare, monkeypatch):
    root, _ = shakespeare
    load_leaf("shakespeare", root)
    calls = []
    real = leaf.read_leaf_file
    monkeypatch.setattr(leaf, "read_leaf_file", lambda *a: calls.append(a) or real(*a))
    load_leaf("shakespeare", root, users=2)
    assert calls == []
    users = shakespeare_users({"HAMLET": (5, 1)})
    write_leaf(root, users, files=1)  # rewrites all_data_0_* with other contents
    train, _, _ = load_leaf("shakespeare", root)
    assert calls and len(train) != 0


def test_a_shakespeare_run_resumes_and_refuses_cleanly_when_its_data_is_gone(ray_session, tmp_path):
    """Through the scenario (dataset: shakespeare, model: char_lstm): a run extends bit-identically; once
    LEAF's files are gone, --resume exits 2 before touching the run directory."""
    import shutil

    from conftest import comparable, digest
    from emulator.cli import main
    import yaml

    sizes = {f"role_{i:02d}": (12 + i, 4) for i in range(12)}
    root = write_leaf(tmp_path / "leaf", shakespeare_users(sizes))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump({
        "name": "bard", "seed": 1, "rounds": 4, "output": {"checkpoint_every": 2},
        "data": {"dataset": "shakespeare", "root": str(root), "options": {"users": 10}},
        "model": {"name": "char_lstm", "hidden": 16, "layers": 1},
        "algorithm": {"clients_per_round": 4, "client_lr": 0.5, "local_steps": 3, "batch_size": 4},
        "population": {"devices": 10}, "runtime": {"runners": 1}}))
    whole, half = tmp_path / "whole", tmp_path / "half"
    assert main(["run", str(scenario), "--out", str(whole), "--quiet"]) == 0
    assert main(["run", str(scenario), "--out", str(half), "--quiet", "--set", "rounds=2"]) == 0
    assert main(["run", "--resume", str(half), "--set", "rounds=4", "--quiet"]) == 0
    assert comparable(half) == comparable(whole)

    shutil.rmtree(root)
    before = digest(whole)
    assert main(["run", "--resume", str(whole), "--set", "rounds=6", "--quiet"]) == 2
    assert digest(whole) == before

"""Data: partitions, server set, synthetic data, the image readers and build_federation (no network)."""
from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest

import emulator.data.vision as vision
from emulator.data import DataUnavailableError, build_federation, load_vision
from emulator.data.partition import (partition, partition_classes, partition_dirichlet, partition_iid,
                                     partition_shards)
from emulator.data.server_set import carve_server_set
from emulator.data.synthetic import generate_synthetic
from emulator.data.vision import read_idx
from emulator.scenario import DataConfig, ScenarioError, ServerSetConfig, SyntheticConfig
from emulator.parts import load_scenario, validate_scenario

ROOT = Path(__file__).resolve().parents[1]
FMNIST_DIR = Path("/usr/share/datasets/fashion-mnist")


def labels_of(n_per_class: int = 500, classes: int = 10, seed: int = 0) -> np.ndarray:
    y = np.repeat(np.arange(classes), n_per_class)
    np.random.default_rng(seed).shuffle(y)
    return y


def assert_disjoint(parts: list[np.ndarray], n: int) -> None:
    flat = np.concatenate(parts)
    assert flat.dtype == np.int64
    assert len(np.unique(flat)) == len(flat), "an index is used twice"
    assert flat.min() >= 0 and flat.max() < n


def mean_tv(y: np.ndarray, parts: list[np.ndarray], classes: int) -> float:
    """Mean total-variation distance of the devices' label distributions from the global one (0 = iid)."""
    overall = np.bincount(y, minlength=classes) / len(y)
    return float(np.mean([0.5 * np.abs(np.bincount(y[p], minlength=classes) / len(p) - overall).sum()
                          for p in parts if len(p)]))


# --------------------------------------------------------------------------------------------- partitions
def test_iid_partition_is_disjoint_complete_near_equal_and_unskewed():
    y = labels_of(1000)
    parts = partition_iid(len(y) + 3, 10, np.random.default_rng(0))
    assert len(parts) == 10
    assert_disjoint(parts, len(y) + 3)
    sizes = [len(p) for p in parts]
    assert sum(sizes) == len(y) + 3 and max(sizes) - min(sizes) <= 1
    assert mean_tv(y, [p[p < len(y)] for p in parts], 10) < 0.05


@pytest.mark.parametrize("balanced", [False, True])
def test_dirichlet_label_skew_grows_as_alpha_falls(balanced):
    y = labels_of(600)
    skew = []
    for alpha in (100.0, 1.0, 0.1):
        parts = partition_dirichlet(y, 10, 50, alpha, balanced, 1, np.random.default_rng(1))
        assert_disjoint(parts, len(y))
        assert min(len(p) for p in parts) >= 1
        if balanced:
            assert {len(p) for p in parts} == {len(y) // 50}
        skew.append(mean_tv(y, parts, 10))
    assert skew[0] < 0.15 < skew[1] < skew[2], skew
    assert skew[2] > 0.5


def label_entropy(y: np.ndarray, parts: list[np.ndarray], classes: int) -> float:
    """Mean entropy (nats) of the devices' label distributions: 0 when every device holds one class."""
    out = []
    for p in parts:
        q = np.bincount(y[p], minlength=classes) / len(p)
        q = q[q > 0]
        out.append(float(-(q * np.log(q)).sum()))
    return float(np.mean(out))


def test_dirichlet_unbalanced_sizes_vary_respect_min_samples_and_refuse_only_the_impossible():
    y = labels_of(200)
    parts = partition_dirichlet(y, 10, 20, 0.5, False, 30, np.random.default_rng(2))
    sizes = np.array([len(p) for p in parts])
    assert sizes.min() >= 30 and sizes.std() > 0.2 * sizes.mean()
    tight = partition_dirichlet(y, 10, 20, 0.01, False, 99, np.random.default_rng(2))  # no draw gives this
    assert_disjoint(tight, len(y))
    assert min(len(p) for p in tight) >= 99
    exact = partition_dirichlet(y, 10, 20, 0.01, False, 100, np.random.default_rng(2))  # 20 x 100 = all 2000
    assert sorted(len(p) for p in exact) == [100] * 20 and len(np.unique(np.concatenate(exact))) == 2000
    with pytest.raises(ValueError, match=r"data.partition.min_samples: 20 devices x 101 samples each need 2020 "
                                         r"samples, but the training pool holds 2000; set "
                                         r"data.partition.min_samples to at most 100, or lower population.devices "
                                         r"to at most 19"):
        partition_dirichlet(y, 10, 20, 1.0, False, 101, np.random.default_rng(2))
    with pytest.raises(ValueError, match="data.partition.min_samples: 20 devices x 101"):
        partition_dirichlet(y, 10, 20, 1.0, True, 101, np.random.default_rng(2))  # balanced cannot give it either


def quickstart_labels() -> np.ndarray:
    """The quickstart's training labels: synthetic_iid over 1000 devices, seed 0 (74754 samples)."""
    train, _, _ = generate_synthetic(SyntheticConfig(iid=True), 1000, np.random.default_rng(0))
    return train.y


@pytest.mark.parametrize("min_samples", [1, 10])
def test_dirichlet_unbalanced_meets_min_samples_at_small_alpha_and_keeps_the_skew(min_samples):
    # At alpha 0.1 a Dir(alpha) split of each class over 1000 devices leaves ~2% of them empty in every draw,
    # so redrawing never succeeds; the short devices are topped up from the largest holders instead.
    y = quickstart_labels()
    entropy = {}
    for alpha in (0.01, 0.05, 0.1, 100.0):
        parts = partition_dirichlet(y, 10, 1000, alpha, False, min_samples, np.random.default_rng(5))
        assert len(parts) == 1000
        assert_disjoint(parts, len(y))
        assert min(len(p) for p in parts) >= min_samples
        assert sum(len(p) for p in parts) == len(y)  # every sample is used, none twice
        again = partition_dirichlet(y, 10, 1000, alpha, False, min_samples, np.random.default_rng(5))
        assert all(np.array_equal(a, b) for a, b in zip(parts, again))  # a function of the rng
        entropy[alpha] = label_entropy(y, parts, 10)
    # The top-up hands a short device samples of one class, so the skew is that of a plain draw (whose
    # non-empty devices have entropy 0.68 at alpha 0.1 here) or stronger.
    assert entropy[0.01] < entropy[0.05] < entropy[0.1] < 0.5 * entropy[100.0], entropy
    assert entropy[0.01] < 0.15 and entropy[100.0] > 1.35, entropy


def test_dirichlet_unbalanced_keeps_the_draw_when_it_already_meets_min_samples():
    # Only short draws are changed: where redrawing succeeds, the split is the plain Dirichlet split (so runs
    # of existing scenarios are unchanged); every device's size is then one class-wise Dirichlet share.
    y = labels_of(200)
    parts = partition_dirichlet(y, 10, 20, 1.0, False, 1, np.random.default_rng(0))
    rng = np.random.default_rng(0)
    rng.random(len(y))  # consumed by the random tie-breaking within each class
    shares = [rng.dirichlet(np.ones(20)) for _ in range(10)]
    for c, p in enumerate(shares):
        cuts = (np.cumsum(p) * 200).astype(np.int64)[:-1]
        expected = np.diff(cuts, prepend=0, append=200)
        assert [np.count_nonzero(y[part] == c) for part in parts] == list(expected)


@pytest.mark.parametrize("devices,per_client", [(10, 1), (10, 2), (15, 3), (7, 10), (30, 5)])
def test_classes_partition_gives_each_device_exactly_p_classes_evenly(devices, per_client):
    y = labels_of(300)
    parts = partition_classes(y, 10, devices, per_client, np.random.default_rng(3))
    assert_disjoint(parts, len(y))
    holders = np.zeros(10, dtype=int)
    for p in parts:
        present = np.unique(y[p])
        assert len(present) == per_client
        holders[present] += 1
    assert holders.min() >= 1, "a class is held by nobody although devices * p >= classes"
    assert holders.max() - holders.min() <= 1
    for c in range(10):  # each class's samples are split evenly among its holders, and all are used
        shares = [np.count_nonzero(y[p] == c) for p in parts if np.any(y[p] == c)]
        assert max(shares) - min(shares) <= 1 and sum(shares) == 300


def test_classes_partition_rejects_more_classes_than_exist():
    with pytest.raises(ValueError, match=r"data.partition.classes_per_client: 12 exceeds the 10 classes"):
        partition_classes(labels_of(10), 10, 5, 12, np.random.default_rng(0))


def test_shards_are_single_class_so_devices_hold_at_most_shards_per_client_labels():
    y = labels_of(100)  # 1000 samples, 100 shards of 10: every shard holds a single class
    parts = partition_shards(y, 50, 2, np.random.default_rng(4))
    assert_disjoint(parts, len(y))
    assert all(len(p) == 20 for p in parts)
    assert max(len(np.unique(y[p])) for p in parts) <= 2
    assert np.mean([len(np.unique(y[p])) for p in parts]) > 1.5  # shards are dealt at random, not in order
    with pytest.raises(ValueError, match="data.partition.shards_per_client"):
        partition_shards(y, 600, 2, np.random.default_rng(4))


def test_impossible_device_counts_name_the_field():
    with pytest.raises(ValueError, match="population.devices"):
        partition_iid(10, 11, np.random.default_rng(0))
    with pytest.raises(ValueError, match="population.devices"):
        partition_dirichlet(labels_of(1), 10, 11, 1.0, True, 1, np.random.default_rng(0))


def test_partition_dispatches_on_the_schema():
    cfg = DataConfig(dataset="mnist", partition={"scheme": "classes", "classes_per_client": 2})
    y = labels_of(50)
    parts = partition(y, 10, 10, cfg.partition, np.random.default_rng(0))
    assert all(len(np.unique(y[p])) == 2 for p in parts)
    with pytest.raises(ValueError, match="data.partition.scheme"):
        partition(y, 10, 10, DataConfig().partition, np.random.default_rng(0))  # natural


# ------------------------------------------------------------------------------------------- server set
def _devices_and_labels():
    y = labels_of(200)
    return partition_iid(len(y), 20, np.random.default_rng(5)), y


@pytest.mark.parametrize("spec", [ServerSetConfig(size=137, source="iid"),
                                  ServerSetConfig(size=137, source="balanced"),
                                  ServerSetConfig(size=137, source="clients", clients=3)])
def test_server_set_is_disjoint_from_devices_and_has_the_size(spec):
    per_device, y = _devices_and_labels()
    before = np.concatenate(per_device)
    remaining, server = carve_server_set(per_device, y, 10, spec, np.random.default_rng(6))
    assert len(server) == 137 and len(np.unique(server)) == 137
    left = np.concatenate(remaining)
    assert not np.intersect1d(left, server).size
    assert np.array_equal(np.sort(np.concatenate([left, server])), np.sort(before))  # nothing lost or invented
    if spec.source == "balanced":
        counts = np.bincount(y[server], minlength=10)
        assert counts.min() >= 13 and counts.max() <= 14
    if spec.source == "clients":
        donors = [d for d, (a, b) in enumerate(zip(per_device, remaining)) if len(a) != len(b)]
        assert len(donors) == 3
        assert sorted(len(per_device[d]) - len(remaining[d]) for d in donors) == [45, 46, 46]


def test_server_set_from_clients_carries_only_their_classes():
    y = labels_of(200)
    skewed = partition_classes(y, 10, 100, 1, np.random.default_rng(8))
    after, server = carve_server_set(skewed, y, 10, ServerSetConfig(size=50, source="clients", clients=5),
                                     np.random.default_rng(9))
    donors = [d for d in range(100) if len(after[d]) < len(skewed[d])]
    assert len(donors) == 5 and len(server) == 50
    assert set(y[server]) == {int(y[skewed[d][0]]) for d in donors}


def test_server_set_size_zero_is_a_no_op_and_impossible_sizes_name_the_field():
    per_device, y = _devices_and_labels()
    same, server = carve_server_set(per_device, y, 10, ServerSetConfig(), np.random.default_rng(0))
    assert same is per_device and len(server) == 0
    for spec in (ServerSetConfig(size=5000), ServerSetConfig(size=1000, source="clients", clients=2)):
        with pytest.raises(ValueError, match="data.server_set.size"):
            carve_server_set(per_device, y, 10, spec, np.random.default_rng(0))
    one_class = partition_classes(y, 10, 10, 1, np.random.default_rng(0))[:5]  # devices hold 5 classes only
    with pytest.raises(ValueError, match="data.server_set.size"):
        carve_server_set(one_class, y, 10, ServerSetConfig(size=100, source="balanced"), np.random.default_rng(0))


def test_a_server_set_fraction_is_that_share_of_the_devices_samples_and_is_refused_beside_a_size():
    per_device, y = _devices_and_labels()
    held = sum(len(p) for p in per_device)
    for fraction, expected in ((0.1, round(0.1 * held)), (0.1 / held, 1)):  # rounded, at least one sample
        remaining, server = carve_server_set(per_device, y, 10, ServerSetConfig(fraction=fraction, source="balanced"
                                             if fraction > 0.01 else "iid"), np.random.default_rng(1))
        assert len(server) == expected and sum(len(p) for p in remaining) == held - expected
    with pytest.raises(ValueError, match="give one of them"):
        ServerSetConfig(size=10, fraction=0.1)
    for bad in (0, 1, 1.5):
        with pytest.raises(ValueError, match="fraction"):
            ServerSetConfig(fraction=bad)
    with pytest.raises(ValueError, match=rf"data.server_set.fraction \({round(0.9 * held)} samples\)"):  # named
        carve_server_set(per_device, y, 10, ServerSetConfig(fraction=0.9, source="clients", clients=2),
                         np.random.default_rng(0))
    safari = validate_scenario({"name": "s", "rounds": 1, "algorithm": {"name": "safari"},
                                "data": {"server_set": {"fraction": 0.01}}})
    assert safari.data.server_set.fraction == 0.01  # a fraction satisfies an algorithm that needs server data


# -------------------------------------------------------------------------------------------- synthetic
def test_synthetic_shapes_sizes_and_split():
    cfg = SyntheticConfig(min_samples=20, max_samples=300, dimension=30, classes=5)
    train, test, per_device = generate_synthetic(cfg, 500, np.random.default_rng(7))
    assert train.x.dtype == np.float32 and train.y.dtype == np.int64 and train.input_shape == (30,)
    assert train.num_classes == 5 and train.mean is None and train.y.max() < 5
    assert_disjoint(per_device, len(train))
    assert sum(len(p) for p in per_device) == len(train)
    train_sizes = np.array([len(p) for p in per_device])
    assert train_sizes.min() >= 16 and train_sizes.max() <= 300 - 1  # [20, 300] less the test share
    assert abs(len(test) / (len(test) + len(train)) - 0.2) < 0.02 and len(test) >= 500
    assert np.any(train_sizes >= 200) and np.any(train_sizes <= 20)  # lognormal sizes, clipped


def test_synthetic_non_iid_is_more_label_skewed_than_iid_and_deterministic():
    skew, spread = {}, {}
    for iid in (False, True):
        cfg = SyntheticConfig(alpha=1, beta=1, iid=iid)
        train, _, per_device = generate_synthetic(cfg, 300, np.random.default_rng(8))
        skew[iid] = mean_tv(train.y, per_device, 10)
        spread[iid] = np.std([train.x[p, 0].mean() for p in per_device])  # how far device input means scatter
        again, _, _ = generate_synthetic(cfg, 300, np.random.default_rng(8))
        assert np.array_equal(train.x, again.x) and np.array_equal(train.y, again.y)
    assert skew[False] > skew[True] + 0.2, skew
    assert spread[False] > 1.0 > 0.5 > spread[True], spread  # v_k ~ N(B_k, 1) vs. all inputs from N(0, Sigma)


def test_synthetic_beta_scatters_the_devices_inputs():
    spread = []
    for beta in (0.0, 3.0):
        train, _, per_device = generate_synthetic(SyntheticConfig(beta=beta), 300, np.random.default_rng(9))
        spread.append(np.std([train.x[p, 0].mean() for p in per_device]))  # sqrt(1 + beta^2) in theory
    assert spread[0] < 1.4 and spread[1] > 2.4, spread


# ------------------------------------------------------------------------------------------ image files
def write_idx(path: Path, array: np.ndarray) -> None:
    data = struct.pack(">HBB", 0, 8, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    data += np.ascontiguousarray(array, np.uint8).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as handle:
            handle.write(data)
    else:
        path.write_bytes(data)


def fake_images(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 28, 28), dtype=np.uint8), rng.integers(0, 10, n).astype(np.uint8)


MNIST_NAMES = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
               "t10k-labels-idx1-ubyte"]


def write_mnist_like(directory: Path, gz: bool, n_train: int = 30, n_test: int = 12):
    (xtr, ytr), (xte, yte) = fake_images(n_train, 1), fake_images(n_test, 2)
    for name, array in zip(MNIST_NAMES, (xtr, ytr, xte, yte)):
        write_idx(directory / (name + (".gz" if gz else "")), array)
    return xtr, ytr, xte, yte


@pytest.mark.parametrize("gz", [True, False])
def test_read_idx_roundtrip(tmp_path, gz):
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    path = tmp_path / ("a.idx.gz" if gz else "a.idx")
    write_idx(path, array)
    out = read_idx(path)
    assert out.shape == (2, 3, 4) and np.array_equal(out, array) and out.flags.writeable


def test_read_idx_rejects_other_and_truncated_files(tmp_path):
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04garbage")
    with pytest.raises(DataUnavailableError, match="not an unsigned-byte IDX"):
        read_idx(tmp_path / "bad")
    write_idx(tmp_path / "short", np.zeros((3, 4), np.uint8))
    (tmp_path / "short").write_bytes((tmp_path / "short").read_bytes()[:-1])
    with pytest.raises(DataUnavailableError, match="truncated"):
        read_idx(tmp_path / "short")


@pytest.mark.parametrize("layout,dataset,gz", [("", "fashion_mnist", True), ("raw", "mnist", False),
                                               ("FashionMNIST/raw", "fashion_mnist", False),
                                               ("MNIST/raw", "mnist", True)])
def test_load_vision_reads_flat_and_torchvision_layouts(tmp_path, layout, dataset, gz):
    xtr, ytr, xte, yte = write_mnist_like(tmp_path / layout, gz)
    train, test = load_vision(dataset, str(tmp_path), False, "balanced")
    assert train.x.shape == (30, 1, 28, 28) and test.x.shape == (12, 1, 28, 28)
    assert train.x.dtype == np.uint8 and train.y.dtype == np.int64
    assert np.array_equal(train.x[:, 0], xtr) and np.array_equal(test.y, yte)
    assert train.num_classes == int(max(ytr.max(), yte.max())) + 1
    mean, std = {"fashion_mnist": (0.2860, 0.3530), "mnist": (0.1307, 0.3081)}[dataset]
    assert train.mean == (mean,) and test.std == (std,)
    x, _ = train.tensors(np.array([0, 1]))
    np.testing.assert_allclose(x[:, 0].numpy(), (xtr[:2] / 255.0 - mean) / std, rtol=1e-5, atol=1e-5)
    again, _ = load_vision(dataset, str(tmp_path), False, "balanced")
    assert again.x is train.x  # served from the cache


def test_emnist_is_transposed_upright_and_letters_are_zero_based(tmp_path):
    names = [f"emnist-letters-{p}" for p in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                             "test-images-idx3-ubyte", "test-labels-idx1-ubyte")]
    xtr = np.random.default_rng(0).integers(0, 256, (8, 28, 28), dtype=np.uint8)
    ytr = np.array([1, 2, 3, 4, 5, 6, 7, 26], dtype=np.uint8)
    for name, array in zip(names, (xtr, ytr, xtr[:3], ytr[:3])):
        write_idx(tmp_path / "EMNIST" / "raw" / (name + ".gz"), array)
    train, test = load_vision("emnist", str(tmp_path), False, "letters")
    assert np.array_equal(train.x[:, 0], xtr.transpose(0, 2, 1))
    assert list(train.y) == [0, 1, 2, 3, 4, 5, 6, 25] and train.num_classes == 26
    assert len(test) == 3 and train.mean == (0.1751,)


@pytest.mark.parametrize("nested", [True, False])
def test_cifar10_pickles(tmp_path, nested):
    directory = tmp_path / "cifar-10-batches-py" if nested else tmp_path
    directory.mkdir(exist_ok=True)
    rng = np.random.default_rng(0)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        labels = list(rng.integers(0, 10, 4))
        labels[0] = 9
        batch = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"labels": labels}
        batches[name] = batch
        (directory / name).write_bytes(pickle.dumps(batch))
    train, test = load_vision("cifar10", str(tmp_path), False, "balanced")
    assert train.x.shape == (20, 3, 32, 32) and test.x.shape == (4, 3, 32, 32) and train.num_classes == 10
    assert np.array_equal(train.x[4], batches["data_batch_2"][b"data"][0].reshape(3, 32, 32))
    assert list(test.y) == batches["test_batch"][b"labels"]
    assert train.mean == (0.4914, 0.4822, 0.4465)


def test_missing_dataset_error_says_where_and_how_to_fix(tmp_path):
    with pytest.raises(DataUnavailableError) as info:
        load_vision("fashion_mnist", str(tmp_path / "nowhere"), False, "balanced")
    message = str(info.value)
    assert isinstance(info.value, ScenarioError)
    assert str(tmp_path / "nowhere") in message and str(tmp_path / "nowhere" / "FashionMNIST" / "raw") in message
    assert "train-images-idx3-ubyte" in message and "t10k-labels-idx1-ubyte" in message
    assert "data.download: true" in message and "data.root" in message
    assert "apt-get install dataset-fashion-mnist" in message
    with pytest.raises(DataUnavailableError, match="emnist-digits-train-images"):
        load_vision("emnist", str(tmp_path), False, "digits")


def test_failed_download_is_reported_as_unavailable(tmp_path, monkeypatch):
    import torchvision.datasets

    def offline(*args, **kwargs):
        raise OSError("Name or service not known")

    monkeypatch.setattr(torchvision.datasets, "MNIST", offline)
    with pytest.raises(DataUnavailableError, match="data.download.*network"):
        load_vision("mnist", str(tmp_path), True, "balanced")


def test_default_root_honours_emulator_data(tmp_path, monkeypatch):
    monkeypatch.setenv("EMULATOR_DATA", str(tmp_path))
    write_mnist_like(tmp_path / "mnist" / "raw", gz=True)
    train, _ = load_vision("mnist", None, False, "balanced")
    assert len(train) == 30
    assert vision.default_roots("fashion_mnist")[-1] == vision.DEBIAN_FASHION_MNIST


@pytest.mark.skipif(not FMNIST_DIR.is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
def test_real_fashion_mnist_loads_by_default(monkeypatch, tmp_path):
    monkeypatch.setenv("EMULATOR_DATA", str(tmp_path))  # nothing there: the Debian directory must be found
    train, test = load_vision("fashion_mnist", None, False, "balanced")
    assert train.x.shape == (60000, 1, 28, 28) and test.x.shape == (10000, 1, 28, 28)
    assert train.num_classes == 10 and set(np.bincount(train.y)) == {6000}
    mean = train.x[:5000].astype(np.float64).mean() / 255
    assert abs(mean - 0.2860) < 0.01  # the normalisation constants fit the data (and images are not garbage)


# ------------------------------------------------------------------------------------- build_federation
def synthetic_data(**extra) -> DataConfig:
    return DataConfig(**{"dataset": "synthetic", "synthetic": {"max_samples": 200}, **extra})


def test_build_federation_is_a_function_of_the_seed():
    data = synthetic_data(partition={"scheme": "dirichlet", "alpha": 0.3, "balanced": True},
                          server_set={"size": 50, "source": "balanced"}, test_samples=100)
    a, b, c = build_federation(data, 30, 1), build_federation(data, 30, 1), build_federation(data, 30, 2)
    assert np.array_equal(a.device_indices, b.device_indices) and np.array_equal(a.server_indices, b.server_indices)
    assert np.array_equal(a.test.x, b.test.x) and np.array_equal(a.train.x, b.train.x)
    assert not np.array_equal(a.train.x[:100], c.train.x[:100])
    assert a.num_devices == 30 and len(a.server_indices) == 50 and len(a.test) == 100
    assert not np.intersect1d(a.server_indices, a.device_indices).size
    assert a.label_counts().sum() == a.sizes.sum()


def test_build_federation_natural_synthetic_and_vision(tmp_path):
    fed = build_federation(synthetic_data(), 25, 0)
    assert fed.num_devices == 25 and fed.sizes.min() >= 1 and fed.sizes.sum() == len(fed.train)
    write_mnist_like(tmp_path, gz=True, n_train=200)
    vis = DataConfig(dataset="mnist", root=str(tmp_path), partition={"scheme": "shards", "shards_per_client": 2},
                     server_set={"size": 10, "source": "clients", "clients": 2})
    fed = build_federation(vis, 10, 0)
    assert fed.train.x.shape == (200, 1, 28, 28) and fed.sizes.sum() == 190
    assert len(np.unique(np.concatenate([fed.device_indices, fed.server_indices]))) == 200
    same, other = build_federation(vis, 10, 0), build_federation(vis, 10, 1)  # same files, so only the split moves
    assert np.array_equal(same.device_indices, fed.device_indices)
    assert not np.array_equal(other.server_indices, fed.server_indices)
    no_server = vis.model_copy(update={"server_set": ServerSetConfig()})
    assert not np.array_equal(build_federation(no_server, 10, 0).device_indices,
                              build_federation(no_server, 10, 1).device_indices)


@pytest.mark.parametrize("alpha", ["0.01", "0.05", "0.1"])
def test_quickstart_with_strong_label_skew_builds(alpha):
    # The README's `emulator run scenarios/quickstart.yaml --set rounds=100 --set data.partition.alpha=0.1`.
    scenario = load_scenario(ROOT / "scenarios" / "quickstart.yaml",
                             ["rounds=100", f"data.partition.alpha={alpha}"])
    assert scenario.data.partition.min_samples == 1 and not scenario.data.partition.balanced
    fed = build_federation(scenario.data, scenario.population.devices, scenario.seed)
    assert fed.num_devices == 1000 and fed.sizes.min() >= 1 and fed.sizes.sum() == len(fed.train)
    assert len(np.unique(fed.device_indices)) == len(fed.device_indices)
    parts = np.split(fed.device_indices, np.cumsum(fed.sizes)[:-1])
    assert label_entropy(fed.train.y, parts, 10) < 0.8  # 0.63 at alpha 0.1; 1.43 at alpha 100


def test_build_federation_turns_impossible_requests_into_scenario_errors():
    with pytest.raises(ScenarioError, match="data.partition.classes_per_client: 12 exceeds"):
        build_federation(synthetic_data(partition={"scheme": "classes", "classes_per_client": 12}), 10, 0)
    with pytest.raises(ScenarioError, match="data.partition.shards_per_client"):
        build_federation(synthetic_data(partition={"scheme": "shards", "shards_per_client": 10 ** 6}), 10, 0)
    with pytest.raises(ScenarioError, match="data.server_set.size"):
        build_federation(synthetic_data(server_set={"size": 10 ** 6}), 10, 0)
    with pytest.raises(ScenarioError, match="data.partition.min_samples: 10 devices x 10000 samples each need"):
        build_federation(synthetic_data(partition={"scheme": "dirichlet", "alpha": 0.1, "min_samples": 10 ** 4}),
                         10, 0)

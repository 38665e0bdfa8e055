"""Datasets, partitioners and the server set, on generated data (and the real Fashion-MNIST when installed)."""
import gzip
import pickle
import struct

import numpy as np
import pytest

from conftest import FMNIST_DIR
from emulator.data import build_federation
from emulator.data.partition import partition_classes, partition_dirichlet, partition_iid, partition_shards
from emulator.data.server_set import carve_server_set
from emulator.data.synthetic import generate_synthetic
from emulator.data.vision import DataUnavailableError, load_vision, read_idx
from emulator.scenario import DataConfig, ScenarioError, ServerSetConfig, SyntheticConfig

CLASSES = 10
LABELS = np.random.default_rng(0).integers(0, CLASSES, 20000)


def check_disjoint(parts, n):
    flat = np.concatenate(parts)
    assert len(np.unique(flat)) == len(flat), "an index went to two devices"
    assert flat.min() >= 0 and flat.max() < n


def label_skew(parts, labels):
    """Mean total-variation distance between each device's label mix and the global one (0 = iid)."""
    overall = np.bincount(labels, minlength=CLASSES) / len(labels)
    mixes = [np.bincount(labels[p], minlength=CLASSES) / len(p) for p in parts if len(p)]
    return float(np.mean([0.5 * np.abs(m - overall).sum() for m in mixes]))


def test_iid_sizes_are_near_equal_and_labels_unskewed():
    parts = partition_iid(len(LABELS), 100, np.random.default_rng(1))
    check_disjoint(parts, len(LABELS))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1 and sum(sizes) == len(LABELS)
    assert label_skew(parts, LABELS) < 0.2


@pytest.mark.parametrize("balanced", [False, True])
def test_dirichlet_label_skew_grows_as_alpha_falls(balanced):
    skews = []
    for alpha in (100.0, 1.0, 0.1):
        parts = partition_dirichlet(LABELS, CLASSES, 50, alpha, balanced, 1, np.random.default_rng(2))
        check_disjoint(parts, len(LABELS))
        skews.append(label_skew(parts, LABELS))
        sizes = np.array([len(p) for p in parts])
        if balanced:
            assert (sizes == len(LABELS) // 50).all()
    assert skews[0] < skews[1] < skews[2]
    assert skews[0] < 0.1 and skews[2] > 0.5


def test_unbalanced_dirichlet_sizes_vary_and_respect_min_samples():
    parts = partition_dirichlet(LABELS, CLASSES, 50, 0.3, False, 20, np.random.default_rng(3))
    sizes = np.array([len(p) for p in parts])
    assert sizes.min() >= 20 and sizes.std() > 0.3 * sizes.mean()
    with pytest.raises(ValueError, match="min_samples"):
        partition_dirichlet(LABELS[:2000], CLASSES, 100, 0.01, False, 15, np.random.default_rng(3))


@pytest.mark.parametrize("p", [1, 2, 5])
def test_classes_partition_gives_each_device_p_classes(p):
    parts = partition_classes(LABELS, CLASSES, 30, p, np.random.default_rng(4))
    check_disjoint(parts, len(LABELS))
    assert all(len(np.unique(LABELS[part])) == p for part in parts)
    held = np.unique(np.concatenate([np.unique(LABELS[part]) for part in parts]))
    assert len(held) == CLASSES  # every class is held by someone
    with pytest.raises(ValueError, match="classes_per_client"):
        partition_classes(LABELS, CLASSES, 30, 11, np.random.default_rng(4))


def test_shards_give_at_most_two_labels_each():
    labels = np.repeat(np.arange(CLASSES), 100)  # 1000 samples: shards of 10 are single-class
    parts = partition_shards(labels, 50, 2, np.random.default_rng(5))
    check_disjoint(parts, len(labels))
    assert all(len(p) == 20 for p in parts)
    assert all(len(np.unique(labels[p])) <= 2 for p in parts)
    assert np.mean([len(np.unique(labels[p])) for p in parts]) < 2.1


def test_server_set_is_held_out_and_sized():
    parts = partition_iid(len(LABELS), 100, np.random.default_rng(6))
    rng = np.random.default_rng(7)
    new_parts, server = carve_server_set(parts, LABELS, CLASSES, ServerSetConfig(size=500), rng)
    assert len(server) == 500
    check_disjoint(new_parts + [server], len(LABELS))
    assert sum(len(p) for p in new_parts) == len(LABELS) - 500

    _, balanced = carve_server_set(parts, LABELS, CLASSES, ServerSetConfig(size=500, source="balanced"), rng)
    assert (np.bincount(LABELS[balanced], minlength=CLASSES) == 50).all()

    skewed = partition_classes(LABELS, CLASSES, 100, 1, np.random.default_rng(8))
    after, from_clients = carve_server_set(skewed, LABELS, CLASSES,
                                           ServerSetConfig(size=50, source="clients", clients=5), rng)
    donors = [d for d in range(100) if len(after[d]) < len(skewed[d])]
    assert len(donors) == 5 and len(from_clients) == 50
    assert set(LABELS[from_clients]) == set(np.concatenate([np.unique(LABELS[skewed[d]]) for d in donors]))
    with pytest.raises(ValueError, match="data.server_set.size"):
        carve_server_set(parts, LABELS, CLASSES, ServerSetConfig(size=10**6), rng)


def test_synthetic_sizes_and_heterogeneity():
    config = SyntheticConfig(alpha=1.0, beta=1.0, min_samples=20, max_samples=300)
    train, test, parts = generate_synthetic(config, 200, np.random.default_rng(9))
    check_disjoint(parts, len(train))
    totals = np.array([len(p) for p in parts]) + 0  # train share of each device
    assert totals.min() >= int(20 * 0.8) - 1 and totals.max() <= 300
    assert train.x.dtype == np.float32 and train.input_shape == (60,) and len(test) > 0
    iid_train, _, iid_parts = generate_synthetic(SyntheticConfig(iid=True), 200, np.random.default_rng(9))
    # Every device has its own labelling function in synthetic(1, 1): its label mix is far from the pool's.
    assert label_skew(parts, train.y) > label_skew(iid_parts, iid_train.y) + 0.1


def write_idx(path, array, compress):
    header = struct.pack(">HBB", 0, 8, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    opener = gzip.open if compress else open
    with opener(path, "wb") as handle:
        handle.write(header + array.astype(np.uint8).tobytes())


def fake_mnist(directory, compress, n_train=30, n_test=10, prefix=""):
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(10)
    suffix = ".gz" if compress else ""
    arrays = {}
    for split, n in (("train", n_train), ("t10k", n_test)):
        images, labels = rng.integers(0, 256, (n, 28, 28)), rng.integers(0, 10, n)
        write_idx(directory / f"{prefix}{split}-images-idx3-ubyte{suffix}", images, compress)
        write_idx(directory / f"{prefix}{split}-labels-idx1-ubyte{suffix}", labels, compress)
        arrays[split] = (images, labels)
    return arrays


@pytest.mark.parametrize("layout,compress", [("flat", True), ("flat", False), ("torchvision", True)])
def test_idx_reader_reads_the_supported_layouts(tmp_path, layout, compress):
    directory = tmp_path if layout == "flat" else tmp_path / "MNIST" / "raw"
    arrays = fake_mnist(directory, compress)
    train, test = load_vision("mnist", str(tmp_path), False)
    assert train.x.shape == (30, 1, 28, 28) and test.x.shape == (10, 1, 28, 28)
    assert np.array_equal(train.x[:, 0], arrays["train"][0]) and np.array_equal(test.y, arrays["t10k"][1])
    x, y = train.tensors(np.array([0, 1]))
    expected = (arrays["train"][0][:2] / 255.0 - 0.1307) / 0.3081
    np.testing.assert_allclose(x[:, 0].numpy(), expected, rtol=1e-5, atol=1e-5)


def test_emnist_is_transposed_upright(tmp_path):
    directory = tmp_path / "EMNIST" / "raw"
    directory.mkdir(parents=True)
    images = np.random.default_rng(11).integers(0, 256, (4, 28, 28))
    for split in ("train", "test"):
        write_idx(directory / f"emnist-letters-{split}-images-idx3-ubyte.gz", images, True)
        write_idx(directory / f"emnist-letters-{split}-labels-idx1-ubyte.gz", np.array([1, 2, 26, 3]), True)
    train, _ = load_vision("emnist", str(tmp_path), False, "letters")
    assert np.array_equal(train.x[0, 0], images[0].T)
    assert list(train.y) == [0, 1, 25, 2] and train.num_classes == 26


def test_cifar10_pickles(tmp_path):
    directory = tmp_path / "cifar-10-batches-py"
    directory.mkdir()
    rng = np.random.default_rng(12)
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (6, 3072), dtype=np.uint8), b"labels": list(rng.integers(0, 10, 6))}
        (directory / name).write_bytes(pickle.dumps(batch))
    train, test = load_vision("cifar10", str(tmp_path), False)
    assert train.x.shape == (30, 3, 32, 32) and test.x.shape == (6, 3, 32, 32) and train.num_classes == 10


def test_missing_dataset_says_where_and_how(tmp_path):
    with pytest.raises(DataUnavailableError) as err:
        load_vision("mnist", str(tmp_path / "nowhere"), False)
    message = str(err.value)
    assert str(tmp_path / "nowhere") in message and "data.download: true" in message
    assert "train-images-idx3-ubyte" in message and "data.root" in message
    assert isinstance(err.value, ScenarioError)


def test_read_idx_rejects_other_files(tmp_path):
    path = tmp_path / "bad"
    path.write_bytes(b"\x01\x02\x03\x04garbage")
    with pytest.raises(DataUnavailableError):
        read_idx(path)


@pytest.mark.skipif(not FMNIST_DIR.is_dir(), reason="Debian's dataset-fashion-mnist is not installed")
def test_real_fashion_mnist_loads_by_default():
    train, test = load_vision("fashion_mnist", None, False)
    assert train.x.shape == (60000, 1, 28, 28) and len(test) == 10000 and train.num_classes == 10
    assert (np.bincount(train.y) == 6000).all()


def test_build_federation_is_deterministic_per_seed():
    config = DataConfig(dataset="synthetic", partition={"scheme": "dirichlet", "alpha": 0.5},
                        server_set={"size": 100, "source": "balanced"}, test_samples=300)
    a, b, c = (build_federation(config, 30, seed) for seed in (1, 1, 2))
    assert np.array_equal(a.device_indices, b.device_indices) and np.array_equal(a.server_indices, b.server_indices)
    assert np.array_equal(a.test.x, b.test.x) and len(a.test) == 300
    assert not np.array_equal(a.device_indices, c.device_indices)
    assert len(np.intersect1d(a.device_indices, a.server_indices)) == 0
    assert a.num_devices == 30 and a.label_counts().sum() == a.sizes.sum()


def test_build_federation_turns_impossible_requests_into_scenario_errors():
    config = DataConfig(dataset="synthetic", partition={"scheme": "shards", "shards_per_client": 10**6})
    with pytest.raises(ScenarioError, match="shards_per_client"):
        build_federation(config, 10, 0)

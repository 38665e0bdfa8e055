"""A damaged file where a dataset's files belong is refused naming data.root, the file and the fix, never a
traceback: every kind of damage (empty, cut short, binary junk, another file under the name, contents that
disagree) to every file of the MNIST family's IDX sets (raw and gzipped), CIFAR-10's batches and LEAF's JSON,
and to the .npy / .npz files handed over as data=. The last case of each runs `emulator run` itself."""
from __future__ import annotations

import gzip
import json
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import small_scenario
from emulator.cli import main
from emulator.data.leaf import load_leaf
from emulator.data.vision import DataUnavailableError, load_vision
from emulator.scenario import ScenarioError
from leaf_fixtures import femnist_users, write_leaf

IDX = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]


def idx_bytes(array: np.ndarray) -> bytes:
    return (struct.pack(">HBB", 0, 8, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
            + np.ascontiguousarray(array, np.uint8).tobytes())


def mnist_like(root: Path, gz: bool) -> dict[str, Path]:
    rng = np.random.default_rng(0)
    arrays = [rng.integers(0, 256, (12, 28, 28)), rng.integers(0, 10, 12), rng.integers(0, 256, (6, 28, 28)),
              rng.integers(0, 10, 6)]
    files = {}
    for name, array in zip(IDX, arrays):
        path = root / (name + (".gz" if gz else ""))
        data = idx_bytes(array)
        path.write_bytes(gzip.compress(data) if gz else data)
        files[name] = path
    return files


def _plain(change):
    """A damage to the IDX bytes, written back gzipped where the file is."""
    def damage(path: Path) -> None:
        data = path.read_bytes()
        packed = path.suffix == ".gz"
        data = change(gzip.decompress(data) if packed else data)
        path.write_bytes(gzip.compress(data) if packed else data)
    return damage


def _raw(change):
    def damage(path: Path) -> None:
        path.write_bytes(change(path.read_bytes()))
    return damage


IDX_DAMAGE = {  # kind -> (damage, files it applies to ("images", "labels", "any", "gz"), what the message says)
    "empty": (_raw(lambda data: b""), "any", "not an unsigned-byte IDX file"),
    "binary junk": (_raw(lambda data: bytes(range(256)) * 8), "any", "not an unsigned-byte IDX file"),
    "body cut short": (_plain(lambda data: data[:-7]), "any", "truncated"),
    "header cut short": (_plain(lambda data: data[:9]), "images", "header is cut short"),
    "bytes added": (_plain(lambda data: data + b"\x00" * 5), "any", "corrupt"),
    "no dimensions": (_plain(lambda data: data[:3] + b"\x00"), "any", "IDX file of 0 dimensions"),
    "labels under an images name": (_plain(lambda data: idx_bytes(np.zeros(12))), "images", "of 1 dimensions where 3"),
    "images under a labels name": (_plain(lambda data: idx_bytes(np.zeros((12, 28, 28)))), "labels",
                                   "of 3 dimensions where 1"),
    "images of another size": (_plain(lambda data: idx_bytes(np.zeros((12, 32, 32)))), "images", "32 x 32 pixels"),
    "labels of another set": (_plain(lambda data: idx_bytes(np.zeros(5))), "labels", "labels for the"),
    "a label out of range": (_plain(lambda data: idx_bytes(np.full(struct.unpack(">I", data[4:8])[0], 200))),
                             "labels", "label 200 where mnist has 10 classes"),
    "gzip cut short": (_raw(lambda data: data[:len(data) // 2]), "gz", "does not decompress"),
}


def idx_cases():
    for gz in (False, True):
        for name in IDX:
            kind_of_file = "images" if "images" in name else "labels"
            for kind, (damage, applies, says) in IDX_DAMAGE.items():
                if applies in ("any", kind_of_file) or applies == "gz" and gz:
                    yield pytest.param(gz, name, damage, says, id=f"{name}{'.gz' if gz else ''}: {kind}")


def refused_naming(error: BaseException, path: Path, says: str, fix: str) -> None:
    message = str(error)
    assert isinstance(error, ScenarioError), type(error)
    assert message.startswith("data.root: ") and str(path) in message and says in message and fix in message, message


@pytest.mark.parametrize("gz, name, damage, says", list(idx_cases()))
def test_a_damaged_idx_file_is_refused_naming_data_root_the_file_and_the_fix(tmp_path, gz, name, damage, says):
    files = mnist_like(tmp_path, gz)
    damage(files[name])
    with pytest.raises(DataUnavailableError) as refused:
        load_vision("mnist", str(tmp_path))
    refused_naming(refused.value, files[name], says, "replace it with a good copy")


def cifar_like(root: Path) -> dict[str, Path]:
    folder = root / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    files = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        batch = {b"data": rng.integers(0, 256, (4, 3072), dtype=np.uint8), b"labels": list(rng.integers(0, 10, 4))}
        (folder / name).write_bytes(pickle.dumps(batch))
        files[name] = folder / name
    return files


CIFAR_DAMAGE = {
    "empty": (lambda data: b"", "not a CIFAR-10 python batch"),
    "cut short": (lambda data: data[:len(data) // 2], "not a CIFAR-10 python batch"),
    "binary junk": (lambda data: bytes(range(256)), "not a CIFAR-10 python batch"),
    "a list": (lambda data: pickle.dumps([1, 2]), "not a CIFAR-10 python batch (a dict"),
    "images of another size": (lambda data: pickle.dumps({b"data": np.zeros((4, 100), np.uint8),
                                                         b"labels": [0] * 4}), "not 32 x 32 colour images"),
    "a label out of range": (lambda data: pickle.dumps({b"data": np.zeros((4, 3072), np.uint8),
                                                       b"labels": [0, 1, 2, 11]}), "one label 0..9 per image"),
    "labels of another batch": (lambda data: pickle.dumps({b"data": np.zeros((4, 3072), np.uint8),
                                                          b"labels": [0, 1]}), "2 labels"),
}


@pytest.mark.parametrize("name", ["data_batch_1", "data_batch_5", "test_batch"])
@pytest.mark.parametrize("kind", list(CIFAR_DAMAGE))
def test_a_damaged_cifar_batch_is_refused_naming_data_root_the_file_and_the_fix(tmp_path, name, kind):
    files = cifar_like(tmp_path)
    change, says = CIFAR_DAMAGE[kind]
    files[name].write_bytes(change(files[name].read_bytes()))
    with pytest.raises(DataUnavailableError) as refused:
        load_vision("cifar10", str(tmp_path))
    refused_naming(refused.value, files[name], says, "replace it with a good copy")


LEAF_DAMAGE = {
    "empty": (lambda text: b"", "not valid JSON"),
    "cut short": (lambda text: text[:len(text) // 2], "not valid JSON"),
    "binary junk": (lambda text: bytes(range(256)), "not text"),
    "not UTF-8": (lambda text: text[:20] + b"\xff\xfe" + text[20:], "not text"),
    "nested too deep": (lambda text: b"[" * 100_000 + b"]" * 100_000, "nested deeper"),
    "a list": (lambda text: b"[1, 2]", "top level"),
    "a pixel that is NaN": (lambda text: text.replace(b"[[", b"[[NaN, ", 1).replace(b", 0.", b", ", 0), "x[0]"),
    "users not a list": (lambda text: json.dumps({**json.loads(text), "users": "f0"}).encode(), "users"),
}


@pytest.mark.parametrize("which", ["train", "test"])
@pytest.mark.parametrize("kind", list(LEAF_DAMAGE))
def test_a_damaged_leaf_file_is_refused_naming_data_root_the_file_and_the_fix(tmp_path, which, kind):
    root = write_leaf(tmp_path / "femnist", femnist_users({"f0": (3, 2), "f1": (2, 2)}), files=1)
    path = next((root / which).glob("*.json"))
    change, says = LEAF_DAMAGE[kind]
    path.write_bytes(change(path.read_bytes()))
    with pytest.raises(DataUnavailableError) as refused:
        load_leaf("femnist", root)
    refused_naming(refused.value, path, says, "preprocess.sh")


# ------------------------------------------------------------------------------------- data= from files
def arrays(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x_train": rng.normal(size=(40, 5)).astype(np.float32), "y_train": rng.integers(0, 3, 40),
            "x_test": rng.normal(size=(10, 5)).astype(np.float32), "y_test": rng.integers(0, 3, 10)}


def test_an_npz_file_and_npy_files_are_data_as_their_arrays_are(tmp_path):
    from emulator.data.custom import read_data

    given = arrays()
    np.savez(tmp_path / "data.npz", **given)
    for name, array in given.items():
        np.save(tmp_path / f"{name}.npy", array)
    expected = read_data(tuple(given.values())).fingerprint
    assert read_data(tmp_path / "data.npz").fingerprint == expected
    assert read_data(str(tmp_path / "data.npz")).fingerprint == expected
    assert read_data(np.load(tmp_path / "data.npz")).fingerprint == expected
    assert read_data(tuple(tmp_path / f"{n}.npy" for n in given)).fingerprint == expected
    assert read_data({n: str(tmp_path / f"{n}.npy") for n in given}).fingerprint == expected


def _npz_member(data: bytes) -> bytes:
    """The first member's stored bytes flipped (the archive's CRC no longer matches)."""
    start = data.index(b"\x93NUMPY") + 80
    return data[:start] + bytes(b ^ 0xFF for b in data[start:start + 16]) + data[start + 16:]


NPZ_DAMAGE = {  # kind -> (what data.npz becomes, what the message says)
    "empty": (lambda path: path.write_bytes(b""), "not an .npz file numpy can read"),
    "cut short": (lambda path: path.write_bytes(path.read_bytes()[:300]), "not an .npz file numpy can read"),
    "binary junk": (lambda path: path.write_bytes(bytes(range(256))), "not an .npz file numpy can read"),
    "a member garbled": (lambda path: path.write_bytes(_npz_member(path.read_bytes())), "cannot be read"),
    "an array missing": (lambda path: np.savez(path, **{k: v for k, v in arrays().items() if k != "y_test"}),
                         "it needs the arrays x_train, y_train, x_test, y_test"),
    "Python objects": (lambda path: np.savez(path, **{**arrays(), "x_train": np.array([{}] * 40, dtype=object)}),
                       "its array x_train cannot be read"),
    "one array": (lambda path: (np.save(path.with_suffix(".npy"), arrays()["x_train"]),
                                path.with_suffix(".npy").rename(path)), "one array (a .npy file)"),
}
NPY_DAMAGE = {
    "empty": (lambda path: path.write_bytes(b""), "not a .npy file numpy can read"),
    "cut short": (lambda path: path.write_bytes(path.read_bytes()[:-9]), "not a .npy file numpy can read"),
    "header cut short": (lambda path: path.write_bytes(path.read_bytes()[:30]), "not a .npy file numpy can read"),
    "binary junk": (lambda path: path.write_bytes(bytes(range(256))), "not a .npy file numpy can read"),
    "Python objects": (lambda path: np.save(path, np.array([{}] * 40, dtype=object), allow_pickle=True),
                       "not a .npy file numpy can read"),
    "an archive": (lambda path: (np.savez(path.with_suffix(".npz"), a=1), path.with_suffix(".npz").rename(path)),
                   "an .npz archive where one array (.npy) belongs"),
    "missing": (lambda path: path.unlink(), "no such file"),
}


@pytest.mark.parametrize("kind", list(NPZ_DAMAGE))
def test_a_damaged_npz_given_as_data_is_refused_naming_the_file_and_how_to_write_it(tmp_path, kind):
    import emulator

    path = tmp_path / "data.npz"
    np.savez(path, **arrays())
    damage, says = NPZ_DAMAGE[kind]
    damage(path)
    with pytest.raises(ScenarioError) as refused:
        emulator.run(small_scenario(), data=path, out=tmp_path / "run")
    message = str(refused.value)
    assert message.startswith(f"data=: {path}") and says in message and "numpy.savez(path, x_train=" in message, message
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name", ["x_train", "y_test"])
@pytest.mark.parametrize("kind", list(NPY_DAMAGE))
def test_a_damaged_npy_given_as_data_is_refused_naming_the_file_and_how_to_write_it(tmp_path, name, kind):
    import emulator

    paths = {}
    for key, array in arrays().items():
        paths[key] = tmp_path / f"{key}.npy"
        np.save(paths[key], array)
    damage, says = NPY_DAMAGE[kind]
    damage(paths[name])
    with pytest.raises(ScenarioError) as refused:
        emulator.run(small_scenario(), data=tuple(paths.values()), out=tmp_path / "run")
    message = str(refused.value)
    assert message.startswith(f"data=: {name}: {paths[name]}: ") and says in message, message
    assert kind in ("missing", "an archive") or "numpy.save(path, array)" in message, message


@pytest.mark.parametrize("dataset, damage", [("mnist", "train-labels-idx1-ubyte"), ("femnist", "train"),
                                             ("cifar10", "test_batch")])
def test_emulator_run_on_a_damaged_data_root_exits_2_naming_the_file(tmp_path, capsys, dataset, damage):
    if dataset == "mnist":
        path = mnist_like(tmp_path, gz=False)[damage]
    elif dataset == "cifar10":
        path = cifar_like(tmp_path)[damage]
    else:
        root = write_leaf(tmp_path, femnist_users({"f0": (3, 2), "f1": (2, 2)}), files=1)
        path = next((root / damage).glob("*.json"))
    path.write_bytes(path.read_bytes()[:-20])
    raw = small_scenario(**{"data": {"dataset": dataset, "root": str(tmp_path)}, "population.devices": 2,
                            "algorithm.clients_per_round": 2, "output.dir": str(tmp_path / "runs")})
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    assert main(["run", str(tmp_path / "s.yaml"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"data.root: {path}: " in err and "Traceback" not in err, err

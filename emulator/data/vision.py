"""Image datasets from a local directory: Fashion-MNIST, MNIST, EMNIST (IDX files) and CIFAR-10 (pickles).

The files are read directly (gzipped or not), so Debian's dataset-fashion-mnist layout, torchvision's
layout and a flat directory all work offline. torchvision is used only to download, when asked to.
"""
from __future__ import annotations

import gzip
import os
import pickle
import struct
import zlib
from pathlib import Path

import numpy as np

from emulator.data.federation import ArrayDataset
from emulator.scenario import ScenarioError

DEBIAN_FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")
NORMALISATION = {
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "mnist": ((0.1307,), (0.3081,)),
    "emnist": ((0.1751,), (0.3332,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}
VISION_DATASETS = tuple(NORMALISATION)
TORCHVISION_FOLDER = {"fashion_mnist": "FashionMNIST", "mnist": "MNIST", "emnist": "EMNIST"}
CIFAR_FILES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
_CACHE: dict[tuple, tuple[ArrayDataset, ArrayDataset]] = {}


class DataUnavailableError(ScenarioError):
    """The dataset's files are not where the scenario says; the message says where to put them."""


class _FilesMissing(DataUnavailableError):
    """Not there at all (as opposed to there but unreadable): the case a download can fix."""


def default_roots(dataset: str) -> list[Path]:
    """Where a dataset is looked for when data.root is unset; a download goes to the first.

    $EMULATOR_DATA/<dataset> (else ~/.cache/emulator/datasets/<dataset>), then for Fashion-MNIST the directory
    Debian's dataset-fashion-mnist package installs, which needs no download at all.
    """
    base = Path(os.environ["EMULATOR_DATA"]) if os.environ.get("EMULATOR_DATA") else \
        Path.home() / ".cache" / "emulator" / "datasets"
    roots = [base / dataset]
    if dataset == "fashion_mnist":
        roots.append(DEBIAN_FASHION_MNIST)
    return roots


def expected_files(dataset: str, split: str = "balanced") -> list[str]:
    """The file names a dataset is read from (IDX ones may also carry .gz): train images, train labels,
    test images, test labels; for CIFAR-10 the five training batches and the test batch."""
    if dataset == "cifar10":
        return list(CIFAR_FILES)
    prefix, test = (f"emnist-{split}-", "test") if dataset == "emnist" else ("", "t10k")
    return [f"{prefix}train-images-idx3-ubyte", f"{prefix}train-labels-idx1-ubyte",
            f"{prefix}{test}-images-idx3-ubyte", f"{prefix}{test}-labels-idx1-ubyte"]


def directories(dataset: str, root: Path) -> list[Path]:
    """The layouts accepted under a root: flat, raw/, torchvision's (<Folder>/raw/ or cifar-10-batches-py/)."""
    if dataset == "cifar10":
        return [root / "cifar-10-batches-py", root]
    folder = TORCHVISION_FOLDER[dataset]
    found = [root, root / "raw", root / folder / "raw", root / folder]
    if dataset == "emnist":  # the official gzip.zip unpacks into gzip/
        found += [root / "gzip", root / folder / "raw" / "gzip"]
    return found


REPLACE = ("replace it with a good copy (or delete the dataset's files and set data.download: true to fetch them "
           "again)")
LABELS = {"fashion_mnist": 10, "mnist": 10, "emnist": 62, "cifar10": 10}  # classes a label file may name


def damaged(path: Path, problem: str) -> DataUnavailableError:
    """The refusal of a file under data.root that is there but not what the dataset's files are."""
    return DataUnavailableError(f"data.root: {path}: {problem}; {REPLACE}")


def read_idx(path: str | Path, dims: int | None = None) -> np.ndarray:
    """An unsigned-byte IDX file (the MNIST family's format), gzipped or not, as a writable numpy array of
    `dims` dimensions (any when None). A file that is not one, or not whole, raises DataUnavailableError
    naming data.root, the file and the fix."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise damaged(path, f"cannot be read ({exc.strerror or exc})") from None
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as exc:  # BadGzipFile is an OSError
            raise damaged(path, f"a gzip file that does not decompress ({exc}): truncated or corrupt") from None
    if len(data) < 4 or data[:2] != b"\x00\x00" or data[2] != 0x08:
        raise damaged(path, "not an unsigned-byte IDX file (empty, corrupt or another file)")
    found = data[3]
    if found == 0 or dims is not None and found != dims:
        raise damaged(path, f"an IDX file of {found} dimensions where {dims or 'at least 1'} belong (images have 3, "
                            "labels 1): another file under this name?")
    if len(data) < 4 + 4 * found:
        raise damaged(path, f"its header is cut short ({len(data)} bytes): truncated")
    shape = struct.unpack(f">{found}I", data[4:4 + 4 * found])
    expected = int(np.prod(shape, dtype=np.int64))
    held = len(data) - 4 - 4 * found
    if held != expected:
        raise damaged(path, f"{held:,} bytes of data where its header says shape {shape} ({expected:,} bytes): "
                            f"{'truncated' if held < expected else 'corrupt'}")
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * found).reshape(shape).copy()


def _locate(dataset: str, roots: list[Path], split: str) -> list[Path]:
    """The paths of the expected files, all from the first directory that holds every one of them."""
    names = expected_files(dataset, split)
    suffixes = ("",) if dataset == "cifar10" else ("", ".gz")
    looked: list[Path] = []
    for root in roots:
        for directory in directories(dataset, root):
            looked.append(directory)
            paths = [next((directory / (n + s) for s in suffixes if (directory / (n + s)).is_file()), None)
                     for n in names]
            if all(p is not None for p in paths):
                return paths
    raise _FilesMissing(_missing_message(dataset, looked, names))


def _missing_message(dataset: str, looked: list[Path], expected: list[str]) -> str:
    gz = "" if dataset == "cifar10" else " (each may also be gzipped, with .gz)"
    apt = (f"\n  - or, on Debian/Ubuntu, `apt-get install dataset-fashion-mnist`, which puts them in "
           f"{DEBIAN_FASHION_MNIST}" if dataset == "fashion_mnist" else "")
    return (f"data.dataset: the {dataset} files were not found.\n"
            "Looked in:\n    " + "\n    ".join(str(p) for p in dict.fromkeys(looked)) + "\n"
            f"Expected files{gz}:\n    " + "\n    ".join(expected) + "\n"
            "Fix it by one of:\n"
            f"  - put the files in one of those directories, or set data.root to the directory that holds them{apt}\n"
            "  - set data.download: true to fetch them with torchvision (needs network access)")


def _read_idx_dataset(dataset: str, paths: list[Path], split: str) -> tuple[ArrayDataset, ArrayDataset]:
    arrays = [read_idx(p, dims=3 if k % 2 == 0 else 1) for k, p in enumerate(paths)]
    parts = []
    for (images, labels), (image_file, label_file) in zip((arrays[0:2], arrays[2:4]), (paths[0:2], paths[2:4])):
        if images.shape[1:] != (28, 28):
            raise damaged(image_file, f"images of {images.shape[1]} x {images.shape[2]} pixels where {dataset}'s are "
                                      "28 x 28: another dataset's file?")
        if len(images) != len(labels):
            raise damaged(label_file, f"{len(labels):,} labels for the {len(images):,} images of {image_file.name}: "
                                      "the two files are of different sets")
        if labels.max(initial=0) >= LABELS[dataset] + (dataset == "emnist" and split == "letters"):
            raise damaged(label_file, f"label {int(labels.max())} where {dataset} has {LABELS[dataset]} classes")
        labels = labels.astype(np.int64)
        if dataset == "emnist":
            images = images.transpose(0, 2, 1)  # EMNIST is stored transposed
            if split == "letters":
                labels -= 1  # letters are labelled 1..26
        parts.append((np.ascontiguousarray(images[:, None, :, :]), labels))
    return _pair(dataset, parts)


def _read_cifar10(paths: list[Path]) -> tuple[ArrayDataset, ArrayDataset]:
    batches = []
    for path in paths:
        batches.append(_cifar_batch(path))
    train = (np.concatenate([b[0] for b in batches[:5]]), np.concatenate([b[1] for b in batches[:5]]))
    return _pair("cifar10", [train, batches[5]])


def _cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One of CIFAR-10's python batches (a pickled dict of data and labels) as (images, labels)."""
    try:
        with open(path, "rb") as handle:
            batch = pickle.load(handle, encoding="bytes")
    except OSError as exc:
        raise damaged(path, f"cannot be read ({exc.strerror or exc})") from None
    except Exception as exc:  # a pickle cut short or garbled fails in many ways (EOFError, UnpicklingError, ...)
        raise damaged(path, f"not a CIFAR-10 python batch ({type(exc).__name__}: {str(exc)[:80]}): truncated or "
                            "corrupt") from None
    if not isinstance(batch, dict) or b"data" not in batch or b"labels" not in batch:
        raise damaged(path, "not a CIFAR-10 python batch (a dict with data and labels)")
    try:
        images = np.asarray(batch[b"data"], np.uint8).reshape(-1, 3, 32, 32)
        labels = np.asarray(batch[b"labels"], np.int64).reshape(-1)
    except (ValueError, TypeError, OverflowError) as exc:
        raise damaged(path, f"its data is not 32 x 32 colour images with integer labels ({exc})") from None
    if len(images) != len(labels) or len(labels) and (labels.min() < 0 or labels.max() >= LABELS["cifar10"]):
        raise damaged(path, f"{len(labels):,} labels (from {labels.min(initial=0)} to {labels.max(initial=0)}) for "
                            f"{len(images):,} images: CIFAR-10 has one label 0..9 per image")
    return images, labels


def _pair(dataset: str, parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[ArrayDataset, ArrayDataset]:
    mean, std = NORMALISATION[dataset]
    classes = int(max(y.max() for _, y in parts) + 1)
    return tuple(ArrayDataset(x, y, classes, mean, std) for x, y in parts)


def _download(dataset: str, root: Path, split: str) -> None:
    try:
        import torchvision.datasets as tv

        root.mkdir(parents=True, exist_ok=True)
        if dataset == "fashion_mnist":
            for train in (True, False):
                tv.FashionMNIST(str(root), train=train, download=True)
        elif dataset == "mnist":
            for train in (True, False):
                tv.MNIST(str(root), train=train, download=True)
        elif dataset == "emnist":
            tv.EMNIST(str(root), split=split, download=True)
        else:
            tv.CIFAR10(str(root), download=True)
    except Exception as exc:  # no network, a broken mirror, a read-only or full disk...
        raise DataUnavailableError(
            f"data.download: fetching {dataset} into {root} failed, probably for lack of network access "
            f"({type(exc).__name__}: {exc}). Put the files there by hand, or set data.root to a directory that "
            "holds them.") from None


def load_vision(dataset: str, root: str | None = None, download: bool = False, emnist_split: str = "balanced"
                ) -> tuple[ArrayDataset, ArrayDataset]:
    """(train, test) of an image dataset: uint8 images (N, C, H, W), int64 labels, per-channel mean/std.

    Parsed arrays are cached per (dataset, directory, split), so repeated builds in one process are cheap.
    """
    if dataset not in NORMALISATION:
        raise DataUnavailableError(f"data.dataset: {dataset!r} is not an image dataset; choose one of "
                                   f"{', '.join(NORMALISATION)}")
    split = emnist_split if dataset == "emnist" else ""
    roots = [Path(root).expanduser()] if root else default_roots(dataset)
    try:
        paths = _locate(dataset, roots, split)
    except _FilesMissing:
        if not download:
            raise
        _download(dataset, roots[0], split)
        paths = _locate(dataset, roots[:1], split)
    key = (dataset, str(paths[0].parent.resolve()), split)
    if key not in _CACHE:
        _CACHE[key] = _read_cifar10(paths) if dataset == "cifar10" else _read_idx_dataset(dataset, paths, split)
    return tuple(ArrayDataset(d.x, d.y, d.num_classes, d.mean, d.std) for d in _CACHE[key])

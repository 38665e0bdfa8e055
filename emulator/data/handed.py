"""Data handed over from Python (`emulator.run(data=...)`), read into arrays: numpy arrays (or .npy / .npz
files holding them), a torch Dataset or a Hugging Face `datasets.Dataset`, with the data's own split when it
comes with one (`devices=`, `users=`), and its fingerprint. What a run does with it (the scenario, the
federation, the record in the run directory) is custom.py.

A problem with what was handed over raises ScenarioError naming the argument (`data=`, `devices=`, ...); a
.npy or .npz file numpy cannot read is named with what is wrong and how to write it again.
"""
from __future__ import annotations

import hashlib
import os
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from emulator.data.federation import ArrayDataset
from emulator.data.ragged import RaggedRows
from emulator.errors import ArgumentError
from emulator.scenario import ScenarioError

LABEL_COLUMNS = ("label", "labels", "y", "target", "targets")
FEATURE_COLUMNS = ("x", "image", "img", "pixel_values", "features", "input", "inputs")


@dataclass
class CustomData:
    """The user's data as arrays, with its own split (per_device) when it came with one."""

    train: ArrayDataset
    test: ArrayDataset
    form: str                                  # arrays, torch or huggingface
    per_device: list[np.ndarray] | None = None  # devices= or users=: the data's own split
    split: str | None = None                    # "devices", "users" or None (the scenario's partition)
    user_ids: np.ndarray | None = None          # with users=: the user id of each device
    fingerprint: str = ""

    @property
    def devices(self) -> int | None:
        return None if self.per_device is None else len(self.per_device)


# ------------------------------------------------------------------------------------------ reading
def read_data(data: Any, devices=None, users=None, features: str | None = None,
              label: str | None = None) -> CustomData:
    """Arrays from any accepted form of `data=` (see docs/api.md); problems raise ScenarioError naming
    the argument."""
    if devices is not None and users is not None:
        raise ScenarioError("devices= and users=: give one of them (index lists per device, or a user id per "
                            "training sample), not both")
    train_source, test_source, form = _train_and_test(data)
    user_column = users if isinstance(users, str) else None
    if user_column is not None and form != "huggingface":
        raise ScenarioError(f"users={users!r}: a column name only applies to a Hugging Face Dataset; give an array "
                            "with the user id of every training sample")
    x_train, y_train, train_users = _arrays(train_source, "train", features, label, user_column)
    x_test, y_test, _ = _arrays(test_source, "test", features, label, user_column, need_users=False)
    x_train, x_test = _common_width(x_train, x_test)
    if x_train.shape[1:] != x_test.shape[1:]:
        raise ScenarioError(f"data=: train samples have shape {x_train.shape[1:]} but test samples "
                            f"{x_test.shape[1:]}; give both sets in one shape")
    if len(y_train) == 0 or len(y_test) == 0:
        raise ScenarioError(f"data=: the {'train' if len(y_train) == 0 else 'test'} set is empty")
    classes = int(max(y_train.max(), y_test.max())) + 1
    if classes < 2:
        raise ScenarioError("data=: every label is 0; a classification task needs at least two classes")
    custom = CustomData(ArrayDataset(x_train, y_train, classes), ArrayDataset(x_test, y_test, classes), form)
    if devices is not None:
        custom.per_device, custom.split = _device_lists(devices, len(y_train)), "devices"
    elif users is not None:
        ids = train_users if user_column is not None else users
        custom.per_device, custom.user_ids = _user_split(ids, len(y_train))
        custom.split = "users"
    custom.fingerprint = fingerprint(custom)
    return custom


def _train_and_test(data: Any) -> tuple[Any, Any, str]:
    """(train source, test source, form); a source is an (x, y) pair, a torch Dataset or a HF Dataset."""
    if isinstance(data, (str, os.PathLike)):  # an .npz file of the four arrays
        data = _archive(Path(data))
    elif isinstance(data, Mapping) and not isinstance(data, dict):  # np.load's NpzFile, or another mapping
        data = _members(data, _origin(data))
    if isinstance(data, dict):
        keys = set(data)
        if set(ARRAYS) <= keys:
            x_train, y_train, x_test, y_test = (_array_file(data[key], key) for key in ARRAYS)
            return (x_train, y_train), (x_test, y_test), "arrays"
        if {"train", "test"} <= keys:
            train, test = data["train"], data["test"]
            return train, test, _form(train, test)
        raise ScenarioError(f"data=: a dict needs the keys x_train, y_train, x_test, y_test (arrays) or train and "
                            f"test (datasets); got {', '.join(map(str, data)) or 'none'}")
    if isinstance(data, (tuple, list)):
        if len(data) == 4:
            x_train, y_train, x_test, y_test = (_array_file(value, key) for value, key in zip(data, ARRAYS))
            return (x_train, y_train), (x_test, y_test), "arrays"
        if len(data) == 2:
            return data[0], data[1], _form(data[0], data[1])
        raise ScenarioError(f"data=: a tuple of {len(data)} items; give (x_train, y_train, x_test, y_test) or "
                            "(train_dataset, test_dataset)")
    if _is_hf(data) or _is_torch(data):
        raise ScenarioError("data=: a single dataset; the run needs a test set too: give (train, test), e.g. "
                            "data=(train_dataset, test_dataset), or a Hugging Face DatasetDict with train and test "
                            "splits")
    raise ArgumentError(f"data=: {type(data).__name__} is not a form of data the emulator reads; give "
                        "(x_train, y_train, x_test, y_test) arrays (or .npy files), a dict of them, an .npz file "
                        "holding them, or (train, test) torch or Hugging Face datasets")


# ------------------------------------------------------------------------------------ .npy and .npz files
ARRAYS = ("x_train", "y_train", "x_test", "y_test")
NPY_FIX = "write it again with numpy.save(path, array) (plain numbers: no Python objects)"
NPZ_FIX = "write it again with numpy.savez(path, x_train=..., y_train=..., x_test=..., y_test=...)"
_UNREADABLE = (ValueError, OSError, EOFError, zipfile.BadZipFile, zlib.error, KeyError)


def _array_file(value: Any, name: str) -> Any:
    """`value`, or the array in the .npy file it names (allow_pickle=False: a file of Python objects is refused,
    never unpickled); a file numpy cannot read is named, with what is wrong and how to write it."""
    if not isinstance(value, (str, os.PathLike)):
        return value
    path = Path(value)
    if not path.is_file():
        raise ScenarioError(f"data=: {name}: {path}: no such file")
    try:
        array = np.load(path, allow_pickle=False)
    except _UNREADABLE as exc:
        raise ScenarioError(f"data=: {name}: {path}: not a .npy file numpy can read ({_why(exc)}); {NPY_FIX}") from None
    if not isinstance(array, np.ndarray):
        array.close()
        raise ScenarioError(f"data=: {name}: {path}: an .npz archive where one array (.npy) belongs; give the .npz "
                            "as data= itself, or save each array with numpy.save")
    return array


def _archive(path: Path) -> dict:
    """The four arrays of an .npz file (x_train, y_train, x_test, y_test)."""
    if not path.is_file():
        raise ScenarioError(f"data=: {path}: no such file (an .npz file holding {', '.join(ARRAYS)})")
    try:
        archive = np.load(path, allow_pickle=False)
    except _UNREADABLE as exc:
        raise ScenarioError(f"data=: {path}: not an .npz file numpy can read ({_why(exc)}); {NPZ_FIX}") from None
    if isinstance(archive, np.ndarray):
        raise ScenarioError(f"data=: {path}: one array (a .npy file); data= as a file is an .npz holding "
                            f"{', '.join(ARRAYS)}: {NPZ_FIX}")
    with archive:
        return _members(archive, path)


def _members(archive: Mapping, origin: Any) -> dict:
    """The arrays of a mapping such as np.load's NpzFile, each read now, so a damaged member is named here."""
    try:
        names = list(archive)
    except _UNREADABLE as exc:
        raise ScenarioError(f"data=: {origin}: cannot be read ({_why(exc)}); {NPZ_FIX}") from None
    if not set(ARRAYS) <= set(names) and not {"train", "test"} <= set(names):
        raise ScenarioError(f"data=: {origin} holds {', '.join(map(str, names)) or 'nothing'}; it needs the arrays "
                            f"{', '.join(ARRAYS)}: {NPZ_FIX}")
    found = {}
    for name in names:
        try:
            found[name] = archive[name]
        except _UNREADABLE as exc:
            raise ScenarioError(f"data=: {origin}: its array {name} cannot be read ({_why(exc)}); {NPZ_FIX}") from None
    return found


def _origin(archive: Mapping) -> str:
    handle = getattr(archive, "fid", None)
    return str(getattr(handle, "name", None) or type(archive).__name__)


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:200]


def _form(train, test) -> str:
    for source in (train, test):
        if _is_hf(source):
            return "huggingface"
        if _is_torch(source):
            return "torch"
    return "arrays"


def _is_hf(obj) -> bool:
    return type(obj).__module__.startswith("datasets.") and hasattr(obj, "column_names") and hasattr(obj, "with_format")


def _is_torch(obj) -> bool:
    if not (hasattr(obj, "__getitem__") and hasattr(obj, "__len__")) or isinstance(obj, (tuple, list, np.ndarray)):
        return False
    import torch.utils.data

    return isinstance(obj, torch.utils.data.Dataset)


def _arrays(source, which: str, features, label, user_column, need_users: bool = True):
    """(x, y, users column or None) of one set, x as float32 (or uint8 images) and y as int64."""
    users = None
    if _is_hf(source):
        x, y, users = _from_hf(source, which, features, label, user_column, need_users)
    elif _is_torch(source):
        x, y = _from_torch(source, which)
    elif isinstance(source, (tuple, list)) and len(source) == 2:
        x, y = _inputs(source[0], which), _numpy(source[1])
    else:
        raise ScenarioError(f"data=: the {which} set is a {type(source).__name__}; give an (x, y) pair of arrays, a "
                            "torch Dataset or a Hugging Face Dataset")
    return _features(x, which), _labels(y, which, len(x)), users


def _inputs(value, which: str) -> np.ndarray | RaggedRows:
    """An array of inputs; token sequences of different lengths (a list of 1-D integer arrays, or
    RaggedRows, which also sets the padded width and the padding token) become RaggedRows."""
    if isinstance(value, RaggedRows):
        return value
    if isinstance(value, (list, tuple)) or isinstance(value, np.ndarray) and value.dtype == object:
        rows = [_numpy(v) for v in value]
        if len({r.shape for r in rows}) > 1:
            if not all(r.ndim == 1 and (r.dtype.kind in "iu" or len(r) == 0) for r in rows):
                raise ScenarioError(f"data=: the {which} samples differ in shape; give samples of one shape, or "
                                    "token sequences (1-D integer arrays) of any length")
            return RaggedRows.from_sequences(rows)
        return np.stack(rows) if rows else np.zeros((0, 1), np.float32)
    return _numpy(value)


def _common_width(x_train, x_test):
    """Train and test token sequences padded to one width (the longer of the two sets' longest rows)."""
    if isinstance(x_train, RaggedRows) and isinstance(x_test, RaggedRows) and x_train.length != x_test.length:
        width = max(x_train.length, x_test.length)
        return replace(x_train, length=width), replace(x_test, length=width)
    return x_train, x_test


def _numpy(value) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor
        return value.detach().cpu().numpy()
    return np.asarray(value)


def _features(x: np.ndarray | RaggedRows, which: str) -> np.ndarray | RaggedRows:
    if isinstance(x, RaggedRows):
        if x.dtype.kind not in "iu":
            raise ScenarioError(f"data=: {which} sequences hold {x.dtype} values; give integer token ids")
        if x.dtype == np.uint8:  # uint8 inputs are images (scaled to [0, 1]); token ids stay integers
            return replace(x, values=x.values.astype(np.int16))
        return x
    if x.ndim < 2:
        raise ScenarioError(f"data=: {which} inputs have shape {x.shape}; give one row (or image) per sample: (N, D) "
                            "features or (N, C, H, W) images")
    if x.ndim == 3:  # (N, H, W): one channel
        x = x[:, None]
    if x.dtype.kind not in "biuf":
        raise ScenarioError(f"data=: {which} inputs are of type {x.dtype}; give numbers (float features, uint8 "
                            "images or integer token ids)")
    if x.dtype == np.uint8 or x.dtype.kind in "iu" and x.ndim == 2:
        return np.ascontiguousarray(x)  # images (scaled to [0, 1] when trained on), or token ids for an embedding
    x = np.ascontiguousarray(x, dtype=np.float32)
    bad = ~np.isfinite(x)
    if bad.any():  # a NaN feature trains the model to NaN: refused here, not discovered rounds later
        first = np.argwhere(bad)[0]
        position = f"column {first[1]}" if x.ndim == 2 else f"position {tuple(int(i) for i in first[1:])}"
        where = f"sample {first[0]}, {position}"
        raise ScenarioError(f"data=: {which} inputs hold {int(bad.sum()):,} value(s) that are not finite numbers (NaN "
                            f"or infinite, or too large for float32), the first at {where}; drop or impute them "
                            "before handing the data over")
    return x


def _labels(y: np.ndarray, which: str, n: int) -> np.ndarray:
    y = np.asarray(y)
    if y.ndim == 2 and y.shape[1] == 1:
        y = y[:, 0]
    if y.ndim != 1 or len(y) != n:
        raise ScenarioError(f"data=: {which} labels have shape {y.shape} for {n} samples; give one integer class "
                            "label per sample")
    if y.dtype.kind == "f" and np.any(y != np.round(y)) or y.dtype.kind not in "biuf":
        raise ScenarioError(f"data=: {which} labels must be integer classes 0..C-1, got {y.dtype} values")
    y = y.astype(np.int64)
    if len(y) and y.min() < 0:
        raise ScenarioError(f"data=: {which} labels must be classes 0..C-1; found {int(y.min())}")
    return y


def _from_torch(dataset, which: str) -> tuple[np.ndarray, np.ndarray]:
    tensors = getattr(dataset, "tensors", None)
    if isinstance(tensors, tuple) and len(tensors) >= 2:  # TensorDataset: no per-item loop
        return _numpy(tensors[0]), _numpy(tensors[1])
    xs, ys = [], []
    for i in range(len(dataset)):
        item = dataset[i]
        if not isinstance(item, (tuple, list)) or len(item) < 2:
            raise ScenarioError(f"data=: the {which} dataset's item {i} is a {type(item).__name__}; a torch Dataset "
                                "must return (x, y) pairs")
        xs.append(_sample(item[0]))
        ys.append(_numpy(item[1]))
    if not xs:
        return np.zeros((0, 1), np.float32), np.zeros(0, np.int64)
    return _inputs(xs, which), np.stack(ys).reshape(len(ys), -1).squeeze(1)


def _sample(x) -> np.ndarray:
    """One sample as an array; a PIL image (H, W[, C]) becomes (C, H, W)."""
    if type(x).__module__.startswith("PIL."):
        return _channels_first(np.asarray(x)[None])[0]
    return _numpy(x)


def _channels_first(images: np.ndarray) -> np.ndarray:
    """(N, H, W, C) or (N, H, W) images, as PIL and Hugging Face give them, as (N, C, H, W)."""
    if images.ndim == 3:
        return images[:, None]
    if images.ndim == 4:
        return np.moveaxis(images, -1, 1)
    return images


def _from_hf(dataset, which: str, features, label, user_column, need_users):
    columns = list(dataset.column_names)
    label = label or next((c for c in LABEL_COLUMNS if c in columns), None)
    if label is None or label not in columns:
        raise ScenarioError(f"label=: the {which} dataset has no label column {label or ''} (columns: "
                            f"{', '.join(columns)}); name it with label=")
    if user_column is not None and need_users and user_column not in columns:
        raise ScenarioError(f"users={user_column!r}: the train dataset has no such column (columns: "
                            f"{', '.join(columns)})")
    rest = [c for c in columns if c not in (label, user_column)]
    if features is None:
        named = [c for c in FEATURE_COLUMNS if c in rest]
        if len(rest) == 1:
            features = rest[0]
        elif named:
            features = named[0]
        else:
            raise ScenarioError(f"features=: the {which} dataset has columns {', '.join(rest)} besides the label; "
                                "name the input column with features=")
    if features not in columns:
        raise ScenarioError(f"features={features!r}: the {which} dataset has no such column (columns: "
                            f"{', '.join(columns)})")
    wanted = [features, label] + ([user_column] if user_column is not None and user_column in columns else [])
    table = dataset.select_columns(wanted).with_format("numpy")[:]
    x = np.asarray(table[features])
    if x.dtype == object:  # rows of different lengths: token sequences (RaggedRows), else refused
        x = _inputs(x, which)
    if type(dataset.features[features]).__name__ == "Image":
        x = _channels_first(x)
    users = table[user_column] if user_column is not None and user_column in table else None
    return x, np.asarray(table[label]), users


def _device_lists(devices, n_train: int) -> list[np.ndarray]:
    if isinstance(devices, (str, bytes)) or not hasattr(devices, "__len__"):
        raise ScenarioError("devices=: give one list of training-sample indices per device")
    lists = []
    for d, indices in enumerate(devices):
        a = np.asarray(indices)
        if a.size == 0:
            a = a.astype(np.int64)
        if a.ndim != 1 or a.dtype.kind not in "iu":
            raise ScenarioError(f"devices=: device {d}'s entry is not a list of integer sample indices")
        if len(a) and (a.min() < 0 or a.max() >= n_train):
            raise ScenarioError(f"devices=: device {d} holds sample {int(a.min() if a.min() < 0 else a.max())}, but "
                                f"the train set has samples 0..{n_train - 1}")
        lists.append(a.astype(np.int64))
    if not lists:
        raise ScenarioError("devices=: no devices")
    owners = np.bincount(np.concatenate(lists), minlength=n_train)
    if owners.max(initial=0) > 1:
        sample = int(np.argmax(owners > 1))
        raise ScenarioError(f"devices=: sample {sample} is held {int(owners[sample])} times; a training sample "
                            "belongs to one device, once")
    return lists


def _user_split(users, n_train: int) -> tuple[list[np.ndarray], np.ndarray]:
    ids = _numpy(users)
    if ids.ndim != 1 or len(ids) != n_train:
        raise ScenarioError(f"users=: {len(ids) if ids.ndim == 1 else ids.shape} user ids for {n_train} training "
                            "samples; give one user id per training sample")
    try:
        unique, owner = np.unique(ids, return_inverse=True)
    except TypeError:
        raise ScenarioError("users=: user ids must be all numbers or all strings") from None
    order = np.argsort(owner, kind="stable")
    sizes = np.bincount(owner, minlength=len(unique))
    return np.split(order.astype(np.int64), np.cumsum(sizes)[:-1]), unique


# ------------------------------------------------------------------------------------ fingerprint
def fingerprint(custom: CustomData) -> str:
    """SHA-256 of the arrays (dtype, shape and bytes) and of the data's own split, if any."""
    digest = hashlib.sha256()
    for array in (custom.train.x, custom.train.y, custom.test.x, custom.test.y):
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        if isinstance(array, RaggedRows):  # its tokens, where each row starts, and the padding token
            digest.update(f"pad{array.pad}".encode())
            digest.update(np.ascontiguousarray(array.offsets, dtype=np.int64).data)
            array = array.values
        digest.update(np.ascontiguousarray(array).data)
    digest.update(f"split:{custom.split}".encode())
    for indices in custom.per_device or []:
        digest.update(len(indices).to_bytes(8, "little"))
        digest.update(np.ascontiguousarray(indices, dtype=np.int64).data)
    return "sha256:" + digest.hexdigest()

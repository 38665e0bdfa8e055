"""Bring your own data: numpy arrays, a torch Dataset or a Hugging Face `datasets.Dataset` as a Federation.

`read_data` turns what the user hands `emulator.run(data=...)` into arrays (a train and a test set), with
the data's own split when there is one: per-device index lists (`devices=[idx0, idx1, ...]`) or a user id
per training sample (`users=`, an array or a column name: device d holds the rows of the d-th smallest
user id). Without a split the scenario's `data.partition` deals the samples out, as for a built-in dataset.
Either way the server set (`data.server_set`) is carved from the devices' data and the test set cut to
`data.test_samples`, with the same random streams `build_federation` uses.

The data is fingerprinted (SHA-256 of the arrays and the split) and the run records where it came from:
`data.json` in the run directory, a `data` entry in summary.json and a comment heading scenario.yaml
(whose `data.dataset` does not say where the samples came from). Such a run cannot be resumed from the
command line, which has no way to get the arrays back; `emulator.resume(run_dir, data=...)` continues it
after checking that the data given has the recorded fingerprint.
"""
from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

import numpy as np
from pydantic import Field

from emulator.data import assemble_federation
from emulator.data.federation import ArrayDataset, Federation
from emulator.data.ragged import RaggedRows
from emulator.models.zoo import build_model
from emulator.recording.rundir import atomic_file, write_atomic
from emulator.errors import ArgumentError
from emulator.scenario import DatasetOptions, ScenarioError


class MemoryOptions(DatasetOptions):
    """Samples handed over from Python (emulator.run(data=...)): what the scenario can know of them."""

    shape: list[int] = Field(min_length=1)  # one sample's shape
    classes: int = Field(gt=0)
    fingerprint: str  # SHA-256 of the arrays and their split: a resume must get the same data
    form: str = "arrays"  # arrays, torch or huggingface
    split: Optional[str] = None  # devices or users (the data's own split), None: data.partition dealt it


RECORD = "data.json"      # where a run on in-memory data records it, beside scenario.yaml
USERS = "users.csv"       # device -> user id, for a run split by users=
SOURCE = "memory"
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
    if isinstance(data, dict):
        keys = set(data)
        if {"x_train", "y_train", "x_test", "y_test"} <= keys:
            return (data["x_train"], data["y_train"]), (data["x_test"], data["y_test"]), "arrays"
        if {"train", "test"} <= keys:
            train, test = data["train"], data["test"]
            return train, test, _form(train, test)
        raise ScenarioError(f"data=: a dict needs the keys x_train, y_train, x_test, y_test (arrays) or train and "
                            f"test (datasets); got {', '.join(map(str, data)) or 'none'}")
    if isinstance(data, (tuple, list)):
        if len(data) == 4:
            return (data[0], data[1]), (data[2], data[3]), "arrays"
        if len(data) == 2:
            return data[0], data[1], _form(data[0], data[1])
        raise ScenarioError(f"data=: a tuple of {len(data)} items; give (x_train, y_train, x_test, y_test) or "
                            "(train_dataset, test_dataset)")
    if _is_hf(data) or _is_torch(data):
        raise ScenarioError("data=: a single dataset; the run needs a test set too: give (train, test), e.g. "
                            "data=(train_dataset, test_dataset), or a Hugging Face DatasetDict with train and test "
                            "splits")
    raise ArgumentError(f"data=: {type(data).__name__} is not a form of data the emulator reads; give "
                        "(x_train, y_train, x_test, y_test) arrays, a dict of them, or (train, test) torch or "
                        "Hugging Face datasets")


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
        where = f"sample {first[0]}, " + (f"column {first[1]}" if x.ndim == 2 else f"position {tuple(int(i) for i in first[1:])}")
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


# ------------------------------------------------------------------------------- the scenario for it
def scenario_for(raw: dict, custom: CustomData) -> dict:
    """The raw scenario adjusted to the data (a copy): population.devices from the data's split when the
    scenario leaves it out, the partition (natural: the data's own split; iid when the scenario gives none
    and the data has no split), and, for the nominal dataset synthetic, its dimension and classes."""
    raw = copy.deepcopy(raw)
    # where samples come from no longer applies; how they are split, and where they are kept, does
    data = {key: value for key, value in (raw.get("data") or {}).items()
            if key in ("partition", "server_set", "test_samples", "store")}
    data["dataset"] = "memory"
    data["options"] = {"shape": list(custom.train.input_shape), "classes": custom.train.num_classes,
                       "fingerprint": custom.fingerprint or fingerprint(custom), "form": custom.form,
                       "split": custom.split}
    raw["data"] = data
    partition = data.get("partition") or None
    scheme = partition.get("scheme") if isinstance(partition, dict) else None
    if custom.per_device is not None:
        if scheme not in (None, "natural"):
            raise ScenarioError(f"data.partition.scheme: {scheme!r}, but data= comes split by {custom.split}= into "
                                f"devices; drop data.partition (the data's own split is used), or drop {custom.split}= "
                                "to let the partition deal the samples out")
        data["partition"] = {"scheme": "natural"}
        population = raw.setdefault("population", {}) or {}
        raw["population"] = population
        given = population.get("devices")
        if given is None:
            population["devices"] = custom.devices
        elif given != custom.devices:
            raise ScenarioError(f"population.devices: {given}, but data= comes split into {custom.devices} devices "
                                f"(by {custom.split}=); set population.devices to {custom.devices} or leave it out")
    elif scheme in (None, "natural"):
        # natural (the default for synthetic) would mean the data's own split, and there is none
        data["partition"] = {"scheme": "iid"}
    return raw


def build_custom_federation(scenario, custom: CustomData) -> Federation:
    """The Federation of a run on the user's data: their split or the scenario's partition, the server
    set carved and the test set cut as build_federation does (same random streams)."""
    per_device = None if custom.per_device is None else list(custom.per_device)
    federation = assemble_federation(scenario.data, scenario.population.devices, scenario.seed,
                                     scenario.population.types, custom.train, custom.test, per_device)
    _check_model(scenario, federation)
    return federation


def _check_model(scenario, federation: Federation) -> None:
    """Build the model on two samples of the data, so a model that cannot take them fails here, clearly,
    instead of inside a Ray actor."""
    import torch


    train = federation.train
    try:
        options = scenario.model.options() if hasattr(scenario.model, "options") else None  # a model's own
        model = (build_model(scenario.model.name, train.input_shape, train.num_classes, None, options) if options
                 else build_model(scenario.model.name, train.input_shape, train.num_classes))
        model.eval()
        with torch.no_grad():
            model(train.tensors(np.arange(min(2, len(train))))[0])
    except Exception as exc:
        if train.x.dtype.kind in "iu" and train.x.dtype != np.uint8:
            hint = ("; integer inputs (other than uint8) are token ids for an embedding model such as char_lstm: "
                    "give float32 features for logreg or mlp")
        else:
            hint = "; choose a model that fits the data (logreg and mlp fit any features)"
        raise ScenarioError(f"model.name: {scenario.model.name} cannot take the samples of data= (shape "
                            f"{train.input_shape}, {train.num_classes} classes): {type(exc).__name__}: {exc}{hint}"
                            ) from None


# ------------------------------------------------------------------------------------------ record
def record(custom: CustomData) -> dict:
    """What data.json and summary.json say about the data of a run on in-memory data."""
    entry = {"source": SOURCE, "form": custom.form, "fingerprint": custom.fingerprint, "split": custom.split,
             "train_samples": len(custom.train), "test_samples": len(custom.test),
             "input_shape": list(custom.train.input_shape), "classes": custom.train.num_classes}
    if custom.user_ids is not None:
        entry["users_file"] = USERS
        entry["_user_ids"] = custom.user_ids
    return entry


def public(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if not k.startswith("_")}


def write_record(run_dir: Path, entry: dict) -> None:
    """data.json (and users.csv: which user each device is) in a new run directory, atomically."""
    write_atomic(Path(run_dir) / RECORD, json.dumps(public(entry), indent=2) + "\n")
    ids = entry.get("_user_ids")
    if ids is not None:
        with atomic_file(Path(run_dir) / USERS) as handle:
            handle.write("device,user\n")
            handle.writelines(f"{d},{_csv_cell(u)}\n" for d, u in enumerate(ids.tolist()))


def _csv_cell(value) -> str:
    text = str(value)
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n\r') else text


def scenario_header(entry: dict) -> str:
    """The comment heading scenario.yaml of a run on in-memory data."""
    return (f"# data: given in memory ({entry['form']}, {entry['train_samples']} train and {entry['test_samples']} "
            f"test samples, {entry['fingerprint']}),\n"
            "# (data.dataset: memory below; see data.json). Rerun or resume it from Python with the same data:\n"
            "# emulator.resume(RUN_DIR, data=...)\n")


def memory_record(run_dir: str | Path) -> dict | None:
    """The in-memory data record of a run directory (data.json, else summary.json's `data`), or None."""
    run_dir = Path(run_dir)
    try:
        entry = json.loads((run_dir / RECORD).read_text())
    except (OSError, ValueError):
        entry = None
    if not isinstance(entry, dict):
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
            entry = summary.get("data") if isinstance(summary, dict) else None
        except (OSError, ValueError):
            entry = None
    return entry if isinstance(entry, dict) and entry.get("source") == SOURCE else None


def cli_refusal(run_dir: str | Path, entry: dict) -> str:
    split = {"devices": ", devices=...", "users": ", users=..."}.get(entry.get("split"), "")
    return (f"--resume {run_dir}: this run trained on data given in memory ({entry.get('form')}, "
            f"{entry.get('fingerprint')}), which the command line cannot load again; nothing was changed. Resume it "
            f"from Python with the same data: emulator.resume({str(run_dir)!r}, data=...{split})")


def check_same_data(run_dir: str | Path, entry: dict | None, custom: CustomData) -> None:
    """Refuse to resume a run with other data than it started with (or a run that read its own data)."""
    if entry is None:
        raise ScenarioError(f"data=: {run_dir} did not run on in-memory data (it reads data.dataset); resume it "
                            "without data=")
    if entry.get("fingerprint") != custom.fingerprint:
        raise ScenarioError(f"data=: not the data {run_dir} started with: its fingerprint is "
                            f"{entry.get('fingerprint')}, the data given has {custom.fingerprint} (same arrays, in "
                            "the same order, with the same devices= or users= are needed); nothing was changed")

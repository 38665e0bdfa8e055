"""LEAF's federated data sets (FEMNIST, Shakespeare) from a local directory: one device per LEAF user.

LEAF (github.com/TalwalkarLab/leaf) preprocesses its data sets into JSON files; run its `preprocess.sh`
on a machine with network access (e.g. `./preprocess.sh -s niid --sf 0.2 -k 0 -t sample --tf 0.8` in
data/shakespeare) and copy the resulting `data/` directory to this machine. Nothing here ever downloads.

Layout under the root (data.root; else $EMULATOR_DATA/<name>, else ~/.cache/emulator/datasets/<name>):
`train/*.json` and `test/*.json`, or the same under `data/` (the root may then be LEAF's `data/<name>`).
Every file is `{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y": [...]}}}`,
optionally with `hierarchies` (read and ignored). `num_samples` may be left out; when present it must agree
with user_data.

- femnist: x is a flat list of 784 grey levels in [0, 1] (28 x 28, LEAF's value / 255), y a class 0..61.
  Stored as uint8 images (N, 1, 28, 28) (x * 255 rounded: lossless for LEAF's values) and fed to models
  as floats in [0, 1], not normalised further, as LEAF's models take them.
- shakespeare: x is an 80-character string, y the next character; both encoded with LEAF's 80-character
  vocabulary (ALL_LETTERS: a character's index is its position). Stored as int16 token ids (N, 80) and fed
  to models as int64 (ArrayDataset.tensors). A character outside the vocabulary (Gutenberg text may hold a few)
  becomes the last one, '}', which Shakespeare does not use: the one-hot position LEAF's own label
  encoding gives it (`find` returns -1).

Devices are LEAF users, in sorted user-id order. Users with fewer than `min_samples` training samples are
left out; of the rest, `users` are kept (all when None): a uniform sample without replacement drawn from
the seed's "leaf_users" stream (pick="random", the default), or the first ones by sorted id
(pick="first"). The kept devices keep their sorted order. Test data: LEAF splits per user; the kept users'
test samples are pooled into one global test set. When the test files hold other users than the training
files (LEAF's `-t user` split, users held out whole), all test users' samples are pooled instead.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Literal, Optional

import numpy as np
from pydantic import Field

from emulator.data.federation import ArrayDataset
from emulator.data.vision import DataUnavailableError
from emulator.scenario import DatasetOptions
from emulator.seeding import rng


class LeafOptions(DatasetOptions):
    """LEAF's FEMNIST and Shakespeare (data.root holds LEAF's preprocessed train/ and test/ JSON files):
    one device per user; `users` keeps that many (picked at random from the seed, or the first by id)."""

    users: Optional[int] = Field(None, gt=0)
    min_samples: int = Field(1, ge=1)
    pick: Literal["random", "first"] = "random"


LEAF_URL = "https://github.com/TalwalkarLab/leaf"
LEAF_DATASETS = ("femnist", "shakespeare")
# LEAF's models/utils/language_utils.py: a character's index is its position in this string.
ALL_LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
UNKNOWN_INDEX = len(ALL_LETTERS) - 1  # '}': where a character outside the vocabulary goes
SEQUENCE_LENGTH = 80
FEMNIST_SIDE = 28
FEMNIST_CLASSES = 62
_SHAPES = {"femnist": (1, FEMNIST_SIDE, FEMNIST_SIDE), "shakespeare": (SEQUENCE_LENGTH,)}
_CLASSES = {"femnist": FEMNIST_CLASSES, "shakespeare": len(ALL_LETTERS)}
_TABLE = np.full(128, UNKNOWN_INDEX, dtype=np.int16)  # ASCII code point -> token id
_TABLE[[ord(c) for c in ALL_LETTERS]] = np.arange(len(ALL_LETTERS), dtype=np.int16)
_CACHE: dict[tuple, tuple[dict, dict]] = {}

assert len(ALL_LETTERS) == 80 and len(set(ALL_LETTERS)) == 80


def _check_name(name: str) -> None:
    if name not in LEAF_DATASETS:
        raise DataUnavailableError(f"data.dataset: {name!r} is not a LEAF data set; choose one of "
                                   f"{', '.join(LEAF_DATASETS)}")


def leaf_input_shape(name: str) -> tuple[int, ...]:
    """A sample's shape: femnist (1, 28, 28) uint8 images, shakespeare (80,) token ids."""
    _check_name(name)
    return _SHAPES[name]


def leaf_classes(name: str) -> int:
    """The number of classes: femnist 62 (digits, upper case, lower case), shakespeare 80 (the vocabulary)."""
    _check_name(name)
    return _CLASSES[name]


def encode_text(text: str) -> np.ndarray:
    """Token ids (int16) of a string in LEAF's vocabulary; characters outside it become UNKNOWN_INDEX."""
    codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    return np.where(codes < 128, _TABLE[np.minimum(codes, 127)], np.int16(UNKNOWN_INDEX)).astype(np.int16)


def decode_text(tokens) -> str:
    """The string a sequence of token ids stands for."""
    return "".join(ALL_LETTERS[int(t)] for t in np.asarray(tokens).reshape(-1))


def default_root(name: str) -> Path:
    """Where a LEAF data set is looked for when data.root is unset."""
    base = Path(os.environ["EMULATOR_DATA"]) if os.environ.get("EMULATOR_DATA") else \
        Path.home() / ".cache" / "emulator" / "datasets"
    return base / name


def locate_leaf(name: str, root: str | os.PathLike | None = None) -> tuple[Path, Path]:
    """The train and test directories of a LEAF data set under `root` (default_root(name) when None)."""
    _check_name(name)
    base = Path(root).expanduser() if root else default_root(name)
    for directory in (base, base / "data"):
        if (directory / "train").is_dir():
            train, test = directory / "train", directory / "test"
            if not any(train.glob("*.json")):
                raise DataUnavailableError(f"data.root: {train} holds no .json files; {_how_to(name)}")
            if not test.is_dir() or not any(test.glob("*.json")):
                raise DataUnavailableError(
                    f"data.root: {train} is there but {test} holds no .json files: LEAF writes test/ when "
                    f"preprocess.sh is run with a train/test split (-t sample, or -t user); {_how_to(name)}")
            return train, test
    unset = "" if root else (" (data.root is unset, so the default was used: $EMULATOR_DATA/<dataset>, else "
                             "~/.cache/emulator/datasets/<dataset>)")
    raise DataUnavailableError(
        f"data.root: no LEAF {name} data in {base}{unset}; looked for {base / 'train'} and "
        f"{base / 'data' / 'train'}, each next to a test/ directory of .json files. {_how_to(name)}.")


def _how_to(name: str) -> str:
    return (f"LEAF's preprocessed files come from its preprocess.sh, run on a machine with network access "
            f"({LEAF_URL}: in data/{name}, e.g. `./preprocess.sh -s niid --sf 0.2 -k 0 -t sample --tf 0.8`); "
            f"copy its data/{name}/data directory (with train/ and test/) to this machine and point data.root at it")


# --------------------------------------------------------------------------------------------- reading
REGENERATE = "fix the file, or regenerate it with LEAF's preprocess.sh"


def _bad(path: Path, field: str, problem: str) -> DataUnavailableError:
    return DataUnavailableError(f"data.root: {path}: {field}: {problem} ({REGENERATE})")


def _decode_femnist(path: Path, user: str, xs, ys) -> tuple[np.ndarray, np.ndarray]:
    field = f"user_data[{user!r}]"
    pixels = FEMNIST_SIDE * FEMNIST_SIDE
    try:
        x = np.asarray(xs, dtype=np.float32)
    except (ValueError, TypeError):
        x = None
    if x is None or (len(xs) and x.shape != (len(xs), pixels)):
        row = next((j for j, v in enumerate(xs) if not isinstance(v, list) or len(v) != pixels), 0)
        raise _bad(path, f"{field}.x[{row}]", f"every sample must be a list of {pixels} numbers (28 x 28)")
    if len(xs) == 0:
        x = np.zeros((0, pixels), np.float32)
    if not np.all((x >= 0) & (x <= 1)):  # also catches NaN
        row = int(np.nonzero(~np.all((x >= 0) & (x <= 1), axis=1))[0][0])
        raise _bad(path, f"{field}.x[{row}]", "pixel values must lie in [0, 1] (LEAF's grey levels / 255)")
    images = np.rint(x * 255.0).astype(np.uint8).reshape(-1, 1, FEMNIST_SIDE, FEMNIST_SIDE)
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in ys):
        row = next(j for j, v in enumerate(ys) if not isinstance(v, int) or isinstance(v, bool))
        raise _bad(path, f"{field}.y[{row}]", f"a label must be an integer class 0..{FEMNIST_CLASSES - 1}, "
                   f"got {ys[row]!r}")
    y = np.asarray(ys, dtype=np.int64).reshape(-1)
    if len(y) and (y.min() < 0 or y.max() >= FEMNIST_CLASSES):
        row = int(np.nonzero((y < 0) | (y >= FEMNIST_CLASSES))[0][0])
        raise _bad(path, f"{field}.y[{row}]", f"label {int(y[row])} is outside 0..{FEMNIST_CLASSES - 1}")
    return images, y


def _decode_shakespeare(path: Path, user: str, xs, ys) -> tuple[np.ndarray, np.ndarray]:
    field = f"user_data[{user!r}]"
    for j, s in enumerate(xs):
        if not isinstance(s, str) or len(s) != SEQUENCE_LENGTH:
            got = f"{len(s)} characters" if isinstance(s, str) else type(s).__name__
            raise _bad(path, f"{field}.x[{j}]", f"every sample must be a string of {SEQUENCE_LENGTH} characters, "
                       f"got {got}")
    for j, s in enumerate(ys):
        if not isinstance(s, str) or len(s) != 1:
            raise _bad(path, f"{field}.y[{j}]", f"a label must be one character (the next one), got {s!r}")
    x = encode_text("".join(xs)).reshape(len(xs), SEQUENCE_LENGTH)
    y = encode_text("".join(ys)).astype(np.int64)
    return x, y


_DECODERS = {"femnist": _decode_femnist, "shakespeare": _decode_shakespeare}


def read_leaf_file(name: str, path: str | os.PathLike) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """One LEAF JSON file: {user: (x, y)} in the file's user order, decoded as load_leaf stores them."""
    _check_name(name)
    path = Path(path)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except json.JSONDecodeError as exc:
        raise DataUnavailableError(f"data.root: {path}: not valid JSON ({exc.msg} at line {exc.lineno}, column "
                                   f"{exc.colno}): truncated or corrupt; {REGENERATE}") from None
    except UnicodeDecodeError as exc:
        raise DataUnavailableError(f"data.root: {path}: not text (byte {exc.start} is not UTF-8: binary data?); "
                                   f"{REGENERATE}") from None
    except RecursionError:
        raise DataUnavailableError(f"data.root: {path}: JSON nested deeper than LEAF writes it; {REGENERATE}"
                                   ) from None
    except OSError as exc:
        raise DataUnavailableError(f"data.root: {path}: cannot be read ({exc.strerror or exc})") from None
    if not isinstance(data, dict):
        raise _bad(path, "top level", f"must be an object with users and user_data, got a {type(data).__name__}")
    for key, kind in (("users", list), ("user_data", dict)):
        if key not in data:
            raise _bad(path, key, "missing")
        if not isinstance(data[key], kind):
            raise _bad(path, key, f"must be a {'list' if kind is list else 'object'}, "
                       f"got a {type(data[key]).__name__}")
    users, user_data, counts = data["users"], data["user_data"], data.get("num_samples")
    if counts is not None and (not isinstance(counts, list) or len(counts) != len(users)):
        raise _bad(path, "num_samples", f"must be a list with one count per user ({len(users)})")
    decode = _DECODERS[name]
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for i, user in enumerate(users):
        if not isinstance(user, str):
            raise _bad(path, f"users[{i}]", f"a user id must be a string, got {user!r}")
        if user in out:
            raise _bad(path, f"users[{i}]", f"user {user!r} is listed twice")
        entry = user_data.get(user)
        if not isinstance(entry, dict):
            raise _bad(path, f"user_data[{user!r}]", f"missing (user {user!r} is users[{i}])" if entry is None
                       else "must be an object with x and y")
        for key in ("x", "y"):
            if not isinstance(entry.get(key), list):
                raise _bad(path, f"user_data[{user!r}].{key}", "missing" if key not in entry else "must be a list")
        xs, ys = entry["x"], entry["y"]
        if len(xs) != len(ys):
            raise _bad(path, f"user_data[{user!r}]", f"x has {len(xs)} samples but y has {len(ys)}")
        if counts is not None and counts[i] != len(ys):
            raise _bad(path, f"num_samples[{i}]", f"says {counts[i]!r} samples for user {user!r}, but "
                       f"user_data[{user!r}] has {len(ys)}")
        out[user] = decode(path, user, xs, ys)
    return out


def _read_directory(name: str, directory: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    users: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    where: dict[str, Path] = {}
    for path in sorted(directory.glob("*.json")):
        for user, arrays in read_leaf_file(name, path).items():
            if user in users:
                raise DataUnavailableError(f"data.root: {path}: users: user {user!r} is also in {where[user]}; a "
                                           f"user's {directory.name} samples must be in one file")
            users[user], where[user] = arrays, path
    return users


def _signature(directory: Path) -> tuple:
    return tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(directory.glob("*.json")))


def _parsed(name: str, train_dir: Path, test_dir: Path) -> tuple[dict, dict]:
    """{user: (x, y)} for train and test, parsed once per process while the files stay unchanged."""
    key = (name, str(train_dir.resolve()), _signature(train_dir), str(test_dir.resolve()), _signature(test_dir))
    if key not in _CACHE:
        _CACHE.clear()  # one LEAF data set in memory at a time: they are large
        _CACHE[key] = (_read_directory(name, train_dir), _read_directory(name, test_dir))
    return _CACHE[key]


# --------------------------------------------------------------------------------------------- loading
def _stack(name: str, parts: list[tuple[np.ndarray, np.ndarray]]) -> ArrayDataset:
    empty_x = np.zeros((0,) + _SHAPES[name], np.uint8 if name == "femnist" else np.int16)
    x = np.concatenate([p[0] for p in parts]) if parts else empty_x
    y = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
    return ArrayDataset(x, y, _CLASSES[name])


def load_leaf(name: str, root: str | os.PathLike | None = None, users: int | None = None, min_samples: int = 1,
              seed: int = 0, *, pick: str = "random") -> tuple[ArrayDataset, ArrayDataset, list[np.ndarray]]:
    """(train, test, per_device): a LEAF data set with one device per user (see the module's docstring).

    train holds the kept users' training samples in device order, so device d's indices (per_device[d],
    int64) are one contiguous range; test pools the kept users' test samples. users: how many users to keep
    (None: all with at least min_samples training samples); pick: "random" (from the seed) or "first" (by
    sorted id). Problems with the files or the request raise DataUnavailableError (a ScenarioError).
    """
    _check_name(name)
    if pick not in ("random", "first"):
        raise DataUnavailableError(f"data.options.pick: {pick!r}; choose random or first")
    if users is not None and users < 1:
        raise DataUnavailableError(f"data.options.users: {users}; keep at least one user, or null for all")
    train_dir, test_dir = locate_leaf(name, root)
    train_users, test_users = _parsed(name, train_dir, test_dir)
    eligible = sorted(u for u, (_, y) in train_users.items() if len(y) >= max(min_samples, 1))
    if users is not None and users > len(eligible):
        raise DataUnavailableError(
            f"data.options.users: {users} users asked for, but {train_dir} holds {len(eligible)} with at least "
            f"{max(min_samples, 1)} training samples (of {len(train_users)} users); lower data.options.users or "
            "data.options.min_samples, or preprocess more of LEAF's data (a larger --sf)")
    if users is None or users == len(eligible):
        chosen = eligible
    elif pick == "first":
        chosen = eligible[:users]
    else:
        keep = np.sort(rng(seed, "leaf_users").choice(len(eligible), users, replace=False))
        chosen = [eligible[i] for i in keep]
    train = _stack(name, [train_users[u] for u in chosen])
    sizes = np.array([len(train_users[u][1]) for u in chosen], dtype=np.int64)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    per_device = [np.arange(bounds[k], bounds[k + 1], dtype=np.int64) for k in range(len(chosen))]
    owner = None
    if train_users.keys() & test_users.keys():  # split by sample: each user's own held-out samples
        test_ids = [u for u in chosen if u in test_users]
        device_of = {u: k for k, u in enumerate(chosen)}  # data.local_test.split: dataset keeps them per device
        owner = np.repeat([device_of[u] for u in test_ids], [len(test_users[u][1]) for u in test_ids]).astype(np.int64)
    else:  # split by user: the test users are others
        test_ids = sorted(test_users)
    test = _stack(name, [test_users[u] for u in test_ids])
    test.owner = owner
    if len(test) == 0:
        raise DataUnavailableError(f"data.root: {test_dir} holds no test samples for the {len(chosen)} users "
                                   "kept; regenerate the data with a train/test split (preprocess.sh -t sample)")
    return train, test, per_device


__all__ = ["ALL_LETTERS", "LEAF_DATASETS", "decode_text", "default_root", "encode_text", "leaf_classes",
           "leaf_input_shape", "load_leaf", "locate_leaf", "read_leaf_file"]

"""A dataset plugin: one CSV of rows `user,label,f0,f1,...`, split naturally by user (each user is a
device) with a seeded share of every user's rows held out for the global test set."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import Field

from emulator.extend import ArrayDataset, DatasetOptions, ScenarioError, register_dataset


class UserCsvOptions(DatasetOptions):
    """One CSV of rows `user,label,f0,f1,...`: a device per user, a share of its rows held out for testing."""

    file: str  # relative to the working directory, or absolute
    test_fraction: float = Field(0.2, gt=0, lt=1)


@lru_cache(maxsize=4)
def read_rows(file: str):
    path = Path(file).expanduser()
    if not path.is_file():
        raise ScenarioError(f"data.options.file: no file {path}; give the CSV's path (absolute, or relative to "
                            "the working directory)")
    table = np.loadtxt(path, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2)
    return table[:, 0].astype(np.int64), table[:, 1].astype(np.int64), table[:, 2:].astype(np.float32)


def load(data, devices, seed):
    users, labels, features = read_rows(data.options.file)
    classes = int(labels.max()) + 1
    rng = np.random.default_rng(seed)
    train, test = [], []
    for user in np.unique(users):  # users in id order: device d is the d-th user
        rows = rng.permutation(np.flatnonzero(users == user))
        cut = int(round(len(rows) * data.options.test_fraction))
        test.append(rows[:cut])
        train.append(rows[cut:])
    train_rows, test_rows = np.concatenate(train), np.concatenate(test)
    per_device = np.split(np.arange(len(train_rows)), np.cumsum([len(t) for t in train])[:-1])
    return (ArrayDataset(features[train_rows], labels[train_rows], classes),
            ArrayDataset(features[test_rows], labels[test_rows], classes), per_device)


register_dataset("user_csv", load, config=UserCsvOptions, natural=True,
                 classes=lambda data: int(read_rows(data.options.file)[1].max()) + 1,
                 input_shape=lambda data: (read_rows(data.options.file)[2].shape[1],))

"""The flat parameter vector (emulator/params.py): a runner loads the global vector into its model and reads
each device's update back a thousand times a round, through numpy views of a CPU model's own memory; a
model whose tensors are not plain contiguous float32 on the CPU takes torch's path, with the same result."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from emulator import params as param_vector


def _models():
    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(5, 7), nn.ReLU(), nn.Linear(7, 3))
    normed = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4 * 4 * 4, 2))
    wide = nn.Linear(4, 3).double()  # float64 tensors: not viewed, copied through torch
    strided = nn.Linear(6, 6)
    strided.weight.data = strided.weight.data.t()  # a non-contiguous parameter
    return [plain, normed, wide, strided]


@pytest.mark.parametrize("index", range(4))
def test_load_and_delta_match_flatten_on_every_kind_of_model(index):
    model = _models()[index]
    start = param_vector.flatten(model).copy()
    rng = np.random.default_rng(index)
    target = (start + rng.normal(0, 0.1, len(start))).astype(np.float32)
    param_vector.load(model, target)
    assert np.array_equal(param_vector.flatten(model), target)
    expected = param_vector.flatten(model) - start
    assert np.array_equal(param_vector.delta(model, start), expected)
    out = np.full(len(start), np.nan, dtype=np.float32)
    assert param_vector.delta(model, start, out) is out and np.array_equal(out, expected)
    read_only = start.copy()
    read_only.flags.writeable = False  # as Ray's object store hands the global vector out
    param_vector.load(model, read_only)
    assert np.array_equal(param_vector.flatten(model), start)


def test_a_vector_of_the_wrong_length_is_refused_naming_both_sizes():
    model = _models()[0]
    size = param_vector.size(model)
    with pytest.raises(ValueError, match=f"has {size + 1} values, the model needs {size}"):
        param_vector.load(model, np.zeros(size + 1, dtype=np.float32))


def test_a_kept_model_vector_follows_tensors_the_model_replaces():
    """A runner keeps one ModelVector a run: a buffer or parameter assigned anew, a submodule swapped or a
    tensor's memory moved (`.data =`) between uses must not leave it writing into tensors the model dropped."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Linear(5, 2))
    vector = param_vector.ModelVector(model)
    changes = [
        lambda: setattr(model[1], "running_mean", torch.zeros(5)),
        lambda: setattr(model[0], "bias", nn.Parameter(torch.zeros(5))),
        lambda: model.__setitem__(2, nn.Linear(5, 2)),
        lambda: setattr(model[2].weight, "data", torch.zeros(2, 5)),
    ]
    rng = np.random.default_rng(0)
    for change in changes:
        change()
        target = rng.normal(0, 1, param_vector.size(model)).astype(np.float32)
        vector.load(target)
        assert np.array_equal(param_vector.flatten(model), target)
        start = target + np.float32(0.5)
        assert np.array_equal(vector.delta(start), param_vector.flatten(model) - start)

"""Cohort-vectorised training (emulator/training/cohort.py) against the sequential path, device by device.

The sequential reference is what the runner does per device: torch.manual_seed(seed), train_locally with
seeded_generator(seed), the correction sliced by params.per_parameter, the result flattened. Tolerances
(fp32, CPU, one torch thread): parameters within 1e-5 after up to 12 steps (measured ~1e-7: only the
summation order of batched matrix products differs), mean losses within 1e-5, accuracies equal. Adam is
the exception in fp32: where a gradient entry nearly cancels (|g| ~ eps), Adam's normalisation turns its
last-bit differences into steps of up to ~lr, so a few entries differ by up to a few 1e-3 x lr; in fp64
both paths agree to the float32 output's last bit, which shows the update itself is the same.
"""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

from emulator import params as param_vector
from emulator.training.cohort import batch_plan, supports, train_cohort
from emulator.models.zoo import build_model
from emulator.models.text import char_lstm
from emulator.training.local import LocalTraining, seeded_generator, train_locally

PARAM_TOL = 1e-5
LOSS_TOL = 1e-5
SHAPE = (1, 28, 28)


@pytest.fixture(autouse=True)
def one_thread():
    """The runners' setting (training.set_torch_arithmetic): the thread count is part of the arithmetic."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def sequential(model, xs, ys, specs, seeds, corrections=None):
    """One device at a time, as DeviceRunner.train does it."""
    out = []
    for d, (x, y, spec, seed) in enumerate(zip(xs, ys, specs, seeds)):
        local = copy.deepcopy(model)
        correction = None
        if corrections is not None and corrections[d] is not None:
            correction = [t.to(x.dtype) if x.is_floating_point() else t
                          for t in param_vector.per_parameter(local, corrections[d])]
        torch.manual_seed(seed)
        stats = train_locally(local, x, y, spec, seeded_generator(seed), correction)
        out.append((param_vector.flatten(local), stats))
    return out


def device_data(sizes, shape=SHAPE, seed=1, dtype=torch.float32):
    generator = torch.Generator().manual_seed(seed)
    xs = [torch.rand((n,) + shape, generator=generator, dtype=dtype) for n in sizes]
    ys = [torch.randint(0, 10, (n,), generator=generator) for n in sizes]
    return xs, ys


def corrections_for(model, count):
    """SCAFFOLD-like corrections for every other device (None for the rest)."""
    size = param_vector.size(model)
    return [np.random.default_rng(d).normal(0, 0.01, size).astype(np.float32) if d % 2 == 0 else None
            for d in range(count)]


def assert_agree(expected, got, param_tol=PARAM_TOL):
    assert len(expected) == len(got)
    for (want, want_stats), (have, have_stats) in zip(expected, got):
        assert have.dtype == np.float32 and have.shape == want.shape
        assert float(np.abs(want - have).max()) <= param_tol
        assert have_stats.steps == want_stats.steps
        if want_stats.steps == 0:
            assert math.isnan(have_stats.loss) and math.isnan(have_stats.accuracy)
            np.testing.assert_array_equal(have, want)
        else:
            assert abs(have_stats.loss - want_stats.loss) <= LOSS_TOL * max(1.0, abs(want_stats.loss))
            assert have_stats.accuracy == pytest.approx(want_stats.accuracy, abs=1e-12)


def check(name, specs, sizes, corrections=False, param_tol=PARAM_TOL, dtype=torch.float32):
    model = build_model(name, SHAPE, 10, seed=0).to(dtype)
    xs, ys = device_data(sizes, dtype=dtype)
    seeds = [1000 + 7 * d for d in range(len(sizes))]
    fixes = corrections_for(model, len(sizes)) if corrections else None
    expected = sequential(model, xs, ys, specs, seeds, fixes)
    before = param_vector.flatten(model)
    got = train_cohort(model, xs, ys, specs, seeds, fixes)
    np.testing.assert_array_equal(param_vector.flatten(model), before)  # the caller's model is untouched
    assert_agree(expected, got, param_tol)
    return got


MODELS = ["logreg", "mlp", "cnn_fmnist"]  # cnn_fmnist has dropout: its masks are the sequential path's own


@pytest.mark.parametrize("name", MODELS)
def test_local_steps_with_short_devices(name):
    """K steps over devices of 20, 30, 5 (one short batch of 5, the whole set) and 40 samples."""
    check(name, [LocalTraining(lr=0.05, batch_size=8, local_steps=10)] * 4, [20, 30, 5, 40])


@pytest.mark.parametrize("name", MODELS)
def test_epochs_over_unequal_sizes_and_an_empty_device(name):
    """E epochs: 6, 0, 4, 1 and 4 steps with partial last batches (13 = 8 + 5), one device without data."""
    check(name, [LocalTraining(lr=0.05, batch_size=8, local_epochs=2)] * 5, [20, 0, 13, 3, 9])


@pytest.mark.parametrize("name", MODELS)
def test_prox_correction_momentum_weight_decay(name):
    spec = LocalTraining(lr=0.05, batch_size=8, local_epochs=2, momentum=0.9, weight_decay=1e-3, prox_mu=0.1)
    check(name, [spec] * 4, [20, 0, 13, 9], corrections=True)


@pytest.mark.parametrize("name", ["logreg", "mlp"])
def test_every_field_different_per_device(name):
    """lr, batch size, momentum, weight decay and mu differ per device (the per-device tensor path)."""
    specs = [LocalTraining(lr=0.05 * (d + 1), batch_size=4 + d, local_epochs=2, momentum=0.3 * d,
                           weight_decay=1e-3 * d, prox_mu=0.1 * d) for d in range(4)]
    check(name, specs, [20, 7, 13, 9], corrections=True)
    check(name, [LocalTraining(lr=0.05, batch_size=8, local_steps=3 + 3 * d) for d in range(4)], [20, 7, 13, 9])


@pytest.mark.parametrize("name", MODELS)
def test_adam(name):
    """fp32: equal up to Adam's amplification of last-bit gradient differences (see the module doc)."""
    spec = LocalTraining(lr=0.01, batch_size=8, local_steps=10, optimizer="adam", weight_decay=1e-3, prox_mu=0.1)
    got = check(name, [spec] * 4, [20, 0, 13, 9], corrections=True, param_tol=0.02 * spec.lr)
    assert all(np.isfinite(vector).all() for vector, _ in got)


@pytest.mark.parametrize("adam", [True, False])
def test_float64_agrees_to_the_last_float32_bit(adam):
    """In fp64 the rounding differences vanish below the float32 output, Adam's included."""
    specs = [LocalTraining(lr=0.01 * (d + 1), batch_size=4 + d, local_epochs=2, optimizer="adam" if adam else "sgd",
                           momentum=0.0 if adam else 0.5, weight_decay=1e-3 * d, prox_mu=0.1 * d) for d in range(4)]
    check("mlp", specs, [20, 7, 13, 9], corrections=True, param_tol=1e-7, dtype=torch.float64)


@pytest.mark.parametrize("name", ["mlp", "cnn_fmnist"])
def test_group_composition_does_not_change_a_device(name):
    """Device (data, seed) trained with other companions, at another position, in a smaller group."""
    model = build_model(name, SHAPE, 10, seed=0)
    xs, ys = device_data([17, 40, 3, 25, 0, 9], seed=3)
    spec = LocalTraining(lr=0.05, batch_size=8, local_epochs=2, momentum=0.5, prox_mu=0.01)
    fixes = corrections_for(model, 6)

    def pick(group):
        return ([xs[d] for d in group], [ys[d] for d in group], [spec] * len(group), [50 + d for d in group],
                [fixes[d] for d in group])

    alone = train_cohort(model, *pick([0]))[0]
    for group, position in (([0, 1, 2], 0), ([3, 4, 5, 0], 3), ([1, 0], 1)):
        vector, stats = train_cohort(model, *pick(group))[position]
        assert float(np.abs(vector - alone[0]).max()) <= 1e-6
        assert stats.steps == alone[1].steps and abs(stats.loss - alone[1].loss) <= 1e-6


def test_batch_plan_is_train_locally_order():
    """batch_plan draws what train_locally reads: record train_locally's batches through the model."""
    seen = []

    class Recorder(nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = nn.Linear(1, 3)

        def forward(self, x):
            seen.append(x[:, 0].long().tolist())
            return self.linear(x)

    n = 11
    for spec in (LocalTraining(lr=0.1, batch_size=4, local_epochs=3), LocalTraining(lr=0.1, batch_size=5, local_steps=7),
                 LocalTraining(lr=0.1, batch_size=20, local_steps=3)):
        seen.clear()
        x = torch.arange(n, dtype=torch.float32).unsqueeze(1)
        train_locally(Recorder(), x, torch.zeros(n, dtype=torch.int64), spec, seeded_generator(4))
        assert [b.tolist() for b in batch_plan(n, spec, seeded_generator(4))] == seen
    assert batch_plan(0, LocalTraining(lr=0.1, batch_size=4, local_epochs=3), seeded_generator(4)) == []


def test_no_device_with_data():
    model = build_model("mlp", SHAPE, 10, seed=0)
    xs, ys = device_data([0, 0])
    got = train_cohort(model, xs, ys, [LocalTraining(lr=0.1, batch_size=4, local_epochs=1)] * 2, [1, 2])
    for vector, stats in got:
        np.testing.assert_array_equal(vector, param_vector.flatten(model))
        assert stats.steps == 0 and math.isnan(stats.loss)


def test_one_optimizer_kind_per_group():
    model = build_model("logreg", SHAPE, 10, seed=0)
    xs, ys = device_data([4, 4])
    specs = [LocalTraining(lr=0.1, batch_size=4, local_steps=1), LocalTraining(lr=0.1, batch_size=4, local_steps=1,
                                                                               optimizer="adam")]
    with pytest.raises(ValueError, match="one optimizer kind"):
        train_cohort(model, xs, ys, specs, [1, 2])


class FrozenAndUnused(nn.Module):
    """A frozen layer, a layer the loss never reaches (torch.optim leaves both alone), tied weights."""

    def __init__(self):
        super().__init__()
        self.frozen = nn.Linear(784, 16)
        self.frozen.requires_grad_(False)
        self.hidden = nn.Linear(16, 16)
        self.head = nn.Linear(16, 10)
        self.spare = nn.Linear(16, 10)
        self.tied = self.hidden  # the same weights under a second name: twice in the flat vector

    def forward(self, x):
        return self.head(torch.relu(self.tied(torch.relu(self.frozen(x.flatten(1))))))


def test_frozen_unused_and_tied_parameters():
    torch.manual_seed(0)
    model = FrozenAndUnused()
    assert supports(model) is None
    xs, ys = device_data([20, 13, 9, 5])
    specs = [LocalTraining(lr=0.05, batch_size=8, local_epochs=2, momentum=0.5, weight_decay=1e-2,
                           prox_mu=0.1 * (d % 2)) for d in range(4)]
    fixes = corrections_for(model, 4)
    expected = sequential(model, xs, ys, specs, [1, 2, 3, 4], fixes)
    assert_agree(expected, train_cohort(model, xs, ys, specs, [1, 2, 3, 4], fixes))


def test_supports_the_zoo_and_refuses_batchnorm():
    for name in ("logreg", "mlp", "cnn_fmnist", "cnn_mnist"):
        assert supports(build_model(name, SHAPE, 10, seed=0)) is None
    assert supports(build_model("cnn_cifar", (3, 32, 32), 10, seed=0)) is None
    bn = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 26 * 26, 10))
    assert "BatchNorm" in supports(bn)
    stateless = nn.Sequential(nn.Flatten(), nn.Linear(784, 8), nn.BatchNorm1d(8, track_running_stats=False),
                              nn.Linear(8, 10))
    assert "BatchNorm" in supports(stateless)  # batch statistics over padded batches would be wrong
    xs, ys = device_data([8, 8])
    with pytest.raises(ValueError, match="BatchNorm"):
        train_cohort(bn, xs, ys, [LocalTraining(lr=0.1, batch_size=4, local_steps=2)] * 2, [1, 2])
    buffered = nn.Sequential(nn.Flatten(), nn.Linear(784, 10))
    buffered.register_buffer("scale", torch.ones(1))
    assert "buffers (scale)" in supports(buffered)


def test_char_lstm_is_refused_but_computes_right():
    """nn.LSTM has no vmap batching rule (torch loops over the devices): refused for speed, not for
    correctness, and the token-id path gives the sequential result when forced."""
    model = char_lstm((12,), 20, embedding=4, hidden=8, layers=2)
    assert "recurrent" in supports(model)
    generator = torch.Generator().manual_seed(0)
    sizes = [9, 0, 5]
    xs = [torch.randint(0, 20, (n, 12), generator=generator) for n in sizes]
    ys = [torch.randint(0, 20, (n,), generator=generator) for n in sizes]
    specs = [LocalTraining(lr=0.5, batch_size=4, local_epochs=2)] * 3
    expected = sequential(model, xs, ys, specs, [1, 2, 3])
    with pytest.raises(ValueError, match="recurrent"):
        train_cohort(model, xs, ys, specs, [1, 2, 3])
    with pytest.warns(UserWarning, match="batching rule"):
        got = train_cohort(model, xs, ys, specs, [1, 2, 3], check=False)
    assert_agree(expected, got)


def test_dropout_masks_are_per_device_and_train():
    """cnn_fmnist's dropout: two devices with the same data and seed get the same result, another seed
    another one; training lowers the loss (statistical sanity beside the exact tests above)."""
    model = build_model("cnn_fmnist", SHAPE, 10, seed=0)
    xs, ys = device_data([32])
    spec = LocalTraining(lr=0.05, batch_size=32, local_steps=1)
    got = train_cohort(model, xs * 3, ys * 3, [spec] * 3, [5, 5, 6])
    np.testing.assert_array_equal(got[0][0], got[1][0])
    assert float(np.abs(got[0][0] - got[2][0]).max()) > 1e-4
    long = LocalTraining(lr=0.05, batch_size=8, local_steps=40)
    first = train_cohort(model, xs, ys, [LocalTraining(lr=0.05, batch_size=8, local_steps=4)], [1])[0][1].loss
    assert train_cohort(model, xs, ys, [long], [1])[0][1].loss < first


def test_dropout_masks_follow_the_input_layout():
    """torch's CPU dropout fills its mask in its input's memory order, and (N, 1, H, W) images with a
    channel stride of 1 (what ArrayDataset.tensors gives for numpy images) make the convolutions run
    channels_last: the masks must be drawn in that order too. A group mixes both layouts."""
    model = build_model("cnn_fmnist", SHAPE, 10, seed=0)
    xs, ys = device_data([40, 23, 16, 9])
    xs = [x.as_strided(x.shape, (784, 1, 28, 1)) if d % 2 == 0 else x for d, x in enumerate(xs)]
    assert xs[0].stride() == (784, 1, 28, 1)
    specs = [LocalTraining(lr=0.05, batch_size=16, local_epochs=2)] * 4
    expected = sequential(model, xs, ys, specs, [1, 2, 3, 4])
    assert_agree(expected, train_cohort(model, xs, ys, specs, [1, 2, 3, 4]))


@pytest.mark.heavy
def test_keep_freed_memory_in_a_process_of_its_own(tmp_path):
    """Process-wide, so checked in a child process: glibc accepts both settings and training still runs."""
    from conftest import run_python

    code = ("import torch; from emulator.training.cohort import keep_freed_memory, train_cohort; "
            "from emulator.training.local import LocalTraining; assert keep_freed_memory(); "
            "m = torch.nn.Linear(3, 2); x = torch.zeros(200000, 3); "
            "train_cohort(m, [x], [torch.zeros(200000, dtype=torch.int64)], "
            "[LocalTraining(lr=0.1, batch_size=100000, local_steps=2)], [1])")
    run_python(code, tmp_path, check=True)

"""FedAvg's aggregation against hand-computed tensors."""
import numpy as np
import pytest

from emulator.aggregation.mean import WeightedMean, server_update
from emulator.algorithms import AlgorithmContext, ClientUpdate
from emulator.algorithms.fedavg import FedAvg
from emulator.algorithms.selection import Uniform, distinct_in_draw_order
from emulator.algorithms.fedavg import FedAvgConfig
from emulator.training.local import TrainStats

STATS = TrainStats(steps=1, loss=0.0, accuracy=0.0)


def fedavg(**config) -> FedAvg:
    context = AlgorithmContext(num_devices=4, device_sizes=np.array([10, 30, 20, 40]), num_params=3, seed=0)
    return FedAvg(FedAvgConfig(**config), context)


def update(device, delta, samples=10, multiplicity=1):
    return ClientUpdate(device, samples, np.asarray(delta, dtype=np.float32), STATS, multiplicity)


def test_server_lr_one_is_the_plain_model_average():
    x = np.array([1.0, 2.0, 3.0], dtype=np.float32)
    local_models = [np.array([2.0, 2.0, 0.0]), np.array([0.0, 4.0, 3.0]), np.array([1.0, 0.0, 6.0])]
    updates = [update(i, m - x) for i, m in enumerate(local_models)]
    new = fedavg(server_lr=1.0).aggregate(x, iter(updates), 1)
    np.testing.assert_allclose(new, np.mean(local_models, axis=0), rtol=1e-6)


def test_server_lr_scales_the_mean_delta():
    x = np.zeros(3, dtype=np.float32)
    updates = [update(0, [1.0, 0.0, -1.0]), update(1, [3.0, 2.0, 1.0])]
    new = fedavg(server_lr=10.0).aggregate(x, iter(updates), 1)
    np.testing.assert_allclose(new, [20.0, 10.0, 0.0])


def test_a_device_drawn_twice_counts_twice():
    x = np.zeros(3, dtype=np.float32)
    updates = [update(0, [3.0, 0.0, 0.0], multiplicity=2), update(1, [0.0, 3.0, 0.0])]
    new = fedavg(sampling="with_replacement").aggregate(x, iter(updates), 1)
    np.testing.assert_allclose(new, [2.0, 1.0, 0.0], rtol=1e-6)


def test_sample_count_weights():
    x = np.zeros(2, dtype=np.float32)
    updates = [update(0, [1.0, 0.0], samples=10), update(1, [0.0, 1.0], samples=30)]
    new = fedavg(weighting="samples").aggregate(x, iter(updates), 1)
    np.testing.assert_allclose(new, [0.25, 0.75], rtol=1e-6)


def test_a_device_without_data_does_not_pull_the_average_to_zero():
    x = np.zeros(2, dtype=np.float32)
    empty = ClientUpdate(1, 0, np.zeros(2, np.float32), TrainStats(steps=0, loss=float("nan"), accuracy=float("nan")))
    new = fedavg().aggregate(x, iter([update(0, [2.0, 4.0]), empty]), 1)
    np.testing.assert_allclose(new, [2.0, 4.0])


def test_no_updates_keeps_the_model():
    x = np.array([1.0, -1.0], dtype=np.float32)
    assert np.array_equal(fedavg().aggregate(x, iter([]), 1), x)


def test_weighted_mean_streams_in_constant_memory_and_rejects_negative_weights():
    mean = WeightedMean(2)
    for k in range(1000):
        mean.add(np.array([k, 1.0], dtype=np.float32))
    np.testing.assert_allclose(mean.mean(), [499.5, 1.0])
    assert mean.total.shape == (2,)
    with pytest.raises(ValueError):
        mean.add(np.zeros(2), -1.0)


def test_server_update_is_x_plus_eta_delta():
    np.testing.assert_allclose(server_update(np.array([1.0], np.float32), np.array([0.5], np.float32), 4.0), [3.0])


def test_sampling_with_replacement_yields_multiplicities():
    rng = np.random.default_rng(0)
    drawn = Uniform(replace=True).select(np.arange(3), 30, rng)
    devices, counts = distinct_in_draw_order(drawn)
    assert counts.sum() == 30 and len(devices) <= 3 and counts.max() >= 2
    assert list(devices) == list(dict.fromkeys(drawn.tolist()))


def test_sampling_without_replacement_never_repeats():
    rng = np.random.default_rng(0)
    drawn = Uniform(replace=False).select(np.arange(100), 50, rng)
    assert len(set(drawn.tolist())) == 50

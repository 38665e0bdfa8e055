"""Staleness weights and the asynchronous server steps, against values computed by hand."""
import numpy as np
import pytest

from emulator.aggregation.staleness import StalenessBuffer, fedasync_mix, staleness_weight


def test_staleness_functions_by_hand():
    assert staleness_weight("constant", 7) == 1.0
    assert staleness_weight("polynomial", 3, a=0.5) == pytest.approx(0.5)  # 1 / sqrt(1 + 3): FedBuff's rule
    assert staleness_weight("polynomial", 0, a=2.0) == 1.0
    assert staleness_weight("polynomial", 4, a=1.0) == pytest.approx(0.2)  # 1 / 5
    assert staleness_weight("hinge", 4, a=10, b=4) == 1.0  # still within b
    assert staleness_weight("hinge", 5, a=10, b=4) == pytest.approx(1 / 11)  # 1 / (10 * 1 + 1)
    assert staleness_weight("hinge", 6, a=0.5, b=4) == pytest.approx(0.5)  # 1 / (0.5 * 2 + 1)
    weights = staleness_weight("polynomial", np.array([0, 1, 3, 8]), a=0.5)
    assert np.allclose(weights, [1, 1 / np.sqrt(2), 0.5, 1 / 3])


def test_staleness_refuses_what_it_cannot_weigh():
    with pytest.raises(ValueError, match="unknown staleness function 'exponential'"):
        staleness_weight("exponential", 1)
    with pytest.raises(ValueError, match="staleness must be >= 0"):
        staleness_weight("constant", -1)


def test_fedasync_mixes_towards_the_trained_model():
    current = np.array([1.0, 2.0, 4.0], dtype=np.float32)
    trained = np.array([3.0, 2.0, 0.0], dtype=np.float32)
    # alpha 0.6, s(d) = 0.5: mixing 0.3 -> 0.7 * current + 0.3 * trained
    assert np.allclose(fedasync_mix(current, trained, 0.6, 0.5), [1.6, 2.0, 2.8])
    assert np.array_equal(fedasync_mix(current, trained, 1.0, 1.0), trained)  # alpha s = 1: replace
    assert fedasync_mix(current, trained, 0.6, 0.5).dtype == np.float32


def test_buffer_normalisations_by_hand():
    deltas = [np.array([2.0, 0.0]), np.array([0.0, 4.0]), np.array([6.0, 6.0])]
    weights = [1.0, 0.5, 0.25]
    expected_sum = np.array([2.0 + 0 + 1.5, 0 + 2.0 + 1.5])  # [3.5, 3.5]
    for normalisation, divisor in (("count", 3), ("weights", 1.75), ("none", 1)):
        buffer = StalenessBuffer(2)
        for delta, weight in zip(deltas, weights):
            buffer.add(delta.astype(np.float32), weight)
        assert np.allclose(buffer.flush(normalisation), expected_sum / divisor)
        assert buffer.count == 0 and not buffer.total.any()  # flushed empty


def test_buffer_state_round_trip_and_refusals():
    buffer = StalenessBuffer(3)
    buffer.add(np.ones(3, np.float32), 0.5)
    restored = StalenessBuffer(3)
    restored.load_state(buffer.state())
    buffer.add(np.full(3, 2.0, np.float32), 1.0)
    restored.add(np.full(3, 2.0, np.float32), 1.0)
    assert np.array_equal(buffer.flush("weights"), restored.flush("weights"))
    with pytest.raises(ValueError, match="empty buffer"):
        buffer.flush()
    buffer.add(np.ones(3, np.float32), 1.0)
    with pytest.raises(ValueError, match="unknown normalisation 'mean'"):
        buffer.flush("mean")

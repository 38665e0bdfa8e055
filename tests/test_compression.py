"""Upload encoders: decoded values and payload sizes against hand counts."""
import numpy as np
import pytest

from emulator.uplink.compression import qsgd, sign, top_k


def test_qsgd_bytes_by_hand_and_unbiased():
    v = np.random.default_rng(0).normal(size=1000).astype(np.float32)
    _, size = qsgd(v, levels=4, rng=np.random.default_rng(1), bucket=512)
    # 2 buckets x 32 bits + 1000 x ceil(log2 9) = 4 bits -> 64 + 4000 = 4064 bits = 508 bytes
    assert size == 508
    assert qsgd(v, levels=1, rng=np.random.default_rng(1), bucket=1000)[1] == (32 + 1000 * 2) // 8  # 3 levels: 2 bits
    draws = 400
    mean = np.mean([qsgd(v, 4, np.random.default_rng(seed))[0] for seed in range(draws)], axis=0)
    step = np.linalg.norm(v[:512]) / 4  # a level's width; one draw's sd is at most step / 2
    assert np.abs(mean - v).max() < 5 * (step / 2) / np.sqrt(draws)  # unbiased, within 5 standard errors
    assert abs(np.mean(mean - v)) < 0.02  # and no drift across coordinates
    decoded, _ = qsgd(v, 4, np.random.default_rng(2))
    norms = [np.linalg.norm(v[:512]), np.linalg.norm(v[512:])]
    assert set(np.round(np.abs(decoded[:512]) / norms[0] * 4, 5)) <= {0.0, 1.0, 2.0, 3.0, 4.0}  # on the levels
    with pytest.raises(ValueError, match="levels must be >= 1"):
        qsgd(v, 0, np.random.default_rng(0))


def test_top_k_with_error_feedback_by_hand():
    update = np.array([0.5, -3.0, 1.0, 2.0], dtype=np.float32)
    decoded, residual, size = top_k(update, 2)
    assert np.array_equal(decoded, [0, -3.0, 0, 2.0]) and np.allclose(residual, [0.5, 0, 1.0, 0])
    assert size == (2 * (32 + 2) + 7) // 8  # 2 values of 32 bits + 2 indices of ceil(log2 4) = 2 bits: 68 bits -> 9
    tied, _, _ = top_k(np.array([1.0, -1.0, 1.0, 0.5, 1.0, 2.0], dtype=np.float32), 3)
    assert np.array_equal(tied, [1.0, -1.0, 0, 0, 0, 2.0])  # equal magnitudes: the lower indices go first
    # next round: the residual joins the new update, so left-out mass is sent eventually
    decoded, residual, _ = top_k(np.array([0.6, 0.0, 0.1, 0.0], np.float32), 1, residual)
    assert np.allclose(decoded, [1.1, 0, 0, 0]) and np.allclose(residual, [0, 0, 1.1, 0])
    with pytest.raises(ValueError, match="k must be between 1 and the model's 4 values"):
        top_k(update, 5)


def test_sign_by_hand():
    decoded, size = sign(np.array([1.0, -2.0, 3.0, 0.0], np.float32))
    assert np.allclose(decoded, [1.5, -1.5, 1.5, 0.0])  # ||v||_1 / m = 6 / 4
    assert size == (4 + 32 + 7) // 8  # 36 bits -> 5 bytes

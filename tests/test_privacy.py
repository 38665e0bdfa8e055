"""Client-level DP: clipping, the release's noise, adaptive clipping, and epsilon checked against dp_accounting."""
import math
import subprocess
import sys

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting import pld, rdp

from emulator.uplink.privacy import DpFedAvg, clip, next_clip, noised_count_multiplier
from emulator.uplink.accounting import NominalAccountant, sampling_free_epsilon


def test_clip_bounds_norm_keeps_direction_and_short_vectors():
    rng = np.random.default_rng(0)
    for scale in (0.01, 0.5, 3.0, 1e4):
        v = (rng.normal(size=1000) * scale).astype(np.float32)
        clipped, norm = clip(v, 2.0)
        assert clipped.dtype == np.float32 and norm == pytest.approx(np.linalg.norm(v.astype(np.float64)))
        assert np.linalg.norm(clipped.astype(np.float64)) <= 2.0 * (1 + 1e-6)
        if norm <= 2.0:
            assert np.array_equal(clipped, v)  # short vectors pass unchanged
        else:
            assert np.linalg.norm(clipped.astype(np.float64)) == pytest.approx(2.0, rel=1e-6)
            cosine = clipped @ v / (np.linalg.norm(clipped) * np.linalg.norm(v))
            assert cosine == pytest.approx(1.0, abs=1e-6)
    assert np.array_equal(clip(np.zeros(3), 1.0)[0], np.zeros(3))
    dp = DpFedAvg(1.0, clip=1.0, expected_cohort=10)
    assert dp.clip_update(np.array([0.6, 0.8]))[1] is True  # norm exactly C counts as unclipped
    out, unclipped = dp.clip_update(np.array([3.0, 4.0]))
    assert not unclipped and np.allclose(out, [0.6, 0.8])


@pytest.mark.parametrize("noise_cohort", [None, 500])
def test_release_noise_std_is_z_c_over_denominator(noise_cohort):
    z, c, n, m = 1.5, 2.0, 50, 200_000
    dp = DpFedAvg(z, clip=c, expected_cohort=n, noise_cohort=noise_cohort)
    total = np.random.default_rng(1).normal(size=m) * 10  # the signal is divided by n, noise added on top
    estimate, stats = dp.release(total, reports=20, unclipped=20, rng=np.random.default_rng(2))
    expected = z * c / (noise_cohort or n)  # the expected cohort, not the 20 reports: dropouts cut signal only
    noise = estimate.astype(np.float64) - total / n
    assert estimate.dtype == np.float32 and stats["dp_noise_std"] == pytest.approx(expected)
    assert noise.std() == pytest.approx(expected, rel=0.02)
    assert abs(noise.mean()) < 5 * expected / math.sqrt(m)
    assert stats["dp_clip"] == c and stats["dp_unclipped_fraction"] == 1.0
    assert stats["dp_noisy_unclipped_fraction"] is None and dp.current_clip == c  # a fixed clip stays


def test_zero_noise_multiplier_only_divides():
    dp = DpFedAvg(0.0, clip=1.0, expected_cohort=4)
    estimate, stats = dp.release(np.array([4.0, -8.0]), reports=0, unclipped=0, rng=np.random.default_rng(0))
    assert np.array_equal(estimate, [1.0, -2.0]) and stats["dp_noise_std"] == 0
    assert stats["dp_unclipped_fraction"] is None


def test_noised_count_multiplier_by_hand_and_its_limit():
    assert noised_count_multiplier(1.0, 5.0) == pytest.approx((1 - 1 / 100) ** -0.5)  # 1.00504
    assert noised_count_multiplier(2.0, 2.0) == pytest.approx((1 / 4 - 1 / 16) ** -0.5)  # 2.3094
    assert noised_count_multiplier(0.0, 0.0) == 0.0
    with pytest.raises(ValueError, match=r"privacy\.clipping\.count_stddev.*above 0\.5"):
        noised_count_multiplier(1.0, 0.5)
    with pytest.raises(ValueError, match=r"privacy\.clipping\.count_stddev"):  # default sigma_b = 10 / 20 = 0.5
        DpFedAvg(1.0, clip=0.1, expected_cohort=10, adaptive=True)
    assert DpFedAvg(1.0, clip=0.1, expected_cohort=10).update_multiplier == 1.0  # fixed clip: no count released


def test_next_clip_geometric_step_by_hand():
    assert next_clip(1.0, 0.7, 0.5, 0.2) == pytest.approx(math.exp(-0.04))  # too many unclipped: shrink
    assert next_clip(2.0, 0.0, 0.5, 0.2) == pytest.approx(2.0 * math.exp(0.1))  # all clipped: grow
    assert next_clip(2.0, 0.5, 0.5, 0.2) == 2.0


def _adaptive_rounds(dp, rounds, rng, sigma=0.5):
    """Each round the whole expected cohort reports updates with log-normal norms (median 1)."""
    clips = []
    for _ in range(rounds):
        total, unclipped = np.zeros(8), 0
        for norm in rng.lognormal(0.0, sigma, size=int(dp.expected_cohort)):
            direction = rng.normal(size=8)
            clipped, b = dp.clip_update(direction / np.linalg.norm(direction) * norm)
            total, unclipped = total + clipped, unclipped + b
        _, stats = dp.release(total, int(dp.expected_cohort), unclipped, rng)
        clips.append(stats["dp_clip"])
    return clips


@pytest.mark.parametrize("quantile", [0.5, 0.8])
def test_adaptive_clip_settles_at_the_quantile_of_norms(quantile):
    rng = np.random.default_rng(3)
    dp = DpFedAvg(1.0, clip=0.1, expected_cohort=100, adaptive=True, quantile=quantile)
    clips = _adaptive_rounds(dp, 250, rng)
    target = np.quantile(rng.lognormal(0.0, 0.5, size=200_000), quantile)  # 1.0 and 1.52
    assert clips[0] == 0.1 and np.median(clips[-100:]) == pytest.approx(target, rel=0.05)


def test_adaptive_release_stats_noise_order_and_state():
    n = 100
    fixed = DpFedAvg(1.0, clip=1.0, expected_cohort=n)
    adaptive = DpFedAvg(1.0, clip=1.0, expected_cohort=n, adaptive=True)  # sigma_b = 5, z_Delta = 1.00504
    assert adaptive.update_multiplier == pytest.approx(noised_count_multiplier(1.0, 5.0))
    total = np.zeros(1000)
    a, stats = adaptive.release(total, reports=40, unclipped=30, rng=np.random.default_rng(7))
    f, _ = fixed.release(total, reports=40, unclipped=30, rng=np.random.default_rng(7))
    # the count noise is drawn after the update noise: the same draws, scaled by z_Delta / z
    assert np.allclose(a, f * adaptive.update_multiplier, rtol=1e-6, atol=0)
    assert stats["dp_noise_std"] == pytest.approx(adaptive.update_multiplier / n)
    assert stats["dp_unclipped_fraction"] == 0.75  # true fraction of the reports
    b_bar = stats["dp_noisy_unclipped_fraction"]  # over the expected cohort: about 0.3, noise sd 0.05
    assert 0.0 <= b_bar <= 1.0 and abs(b_bar - 0.3) < 0.25
    assert adaptive.current_clip == pytest.approx(next_clip(1.0, b_bar, 0.5, 0.2))
    _, stats = adaptive.release(total, reports=10_000, unclipped=10_000, rng=np.random.default_rng(8))
    assert stats["dp_noisy_unclipped_fraction"] == 1.0  # clamped to [0, 1]

    restored = DpFedAvg(1.0, clip=1.0, expected_cohort=n, adaptive=True)
    restored.load_state(adaptive.state())
    one = adaptive.release(total, 50, 20, np.random.default_rng(9))
    two = restored.release(total, 50, 20, np.random.default_rng(9))
    assert np.array_equal(one[0], two[0]) and one[1] == two[1] and restored.state() == adaptive.state()


def test_nominal_epsilon_matches_dp_accounting_and_restores():
    q, z, t, delta = 0.01, 1.0, 1000, 1e-5
    acc = NominalAccountant(z, q, delta)
    assert acc.epsilon() == 0.0
    acc.record_release()  # one round's RDP is cached and scaled by the count: check it at 1 and at T
    one_round = dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z))
    assert acc.epsilon() == pytest.approx(rdp.RdpAccountant().compose(one_round).get_epsilon(delta), rel=1e-9)
    acc.load_state({"releases": 0})
    for _ in range(t):
        acc.record_release()
    direct = rdp.RdpAccountant().compose(one_round, t).get_epsilon(delta)
    assert acc.epsilon() == pytest.approx(direct, rel=1e-9) and acc.epsilon() == pytest.approx(2.1014, abs=1e-4)
    assert acc.label == "poisson q=0.0100 (nominal: assumes uniform independent sampling)"
    restored = NominalAccountant(z, q, delta)
    restored.load_state(acc.state())
    assert restored.epsilon() == acc.epsilon()
    restored.record_release()
    assert restored.epsilon() > acc.epsilon()

    tight = NominalAccountant(z, q, delta, accountant="pld")
    tight.load_state({"releases": t})
    assert tight.epsilon() == pytest.approx(pld.PLDAccountant().compose(one_round, t).get_epsilon(delta), rel=1e-9)
    assert 1.7 < tight.epsilon() < acc.epsilon()  # PLD is tighter: 1.83

    no_noise = NominalAccountant(0.0, q, delta)
    assert no_noise.epsilon() == 0.0
    no_noise.record_release()
    assert no_noise.epsilon() == math.inf


def test_nominal_accountant_quiet_at_large_q(caplog):
    direct = rdp.RdpAccountant().compose(dpa.PoissonSampledDpEvent(0.1, dpa.GaussianDpEvent(1.0)), 100)
    assert "failed to converge" in caplog.text  # dp_accounting itself logs it at q = 0.1 ...
    caplog.clear()
    acc = NominalAccountant(1.0, 0.1, 1e-5)
    acc.load_state({"releases": 100})
    assert acc.epsilon() == pytest.approx(direct.get_epsilon(1e-5))
    assert "failed to converge" not in caplog.text  # ... but not during our calls


def test_sampling_free_epsilon():
    assert sampling_free_epsilon(1.0, 10, 1e-5) == pytest.approx(19.05, abs=0.01)  # the notes' 19.1 (RDP)
    assert sampling_free_epsilon(1.0, 0, 1e-5) == 0.0 and sampling_free_epsilon(0.0, 3, 1e-5) == math.inf
    assert sampling_free_epsilon(1.0, 1, 1e-5) < sampling_free_epsilon(1.0, 2, 1e-5) < 19.05
    assert sampling_free_epsilon(2.0, 10, 1e-5) < sampling_free_epsilon(1.0, 10, 1e-5)


@pytest.mark.parametrize("kwargs, field", [
    ({"noise_multiplier": -0.1}, "privacy.noise_multiplier"),
    ({"clip": 0.0}, "privacy.clip"),
    ({"expected_cohort": 0}, "algorithm.clients_per_round"),
    ({"quantile": 1.0}, "privacy.clipping.quantile"),
    ({"quantile": 0.0}, "privacy.clipping.quantile"),
    ({"clip_lr": 0.0}, "privacy.clipping.lr"),
    ({"count_stddev": -1.0}, "privacy.clipping.count_stddev"),
    ({"noise_cohort": 0.5}, "privacy.noise_cohort"),
])
def test_dp_fedavg_rejects_bad_config_naming_the_field(kwargs, field):
    config = {"noise_multiplier": 1.0, "clip": 1.0, "expected_cohort": 100, "adaptive": True, **kwargs}
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        DpFedAvg(**config)


@pytest.mark.parametrize("args, field", [
    ((-1.0, 0.01, 1e-5), "privacy.noise_multiplier"),
    ((1.0, 0.0, 1e-5), "algorithm.clients_per_round"),
    ((1.0, 1.5, 1e-5), "population.devices"),
    ((1.0, 0.01, 0.0), "privacy.delta"),
])
def test_accountant_rejects_bad_config_naming_the_field(args, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        NominalAccountant(*args)
    with pytest.raises(ValueError, match="privacy.accountant"):
        NominalAccountant(1.0, 0.01, 1e-5, accountant="prv")


def test_emulator_imports_without_dp_accounting_and_says_how_to_get_it():
    code = ("import sys; sys.modules['dp_accounting'] = None\n"
            "import emulator.uplink.privacy, emulator.uplink.accounting as pa\n"
            "try:\n    pa.NominalAccountant(1.0, 0.01, 1e-5)\n"
            "except ImportError as err:\n    print(err)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "privacy needs the dp-accounting package: pip install dp-accounting" in out

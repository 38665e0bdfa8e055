"""Client-level differential privacy as pure numpy: DP-FedAvg's clipping and fixed-denominator Gaussian release
(McMahan et al., ICLR 2018) with optional adaptive clipping (Andrew et al., NeurIPS 2021).
Sources: ../shared/papers/privacy-compression.md, sections 1-2.

Per round: every report is clipped to the round's bound C_t (flat L2), the server sums them and releases
(sum + N(0, (z_Delta C_t)^2 I)) / n, where n is the *expected* cohort: dropouts cut signal, not noise, so the
sensitivity C_t / n holds however many reports arrive. With adaptive clipping each client also reports whether its
update was unclipped; the noised count moves C_t towards the gamma-quantile of update norms (the paper's geometric
step). Update and count noise form one Gaussian mechanism of multiplier z, so the updates get z_Delta > z and the
accountant keeps z. Accounting lives in privacy_accounting.py.
"""
from __future__ import annotations

import math

import numpy as np


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def clip(delta: np.ndarray, bound: float) -> tuple[np.ndarray, float]:
    """Flat L2 clipping, delta * min(1, bound / ||delta||), in float64 so float32 rounding cannot push the norm
    over the bound the sensitivity relies on; returns the clipped vector (float32) and the pre-clip norm."""
    v = np.asarray(delta, dtype=np.float64)
    norm = math.sqrt(float(v @ v))  # a dot product: three times faster than np.linalg.norm here
    if norm > bound:
        v = v * (bound / norm)
    return v.astype(np.float32), norm


def noised_count_multiplier(z: float, count_stddev: float) -> float:
    """The update noise multiplier z_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2) that, together with count noise
    sigma_b on the +-1/2-encoded unclipped count, makes one Gaussian mechanism of multiplier z (Andrew et al.,
    section 3). Needs z < 2 sigma_b; z = 0 (no noise) stays 0."""
    if z == 0:
        return 0.0
    _require(z < 2 * count_stddev,
             f"privacy.clipping.count_stddev is {count_stddev}, but adaptive clipping with privacy.noise_multiplier "
             f"{z} needs noise_multiplier < 2 * count_stddev (the count takes part of the noise budget); raise "
             f"privacy.clipping.count_stddev above {z / 2:g} (default expected cohort / 20) or lower the multiplier")
    return (z ** -2 - (2 * count_stddev) ** -2) ** -0.5


def next_clip(clip: float, unclipped_fraction: float, quantile: float, lr: float) -> float:
    """C exp(-lr (b_bar - gamma)): a geometric step on the pinball loss, so C settles where a gamma fraction of
    updates are unclipped. The paper's sign: too many unclipped (b_bar > gamma) shrinks C."""
    return clip * math.exp(-lr * (unclipped_fraction - quantile))


class DpFedAvg:
    """Server-side DP-FedAvg state across rounds: the current clip C_t (config is fixed at construction).

    noise_multiplier z (0: clipping only), clip (the fixed bound, or C_0 when adaptive), expected_cohort n (the
    fixed denominator), adaptive, quantile gamma, clip_lr eta, count_stddev sigma_b (None: n / 20, the paper's
    default for the +-1/2 encoding), noise_cohort N_c (None: n; pfl-research's noise_cohort_size, noise sized for a
    larger cohort than the one trained, so only a prediction of that cohort's utility: label such runs)."""

    def __init__(self, noise_multiplier: float, clip: float, expected_cohort: float, adaptive: bool = False,
                 quantile: float = 0.5, clip_lr: float = 0.2, count_stddev: float | None = None,
                 noise_cohort: float | None = None):
        _require(noise_multiplier >= 0, f"privacy.noise_multiplier must be >= 0 (0 clips without noise, epsilon "
                                        f"infinite), got {noise_multiplier}")
        _require(clip > 0, f"privacy.clip must be > 0 (the L2 bound, or the initial bound when adaptive), got {clip}")
        _require(expected_cohort >= 1, f"algorithm.clients_per_round (the expected cohort, DP's fixed denominator) "
                                       f"must be >= 1, got {expected_cohort}")
        _require(0 < quantile < 1, f"privacy.clipping.quantile must be in (0, 1) (the target unclipped fraction, "
                                   f"0.5 by default), got {quantile}")
        _require(clip_lr > 0, f"privacy.clipping.lr must be > 0 (0.2 by default), got {clip_lr}")
        count_stddev = expected_cohort / 20 if count_stddev is None else count_stddev
        _require(count_stddev >= 0, f"privacy.clipping.count_stddev must be >= 0 (None: expected cohort / 20), "
                                    f"got {count_stddev}")
        noise_cohort = expected_cohort if noise_cohort is None else noise_cohort
        _require(noise_cohort >= 1,
                 f"privacy.noise_cohort must be >= 1 (None: the expected cohort), got {noise_cohort}")
        self.noise_multiplier = float(noise_multiplier)
        self.expected_cohort = float(expected_cohort)
        self.adaptive = adaptive
        self.quantile, self.clip_lr, self.count_stddev = float(quantile), float(clip_lr), float(count_stddev)
        self.noise_cohort = float(noise_cohort)
        # z_Delta: the multiplier the updates actually get (z itself when the count is not released)
        self.update_multiplier = (noised_count_multiplier(noise_multiplier, count_stddev) if adaptive
                                  else self.noise_multiplier)
        self.current_clip = float(clip)

    def clip_update(self, delta: np.ndarray) -> tuple[np.ndarray, bool]:
        """A client's update clipped at this round's C_t, and b_i: whether it was within the bound."""
        clipped, norm = clip(delta, self.current_clip)
        return clipped, norm <= self.current_clip

    def release(self, total: np.ndarray, reports: int, unclipped: int,
                rng: np.random.Generator) -> tuple[np.ndarray, dict]:
        """The noised mean total / n + N(0, (z_Delta C_t / N_c)^2 I) (N_c = n: (total + N(0, (z_Delta C_t)^2 I)) / n),
        float32; when adaptive, then the noised unclipped fraction moves C_t for the next round. The count noise is
        drawn after the update noise, so a fixed clip and an adaptive one share the update draws."""
        clip_used = self.current_clip
        std = self.update_multiplier * clip_used / self.noise_cohort
        estimate = np.asarray(total, dtype=np.float64) / self.expected_cohort
        if std > 0:
            estimate = estimate + rng.normal(0.0, std, size=estimate.shape)
        noisy_fraction = None
        if self.adaptive:
            count = unclipped + (rng.normal(0.0, self.count_stddev) if self.count_stddev > 0 else 0.0)
            noisy_fraction = min(1.0, max(0.0, count / self.expected_cohort))
            self.current_clip = next_clip(clip_used, noisy_fraction, self.quantile, self.clip_lr)
        stats = {"dp_clip": clip_used, "dp_noise_std": std,
                 "dp_unclipped_fraction": unclipped / reports if reports else None,
                 "dp_noisy_unclipped_fraction": noisy_fraction}
        return estimate.astype(np.float32), stats

    def state(self) -> dict:
        return {"clip": self.current_clip}

    def load_state(self, state: dict) -> None:
        self.current_clip = float(state["clip"])

"""Epsilon for DP-FedAvg releases, through dp-accounting (google/differential-privacy), imported lazily so the
emulator runs without it unless privacy is on. Sources: ../shared/papers/privacy-compression.md, section 3.

Two answers, neither the whole truth for an emulated run, so each is labelled:
- NominalAccountant: the Poisson-subsampled Gaussian with q = expected cohort / population, as most FL code
  reports it. It assumes every round's cohort is drawn at random, independent of data and history; in the emulator
  participation follows availability, stragglers and dropouts, so amplification by sampling is not justified.
- sampling_free_epsilon: one device's epsilon from the rounds it actually contributed to, with no amplification;
  sound as long as taking part does not depend on the device's data.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import math

ACCOUNTANTS = ("rdp", "pld")


def _dp_accounting():
    try:
        import dp_accounting
    except ImportError as err:
        raise ImportError("privacy needs the dp-accounting package: pip install dp-accounting") from err
    return dp_accounting


class _DropNonConvergence(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "failed to converge" not in record.getMessage()


@contextlib.contextmanager
def _quiet():
    """RDP logs 'failed to converge' for small orders at large q and then excludes those orders: harmless, but one
    line per order per round would bury the run's log. Dropped only during our own calls."""
    logger, drop = logging.getLogger("absl"), _DropNonConvergence()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


class NominalAccountant:
    """Epsilon under the assumption the run does not meet: each round's cohort a Poisson sample with probability q,
    independent of data and history (add/remove-one neighbours). Keeps only the release count, so a checkpoint
    restores it. epsilon() runs after every round: RDP composes linearly in the count, so one round's per-order
    RDP is computed once (the slow part, 15-60 ms by q) and each query scales it, as compose(event, count) does;
    PLD is rebuilt with compose(event, count) per query (about 0.3 s at 1000 rounds)."""

    def __init__(self, noise_multiplier: float, sampling_probability: float, delta: float, accountant: str = "rdp"):
        if not noise_multiplier >= 0:
            raise ValueError(f"privacy.noise_multiplier must be >= 0, got {noise_multiplier}")
        if not 0 < sampling_probability <= 1:
            raise ValueError(f"the sampling probability q = expected cohort / population.devices must be in (0, 1], "
                             f"got {sampling_probability}; lower algorithm.clients_per_round or add devices")
        if not 0 < delta < 1:
            raise ValueError(f"privacy.delta must be in (0, 1) (typically below 1 / population), got {delta}")
        if accountant not in ACCOUNTANTS:
            raise ValueError(f"privacy.accountant must be one of {ACCOUNTANTS}, got {accountant!r}")
        dpa = _dp_accounting()
        self.noise_multiplier, self.sampling_probability = float(noise_multiplier), float(sampling_probability)
        self.delta, self.accountant = float(delta), accountant
        self.releases = 0
        self._one_round = None  # RdpAccountant holding one round's per-order RDP, made on first use
        self._event = dpa.PoissonSampledDpEvent(self.sampling_probability, dpa.GaussianDpEvent(self.noise_multiplier))

    @property
    def label(self) -> str:
        return f"poisson q={self.sampling_probability:.4f} (nominal: assumes uniform independent sampling)"

    def record_release(self) -> None:
        self.releases += 1

    def epsilon(self) -> float:
        if self.releases == 0:
            return 0.0
        if self.noise_multiplier == 0:
            return math.inf
        dpa = _dp_accounting()
        if self.accountant == "pld":
            return float(dpa.pld.PLDAccountant().compose(self._event, self.releases).get_epsilon(self.delta))
        if self._one_round is None:
            with _quiet():
                self._one_round = dpa.rdp.RdpAccountant().compose(self._event)
        rdp = self.releases * self._one_round.rdp
        return float(dpa.rdp.rdp_privacy_accountant.compute_epsilon(self._one_round.orders, rdp, self.delta)[0])

    def state(self) -> dict:
        return {"releases": self.releases}

    def load_state(self, state: dict) -> None:
        self.releases = int(state["releases"])


@functools.lru_cache(maxsize=4096)
def sampling_free_epsilon(noise_multiplier: float, releases: int, delta: float) -> float:
    """Epsilon of a device that contributed to `releases` rounds: the Gaussian mechanism self-composed that many
    times, no amplification (RDP). Cached: many devices share a participation count."""
    if releases == 0:
        return 0.0
    if noise_multiplier == 0:
        return math.inf
    dpa = _dp_accounting()
    event = dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(noise_multiplier), releases)
    with _quiet():
        return float(dpa.rdp.RdpAccountant().compose(event).get_epsilon(delta))

"""The `privacy:`, `compression:` and `secure_aggregation:` sections: what happens to a report on its way
to the aggregate (the code is emulator/uplink/)."""
from __future__ import annotations

from typing import Annotated, Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from emulator.scenario.base import ScenarioFieldError, Strict


# ------------------------------------------------------------------------------ privacy, compression, secure aggregation
class FixedClipping(Strict):
    """Every update is clipped to privacy.clip."""

    kind: Literal["fixed"] = "fixed"


class AdaptiveClipping(Strict):
    """The clip follows the `quantile` of update norms (Andrew et al. 2021): privacy.clip is its start C_0, and
    each round C <- C exp(-lr (b - quantile)), b the noised share of updates that were not clipped."""

    kind: Literal["adaptive"] = "adaptive"
    quantile: float = Field(0.5, gt=0, lt=1)
    lr: float = Field(0.2, gt=0)
    count_stddev: Optional[float] = Field(None, gt=0)  # noise on the unclipped count; None: cohort / 20


class PrivacyConfig(Strict):
    """Client-level differential privacy, DP-FedAvg (McMahan et al. 2018): each device's delta is clipped to
    `clip` in L2, the cohort's sum gets Gaussian noise of std noise_multiplier x clip, and the sum is divided by
    the expected cohort (algorithm.clients_per_round), not by the reports: dropouts cut signal, not noise.
    Epsilon for `delta` is reported after every round (dp-accounting); see docs/privacy.md for what its
    sampling assumption means when participation emerges from the system model."""

    kind: Literal["dp_fedavg"] = "dp_fedavg"
    noise_multiplier: float
    clip: float
    clipping: Annotated[Union[FixedClipping, AdaptiveClipping], Field(discriminator="kind")] = FixedClipping()
    delta: float = 1e-5
    accountant: Literal["rdp", "pld"] = "rdp"
    noise_cohort: Optional[int] = Field(None, gt=0)  # size the noise for this cohort (pfl-research's noise_cohort_size)

    @field_validator("noise_multiplier")
    @classmethod
    def _noise(cls, value):
        if value < 0:
            raise ValueError(f"{value:g} is below 0; give the noise std as a multiple of the clip, >= 0 (0: clipping "
                             "only, no privacy), e.g. 1.0")
        return value

    @field_validator("clip")
    @classmethod
    def _clip(cls, value):
        if value <= 0:
            raise ValueError(f"{value:g}, but the L2 bound on an update must be above 0; e.g. 1.0 (with clipping: "
                             "{kind: adaptive} it is only the start, 0.1 is the usual)")
        return value

    @field_validator("delta")
    @classmethod
    def _delta(cls, value):
        if not 0 < value < 1:
            raise ValueError(f"{value:g} is outside (0, 1); give a small probability, below 1 / population.devices "
                             "(e.g. 1e-5)")
        return value


class NoCompression(Strict):
    kind: Literal["none"] = "none"


class QsgdCompression(Strict):
    """QSGD (Alistarh et al. 2017), dense and bucketed: per bucket one float norm, per value a signed level."""

    kind: Literal["qsgd"] = "qsgd"
    levels: int
    bucket: int = Field(512, gt=0)
    error_feedback: bool = False  # unbiased already: residuals are optional

    @field_validator("levels")
    @classmethod
    def _levels(cls, value):
        if value < 1:
            raise ValueError(f"{value}: quantisation needs at least 1 level; e.g. 4 (4 bits a value) or 8 (5 bits)")
        return value


class TopKCompression(Strict):
    """Top-k sparsification with error feedback (Stich et al. 2018): the k largest entries of update plus the
    device's residual are sent; the rest becomes its residual, kept as device state across rounds."""

    kind: Literal["top_k"] = "top_k"
    k: Optional[int] = None  # values sent
    fraction: Optional[float] = Field(None, gt=0, le=1)  # or this share of the model's values
    error_feedback: bool = True

    @model_validator(mode="after")
    def _one_size(self):
        if (self.k is None) == (self.fraction is None):
            raise ScenarioFieldError("k", "give either k (values sent) or fraction (a share of the model), not both "
                                     "or neither", relative=True)
        if self.k is not None and self.k < 1:
            raise ScenarioFieldError("k", f"{self.k}: send at least 1 value", relative=True)
        return self


class SignCompression(Strict):
    """Scaled sign (EF-signSGD, Karimireddy et al. 2019): one bit a value plus one float scale."""

    kind: Literal["sign"] = "sign"
    error_feedback: bool = True


Compression = Annotated[Union[NoCompression, QsgdCompression, TopKCompression, SignCompression],
                        Field(discriminator="kind")]


class SecureAggregationConfig(Strict):
    """SecAgg (Bonawitz et al. 2017) or SecAgg+ (Bell et al. 2020) as a cost: its round trips, masked upload and
    unmasking are charged to the clock and the byte counters; the aggregate is unchanged (emulator/uplink/secagg.py)."""

    kind: Literal["secagg", "secagg_plus"] = "secagg"
    threshold: Optional[Union[int, float]] = None  # t: an int, or a fraction of a device's share group; None: default
    neighbours: Optional[int] = Field(None, gt=0)  # k, SecAgg+ only; None: from the cohort (O(log n))
    input_bits: int = Field(32, ge=1, le=62)  # a value's fixed-point width before the field grows by log2(cohort)
    malicious: bool = False  # add the consistency round (the malicious-server protocol)
    device_slowdown: float = Field(10.0, gt=0)  # a phone's crypto against the reference core, at median speed

    @field_validator("threshold")
    @classmethod
    def _threshold(cls, value):
        if value is not None and (value <= 0 or (isinstance(value, float) and value > 1)):
            raise ValueError(f"{value}: give a number of devices (>= 2) or a fraction in (0, 1] of a device's group")
        return value



"""What a device's update becomes on its way into the aggregate: clipped (client-level DP), encoded for the
wire (compression, with the device's error-feedback residual) and, with DP, released as the noised mean.

The server passes each report through `encode` in the round's fixed order and the round's mean through
`release`; every random draw comes from a stream named by the seed, the round and the device, so the
numbers never depend on the runners. The order is the one the notes give: clip, then compress; a message
the encoder pushed past the clip (QSGD's rounding, top-k's residual) is clipped again, so each device still
moves the sum by at most the clip and the accountant's sensitivity holds.
"""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from emulator.aggregation.mean import WeightedMean
from emulator.device_state import DeviceStateStore, within
from emulator.seeding import rng
from emulator.uplink import compression as codec
from emulator.uplink.privacy import clip

PRIVACY_COLUMNS = ("dp_clip", "dp_noise_std", "dp_unclipped_fraction", "dp_epsilon", "dp_sampling",
                   "dp_epsilon_device_max", "dp_max_participation")
COMPRESSION_COLUMNS = ("compression_error", "residual_norm", "residual_age")


class UploadPipeline:
    """Per run: the compression scheme and each device's residual, the DP mechanism and its accountant."""

    def __init__(self, scenario, num_params: int, state_dir=None):
        """`state_dir`: the run's device state directory (or a callable giving it; None: a temporary one),
        where error feedback keeps each device's residual: a model's worth of floats per device that reported
        would not fit in memory at 10^6 devices."""
        self.seed = scenario.seed
        self.num_params = num_params
        self.scheme = scenario.compression
        devices = scenario.population.devices
        # device -> what its encoder left out so far (float32), and the round it was last updated (-1: none)
        self.residuals = DeviceStateStore(within(state_dir, "residuals"), devices, num_params)
        self.residual_round = np.full(devices, -1, dtype=np.int64)
        self.dp = self.accountant = None
        privacy = scenario.privacy
        if privacy is not None:  # imported only with DP, for start-up speed (dp-accounting is heavy)
            from emulator.uplink.accounting import NominalAccountant
            from emulator.uplink.privacy import DpFedAvg

            adaptive = privacy.clipping.kind == "adaptive"
            cohort = scenario.algorithm.clients_per_round
            self.dp = DpFedAvg(
                noise_multiplier=privacy.noise_multiplier, clip=privacy.clip, expected_cohort=cohort,
                adaptive=adaptive, quantile=privacy.clipping.quantile if adaptive else 0.5,
                clip_lr=privacy.clipping.lr if adaptive else 0.2,
                count_stddev=privacy.clipping.count_stddev if adaptive else None, noise_cohort=privacy.noise_cohort)
            sampled = privacy.noise_cohort or cohort  # the cohort the noise is sized for is the one accounted
            self.accountant = NominalAccountant(privacy.noise_multiplier, sampled / scenario.population.devices,
                                                privacy.delta, privacy.accountant)
            self.delta = privacy.delta
        self._tally = _RoundTally()
        self._encoded_bytes = None

    # ------------------------------------------------------------------------------------------ sizes
    @property
    def compressed(self) -> bool:
        return self.scheme.kind != "none"

    @property
    def per_report(self) -> bool:
        """Whether each report passes through `encode` on the server (DP clipping, compression)."""
        return self.dp is not None or self.compressed

    @property
    def columns(self) -> tuple[str, ...]:
        return (PRIVACY_COLUMNS if self.dp is not None else ()) + (COMPRESSION_COLUMNS if self.compressed else ())

    def top_k(self) -> int:
        scheme = self.scheme
        return scheme.k if scheme.k is not None else max(1, math.ceil(scheme.fraction * self.num_params))

    def encoded_bytes(self) -> int | None:
        """Bytes of one encoded update on the wire (None: uncompressed), counted by the encoder itself from a
        probe of the model's size: every scheme here has a fixed-size payload."""
        if not self.compressed:
            return None
        if self._encoded_bytes is None:
            probe = np.ones(self.num_params, dtype=np.float32)
            self._encoded_bytes = self._encode(probe, np.random.default_rng(0))[1]
        return self._encoded_bytes

    # ------------------------------------------------------------------------------------------ a round
    def begin_round(self) -> None:
        self._tally = _RoundTally()

    def encode(self, update, round_index: int, stream_key) -> object:
        """The update as the server receives it. `stream_key` names the device's random stream (the round and
        the device; the task for asynchronous runs)."""
        delta, device, tally = update.delta, update.device, self._tally
        if self.dp is not None:
            delta, unclipped = self.dp.clip_update(delta)
            tally.reports += 1
            tally.unclipped += int(unclipped)
        if self.compressed:
            residual = self.residuals.get(device) if self.scheme.error_feedback else None
            if residual is not None:
                tally.ages.append(round_index - self.residual_round[device])
            target = np.asarray(delta, np.float64) if residual is None else delta.astype(np.float64) + residual
            decoded, _ = self._encode(target, rng(self.seed, "compression", *stream_key))
            new_residual = target - decoded
            norm = float(np.linalg.norm(target))
            tally.errors.append(float(np.linalg.norm(decoded - target)) / norm if norm > 0 else 0.0)
            if self.scheme.error_feedback:
                self.residuals.put(device, new_residual.astype(np.float32))
                self.residual_round[device] = round_index
                tally.residual_norms.append(float(np.linalg.norm(new_residual)))
            delta = decoded
            if self.dp is not None:  # the encoder may have pushed the message past the clip
                delta, _ = clip(delta, self.dp.current_clip)
        return replace(update, delta=delta)

    def _encode(self, target: np.ndarray, stream) -> tuple[np.ndarray, int]:
        """(the message as decoded, its payload bytes) for the run's scheme; `target` is update + residual."""
        scheme = self.scheme
        if scheme.kind == "top_k":
            decoded, _, size = codec.top_k(target, self.top_k())
            return decoded, size
        if scheme.kind == "qsgd":
            return codec.qsgd(target, scheme.levels, stream, scheme.bucket)
        return codec.sign(target)

    def release(self, mean: WeightedMean, round_index: int) -> WeightedMean:
        """DP: the round's sum plus Gaussian noise over the expected cohort, as a mean the algorithm steps with
        (it divides by the weight it finds). Without DP, or with nothing to release, the mean as it came."""
        if self.dp is None or mean.weight == 0:
            return mean
        tally = self._tally
        estimate, stats = self.dp.release(mean.total, tally.reports, tally.unclipped,
                                          rng(self.seed, "dp-noise", round_index))
        self.accountant.record_release()
        tally.release = stats
        released = WeightedMean(len(mean.total))
        released.total = estimate.astype(np.float64) * self.dp.expected_cohort
        released.weight, released.count = float(self.dp.expected_cohort), mean.count
        return released

    def round_stats(self, reported_counts: np.ndarray | None) -> dict:
        """The round's columns. `reported_counts`: each device's reports so far (the system's ledger): the
        sampling-free epsilon of the device that contributed most."""
        row, tally = {}, self._tally
        if self.dp is not None:
            from emulator.uplink.accounting import sampling_free_epsilon

            release = tally.release or {}
            most = int(reported_counts.max()) if reported_counts is not None and len(reported_counts) else 0
            row.update(dp_clip=release.get("dp_clip"), dp_noise_std=release.get("dp_noise_std"),
                       dp_unclipped_fraction=release.get("dp_unclipped_fraction"),
                       dp_epsilon=self.accountant.epsilon(), dp_sampling=self.accountant.label,
                       dp_epsilon_device_max=sampling_free_epsilon(self.dp.noise_multiplier, most, self.delta),
                       dp_max_participation=most)
        if self.compressed:
            row.update(compression_error=_mean(tally.errors), residual_norm=_mean(tally.residual_norms),
                       residual_age=_mean(tally.ages))
        return row

    def device_epsilons(self, reported: np.ndarray) -> np.ndarray:
        """Each device's sampling-free epsilon: the Gaussian mechanism composed over the rounds it reported in,
        with no amplification by sampling (sound whatever the cohorts were, given who took part)."""
        from emulator.uplink.accounting import sampling_free_epsilon

        counts, inverse = np.unique(np.asarray(reported), return_inverse=True)
        values = np.array([sampling_free_epsilon(self.dp.noise_multiplier, int(c), self.delta) for c in counts])
        return values[inverse]

    # ------------------------------------------------------------------------------------------ state
    def state(self) -> dict:
        state = {}
        if len(self.residuals):
            devices = self.residuals.devices()
            state["residuals"] = self.residuals.state()
            state["residual_round"] = {"devices": devices, "rounds": self.residual_round[devices].copy()}
        if self.dp is not None:
            state["dp"], state["accountant"] = self.dp.state(), self.accountant.state()
        return state

    def load_state(self, state: dict) -> None:
        residuals, rounds = state.get("residuals", {}), state.get("residual_round", {})
        self.residual_round[:] = -1
        if "generation" in residuals:
            self.residuals.load_state(residuals)
            self.residual_round[np.asarray(rounds["devices"], np.int64)] = np.asarray(rounds["rounds"], np.int64)
        else:  # a checkpoint from before the store: device -> residual, device -> round, in memory
            for device, residual in sorted(residuals.items()):
                self.residuals.put(int(device), np.asarray(residual, np.float32))
                self.residual_round[int(device)] = int(rounds[device])
        if self.dp is not None:
            self.dp.load_state(state["dp"])
            self.accountant.load_state(state["accountant"])


class _RoundTally:
    def __init__(self):
        self.reports = self.unclipped = 0
        self.errors, self.residual_norms, self.ages = [], [], []
        self.release = None


def _mean(values: list) -> float | None:
    return float(np.mean(values)) if values else None

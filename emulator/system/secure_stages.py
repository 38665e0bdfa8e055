"""Secure aggregation's stages on the simulated clock: what the key exchange, masking and unmasking cost each
device (its links and its speed), and whether a round's protocol aborts (emulator/uplink/secagg.py has
the cost model, this module the devices' side of it)."""
from __future__ import annotations

import functools

import numpy as np

from emulator.system.accounting import transfer_seconds
from emulator.system.base import CohortRequest
from emulator.system.profiles import DeviceProfiles


class SecureStages:
    """The protocol's time and bytes for the devices of one population's profiles."""

    def __init__(self, profiles: DeviceProfiles):
        self.profiles = profiles

    def work(self, devices: np.ndarray, request: CohortRequest) -> tuple[np.ndarray, np.ndarray]:
        """Seconds each device spends in the key exchange (R0, R1), and the extra of its masked upload: the
        shares routed to it, its mask expansion and the masked vector's size over the plain upload's."""
        secure, n, p = request.secure, len(devices), self.profiles
        cost = secure.cost
        setup = self.stage_seconds(devices, cost.setup(n), secure.device_slowdown)
        latency = p.latency_s[devices]
        masking = (transfer_seconds(cost.masked_download_bytes(n), p.down_mbps[devices], latency) - latency
                   + cost.masking_compute_s(n) * self.crypto_factor(devices, secure.device_slowdown)
                   + transfer_seconds(cost.masked_upload_bytes(n) - request.bytes_up, p.up_mbps[devices], latency)
                   - latency)
        return setup, masking

    def stage_seconds(self, devices: np.ndarray, stages, slowdown: float) -> np.ndarray:
        """A device's time through protocol stages: each a download, its crypto work and an upload."""
        p, total = self.profiles, np.zeros(len(devices))
        for stage in stages:
            total += (transfer_seconds(stage.bytes_down, p.down_mbps[devices], p.latency_s[devices])
                      + stage.compute_s * self.crypto_factor(devices, slowdown)
                      + transfer_seconds(stage.bytes_up, p.up_mbps[devices], p.latency_s[devices]))
        return total

    def crypto_factor(self, devices: np.ndarray, slowdown: float) -> np.ndarray:
        """A device's crypto time over the reference core's: the slowdown at median speed, scaled by its speed."""
        return slowdown * self.profiles.s_per_sample[devices] / self._median_s_per_sample

    @functools.cached_property
    def _median_s_per_sample(self) -> float:
        return float(np.median(self.profiles.s_per_sample))

    def finish(self, request, devices, reports, plan, closed, failed) -> tuple[bool, dict, int, int]:
        """After the close: does the protocol abort (too few survivors, or a secret with too few live holders),
        and what do unmasking and the server's work cost (nothing after a failed round)? Returns (aborted,
        columns, bytes down, bytes up)."""
        secure, n = request.secure, len(devices)
        cost = secure.cost
        survived = np.zeros(n, dtype=bool)
        survived[reports] = True
        started = plan["start"] <= closed  # the key exchange's bytes: every selected device that began it
        setup = cost.setup(n)
        down = int(started.sum()) * sum(stage.bytes_down for stage in setup)
        up = int(started.sum()) * sum(stage.bytes_up for stage in setup)
        graph = cost.neighbour_graph(n, secure.rng) if cost.neighbours(n) < n - 1 else None
        columns = {"secagg_setup_s": float(plan["setup"].max(initial=0.0)),
                   "secagg_unmask_s": 0.0, "secagg_server_s": 0.0, "secagg_field_bits": cost.field_bits(n),
                   "secagg_aborted": 0}
        if failed:
            return False, columns, down, up
        if cost.aborts(n, survived, graph):
            columns["secagg_aborted"] = 1
            return True, columns, down, up
        finish = cost.finish(n, int(survived.sum()))
        unmask = self.stage_seconds(devices[reports], finish, secure.device_slowdown)
        columns["secagg_unmask_s"] = float(unmask.max(initial=0.0))
        columns["secagg_server_s"] = cost.server_compute_s(n, int(survived.sum()), n - int(survived.sum()))
        down += len(reports) * sum(stage.bytes_down for stage in finish)
        up += len(reports) * sum(stage.bytes_up for stage in finish)
        return False, columns, down, up

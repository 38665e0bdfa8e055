"""The system-model interface: the simulated world that decides who takes part and how long it takes.

The server asks for a cohort; the system model answers with who was selected, who reported in time, who
dropped, straggled or was cancelled, when the round started and ended on the simulated clock, and what
crossed the network. Real training happens afterwards, only for the devices that reported.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from emulator.algorithms.selection import SelectionPolicy
from emulator.system.accounting import ParticipationLedger

_EMPTY = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class SecureAggregation:
    """A round's secure aggregation, priced by `cost` (emulator/uplink/secagg.py): its key exchange before training,
    the masked upload, the unmasking after the round closes and the server's work. A device's crypto runs at
    `device_slowdown` x the reference core, times its own seconds per sample over the population's median."""

    cost: object  # emulator.uplink.secagg.SecAggCost
    device_slowdown: float
    rng: np.random.Generator  # SecAgg+'s neighbour ring


@dataclass(frozen=True)
class CohortRequest:
    round_index: int
    target: int  # reports the round needs
    selection: SelectionPolicy
    rng: np.random.Generator
    bytes_down: int  # per selected device
    bytes_up: int  # per reporting device
    samples_processed: Callable[[np.ndarray], np.ndarray] = lambda devices: np.zeros(len(devices))
    snapshot: bool = False  # sample from the whole population and wait for those devices to check in
    wait_for_all: bool = False  # draw exactly `target` devices, no over-selection: the round waits for all
    secure: SecureAggregation | None = None  # secure aggregation's protocol around the upload
    edge: int | None = None  # an edge server's round: its region's devices, transfers ending at their access links
    deadline_s: float | None = None  # the round's deadline instead of system.deadline_s (an edge server's own)


@dataclass
class RoundOutcome:
    start_s: float
    end_s: float
    selected: np.ndarray  # device ids as drawn, repeats when drawn twice
    reported: np.ndarray  # ids (with repeats) whose updates arrived in time, in arrival order
    dropped: np.ndarray = field(default_factory=lambda: _EMPTY)
    stragglers: np.ndarray = field(default_factory=lambda: _EMPTY)  # still working when the deadline passed
    cancelled: np.ndarray = field(default_factory=lambda: _EMPTY)  # still working when `target` reports had arrived
    aborted: np.ndarray = field(default_factory=lambda: _EMPTY)  # of the dropped: their eligibility lapsed
    bytes_down: int = 0
    bytes_up: int = 0
    failed: bool = False
    server_compute_s: float = 0.0
    events: list = field(default_factory=list)  # (time_s, device, event) when events are recorded
    protocol: dict = field(default_factory=dict)  # secure aggregation's columns (emulator.system.simulated.SECAGG_COLUMNS)
    energy: dict = field(default_factory=dict)  # the devices' energy this round (system.energy.ENERGY_COLUMNS)
    network: dict = field(default_factory=dict)  # the shared links this round (system.network.Network.columns)

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


class SystemModel:
    """A simulated clock plus the population's behaviour, and the per-device participation ledger."""

    def __init__(self, num_devices: int, server_s_per_sample: float = 0.0, server_s_per_operation: float = 0.0,
                 energy: bool = False, aborts: bool = False):
        """`energy`, `aborts`: the ledger also keeps each device's joules (a world with population.energy)
        and its aborts (a world with eligible entries)."""
        self.num_devices = num_devices
        self.now_s = 0.0
        self.server_s_per_sample = server_s_per_sample
        self.server_s_per_operation = server_s_per_operation
        self.ledger = ParticipationLedger(num_devices, energy, aborts)

    def client_round(self, request: CohortRequest) -> RoundOutcome:
        raise NotImplementedError

    def server_round(self, samples: int) -> RoundOutcome:
        """The server trains on its own data: the clock advances by its compute time, no device is involved."""
        start = self.now_s
        seconds = samples * self.server_s_per_sample
        self.now_s += seconds
        return RoundOutcome(start, self.now_s, _EMPTY, _EMPTY, server_compute_s=seconds)

    def charge_server(self, samples: int, operations: float = 0.0) -> float:
        """Server-side work after a client round (FSL's training on its own data, a robust rule's element
        operations): advances the clock, returns the seconds charged."""
        seconds = samples * self.server_s_per_sample + operations * self.server_s_per_operation
        self.now_s += seconds
        return seconds

    def state(self) -> dict:
        """The clock and the ledger (profiles are drawn again from the seed)."""
        return {"now_s": self.now_s, "ledger": self.ledger.state()}

    def load_state(self, state: dict) -> None:
        self.now_s = state["now_s"]
        self.ledger.load(state["ledger"])

    def describe_devices(self) -> dict[str, np.ndarray]:
        """Per-device columns for participation.csv beyond the counters."""
        return {}

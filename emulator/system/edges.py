"""Edge servers (system.network.edges): a server at every region, between its devices and the cloud.

A cloud round is one SimPy episode. Each edge server is a process that plays `cloud_every` rounds with its
region's devices, one after the other, each the synchronous round of simulated.py (check-in, work, close
on its own target or deadline), the devices' transfers ending at their access links, behind which the edge
server sits. Once its last round has closed, an edge server sends its model to the cloud over its region's
link and the server's; the cloud waits for every edge server, averages, and sends its model back down the
same links. The round ends when the last edge server has it. Edge servers share nothing but the backhaul,
so a slow region holds the others up once a cloud round, not once an edge round.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from emulator.scenario.base import ScenarioFieldError
from emulator.system.base import CohortRequest, RoundOutcome

_JOINED = ("dropped", "stragglers", "cancelled", "aborted")


@dataclass(frozen=True)
class CloudRequest:
    round_index: int
    cloud_every: int  # rounds each edge server plays before the cloud averages
    # (edge, its round 0..cloud_every-1) -> that round's request; the edge servers set its edge and deadline
    edge_request: Callable[[int, int], CohortRequest]
    model_bytes: int  # an edge server's model, each way over the backhaul


@dataclass
class CloudOutcome:
    """A cloud round: as one row of metrics.csv (`outcome`: every edge round's devices and device-tier
    bytes together, the backhaul's columns in its `network`), and each edge round's own outcome."""

    outcome: RoundOutcome
    edge_rounds: list[list[RoundOutcome]]  # [edge][k]

    def round_of(self, k: int) -> list[RoundOutcome]:
        """Every edge server's k-th round (0-based), in edge order."""
        return [rounds[k] for rounds in self.edge_rounds]


class EdgeServers:
    """Who each edge server serves, and its rounds' deadline."""

    def __init__(self, config, network, devices: int):
        self.deadline_s = config.deadline_s  # None: system.deadline_s
        self.network = network
        self.count = network.regions
        served = np.bincount(network.region_of(np.arange(devices)), minlength=self.count)
        if (served == 0).any():
            empty = np.flatnonzero(served == 0)
            raise ScenarioFieldError("system.network.edges", f"the edge server of region {int(empty[0])} would serve "
                                     f"no device ({len(empty)} of {self.count} regions have none attached to their "
                                     "access links): use fewer regions (system.network.regions.count) or more "
                                     "devices a link")

    def cloud_round(self, system, env, request: CloudRequest):
        """The cloud round's SimPy process (`system`: the SimulatedSystem whose cohort_round each edge plays)."""
        started, k = env.now, request.cloud_every
        rounds: list[list[RoundOutcome]] = [[] for _ in range(self.count)]
        done = np.zeros(self.count)

        def edge_server(edge: int):
            for j in range(k):
                asked = replace(request.edge_request(edge, j), edge=edge, deadline_s=self.deadline_s)
                outcome = yield env.process(system.cohort_round(env, asked))
                rounds[edge].append(outcome)
            done[edge] = env.now

        yield env.all_of([env.process(edge_server(edge)) for edge in range(self.count)])
        edges, network, nbytes = np.arange(self.count), self.network, request.model_bytes
        at_cloud = network.backhaul(edges, done, nbytes, "up")
        back = network.backhaul(edges, np.full(self.count, at_cloud.max()), nbytes, "down")
        yield env.timeout(float(back.max()) - env.now)
        figures = {"edge_rounds_failed": sum(o.failed for edge in rounds for o in edge),
                   "backhaul_bytes_up": self.count * nbytes, "backhaul_bytes_down": self.count * nbytes,
                   "backhaul_s": float(back.max() - done.max()), "edge_idle_s": float(np.mean(back - done))}
        columns = network.round_columns(started, env.now) | figures
        return CloudOutcome(merged(rounds, started, env.now, columns), rounds)


def merged(rounds: list[list[RoundOutcome]], started: float, ended: float, network: dict) -> RoundOutcome:
    """The edge rounds as one: their devices (by round, then edge), device-tier bytes and energy summed; failed
    when no edge round had the reports it needed."""
    flat = [edge[j] for j in range(len(rounds[0])) for edge in rounds]

    def joined(name: str) -> np.ndarray:
        return np.concatenate([getattr(o, name) for o in flat]).astype(np.int64)

    energy = {}
    for outcome in flat:
        for name, value in outcome.energy.items():
            energy[name] = energy.get(name, 0.0) + value
    events = sorted((row for o in flat for row in o.events), key=lambda row: (row[0], row[1]))
    return RoundOutcome(
        start_s=started, end_s=ended, selected=joined("selected"), reported=joined("reported"),
        **{name: joined(name) for name in _JOINED}, bytes_down=sum(o.bytes_down for o in flat),
        bytes_up=sum(o.bytes_up for o in flat), failed=all(o.failed for o in flat), events=events,
        energy=energy, network=network)

"""The simulated world: devices check in when online, train at their own speed, drop, straggle.

One round is one SimPy episode that starts at the run's current simulated time:

1. Check-in. The devices online now form the pool; if fewer than the cohort (target x over-selection)
   are online, the server polls every checkin_poll_s until enough are, or selection_timeout_s passes.
   A snapshot round (FAST) instead samples from the whole population and each sampled device starts
   when it next comes online: the waiting is part of the round.
2. Work. Each selected device downloads the model, trains (samples processed x its seconds per sample x
   a per-round jitter) and uploads. It is lost if it goes offline before it finishes, or if its dropout
   hazard strikes while it works. Its timeline is computed up front (vectorised) and each device in
   flight is one event on the SimPy clock, firing when it reports or is lost; idle devices cost nothing.
3. Close. The round closes when `target` reports have arrived, when every device has finished or
   dropped, or at the deadline, whichever comes first. Devices still working are discarded, and why the
   round closed says what they were: cancelled if `target` reports had arrived (the server no longer
   needs them), stragglers otherwise (the deadline passed, or no device left could report). With fewer
   than min_report_fraction x target reports the round fails.

Everything random draws from the round's own stream, so the same seed gives the same participation.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import simpy

from emulator.algorithms.selection import distinct_in_draw_order
from emulator.seeding import rng
from emulator.system.accounting import compute_seconds, transfer_seconds
from emulator.system.availability_mix import AvailabilityMix
from emulator.system.base import CohortRequest, RoundOutcome, SystemModel
from emulator.system.edges import CloudOutcome, CloudRequest, EdgeServers
from emulator.system.fleet_energy import FleetEnergy
from emulator.system.network import Network
from emulator.system.profiles import DeviceProfiles
from emulator.system.round_close import close_round
from emulator.system.secure_stages import SecureStages
from emulator.system.ties import World

_EMPTY = np.zeros(0, dtype=np.int64)
SECAGG_COLUMNS = ("secagg_setup_s", "secagg_unmask_s", "secagg_server_s", "secagg_field_bits", "secagg_aborted")


class SimulatedSystem(SystemModel):
    def __init__(self, scenario, label_counts: np.ndarray | None = None):
        """`label_counts` (devices x classes) is the data each device holds: behaviour tied to it
        (population.ties, .types) needs it; an untied world draws the same as without it."""
        population, config = scenario.population, scenario.system
        super().__init__(population.devices, config.server.s_per_sample, config.server.s_per_operation,
                         energy=population.energy is not None,
                         aborts=any(entry.kind == "eligible" for entry in population.availability))
        self.config = config
        self.world = World(population, label_counts, scenario.seed) if population.ties or population.types else None
        self.profiles = DeviceProfiles.draw(population, rng(scenario.seed, "profiles"), self.world)
        self.secure_stages = SecureStages(self.profiles)  # secure aggregation's side of each device
        self.entries = population.availability
        self.availability = AvailabilityMix(population.availability, population.devices, scenario.seed, self.world)
        self.energy = population.energy  # None: a world without batteries
        self.fleet_energy = None if self.energy is None else FleetEnergy(
            self.energy, population.devices, scenario.seed, self.availability, self.entries, self.profiles)
        self.batteries = None if self.fleet_energy is None else self.fleet_energy.batteries  # None: no level known
        self.network = None if config.network is None else Network(
            config.network, population.devices, scenario.seed, self.availability.timezone_h)
        self.edge_servers = None if self.network is None or not self.network.edges else EdgeServers(
            config.network.edges, self.network, population.devices)
        self.eligible = self.availability.eligible_members()  # whose going offline is an abort (None: nobody's)
        self.compute_jitter = population.compute_jitter
        self.dropout_per_hour = population.dropout_per_hour  # a number, or one rate per device when tied to data
        if self.world is not None:
            rates = self.world.values("dropout_per_hour", np.arange(population.devices))
            if rates is not None:
                self.dropout_per_hour = np.where(np.isnan(rates), population.dropout_per_hour, rates)

    @functools.cached_property
    def _everyone(self) -> np.ndarray:
        """Every device id: made only when asked for (snapshot rounds, describe_devices), 80 MB at 10^7."""
        return np.arange(self.num_devices, dtype=np.int64)

    # ------------------------------------------------------------------------------------------ rounds
    def client_round(self, request: CohortRequest) -> RoundOutcome:
        return self._episode(lambda env: self.cohort_round(env, request))

    def cloud_round(self, request: CloudRequest) -> CloudOutcome:
        """A round of every edge server's, then the cloud's exchange with them (system/edges.py)."""
        return self._episode(lambda env: self.edge_servers.cloud_round(self, env, request))

    def _episode(self, process):
        """Run process(env) on a SimPy clock from now to its end; the clock then stands where it ended."""
        env = simpy.Environment(initial_time=self.now_s)
        episode = env.process(process(env))
        env.run(until=episode)
        self.now_s = env.now
        return episode.value

    def cohort_round(self, env: simpy.Environment, request: CohortRequest):
        """One round on the clock, as a SimPy process: check-in, work, close (an edge server's, of its region)."""
        config, started = self.config, env.now
        target = request.target
        needed = max(1, math.ceil(config.min_report_fraction * target))
        wanted = target if request.wait_for_all else math.ceil(target * config.over_selection)
        deadline = config.deadline_s if request.deadline_s is None else request.deadline_s
        if request.snapshot:
            drawn = request.selection.select(self._everyone, wanted, request.rng)
            if config.snapshot_deadline_s is not None:
                deadline = config.snapshot_deadline_s
        else:
            capacity = request.selection.capacity
            online = self._online(env.now, request.edge)
            while capacity(len(online)) < wanted and env.now - started < config.selection_timeout_s:
                yield env.timeout(config.checkin_poll_s)
                online = self._online(env.now, request.edge)
            if capacity(len(online)) < needed:
                return RoundOutcome(started, env.now, _EMPTY, _EMPTY, failed=True)
            policy = request.selection
            if "soc" in policy.reads and self.batteries is not None:  # a battery-aware policy hears the levels
                policy = policy.informed(soc=functools.partial(self.batteries.soc_of, t=env.now))
            drawn = policy.select(online, wanted, request.rng)

        devices, weight = distinct_in_draw_order(drawn)
        secure = request.secure
        if secure is not None:
            try:
                secure.cost.check(len(devices))
            except ValueError:  # too few selected to reach the threshold: the protocol cannot start
                self.ledger.record(devices, _EMPTY, _EMPTY, _EMPTY)
                return RoundOutcome(started, env.now, drawn, _EMPTY, failed=True,
                                    protocol=dict.fromkeys(SECAGG_COLUMNS[:4], 0.0) | {"secagg_aborted": 1})
        plan = self.timeline(devices, env.now, request)
        in_flight = np.flatnonzero(np.isfinite(plan["end"]))
        tally = {"weight": 0, "finished": 0, "reports": []}
        close = env.event()
        if len(in_flight) == 0:
            close.succeed()
        arrive = self._arrival(plan, weight, target, len(in_flight), tally, close)
        for k, delay in zip(in_flight.tolist(), (plan["end"][in_flight] - env.now).tolist()):
            env.timeout(delay, k).callbacks.append(arrive)
        selected_at = env.now
        if deadline is not None:
            yield close | env.timeout(deadline)
        else:
            yield close
        outcome = close_round(self, devices, weight, drawn, plan, tally, started, selected_at, env.now, needed, request)
        if secure is not None and not outcome.failed:  # unmasking, then the server's work, after the close
            yield env.timeout(outcome.protocol["secagg_unmask_s"] + outcome.protocol["secagg_server_s"])
            outcome.end_s, outcome.server_compute_s = env.now, outcome.protocol["secagg_server_s"]
        return outcome

    def _online(self, t: float, edge: int | None = None) -> np.ndarray:
        """The devices that may check in at t: online, with a battery at its policy's floor, and in the edge
        server's region (None: anywhere)."""
        online = self.availability.online_devices(t)
        if edge is not None:
            online = online[self.network.region_of(online) == edge]
        return online if self.fleet_energy is None else self.fleet_energy.may_check_in(online, t)

    @staticmethod
    def _arrival(plan, weight, target, in_flight, tally, close):
        """The callback of a device's event: it reports, or is lost; the target or the last one closes."""
        dropped = plan["dropped"]

        def arrive(event):
            if close.triggered:
                return  # the round already closed: a straggler
            k = event.value
            tally["finished"] += 1
            if not dropped[k]:
                tally["reports"].append(k)
                tally["weight"] += int(weight[k])
            if tally["weight"] >= target or tally["finished"] == in_flight:
                close.succeed()

        return arrive

    def timeline(self, devices: np.ndarray, now: float, request: CohortRequest) -> dict[str, np.ndarray]:
        """When each selected device starts, finishes its download, finishes, or is lost (vectorised)."""
        profiles, stream = self.profiles, request.rng
        start = self.availability.next_online(devices, now) if request.snapshot else np.full(len(devices), now)
        if request.snapshot and self.fleet_energy is not None:
            start = self.fleet_energy.next_start(devices, start)
        down = transfer_seconds(request.bytes_down, profiles.down_mbps[devices], profiles.latency_s[devices])
        jitter = np.exp(self.compute_jitter * stream.standard_normal(len(devices))) if self.compute_jitter else 1.0
        compute = compute_seconds(request.samples_processed(devices), profiles.s_per_sample[devices], jitter)
        up = transfer_seconds(request.bytes_up, profiles.up_mbps[devices], profiles.latency_s[devices])
        setup = None
        if request.secure is not None:  # key exchange first (everyone waits for the slowest), masking with training
            setup, masking = self.secure_stages.work(devices, request)
            start_work = start + (setup if request.snapshot else setup.max(initial=0.0))
            compute = compute + masking
        else:
            start_work = start
        checked_in = np.isfinite(start)
        offline_at = np.full(len(devices), np.inf)
        if checked_in.any():
            offline_at[checked_in] = self._offline_after(devices[checked_in], start[checked_in])
        lost_at = np.minimum(offline_at, start + self.dropout_after(devices, stream))
        download_done, finish, down, shared = timed_transfers(self.network, devices, start_work, down, compute, up,
                                                              lost_at, request, profiles)
        plan = {"start": start, "download_done": download_done, "finish": finish, "setup": setup,
                "down_s": down, "compute_s": compute, "shared": shared}
        # an abort: the policy stopped holding (an eligible entry's device went offline) or the battery hit its floor
        aborts = np.isfinite(offline_at) & (lost_at == offline_at) & self._eligible_of(devices)
        if self.fleet_energy is not None:
            empty = self.fleet_energy.empties(devices, plan, np.minimum(lost_at, finish))
            aborts |= empty < lost_at
            lost_at = np.minimum(lost_at, empty)
        dropped = lost_at < finish
        return {**plan, "lost_at": lost_at, "dropped": dropped, "aborted": dropped & aborts,
                "end": np.where(dropped, lost_at, finish)}

    def _eligible_of(self, devices: np.ndarray) -> np.ndarray:
        return np.zeros(len(devices), bool) if self.eligible is None else self.eligible[devices]

    def dropout_after(self, devices: np.ndarray, stream: np.random.Generator) -> np.ndarray:
        """Seconds from when each device starts working until its dropout hazard strikes (inf: never)."""
        if np.ndim(self.dropout_per_hour):  # one rate per device (tied to data)
            rate = self.dropout_per_hour[devices]
            hazard = stream.standard_exponential(len(devices)) * 3600.0
            return np.divide(hazard, rate, out=np.full(len(devices), np.inf), where=rate > 0)
        if self.dropout_per_hour > 0:
            return stream.exponential(3600.0 / self.dropout_per_hour, len(devices))
        return np.full(len(devices), np.inf)

    def _offline_after(self, devices: np.ndarray, start: np.ndarray) -> np.ndarray:
        """When each device goes offline after starting its work (devices may start at different times)."""
        out = np.empty(len(devices))
        for t in np.unique(start):
            mask = start == t
            out[mask] = self.availability.next_offline(devices[mask], float(t))
        return out

    def state(self) -> dict:
        parts = [part.state() for part in (self.fleet_energy, self.network) if part is not None]
        return {**super().state(), "availability": self.availability.state(), **{k: v for p in parts for k, v in p.items()}}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.availability.load_state(state["availability"])
        for part in (self.fleet_energy, self.network):
            if part is not None:
                part.load_state(state)

    def fastest_round_s(self, bytes_down: int, bytes_up: int, samples: np.ndarray) -> float:
        """The shortest any device could take for a round (median jitter): download + compute + upload."""
        p = self.profiles
        times = (transfer_seconds(bytes_down, p.down_mbps, p.latency_s) + transfer_seconds(bytes_up, p.up_mbps, p.latency_s)
                 + compute_seconds(samples, p.s_per_sample))
        never = self.availability.kind_of(self._everyone) == "never"
        return float(times[~never].min()) if (~never).any() else float("inf")

    def describe_devices(self) -> dict[str, np.ndarray]:
        """participation.csv's behaviour columns: the availability entry, hardware and, in a world tied to
        data, each device's type, group and the dropout rate it got."""
        columns = {**self.availability.columns(self.entries), **self.profiles.columns()}
        columns.update(self.availability.zone_and_habits())
        if np.ndim(self.dropout_per_hour):
            columns["dropout_per_hour"] = self.dropout_per_hour
        if self.fleet_energy is not None:
            columns.update(self.fleet_energy.columns())
        if self.network is not None:
            columns.update(self.network.device_columns())
        if self.world is not None:
            columns.update(self.world.columns)
        return columns


def timed_transfers(network, devices, start_work, down, compute, up, lost_at, request, profiles):
    """(download done, finish, download seconds, the shared links' Transfers or None): each transfer alone at its
    device's speed, or sharing the links it crosses (system.network), a lost device's cancelled then."""
    if network is None:
        return start_work + down, start_work + down + compute + up, down, None
    shared = network.transfers(devices, start_work, compute, lost_at, request.bytes_down, request.bytes_up,
                               profiles.down_mbps[devices], profiles.up_mbps[devices], profiles.latency_s[devices],
                               access_only=request.edge is not None)
    return shared.download_done, shared.finish, shared.download_done - start_work, shared

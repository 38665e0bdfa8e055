"""A round's close: who reported, dropped, straggled or was cancelled, and what the round cost.

Devices still working when a round closes are classified by why it closed, not by each device's own
timeline: once `target` reports are in (even at the deadline's instant) the rest are cancelled, including
those that would have missed the deadline anyway; a round short of its target closed at the deadline or
with no device left that could report, so the rest are stragglers (always so in a failed round). Then the
round is charged: secure aggregation's stages, the devices' energy, the ledger, the shared links.
"""
from __future__ import annotations

import numpy as np

from emulator.system.base import RoundOutcome

_EMPTY = np.zeros(0, dtype=np.int64)


def close_round(system, devices, weight, drawn, plan, tally, started, selected_at, closed, needed,
                request) -> RoundOutcome:
    """The outcome of a round of `system` (a SimulatedSystem) that closed at `closed`, from the devices'
    timelines (`plan`) and the reports that arrived (`tally`); the ledger, batteries and links charged."""
    reports = np.asarray(tally["reports"], dtype=np.int64)
    finished_in_time = np.zeros(len(devices), dtype=bool)
    finished_in_time[reports] = True
    dropped = plan["dropped"] & (plan["lost_at"] <= closed)
    aborted = dropped & plan["aborted"]
    still_working = ~finished_in_time & ~dropped  # includes sampled devices not yet checked in (snapshots)
    # classified by why the round closed (the module's docstring)
    arrived = int(weight[reports].sum())
    reached = arrived >= request.target
    cancelled = still_working & reached
    stragglers = still_working & (not reached)
    failed = arrived < needed
    downloaded = plan["download_done"] <= np.minimum(closed, plan["lost_at"])
    protocol, extra_down, extra_up = {}, 0, 0
    if request.secure is not None:
        aborted, protocol, extra_down, extra_up = system.secure_stages.finish(request, devices, reports, plan,
                                                                            closed, failed)
        n, cost = len(devices), request.secure.cost  # the shares routed with the model; the masked vector's size
        extra_down += int(downloaded.sum()) * cost.masked_download_bytes(n)
        extra_up += len(reports) * (cost.masked_upload_bytes(n) - request.bytes_up)
        failed = failed or aborted
    reported = np.repeat(devices[reports], weight[reports])
    energy = {} if system.fleet_energy is None else system.fleet_energy.spend(
        devices, plan, closed, finished_in_time & (not failed), cancelled, None if system.eligible is None else aborted,
        system.ledger)
    system.ledger.record(devices, _EMPTY if failed else devices[reports], devices[dropped], devices[stragglers],
                       devices[cancelled], devices[aborted])
    network = {}
    if system.network is not None:  # an edge server's round is measured, its cloud round's columns read later
        system.network.measure(devices, plan["shared"], closed)
        network = system.network.round_columns(selected_at, closed) if request.edge is None else {}
    events = event_rows(devices, plan, reports, dropped & ~aborted, stragglers, cancelled, selected_at,
                          closed, aborted) if system.config.events else []
    return RoundOutcome(
        start_s=started, end_s=closed, selected=drawn, reported=_EMPTY if failed else reported,
        dropped=devices[dropped], stragglers=devices[stragglers], cancelled=devices[cancelled],
        aborted=devices[aborted],
        bytes_down=int(downloaded.sum()) * request.bytes_down + extra_down,
        bytes_up=len(reports) * request.bytes_up + extra_up, failed=failed, events=events, protocol=protocol,
        energy=energy, network=network)


def event_rows(devices, plan, reports, dropped, stragglers, cancelled, selected_at, closed, aborted) -> list[tuple]:
    """events.csv's rows of a closed round, in time order."""
    rows = [(selected_at, int(d), "selected") for d in devices]
    late_start = plan["start"] > selected_at
    rows += [(float(plan["start"][k]), int(devices[k]), "checked_in")
             for k in np.flatnonzero(late_start & (plan["start"] <= closed))]
    rows += [(float(plan["finish"][k]), int(devices[k]), "reported") for k in reports]
    rows += [(float(plan["lost_at"][k]), int(devices[k]), "dropped") for k in np.flatnonzero(dropped)]
    rows += [(float(plan["lost_at"][k]), int(devices[k]), "aborted") for k in np.flatnonzero(aborted)]
    rows += [(closed, int(devices[k]), "straggler") for k in np.flatnonzero(stragglers)]
    rows += [(closed, int(devices[k]), "cancelled") for k in np.flatnonzero(cancelled)]
    rows.sort(key=lambda row: (row[0], row[1]))
    return rows

"""The orders one_bottleneck.py's event loop follows, from a call's flows: each group's flows by start, each
cell's flows as they arrive and by cap, each group's flows a cancel may stop, by cancel time. Two numpy sorts
(start, and cancel over the few flows it may stop), then one compiled pass (emulator/compiled.py) that cuts them
by group and cell and puts each cell's flows by cap."""
from __future__ import annotations

import math

import numpy as np

from emulator.compiled import compile_in

_compiled: list = []  # _arrange, _cancellable
FEW_TIES = 16  # tied neighbours _by_value puts in order itself; more, and numpy's stable sort does
SMALL_CELL = 32  # a cell of at most this many flows is put by cap by insertion, a larger one by numpy's sort
MARGIN = 1.001  # over a flow's latest completion: what float rounding could add to it, many times over


def arrange(start, size, cap, cancel, group, first, first_capacity, top_capacity):
    """_arrange's orders (see there) from the flows' start, size, cap, cancel, group and first link (float64 and
    int64 arrays; `first_capacity` each first link's capacity, `top_capacity` each group's link's)."""
    if not _compiled:
        compile_in(globals(), ("_arrange", "_stable_by", "_by_cap", "_cancellable"))
        _compiled.extend((globals()["_arrange"], globals()["_cancellable"]))
    stoppable = _compiled[1](start, size, cap, cancel, group, first, first_capacity, top_capacity)
    return _compiled[0](cap, group, first, first_capacity, _by_value(start),
                        stoppable[_by_value(cancel[stoppable])])


def _cancellable(start, size, cap, cancel, group, first, first_capacity, top_capacity):
    """The flows (ascending) whose cancel may come before they complete: those started before it whose cancel
    is earlier than their latest completion. A flow gets at least its share of every link it crosses (max-min
    fairness: min(cap, capacity / the flows crossing it)), so it completes by start + size / that rate; a round's
    devices mostly leave hours after their transfers, and their cancels are left out of the sort."""
    n = len(start)
    in_group, on_first = np.zeros(len(top_capacity), np.int64), np.zeros(len(first_capacity), np.int64)
    for f in range(n):
        in_group[group[f]] += 1
        if first[f] >= 0:
            on_first[first[f]] += 1
    out, k = np.empty(n, np.int64), 0
    for f in range(n):
        if not (start[f] < cancel[f] < math.inf):
            continue
        rate = min(cap[f], top_capacity[group[f]] / in_group[group[f]])
        if first[f] >= 0:
            rate = min(rate, first_capacity[first[f]] / on_first[first[f]])
        if not rate > 0 or cancel[f] < start[f] + MARGIN * size[f] / rate:
            out[k] = f
            k += 1
    return out[:k]


def _by_value(values: np.ndarray) -> np.ndarray:
    """Indices by value, ties by index (as a stable sort leaves them): numpy's quicksort, then the few runs of
    tied values put in index order (a round's uploads tie once or twice); the identity where all values tie
    (downloads starting together); the stable sort where many do (a fleet of equal links). On a round's own
    values (benchmarks/network.py, AMD EPYC, numpy 2.4) its two calls took 1.75 ms this way, 1.90 with the
    stable sort throughout, although on random floats alone the stable sort is the faster (21 vs 35 µs)."""
    order = np.argsort(values)
    ordered = values[order]
    ties = np.flatnonzero(ordered[1:] == ordered[:-1])
    if len(ties) == len(values) - 1:
        return np.arange(len(values))
    if len(ties) > FEW_TIES:
        return np.argsort(values, kind="stable")
    run = 0
    while run < len(ties):  # a run of tied values: positions ties[run] .. ties[end] + 1
        end = run
        while end + 1 < len(ties) and ties[end + 1] == ties[end] + 1:
            end += 1
        order[ties[run]:ties[end] + 2] = np.sort(order[ties[run]:ties[end] + 2])
        run = end + 1
    return order


def _arrange(cap, group, first, first_capacity, by_start, by_cancel):
    """The orders the event loop follows (from the flows by start and the stoppable by cancel, ties by index):
    each group's flows by start, between group_lo and group_hi; each cell's flows (those whose first link can
    fill), in the order they arrive and by cap, cell c's between cell_bounds[:, c], and each flow's cell (-1:
    none); each group's flows that a cancel may stop, by cancel, between stop_lo[g] and stop_lo[g + 1]."""
    n, groups_bound, links = len(group), group.max() + 1, len(first_capacity)
    arrivals = _stable_by(group, by_start, groups_bound)
    bounds = np.zeros(n + 1, dtype=np.int64)
    groups = 0
    for k in range(n):
        if k == 0 or group[arrivals[k]] != group[arrivals[k - 1]]:
            bounds[groups] = k
            groups += 1
    bounds[groups] = n
    fills = np.zeros(n, dtype=np.bool_)
    for f in range(n):
        fills[f] = first[f] >= 0 and math.isfinite(first_capacity[first[f]])
    members = _stable_by(first, arrivals[fills[arrivals]], links)
    by_cap = members.copy()
    cell = np.full(n, -1, dtype=np.int64)
    cell_bounds = np.zeros((2, len(members)), dtype=np.int64)
    cell_capacity = np.zeros(len(members))
    cells = 0
    for k in range(len(members)):
        if k == 0 or first[members[k]] != first[members[k - 1]]:
            if cells:
                cell_bounds[1, cells - 1] = k
            cell_bounds[0, cells] = k
            cell_capacity[cells] = first_capacity[first[members[k]]]
            cells += 1
        cell[members[k]] = cells - 1
    if cells:
        cell_bounds[1, cells - 1] = len(members)
    for c in range(cells):
        _by_cap(by_cap[cell_bounds[0, c]:cell_bounds[1, c]], cap)
    stops = _stable_by(group, by_cancel, groups_bound)
    stop_lo = np.zeros(groups + 1, dtype=np.int64)
    k = 0
    for g in range(groups):
        while k < len(stops) and group[stops[k]] < group[arrivals[bounds[g]]]:
            k += 1
        stop_lo[g] = k
    stop_lo[groups] = len(stops)
    table = np.stack((members, by_cap)) if len(members) else np.zeros((2, 0), dtype=np.int64)
    return (arrivals, bounds[:groups].copy(), bounds[1:groups + 1].copy(), cell, cell_bounds[:, :cells].copy(),
            cell_capacity[:cells].copy(), table, stops, stop_lo)


def _stable_by(key, order, bound):
    """`order` sorted by key (integers in [0, bound)), stably: ties keep the order they had (a counting sort)."""
    starts = np.zeros(bound + 1, dtype=np.int64)
    for f in order:
        starts[key[f] + 1] += 1
    starts = np.cumsum(starts)
    out = np.empty_like(order)
    for f in order:
        out[starts[key[f]]] = f
        starts[key[f]] += 1
    return out


def _by_cap(flows, cap):
    """A cell's flows by cap, ties as they arrived, in place: by insertion (a cell holds a handful), or numpy's
    stable sort where it holds many. (How ties go changes no level: tied caps add up the same in any order.)"""
    if len(flows) > SMALL_CELL:
        flows[:] = flows[np.argsort(cap[flows], kind="mergesort")]
        return
    for i in range(1, len(flows)):
        f, j = flows[i], i
        while j > 0 and cap[flows[j - 1]] > cap[f]:
            flows[j] = flows[j - 1]
            j -= 1
        flows[j] = f

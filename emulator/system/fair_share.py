"""Max-min fair rates of flows that share links: the fluid model of a network (SimGrid's, without its latency
and TCP corrections), as a pure function that a shared-network model recomputes whenever a transfer starts,
finishes or is cancelled.

Each flow crosses a few links (its device's access link, a regional link, the server's link: one column
each, -1 where it crosses none) and is also capped by its device's own link speed. Progressive filling:
the rates of all flows not yet frozen rise together, at one level; a flow whose cap the level passes stays
at its cap; when a link fills, the flows crossing it freeze at the level. The result is the one allocation
in which no flow can go faster without slowing one that is no faster than it.

Each step finds, for every link at once, the level at which it fills (its flows' caps sorted: a water
level), freezes the flows of the link that fills first, and repeats: as many steps as links that end up
bottlenecks, each a sort of the (flow, link) pairs still rising. Thousands of flows cost milliseconds.
"""
from __future__ import annotations

import numpy as np

TIE = 1e-12  # links whose filling levels are this close (relatively) fill together


def max_min_rates(links: np.ndarray, capacity: np.ndarray, cap: np.ndarray) -> np.ndarray:
    """Each flow's rate, in the units of `capacity` and `cap` (e.g. bytes a second).

    links: (flows, hops) ints, the links each flow crosses, -1 padding; capacity: (links,), each > 0;
    cap: (flows,), each flow's own limit, > 0 (np.inf: none)."""
    cap = np.asarray(cap, dtype=np.float64)
    links = np.asarray(links, dtype=np.int64).reshape(len(cap), -1)
    capacity = np.asarray(capacity, dtype=np.float64)
    _check(links, capacity, cap)
    rate = np.zeros(len(cap))
    used = np.zeros(len(capacity))  # by flows already frozen
    rising = np.ones(len(cap), dtype=bool)
    while rising.any():
        flows = np.flatnonzero(rising)
        level, full = _first_to_fill(links[flows], cap[flows], capacity, used)
        if not full.size and np.isinf(cap[flows]).any():  # a flow with no cap fills every link it crosses
            raise ValueError("a flow crosses no link and has no cap of its own: its rate would be unbounded")
        frozen = cap[flows] <= level  # at their caps before (or as) the level is reached
        if full.size:
            frozen |= np.isin(links[flows], full).any(axis=1)
        done = flows[frozen]
        rate[done] = np.minimum(cap[done], level)
        hops = links[done]
        np.add.at(used, hops[hops >= 0], np.repeat(rate[done], (hops >= 0).sum(axis=1)))
        rising[done] = False
    return rate


def _first_to_fill(links: np.ndarray, cap: np.ndarray, capacity: np.ndarray, used: np.ndarray
                   ) -> tuple[float, np.ndarray]:
    """The level at which the first link fills if every rising flow runs at min(its cap, level), and the
    links that fill at it (np.inf and none when every rising flow reaches its cap first)."""
    flow, hop = np.nonzero(links >= 0)
    link, caps = links[flow, hop], cap[flow]
    order = np.lexsort((caps, link))  # by link, then cap
    link, caps = link[order], caps[order]
    starts = np.flatnonzero(np.r_[True, link[1:] != link[:-1]]) if len(link) else np.zeros(0, np.int64)
    sizes = np.diff(np.r_[starts, len(link)])
    position = np.arange(len(link)) - np.repeat(starts, sizes)  # k: the entry's place in its link's list
    finite = np.where(np.isinf(caps), 0.0, caps)  # an uncapped flow: its link fills at a finite level
    below = np.cumsum(finite) - finite  # caps before it, over all links...
    below -= np.repeat(below[starts], sizes)  # ...less those of the links before its own
    at_cap = used[link] + below + (np.repeat(sizes, sizes) - position) * caps  # the link's use at level = cap
    fills = np.flatnonzero(at_cap >= capacity[link])
    if not fills.size:
        return np.inf, np.zeros(0, np.int64)
    filling, first = np.unique(link[fills], return_index=True)  # each link's first entry that fills it
    k = fills[first]
    levels = (capacity[filling] - used[filling] - below[k]) / (np.repeat(sizes, sizes)[k] - position[k])
    level = float(levels.min())
    return level, filling[levels <= level * (1 + TIE)]


def _check(links: np.ndarray, capacity: np.ndarray, cap: np.ndarray) -> None:
    if links.size and (links.max() >= len(capacity) or links.min() < -1):
        bad = int(links.max()) if links.max() >= len(capacity) else int(links.min())
        raise ValueError(f"a flow crosses link {bad}, but there are {len(capacity)} links (-1 marks no link)")
    if not (np.all(capacity > 0) and np.all(cap > 0)):  # NaN fails too
        raise ValueError("link capacities and flow caps must be positive")


def finish_times(start: np.ndarray, size: np.ndarray, links: np.ndarray, capacity: np.ndarray,
                 cap: np.ndarray, cancel: np.ndarray | None = None) -> np.ndarray:
    """When each flow completes, given when it starts and its size: the fluid model run event by event, the
    rates recomputed (max_min_rates) whenever a flow starts, finishes or is cancelled (at `cancel`, if given:
    such a flow never completes, np.inf). A flow that never starts (start np.inf) never completes either.

    Only links that can fill matter: one whose flows' caps, all of them at once, fit in its capacity never
    slows anyone, and a flow crossing no other link runs at its cap start to end. The flows left fall into
    groups that share no link, each run on its own, so a world whose links rarely fill costs little more
    than the arithmetic of flows running alone."""
    start, size = np.asarray(start, dtype=np.float64), np.asarray(size, dtype=np.float64)
    cap = np.asarray(cap, dtype=np.float64)
    links = np.array(links, dtype=np.int64).reshape(len(cap), -1)
    capacity = np.asarray(capacity, dtype=np.float64)
    cancel = np.full(len(cap), np.inf) if cancel is None else np.asarray(cancel, dtype=np.float64)
    _check(links, capacity, cap)
    starts = np.isfinite(start) & (cancel > start)
    links[~starts] = -1
    demand = np.zeros(len(capacity))
    np.add.at(demand, links[links >= 0], np.broadcast_to(cap[:, None], links.shape)[links >= 0])
    links[(links >= 0) & (demand[np.maximum(links, 0)] <= capacity[np.maximum(links, 0)])] = -1  # never fill
    finish = np.full(len(cap), np.inf)
    alone = starts & (links < 0).all(axis=1)
    if np.isinf(cap[alone]).any():
        raise ValueError("a flow crosses no link and has no cap of its own: its rate would be unbounded")
    finish[alone] = start[alone] + size[alone] / cap[alone]
    for group in _groups(links, starts & ~alone, len(capacity)):
        finish[group] = _run(start[group], size[group], links[group], capacity, cap[group], cancel[group])
    finish[finish > cancel] = np.inf
    return finish


def _groups(links: np.ndarray, flows: np.ndarray, n_links: int) -> list[np.ndarray]:
    """The flows (indices, among `flows`) in groups that share no link: connected through the links they cross."""
    chosen = np.flatnonzero(flows)
    if not chosen.size:
        return []
    parent = np.arange(n_links)

    def root(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for hops in links[chosen].tolist():
        hops = [h for h in hops if h >= 0]
        for other in hops[1:]:
            a, b = root(hops[0]), root(other)
            if a != b:
                parent[b] = a
    label = np.array([root(next(h for h in hops if h >= 0)) for hops in links[chosen].tolist()])
    order = np.argsort(label, kind="stable")
    cuts = np.flatnonzero(np.diff(label[order])) + 1
    return [chosen[part] for part in np.split(order, cuts)]


def _run(start, size, links, capacity, cap, cancel) -> np.ndarray:
    """One group's flows, event by event (np.inf: cancelled before it completed)."""
    left, finish = size.copy(), np.full(len(size), np.nan)
    now = float(start.min())
    while np.isnan(finish).any():
        running = (start <= now) & np.isnan(finish)
        rates = np.zeros(len(size))
        if running.any():
            rates[running] = max_min_rates(links[running], capacity, cap[running])
        with np.errstate(divide="ignore"):
            to_finish = np.where(running, left / np.where(running, rates, 1.0), np.inf)
        pending = np.isnan(finish)
        later = start[pending & (start > now)]
        stops = cancel[running]
        step = min(float(to_finish.min()), float(later.min()) - now if later.size else np.inf,
                   float(stops.min()) - now if stops.size else np.inf)
        left -= rates * step
        now += step
        done = running & ((left <= 1e-12 * size) | (to_finish <= step))
        finish[done] = now
        left[done] = 0.0
        stopped = pending & np.isnan(finish) & (cancel <= now)
        finish[stopped] = np.inf
    return finish

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


def tree_rates(links: np.ndarray, capacity: np.ndarray, cap: np.ndarray, presorted: bool = False) -> np.ndarray:
    """max_min_rates where the links form a tree that every flow climbs: its columns go from the leaves up
    (access link, region, server) and flows that share a link share every link above it. Then the
    allocation is each flow's cap lowered tier by tier to its link's water level, computed over the flows
    below that link alone (a link only ever slows what it carries, and an upper link that fills first leaves
    the lower ones part empty): one sort a tier however many links fill, where the general filling takes a
    step per bottleneck. `presorted`: the flows of each first-column link are side by side, by cap (that
    tier's sort skipped)."""
    rate = np.array(cap, dtype=np.float64)
    if not len(rate):
        return rate
    links = np.asarray(links, dtype=np.int64).reshape(len(rate), -1)
    capacity = np.asarray(capacity, dtype=np.float64)
    for hop in range(links.shape[1]):
        flows = np.flatnonzero(links[:, hop] >= 0)
        if flows.size:
            rate[flows] = np.minimum(rate[flows], _water_levels(links[flows, hop], rate[flows], capacity,
                                                                presorted and hop == 0))
    if np.isinf(rate).any():
        raise ValueError("a flow crosses no link and has no cap of its own: its rate would be unbounded")
    return rate


def _water_levels(link: np.ndarray, demand: np.ndarray, capacity: np.ndarray, presorted: bool = False) -> np.ndarray:
    """For each flow, the level of the link it crosses: the rate its flows above the level get when the flows
    below it keep their demand and the link is full (np.inf where all the demands fit). `presorted`: each
    link's flows already side by side, by demand."""
    if presorted:
        link_sorted, wants = link, demand
    else:
        order = np.lexsort((demand, link))
        link_sorted, wants = link[order], demand[order]
    n = len(link_sorted)
    new_link = np.empty(n, dtype=bool)
    new_link[0] = True
    np.not_equal(link_sorted[1:], link_sorted[:-1], out=new_link[1:])
    starts = np.flatnonzero(new_link)
    ends = np.empty(len(starts), dtype=np.int64)
    ends[:-1], ends[-1] = starts[1:], n
    sizes = ends - starts
    first_of = np.repeat(starts, sizes)
    finite = np.where(wants == np.inf, 0.0, wants)
    below = np.cumsum(finite) - finite
    below -= below[first_of]
    rest = np.repeat(ends, sizes) - np.arange(n)  # flows from this one to the end of its link's list
    fills = below + rest * wants >= capacity[link_sorted]  # the link full when the level reaches this demand
    first = fills.copy()
    first[1:] &= ~(fills[:-1] & ~new_link[1:])  # each link's first entry that fills it
    level = np.full(len(capacity), np.inf)
    level[link_sorted[first]] = (capacity[link_sorted[first]] - below[first]) / rest[first]
    return level[link]

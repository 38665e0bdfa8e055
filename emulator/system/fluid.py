"""When transfers complete on shared links: the fluid model (fair_share's rates) run event by event, the rates
recomputed whenever a flow starts, finishes or is cancelled, as SimGrid's fluid model does.

Most of a round's flows never meet a full link, and those that do meet in small groups (the devices of one
cell), so the work is cut three ways, none changing a completion time:
- a link whose flows' caps, all of them at once, fit in its capacity never slows anyone: left out; a flow
  crossing no other link runs at its cap start to end (that sorting of the flows, and of a tree's into
  groups, is two compiled passes: emulator/compiled.py);
- the flows left fall into groups that share no link, and the groups advance side by side, each on its own
  clock: one vectorised step applies every group's next event, so the steps are as many as the busiest
  group's events, not the sum of all groups';
- on a tree (every topology of system.network) the rates come from fair_share.tree_rates, one sort a tier;
- a group held together by one link (a cell's few flows, scanned by few_flows.py; a region's or the server's,
  with only first links below it) runs through one_bottleneck.py, compiled, an event costing about 0.1 µs, not
  recomputing the group's every rate; the lockstep is left for the rest (links that fill at three tiers,
  or topologies other than a tree).
"""
from __future__ import annotations

import math

import numpy as np

from emulator.compiled import compile_in
from emulator.system.fair_share import _check, max_min_rates, tree_rates
from emulator.system.one_bottleneck import finish_in_groups

NEVER, ALONE, SHARED = 0, 1, 2  # a flow's kind: see _prune
_compiled: list = []


def finish_times(start: np.ndarray, size: np.ndarray, links: np.ndarray, capacity: np.ndarray,
                 cap: np.ndarray, cancel: np.ndarray | None = None, tree: bool = False) -> np.ndarray:
    """When each flow completes, given when it starts, its size, the links it crosses (-1 padding) and its own
    cap; a flow cancelled (at `cancel`) before it completes, or that never starts (start np.inf), never
    completes: np.inf. `tree`: the links form a tree every flow climbs, columns from the leaves up."""
    start, size = np.asarray(start, dtype=np.float64), np.asarray(size, dtype=np.float64)
    cap = np.asarray(cap, dtype=np.float64)
    if not len(cap):
        return np.zeros(0)
    links = np.array(links, dtype=np.int64).reshape(len(cap), -1)
    capacity = np.asarray(capacity, dtype=np.float64)
    cancel = np.full(len(cap), np.inf) if cancel is None else np.asarray(cancel, dtype=np.float64)
    _compile()
    finish = np.full(len(cap), np.inf)
    kind, unbounded = _prune(links, capacity, cap, start, size, cancel, finish)
    if kind is None:  # a link out of range, or a capacity or cap not positive: refused, naming which
        _check(links, capacity, cap)
    if unbounded:
        raise ValueError("a flow crosses no link and has no cap of its own: its rate would be unbounded")
    if tree:
        flows, group, below, rest, rest_group = _tree_shape(links, kind, len(capacity))
        if len(flows):
            finish[flows] = finish_in_groups(start[flows], size[flows], cap[flows], cancel[flows], group, capacity,
                                             below, capacity)
    else:  # any topology: every shared flow in the lockstep, grouped by the links they share
        rest = np.flatnonzero(kind == SHARED)
        rest_group = _groups(links[rest], len(capacity))
    if len(rest):
        finish[rest] = _advance(start[rest], size[rest], links[rest], capacity, cap[rest], cancel[rest], rest_group,
                                tree)
    finish[finish > cancel] = np.inf
    return finish


def _compile() -> None:
    if not _compiled:
        compile_in(globals(), ("_prune", "_tree_shape"))
        _compiled.append(True)


def _prune(links, capacity, cap, start, size, cancel, finish):
    """(each flow's kind, whether a flow ALONE has no cap): the kind NEVER (it never starts), ALONE (it crosses
    no link that can fill: it runs at its cap, its finish set here) or SHARED, with the links that can never
    fill (the caps of every flow crossing them, all at once, fit) taken out of `links` (-1), and all of a
    flow's that never starts. The caps are summed on each link in flow order, as np.bincount sums them.
    (None, False), nothing changed, where a link is out of range or a capacity or cap is not positive."""
    n, hops = links.shape
    for link in range(len(capacity)):
        if not capacity[link] > 0:  # NaN too
            return None, False
    for f in range(n):
        if not cap[f] > 0:
            return None, False
        for h in range(hops):
            if links[f, h] < -1 or links[f, h] >= len(capacity):
                return None, False
    kind = np.full(n, NEVER, dtype=np.int8)
    demand = np.zeros(len(capacity))
    for f in range(n):
        if math.isfinite(start[f]) and cancel[f] > start[f]:
            kind[f] = ALONE
            for h in range(hops):
                if links[f, h] >= 0:
                    demand[links[f, h]] += cap[f]
    unbounded = False
    for f in range(n):
        for h in range(hops):
            if links[f, h] >= 0 and kind[f] != NEVER and demand[links[f, h]] > capacity[links[f, h]]:
                kind[f] = SHARED
            else:
                links[f, h] = -1
        if kind[f] == ALONE:
            finish[f] = start[f] + size[f] / cap[f]
            unbounded = unbounded or math.isinf(cap[f])
    return kind, unbounded


def _tree_shape(links, kind, n_links):
    """On a tree, the shared flows split in two, each flow's group its highest link (flows sharing a link
    share every link above it): those whose group is held together by one link with nothing but first links
    below it (or nothing: a cell's flows alone), with their group and the first link below it (-1: none),
    which one_bottleneck.py runs; and the rest, with their group, for the lockstep."""
    n, hops = links.shape
    highest, shaped = np.zeros(n, dtype=np.int64), np.ones(n, dtype=np.bool_)
    other = np.zeros(n_links, dtype=np.bool_)
    for f in range(n):
        if kind[f] != SHARED:
            continue
        for h in range(hops):
            if links[f, h] >= 0:
                highest[f] = h
        for h in range(1, highest[f]):
            if links[f, h] >= 0:
                shaped[f] = False
                other[links[f, highest[f]]] = True
    flows, group, below = np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.int64)
    rest, rest_group = np.zeros(n, np.int64), np.zeros(n, np.int64)
    ones = rests = 0
    for f in range(n):
        if kind[f] != SHARED:
            continue
        if shaped[f] and not other[links[f, highest[f]]]:
            flows[ones], group[ones] = f, links[f, highest[f]]
            below[ones] = links[f, 0] if highest[f] > 0 else -1  # a cell's own group: none below
            ones += 1
        else:
            rest[rests], rest_group[rests] = f, links[f, highest[f]]
            rests += 1
    return flows[:ones], group[:ones], below[:ones], rest[:rests], rest_group[:rests]


def _groups(links: np.ndarray, n_links: int) -> np.ndarray:
    """Each flow's group: flows connected through the links they cross share one (any topology)."""
    parent = np.arange(n_links)

    def root(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for hops in links.tolist():
        hops = [h for h in hops if h >= 0]
        for other in hops[1:]:
            a, b = root(hops[0]), root(other)
            if a != b:
                parent[b] = a
    return np.array([root(next(h for h in hops if h >= 0)) for hops in links.tolist()], dtype=np.int64)


def _advance(start, size, links, capacity, cap, cancel, group, tree: bool) -> np.ndarray:
    """Every group's flows event by event, the groups side by side on their own clocks (np.inf: cancelled);
    the rates by fair_share.tree_rates on a tree, else by the general filling (max_min_rates).

    The flows are kept in the order (group, first link, cap): a group's flows side by side, so that its next
    event is one reduction over its segment, and each first link's flows by cap, the order its water level
    needs (that sort skipped). Finished flows drop out, the order kept. (A group whose flows meet only at
    one link never gets here: finish_times gives it to one_bottleneck.py.)"""
    order = np.lexsort((cap, links[:, 0], group))
    start, size, links, cap, cancel = start[order], size[order], links[order], cap[order], cancel[order]
    _, group = np.unique(group[order], return_inverse=True)
    now = np.minimum.reduceat(start, np.flatnonzero(np.diff(group, prepend=-1)))  # each group's first start
    left, finish = size.copy(), np.full(len(size), np.nan)
    index = np.arange(len(size))
    while index.size:
        first = np.ones(len(group), dtype=bool)
        np.not_equal(group[1:], group[:-1], out=first[1:])
        bounds = np.flatnonzero(first)
        clock = now[group]
        running = start <= clock
        rates = np.zeros(len(index))
        if tree and running.any():
            rates[running] = tree_rates(links[running], capacity, cap[running], presorted=True)
        elif running.any():
            rates[running] = max_min_rates(links[running], capacity, cap[running])
        with np.errstate(divide="ignore", invalid="ignore"):
            to_finish = np.where(running, left / rates, np.inf)
        until = np.minimum(to_finish, np.where(running, cancel, start) - clock)
        step = np.minimum.reduceat(until, bounds)
        taken = step[np.cumsum(first) - 1]
        left -= rates * taken
        now[group[bounds]] += step
        clock = now[group]
        done = running & ((left <= 1e-12 * size) | (to_finish <= taken))
        stopped = ~done & (cancel <= clock)
        finish[index[done]] = clock[done]
        finish[index[stopped]] = np.inf
        keep = ~(done | stopped)
        index, group, start, size, links, cap, cancel, left = (
            a[keep] for a in (index, group, start, size, links, cap, cancel, left))
    out = np.empty_like(finish)
    out[order] = finish
    return out

"""Groups of flows each held together by one link, event by event in compiled code: the case where the
lockstep of fluid.py pays most (a region's thousand flows coupled through its backhaul, whose every event
would recompute every rate), and the common one of a few flows sharing a cell.

In a group, a flow's rate is min(e, level): e, its cap lowered to its first link's water level (a cell, a
handful of flows; no lower link: its cap), and `level`, the group's shared link's (fair_share.tree_rates).
The flows with e below the level ("free") run at e; the rest ("held") all run at the level, so they advance
on one virtual clock, V, which moves at the level: a held flow completes when V reaches its mark. An event
then touches its cell's flows and moves the few flows whose e the level crossed between the two sets;
nothing else changes. The event loop runs under numba, compiled at its first use in a process (the first
ever takes about 9 s, later processes load it from numba's cache on disk in about 2 s; worlds without
shared links never load numba); where numba is missing the same functions run as plain Python, slower.
"""
from __future__ import annotations

import heapq
import math

import numpy as np

WAITING, FREE, HELD, OVER = 0, 1, 2, 3
SMALL = 16  # a group of at most this many flows and no cell below its link is run by scanning them, no heaps
_KERNEL = ("_run_groups", "_no_cells", "_small_group", "_scan_level", "_one_group", "_heap", "_earlier", "_valid_rate", "_valid",
           "_left", "_become", "_relevel_cell", "_relevel_top")  # compiled together: they call each other by name
_compiled: list = []


def _event_loop():
    """_run_groups compiled by numba (the functions it calls replaced by their compiled selves), at its first
    use; the plain function where numba is not installed."""
    if not _compiled:
        try:
            import numba
        except ImportError:
            _compiled.append(_run_groups)
        else:
            names = globals()
            for name in _KERNEL:
                names[name] = numba.njit(cache=True)(names[name])
            _compiled.append(names["_run_groups"])
    return _compiled[0]


def finish_in_groups(start, size, cap, cancel, group, top_capacity, first, first_capacity) -> np.ndarray:
    """Completion times (np.inf: cancelled first) of flows f, each starting at start[f] with size[f] bytes,
    capped by cap[f], in group group[f] whose shared link has top_capacity[group[f]], and crossing first link
    first[f] below it (-1: none; first_capacity[first[f]] np.inf: a link that cannot fill)."""
    start, size, cap, cancel = (np.ascontiguousarray(a, dtype=np.float64) for a in (start, size, cap, cancel))
    group, first = np.asarray(group, dtype=np.int64), np.asarray(first, dtype=np.int64)
    n = len(start)
    finish = np.full(n, np.nan)
    if not n:
        return finish
    arrivals = np.lexsort((np.arange(n), start, group))  # each group's flows by start (ties: by index)
    bounds = np.flatnonzero(np.diff(group[arrivals], prepend=-1, append=-1))
    # each cell's flows, side by side: in the order they arrive (the order their rates are changed in), and by cap
    # (the order of its water level); a flow's cell: its block's number, -1 where it has no first link that fills
    fills = first >= 0
    fills[fills] = np.isfinite(np.asarray(first_capacity, dtype=np.float64)[first[fills]])
    members = arrivals[fills[arrivals]]
    members = members[np.argsort(first[members], kind="stable")]
    by_cap = np.lexsort((cap, first))
    by_cap = by_cap[fills[by_cap]]
    starts = np.flatnonzero(np.diff(first[members], prepend=-2)) if len(members) else np.zeros(0, np.int64)
    cell_lo, cell_hi = starts, np.append(starts[1:], len(members)).astype(np.int64)
    cell = np.full(n, -1, dtype=np.int64)
    cell[members] = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, len(members))))
    cell_capacity = np.asarray(first_capacity, dtype=np.float64)[first[members[starts]]] if len(starts) else np.zeros(0)
    tops = np.ascontiguousarray(top_capacity, dtype=np.float64)[group[arrivals[bounds[:-1]]]]
    _event_loop()(arrivals, bounds[:-1].astype(np.int64), bounds[1:].astype(np.int64), tops, start, size, cap,
                  cancel, cell, cell_lo, cell_hi, cell_capacity, members, by_cap, finish)
    return finish


def _run_groups(arrivals, group_lo, group_hi, group_top, start, size, cap, cancel, cell, cell_lo, cell_hi,
                cell_capacity, members, by_cap, finish):
    n = len(start)
    e, mark, since = np.zeros(n), np.zeros(n), np.zeros(n)
    mode, version = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    state = np.zeros(5)  # now, V, the free flows' rates summed, how many are held, the level
    heaps = (_heap(), _heap(), _heap(), _heap())  # free flows by completion and by rate, held ones by mark and rate
    stops = _heap()  # by cancel time
    for g in range(len(group_lo)):
        flows = arrivals[group_lo[g]:group_hi[g]]
        if len(flows) <= SMALL and _no_cells(flows, cell):
            _small_group(flows, group_top[g], start, size, cap, cancel, finish, e, mark, mode)
            continue
        state[:] = 0.0
        state[4] = math.inf
        for heap in heaps:
            heap.clear()
        stops.clear()
        _one_group(flows, group_top[g], start, size, cap, cancel, cell, cell_lo,
                   cell_hi, cell_capacity, members, by_cap, finish, e, mark, since, mode, version, state, heaps,
                   stops)


def _no_cells(flows, cell) -> bool:
    for f in flows:
        if cell[f] >= 0:
            return False
    return True


def _small_group(arrivals, top, start, size, cap, cancel, finish, rate, left, mode):
    """A few flows sharing one link and nothing else: at each event every running flow's rate is min(its cap,
    the link's water level), recomputed by scanning them, and the next event is the first arrival, completion
    or cancel among them (a cell's handful of transfers, where heaps would cost more than they save)."""
    n, nxt, running = len(arrivals), 0, 0
    now = start[arrivals[0]] if n else 0.0
    while nxt < n or running:
        level = _scan_level(arrivals, nxt, top, cap, mode)
        when = start[arrivals[nxt]] if nxt < n else math.inf
        for k in range(nxt):
            f = arrivals[k]
            if mode[f] == FREE:
                rate[f] = min(cap[f], level)
                when = min(when, now + left[f] / rate[f], cancel[f])
        for k in range(nxt):
            f = arrivals[k]
            if mode[f] == FREE:
                if now + left[f] / rate[f] <= when:  # completes now
                    finish[f], mode[f] = when, OVER
                    running -= 1
                elif cancel[f] <= when:
                    finish[f], mode[f] = math.inf, OVER
                    running -= 1
                else:
                    left[f] -= rate[f] * (when - now)
        now = when
        while nxt < n and start[arrivals[nxt]] <= now:
            f = arrivals[nxt]
            nxt += 1
            if cancel[f] <= now:
                finish[f], mode[f] = math.inf, OVER
            else:
                left[f], mode[f] = size[f], FREE
                running += 1


def _scan_level(arrivals, arrived, top, cap, mode) -> float:
    """The water level of the running flows among the first `arrived` on a link of capacity `top` (math.inf
    if their caps all fit): their caps taken in ascending order by repeated scans (a handful of flows)."""
    count = 0
    for k in range(arrived):
        if mode[arrivals[k]] == FREE:
            count += 1
    below, seen, last = 0.0, 0, -math.inf
    while seen < count:
        low, ties = math.inf, 0
        for k in range(arrived):
            f = arrivals[k]
            if mode[f] == FREE and last < cap[f] < low:
                low, ties = cap[f], 1
            elif mode[f] == FREE and cap[f] == low:
                ties += 1
        for _ in range(ties):
            if below + (count - seen) * low >= top:
                return (top - below) / (count - seen)
            below += low
            seen += 1
        last = low
    return math.inf


def _one_group(arrivals, top, start, size, cap, cancel, cell, cell_lo, cell_hi, cell_capacity, members, by_cap,
               finish, e, mark, since, mode, version, state, heaps, stops):
    """One group's events in time order: an arrival, a completion (free or held), a cancel."""
    free_done, free_top, held_done, held_low = heaps
    nxt, n = 0, len(arrivals)
    while nxt < n or state[3] > 0 or _valid(free_done, FREE, version, mode):
        when, kind, f = math.inf, 9, 0
        if nxt < n:
            when, kind, f = start[arrivals[nxt]], 0, arrivals[nxt]
        if _valid(free_done, FREE, version, mode):
            when, kind, f = _earlier(when, kind, f, free_done[0][0], 1, free_done[0][2])
        if _valid(held_done, HELD, version, mode):
            held_at = state[0] + (held_done[0][0] - state[1]) / state[4]
            when, kind, f = _earlier(when, kind, f, held_at, 1, held_done[0][2])
        while len(stops) and mode[stops[0][2]] != FREE and mode[stops[0][2]] != HELD:
            heapq.heappop(stops)
        if len(stops):
            when, kind, f = _earlier(when, kind, f, stops[0][0], 2, stops[0][2])
        if state[3] > 0:
            state[1] += state[4] * (when - state[0])
        state[0] = when
        if kind == 0:
            nxt += 1
            if cancel[f] <= when:
                finish[f] = math.inf
                mode[f] = OVER
                continue
            # faster than the level: held at once (relevel_top would move it there; its cell may still slow it)
            joins = HELD if state[3] > 0 and cap[f] > state[4] else FREE
            _become(f, joins, size[f], cap[f], True, heaps, e, mark, since, mode, version, state)
            if cancel[f] < math.inf:
                heapq.heappush(stops, (cancel[f], 0, f))
            _relevel_cell(cell[f], cap, cell_lo, cell_hi, cell_capacity, members, by_cap, heaps, e, mark, since,
                          mode, version, state)
        else:
            if kind == 2:
                heapq.heappop(stops)
                when = math.inf
            finish[f] = when
            _become(f, OVER, 0.0, 0.0, False, heaps, e, mark, since, mode, version, state)
            _relevel_cell(cell[f], cap, cell_lo, cell_hi, cell_capacity, members, by_cap, heaps, e, mark, since,
                          mode, version, state)
        _relevel_top(top, heaps, e, mark, since, mode, version, state)


def _heap():
    heap = [(0.0, 0, 0)]  # typed by its first entry: (key, the flow's version when pushed, flow)
    heap.pop()
    return heap


def _earlier(when, kind, f, other_when, other_kind, other_f):
    if (other_when, other_kind, other_f) < (when, kind, f):
        return other_when, other_kind, other_f
    return when, kind, f


def _valid_rate(heap, wanted, sign, e, mode) -> bool:
    """Whether the heap of rates (sign * e) holds a flow in mode `wanted` at its current e; stale ones on top
    are dropped (a held flow's e changes without a new version: see _become)."""
    while len(heap) and (mode[heap[0][2]] != wanted or sign * heap[0][0] != e[heap[0][2]]):
        heapq.heappop(heap)
    return len(heap) > 0


def _valid(heap, wanted, version, mode) -> bool:
    """Whether the heap holds a current entry of a flow in mode `wanted`; stale ones on top are dropped."""
    while len(heap) and (version[heap[0][2]] != heap[0][1] or mode[heap[0][2]] != wanted):
        heapq.heappop(heap)
    return len(heap) > 0


def _left(f, e, mark, since, mode, state) -> float:
    return mark[f] - state[1] if mode[f] == HELD else mark[f] - e[f] * (state[0] - since[f])


def _become(f, new_mode, remaining, demand, has_demand, heaps, e, mark, since, mode, version, state):
    """Flow f, `remaining` bytes left now, from its set to `new_mode`'s (with a new e, if `has_demand`)."""
    free_done, free_top, held_done, held_low = heaps
    if new_mode == HELD and mode[f] == HELD:  # a held flow's new cap from its cell: its mark stays, as on V
        e[f] = demand
        heapq.heappush(held_low, (e[f], version[f], f))
        return
    version[f] += 1
    now, v = state[0], version[f]
    if mode[f] == FREE:
        state[2] -= e[f]
    elif mode[f] == HELD:
        state[3] -= 1
    if has_demand:
        e[f] = demand
    mode[f] = new_mode
    if new_mode == FREE:
        state[2] += e[f]
        mark[f], since[f] = remaining, now
        heapq.heappush(free_done, (now + remaining / e[f], v, f))
        heapq.heappush(free_top, (-e[f], v, f))
    elif new_mode == HELD:
        state[3] += 1
        mark[f] = state[1] + remaining
        heapq.heappush(held_done, (mark[f], v, f))
        heapq.heappush(held_low, (e[f], v, f))


def _relevel_cell(c, cap, cell_lo, cell_hi, cell_capacity, members, by_cap, heaps, e, mark, since, mode, version,
                  state):
    """A cell's flows at its new water level: each runs at min(its cap, level)."""
    if c < 0:
        return
    below, count = 0.0, 0
    for k in range(cell_lo[c], cell_hi[c]):
        if mode[by_cap[k]] == FREE or mode[by_cap[k]] == HELD:
            count += 1
    level, seen = math.inf, 0
    for k in range(cell_lo[c], cell_hi[c]):  # ascending caps: the level where they fill the cell
        f = by_cap[k]
        if mode[f] != FREE and mode[f] != HELD:
            continue
        if below + (count - seen) * cap[f] >= cell_capacity[c]:
            level = (cell_capacity[c] - below) / (count - seen)
            break
        below += cap[f]
        seen += 1
    for k in range(cell_lo[c], cell_hi[c]):  # in the order the flows arrived
        f = members[k]
        if mode[f] != FREE and mode[f] != HELD:
            continue
        want = min(cap[f], level)
        if want != e[f]:
            _become(f, mode[f], _left(f, e, mark, since, mode, state), want, True, heaps, e, mark, since, mode,
                    version, state)


def _relevel_top(top, heaps, e, mark, since, mode, version, state):
    """The shared link's level, moving flows between the free and the held sets until it settles."""
    free_done, free_top, held_done, held_low = heaps
    while True:
        held = state[3]
        level = (top - state[2]) / held if held > 0 else math.inf
        if _valid_rate(free_top, FREE, -1.0, e, mode):
            f = free_top[0][2]
            if -free_top[0][0] > level or (held == 0 and state[2] > top):
                _become(f, HELD, _left(f, e, mark, since, mode, state), 0.0, False, heaps, e, mark, since, mode,
                        version, state)
                continue
        if _valid_rate(held_low, HELD, 1.0, e, mode):
            f = held_low[0][2]
            if held_low[0][0] < level:
                _become(f, FREE, _left(f, e, mark, since, mode, state), 0.0, False, heaps, e, mark, since, mode,
                        version, state)
                continue
        state[4] = level
        return

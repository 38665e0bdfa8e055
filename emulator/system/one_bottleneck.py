"""Groups of flows each held together by one link, event by event in compiled code: the case where the
lockstep of fluid.py pays most (a region's thousand flows coupled through its backhaul, whose every event
would recompute every rate), and the common one of a few flows sharing a cell.

In a group, a flow's rate is min(e, level): e, its cap lowered to its first link's water level (a cell, a
handful of flows; no lower link: its cap), and `level`, the group's shared link's (fair_share.tree_rates).
The flows with e below the level ("free") run at e; the rest ("held") all run at the level, so they advance
on one virtual clock, V, which moves at the level: a held flow completes when V reaches its mark. An event
then touches its cell's flows and moves the few flows whose e the level crossed between the two sets;
nothing else changes. Flows starting together into an empty group (a round's downloads) join it in one
step (_arrive_together). The loop runs under numba (emulator/compiled.py), compiled at its first use in a
process (about 14 s the first time ever, with fluid.py's; later from numba's cache, about 2.5 s; worlds
without shared links never load numba); without numba the same functions run as plain Python, slower.
"""
from __future__ import annotations

import math

import numpy as np

from emulator.compiled import compile_in
from emulator.system.flow_order import arrange

WAITING, FREE, HELD, OVER, ARRIVING = 0, 1, 2, 3, 4
# the event loop's per-flow state, packed in two arrays (a call then passes two arrays, not ten): rows of `real`,
# e, mark, since, then each heap's keys (by place in it); rows of `whole`, mode, version, then each heap's order and places
E, MARK, SINCE, KEY = 0, 1, 2, 3
MODE, VERSION, ORDER, PLACE, SCRATCH = 0, 1, 2, 6, 10
FREE_DONE, FREE_TOP, HELD_DONE, HELD_LOW = 0, 1, 2, 3  # the heaps: see _push
KEPT = 4  # count[KEPT]: whether FREE_TOP is kept (only while the shared link is contended: see _relevel_top)
SMALL = 16  # a group of at most this many flows and no cell below its link is run by scanning them, no heaps
_KERNEL = ("_run_groups", "_no_cells", "_small_group", "_scan_level", "_one_group", "_earlier", "_push", "_remove",
           "_rekey", "_before", "_sift_up", "_sift_down", "_left", "_become", "_keep_free_top", "_relevel_cell",
           "_relevel_top", "_cell_level", "_arrive_together", "_sort_by_demand", "_sift_demand")
_compiled: list = []  # the event loop


def _event_loop():
    """_run_groups compiled (emulator/compiled.py) at its first use."""
    if not _compiled:
        compile_in(globals(), _KERNEL, nrt=False)  # the loop allocates nothing
        _compiled.append(globals()["_run_groups"])
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
    _event_loop()
    first_capacity = np.ascontiguousarray(first_capacity, dtype=np.float64)
    top_capacity = np.ascontiguousarray(top_capacity, dtype=np.float64)
    arrivals, group_lo, group_hi, cell, cell_bounds, cell_capacity, cells, stops, stop_lo = arrange(
        start, size, cap, cancel, group, first, first_capacity, top_capacity)
    tops = top_capacity[group[arrivals[group_lo]]]
    real, whole = np.zeros((KEY + 4, n)), np.zeros((SCRATCH + 1, n), dtype=np.int64)
    _compiled[0](arrivals, group_lo, group_hi, tops, np.stack([start, size, cap, cancel]), cell, cell_bounds,
                 cell_capacity, cells, stops, stop_lo, finish, real, whole, np.zeros(5), np.zeros(5, dtype=np.int64))
    return finish


def _run_groups(arrivals, group_lo, group_hi, group_top, given, cell, cell_bounds, cell_capacity, cells, stops,
                stop_lo, finish, real, whole, state, count):
    """Each group in turn; `given`: rows start, size, cap and cancel; `cells`: rows each cell's flows in the
    order they arrive and by cap, cell c's between cell_bounds[:, c]; `state`: now, V, the free flows' rates
    summed, how many are held, the level; count: each heap's size."""
    for g in range(len(group_lo)):
        flows = arrivals[group_lo[g]:group_hi[g]]
        if len(flows) <= SMALL and _no_cells(flows, cell):
            _small_group(flows, group_top[g], given[0], given[1], given[2], given[3], finish, real[E], real[MARK],
                         whole[MODE])
            continue
        state[:] = 0.0
        state[4] = math.inf
        count[KEPT] = 0
        first = 0
        if len(flows) > 1 and given[0][flows[1]] == given[0][flows[0]]:  # starting together: _arrive_together
            state[0] = given[0][flows[0]]
            first = _arrive_together(flows, 0, state[0], group_top[g], given, cell, cell_bounds, cell_capacity, cells,
                                     finish, real, whole, state, count)
            _relevel_top(group_top[g], real, whole, state, count)
        _one_group(flows, first, group_top[g], given, cell, cell_bounds, cell_capacity, cells,
                   stops[stop_lo[g]:stop_lo[g + 1]], finish, real, whole, state, count)


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


def _one_group(arrivals, nxt, top, given, cell, cell_bounds, cell_capacity, cells, stops, finish, real, whole, state,
               count):
    """One group's events in time order: an arrival, a completion (free or held), a cancel (`stops`: the
    group's flows that can be cancelled once started, by cancel time)."""
    start, size, cap, cancel = given[0], given[1], given[2], given[3]
    mode = whole[MODE]
    n, stop = len(arrivals), 0
    while nxt < n or count[HELD_DONE] > 0 or count[FREE_DONE] > 0:
        when, kind, f = math.inf, 9, 0
        if nxt < n:
            when, kind, f = start[arrivals[nxt]], 0, arrivals[nxt]
        if count[FREE_DONE] > 0:
            first = whole[ORDER + FREE_DONE, 0]
            when, kind, f = _earlier(when, kind, f, real[KEY + FREE_DONE, 0], 1, first)
        if count[HELD_DONE] > 0:
            first = whole[ORDER + HELD_DONE, 0]
            held_at = state[0] + (real[KEY + HELD_DONE, 0] - state[1]) / state[4]
            when, kind, f = _earlier(when, kind, f, held_at, 1, first)
        while stop < len(stops) and mode[stops[stop]] == OVER:
            stop += 1
        if stop < len(stops):  # a flow still waiting here arrives first, before its cancel
            when, kind, f = _earlier(when, kind, f, cancel[stops[stop]], 2, stops[stop])
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
            _become(f, joins, size[f], cap[f], True, real, whole, state, count)
        else:
            finish[f] = math.inf if kind == 2 else when
            _become(f, OVER, 0.0, 0.0, False, real, whole, state, count)
        if cell[f] >= 0:
            _relevel_cell(cell[f], cap, cell_bounds, cell_capacity, cells, real, whole, state, count)
        _relevel_top(top, real, whole, state, count)


def _arrive_together(arrivals, nxt, when, top, given, cell, cell_bounds, cell_capacity, cells, finish, real, whole,
                     state, count):
    """The flows arriving at `when` into an empty group, in one step: each one's demand (its cap at its cell's
    level), then each into the set it settles in, free below the link's level and held at it, in ascending
    order of demand (relevel_top then finds the level settled), instead of one by one, each arrival lowering
    the level and moving the free flows it passes to the held set. Returns the next arrival's index."""
    start, size, cap, cancel = given[0], given[1], given[2], given[3]
    mode, order, e = whole[MODE], whole[SCRATCH], real[E]
    n, k = len(arrivals), 0
    while nxt < n and start[arrivals[nxt]] == when:
        f = arrivals[nxt]
        nxt += 1
        if cancel[f] <= when:
            finish[f] = math.inf
            mode[f] = OVER
        else:
            mode[f] = ARRIVING
            order[k] = f
            k += 1
    for i in range(k):
        f = order[i]
        e[f] = cap[f] if cell[f] < 0 else min(cap[f], _cell_level(cell[f], cap, cell_bounds, cell_capacity, cells, mode,
                                                                    ARRIVING, ARRIVING))
    _sort_by_demand(order, k, e)
    held_from, below = k, 0.0  # water-filled: the first flow whose demand reaches the level the rest leave
    for i in range(k):
        if below + (k - i) * e[order[i]] >= top:
            held_from = i
            break
        below += e[order[i]]
    for i in range(k):
        f = order[i]
        mode[f] = WAITING
        _become(f, FREE if i < held_from else HELD, size[f], e[f], True, real, whole, state, count)
    return nxt


def _sort_by_demand(order, k, e):
    """order[:k] by (e, flow) ascending, in place (a heap sort: the loop allocates nothing)."""
    for i in range(k // 2 - 1, -1, -1):
        _sift_demand(order, i, k, e)
    for end in range(k - 1, 0, -1):
        order[0], order[end] = order[end], order[0]
        _sift_demand(order, 0, end, e)


def _sift_demand(order, i, k, e):
    f = order[i]
    while 2 * i + 1 < k:
        child = 2 * i + 1
        a, b = order[child], order[min(child + 1, k - 1)]
        if e[a] < e[b] or (e[a] == e[b] and a < b):  # by (e, flow): the larger child
            child = min(child + 1, k - 1)
        a = order[child]
        if not (e[f] < e[a] or (e[f] == e[a] and f < a)):
            break
        order[i] = a
        i = child
    order[i] = f


def _earlier(when, kind, f, other_when, other_kind, other_f):
    if (other_when, other_kind, other_f) < (when, kind, f):
        return other_when, other_kind, other_f
    return when, kind, f


def _push(h, f, value, real, whole, count):
    """Flow f into heap h with `value`. Four heaps of flows by (value, version, flow), values kept by place (a
    comparison reads no flow's row), places by flow: the free flows by completion and -e, the held by mark and e."""
    count[h] += 1
    _sift_up(h, count[h] - 1, f, value, real, whole)


def _remove(h, f, real, whole, count):
    """Flow f out of heap h: its place's hole down to a leaf, the earlier child up each step, then the last
    flow into the hole and up to its place (one comparison a level, not two: the last flow mostly belongs low)."""
    order, place, key, version = whole[ORDER + h], whole[PLACE + h], real[KEY + h], whole[VERSION]
    i, end = place[f], count[h] - 1
    count[h] = end
    if i == end:
        return
    while 2 * i + 1 < end:
        child = 2 * i + 1
        if child + 1 < end and _before(key[child + 1], order[child + 1], key[child], order[child], version):
            child += 1
        order[i], key[i] = order[child], key[child]
        place[order[i]] = i
        i = child
    _sift_up(h, i, order[end], key[end], real, whole)


def _rekey(h, f, value, real, whole, count):
    """Flow f's value in heap h changed (its version did not): f moved up or down to its place."""
    _sift_up(h, whole[PLACE + h, f], f, value, real, whole)
    _sift_down(h, whole[PLACE + h, f], real, whole, count)


def _before(value, f, other_value, other, version) -> bool:
    if value != other_value:
        return value < other_value
    if version[f] != version[other]:
        return version[f] < version[other]
    return f < other


def _sift_up(h, i, f, value, real, whole):
    """Flow f with `value` into place i, then up past the parents it comes before."""
    order, place, key, version = whole[ORDER + h], whole[PLACE + h], real[KEY + h], whole[VERSION]
    while i > 0:
        parent = (i - 1) >> 1
        if not _before(value, f, key[parent], order[parent], version):
            break
        order[i], key[i] = order[parent], key[parent]
        place[order[i]] = i
        i = parent
    order[i], key[i] = f, value
    place[f] = i


def _sift_down(h, i, real, whole, count):
    order, place, key, version = whole[ORDER + h], whole[PLACE + h], real[KEY + h], whole[VERSION]
    f, value, n = order[i], key[i], count[h]
    while 2 * i + 1 < n:
        child = 2 * i + 1
        if child + 1 < n and _before(key[child + 1], order[child + 1], key[child], order[child], version):
            child += 1
        if not _before(key[child], order[child], value, f, version):
            break
        order[i], key[i] = order[child], key[child]
        place[order[i]] = i
        i = child
    order[i], key[i] = f, value
    place[f] = i


def _left(f, real, whole, state) -> float:
    if whole[MODE, f] == HELD:
        return real[MARK, f] - state[1]
    return real[MARK, f] - real[E, f] * (state[0] - real[SINCE, f])


def _become(f, new_mode, remaining, demand, has_demand, real, whole, state, count):
    """Flow f, `remaining` bytes left now, from its set to `new_mode`'s (with a new e, if `has_demand`)."""
    mode = whole[MODE, f]
    if new_mode == HELD and mode == HELD:  # a held flow's new cap from its cell: its mark stays, as on V
        real[E, f] = demand  # HELD_LOW's key only lowered: a key below e is put right once it reaches the top
        if demand < real[KEY + HELD_LOW, whole[PLACE + HELD_LOW, f]]:
            _rekey(HELD_LOW, f, demand, real, whole, count)
        return
    if mode == FREE:
        state[2] -= real[E, f]
        _remove(FREE_DONE, f, real, whole, count)
        if count[KEPT]:
            _remove(FREE_TOP, f, real, whole, count)
    elif mode == HELD:
        state[3] -= 1
        _remove(HELD_DONE, f, real, whole, count)
        _remove(HELD_LOW, f, real, whole, count)
    whole[VERSION, f] += 1
    now = state[0]
    if has_demand:
        real[E, f] = demand
    whole[MODE, f] = new_mode
    if new_mode == FREE:
        state[2] += real[E, f]
        real[MARK, f], real[SINCE, f] = remaining, now
        _push(FREE_DONE, f, now + remaining / real[E, f], real, whole, count)
        if count[KEPT]:
            _push(FREE_TOP, f, -real[E, f], real, whole, count)
    elif new_mode == HELD:
        state[3] += 1
        real[MARK, f] = state[1] + remaining
        _push(HELD_DONE, f, real[MARK, f], real, whole, count)
        _push(HELD_LOW, f, real[E, f], real, whole, count)


def _keep_free_top(real, whole, count):
    """FREE_TOP built from the free flows (those FREE_DONE holds), then kept."""
    count[KEPT], count[FREE_TOP] = 1, count[FREE_DONE]
    for i in range(count[FREE_DONE]):
        f = whole[ORDER + FREE_DONE, i]
        real[KEY + FREE_TOP, i] = -real[E, f]
        whole[ORDER + FREE_TOP, i] = f
        whole[PLACE + FREE_TOP, f] = i
    for i in range(count[FREE_TOP] // 2 - 1, -1, -1):
        _sift_down(FREE_TOP, i, real, whole, count)


def _relevel_cell(c, cap, cell_bounds, cell_capacity, cells, real, whole, state, count):
    """A cell's flows at its new water level: each runs at min(its cap, level)."""
    mode, members = whole[MODE], cells[0]
    level = _cell_level(c, cap, cell_bounds, cell_capacity, cells, mode, FREE, HELD)
    for k in range(cell_bounds[0, c], cell_bounds[1, c]):  # in the order the flows arrived
        f = members[k]
        if mode[f] != FREE and mode[f] != HELD:
            continue
        want = min(cap[f], level)
        if want != real[E, f]:
            _become(f, mode[f], _left(f, real, whole, state), want, True, real, whole, state, count)


def _cell_level(c, cap, cell_bounds, cell_capacity, cells, mode, one, other) -> float:
    """Cell c's water level over its flows in mode `one` or `other` (math.inf where their caps fit): their caps
    taken in ascending order until they fill it."""
    lo, hi, by_cap = cell_bounds[0, c], cell_bounds[1, c], cells[1]
    running = 0
    for k in range(lo, hi):
        if mode[by_cap[k]] == one or mode[by_cap[k]] == other:
            running += 1
    below, seen = 0.0, 0
    for k in range(lo, hi):
        f = by_cap[k]
        if mode[f] != one and mode[f] != other:
            continue
        if below + (running - seen) * cap[f] >= cell_capacity[c]:
            return (cell_capacity[c] - below) / (running - seen)
        below += cap[f]
        seen += 1
    return math.inf


def _relevel_top(top, real, whole, state, count):
    """The shared link's level, moving flows between the free and the held sets until it settles. The free
    flows by rate (FREE_TOP) are kept only while the link is contended (a flow held, or the free flows'
    rates over its capacity): a round's transfers fill it after the first arrive and leave it before the
    last complete, and in between the heap is built once from the free flows (the same order as kept)."""
    while True:
        held = state[3]
        level = (top - state[2]) / held if held > 0 else math.inf
        contended = held > 0 or state[2] > top
        if contended and not count[KEPT]:
            _keep_free_top(real, whole, count)
        elif not contended:
            count[KEPT], count[FREE_TOP] = 0, 0
        if count[FREE_TOP] > 0:
            f = whole[ORDER + FREE_TOP, 0]
            if real[E, f] > level or (held == 0 and state[2] > top):
                _become(f, HELD, _left(f, real, whole, state), 0.0, False, real, whole, state, count)
                continue
        if count[HELD_LOW] > 0 and real[KEY + HELD_LOW, 0] < level:
            f = whole[ORDER + HELD_LOW, 0]
            if real[E, f] != real[KEY + HELD_LOW, 0]:  # its cell's level rose since its key: put right
                _rekey(HELD_LOW, f, real[E, f], real, whole, count)
            else:
                _become(f, FREE, _left(f, real, whole, state), 0.0, False, real, whole, state, count)
            continue
        state[4] = level
        return

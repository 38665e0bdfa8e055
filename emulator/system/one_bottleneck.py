"""Groups of flows each held together by one link, event by event in compiled code: the case where the
lockstep of fluid.py pays most (a region's thousand flows coupled through its backhaul, whose every event
would recompute every rate), and cells with more flows than few_flows.py scans.

In a group, a flow's rate is min(e, level): e, its cap lowered to its first link's water level (a cell, a
handful of flows; no lower link: its cap), and `level`, the group's shared link's (fair_share.tree_rates).
The flows with e below the level ("free") run at e; the rest ("held") all run at the level, so they advance
on one virtual clock, V, which moves at the level: a held flow completes when V reaches its mark. An event
then touches its cell's flows (none but its own where the cell's level stays) and moves the few flows whose
e the level crossed between the two sets; nothing else changes. Flows starting together into an empty group
(a round's downloads) join it in one step (_arrive_together). The loop runs under numba (emulator/compiled.py),
compiled at its first use in a process (about 19 s the first time ever, with fluid.py's; later from numba's
cache, under a second; worlds without shared links never load numba); without numba the same functions run as
plain Python, slower.
"""
from __future__ import annotations

import math

import numpy as np

from emulator.compiled import compile_in
from emulator.system.few_flows import scan_small_groups
from emulator.system.flow_order import arrange

WAITING, FREE, HELD, OVER, ARRIVING = 0, 1, 2, 3, 4
# the event loop's per-flow state, packed in two arrays (a call then passes two arrays, not ten): rows of `real`,
# e, mark, since, then each heap's keys (by place in the heap); rows of `whole`, mode, version, then each heap's
# order and places
E, MARK, SINCE, KEY = 0, 1, 2, 3
MODE, VERSION, ORDER, PLACE, SCRATCH = 0, 1, 2, 6, 10
FREE_DONE, FREE_TOP, HELD_DONE, HELD_LOW = 0, 1, 2, 3  # the heaps: see _push
KEPT = 4  # count[KEPT]: whether FREE_TOP is kept (only while the shared link is contended: see _relevel_top)
_KERNEL = ("_run_groups", "_one_group", "_earlier", "_push", "_remove", "_rekey", "_before", "_earlier_child",
           "_sift_up", "_sift_down", "_left", "_become", "_keep_free_top", "_relevel_cell", "_relevel_top",
           "_cell_level", "_arrive_together", "_sift_demand")
# put into their callers: an event's calls to these cost more than their work (measured: a round's upload call
# 0.52 vs 0.66 ms, its download 0.45 vs 0.51); inlining the rest as well made both slower again
_INLINED = ("_earlier", "_push", "_remove", "_rekey", "_before", "_earlier_child", "_sift_up", "_sift_down",
            "_left", "_become", "_relevel_cell", "_relevel_top", "_cell_level")
_compiled: list = []  # the event loop


def _event_loop():
    """_run_groups compiled (emulator/compiled.py) at its first use."""
    if not _compiled:
        compile_in(globals(), _KERNEL, nrt=False, inline=_INLINED)  # the loop allocates nothing
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
    # rows: each cell's capacity, the level its flows run at, how many run (see _relevel_cell)
    cell_state = np.stack([cell_capacity, np.full(len(cell_capacity), np.nan), np.zeros(len(cell_capacity))])
    real, whole = np.zeros((KEY + 4, n)), np.zeros((SCRATCH + 1, n), dtype=np.int64)
    given = np.stack([start, size, cap, cancel])
    scanned = scan_small_groups(arrivals, group_lo, group_hi, tops, given, cell, finish)
    if scanned.all():
        return finish
    _compiled[0](arrivals, group_lo, group_hi, tops, scanned, given, cell, cell_bounds, cell_state, cells, stops,
                 stop_lo, finish, real, whole, np.zeros(5), np.zeros(5, dtype=np.int64))
    return finish


def _run_groups(arrivals, group_lo, group_hi, group_top, scanned, given, cell, cell_bounds, cell_state, cells,
                stops, stop_lo, finish, real, whole, state, count):
    """Each group that few_flows.py has not `scanned`, in turn; `given`: rows start, size, cap and cancel;
    `cells`: rows each cell's flows in the order they arrive and by cap, cell c's between cell_bounds[:, c];
    `state`: now, V, the free flows' rates summed, how many are held, the level; count: each heap's size."""
    for g in range(len(group_lo)):
        if scanned[g]:
            continue
        flows = arrivals[group_lo[g]:group_hi[g]]
        state[:] = 0.0
        state[4] = math.inf
        count[KEPT] = 0
        first = 0
        if len(flows) > 1 and given[0][flows[1]] == given[0][flows[0]]:  # starting together: _arrive_together
            state[0] = given[0][flows[0]]
            first = _arrive_together(flows, 0, state[0], group_top[g], given, cell, cell_bounds, cell_state, cells,
                                     finish, real, whole, state, count)
            _relevel_top(group_top[g], real, whole, state, count)
        _one_group(flows, first, group_top[g], given, cell, cell_bounds, cell_state, cells,
                   stops[stop_lo[g]:stop_lo[g + 1]], finish, real, whole, state, count)


def _one_group(arrivals, nxt, top, given, cell, cell_bounds, cell_state, cells, stops, finish, real, whole, state,
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
            cell_state[2, cell[f]] += 1 if kind == 0 else -1
            _relevel_cell(cell[f], cap, cell_bounds, cell_state, cells, real, whole, state, count)
        _relevel_top(top, real, whole, state, count)


def _arrive_together(arrivals, nxt, when, top, given, cell, cell_bounds, cell_state, cells, finish, real, whole,
                     state, count):
    """The flows arriving at `when` into an empty group, in one step: each one's demand (its cap at its cell's
    level, computed once a cell), then each into the set it settles in: the free, below the link's level, drawn
    in ascending order of demand from a heap until one reaches the level the rest leave; the rest held as they
    are (relevel_top then finds the level settled). Instead of one by one, each arrival lowering the level and
    moving the free flows it passes to the held set. Returns the next arrival's index."""
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
            if cell[f] >= 0:
                cell_state[2, cell[f]] += 1
    for i in range(k):
        f = order[i]
        if cell[f] >= 0 and math.isnan(cell_state[1, cell[f]]):  # each cell's level once
            cell_state[1, cell[f]] = _cell_level(cell[f], cap, cell_bounds, cell_state, cells, mode, ARRIVING,
                                                    ARRIVING)
        e[f] = cap[f] if cell[f] < 0 else min(cap[f], cell_state[1, cell[f]])
    for i in range(k // 2 - 1, -1, -1):  # a heap by (e, flow), the lowest first
        _sift_demand(order, i, k, e)
    below, left = 0.0, k  # water-filled: free from the lowest demand up, until one reaches the level the rest leave
    while left and below + left * e[order[0]] < top:
        f = order[0]
        below += e[f]
        mode[f] = WAITING
        _become(f, FREE, size[f], e[f], True, real, whole, state, count)
        left -= 1
        order[0] = order[left]
        _sift_demand(order, 0, left, e)
    for i in range(left):
        f = order[i]
        mode[f] = WAITING
        _become(f, HELD, size[f], e[f], True, real, whole, state, count)
    return nxt


def _sift_demand(order, i, k, e):
    """order[i] down the heap order[:k] by (e, flow), the lowest on top."""
    f = order[i]
    while 2 * i + 1 < k:
        child = 2 * i + 1
        a, b = order[child], order[min(child + 1, k - 1)]
        if e[b] < e[a] or (e[b] == e[a] and b < a):  # the lower child
            child = min(child + 1, k - 1)
        a = order[child]
        if not (e[a] < e[f] or (e[a] == e[f] and a < f)):
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
        child = _earlier_child(i, end, order, key, version)
        order[i], key[i] = order[child], key[child]
        place[order[i]] = i
        i = child
    _sift_up(h, i, order[end], key[end], real, whole)


def _rekey(h, f, value, real, whole, count):
    """Flow f's value in heap h changed (its version did not): f moved up or down to its place."""
    _sift_up(h, whole[PLACE + h, f], f, value, real, whole)
    _sift_down(h, whole[PLACE + h, f], real, whole, count)


def _earlier_child(i, n, order, key, version):
    """Of place i's children in a heap of n (one at least), the one that comes first."""
    child = 2 * i + 1
    if child + 1 < n and _before(key[child + 1], order[child + 1], key[child], order[child], version):
        child += 1
    return child


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
        child = _earlier_child(i, n, order, key, version)
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


def _relevel_cell(c, cap, cell_bounds, cell_state, cells, real, whole, state, count):
    """A cell's flows at its new water level, after a flow arrived or left: each runs at min(its cap, level).
    cell_state[:, c]: its capacity, the level its other flows run at (NaN: not yet known), and how many run
    (kept as they arrive and leave). Where the level stays, nothing changes: the flow left, or arrived at its
    cap, and a level an arrival leaves as it was is one its cap fits under (infinite, or above a cap too small
    to move it)."""
    mode, members = whole[MODE], cells[0]
    level = _cell_level(c, cap, cell_bounds, cell_state, cells, mode, FREE, HELD)
    if level == cell_state[1, c]:
        return
    cell_state[1, c] = level
    for k in range(cell_bounds[0, c], cell_bounds[1, c]):  # in the order the flows arrived
        f = members[k]
        if mode[f] != FREE and mode[f] != HELD:
            continue
        want = min(cap[f], level)
        if want != real[E, f]:
            _become(f, mode[f], _left(f, real, whole, state), want, True, real, whole, state, count)


def _cell_level(c, cap, cell_bounds, cell_state, cells, mode, one, other) -> float:
    """Cell c's water level over its flows in mode `one` or `other`, cell_state[2, c] of them (math.inf where
    their caps fit): their caps taken in ascending order until they fill it."""
    by_cap, running = cells[1], int(cell_state[2, c])
    below, seen, k = 0.0, 0, cell_bounds[0, c]
    while seen < running:
        f = by_cap[k]
        k += 1
        if mode[f] != one and mode[f] != other:
            continue
        if below + (running - seen) * cap[f] >= cell_state[0, c]:
            return (cell_state[0, c] - below) / (running - seen)
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

"""Flows behind their own first links and one shared link above them, event by event at a few microseconds an
event: the case where the lockstep of fluid.py pays most, one group of a thousand flows coupled through a
region's link, whose every event would recompute every rate.

On such a tree a flow's rate is min(e, level): e, its cap lowered to its first link's water level (a cell,
a handful of flows), and `level`, the shared link's (fair_share.tree_rates). The flows with e below the
level ("free") run at e; the rest ("held") all run at the level, so they advance on one virtual clock, V,
which moves at the level: a held flow completes when V reaches its mark. An event then touches its cell's
flows and moves the few flows whose e the level crossed between the two sets; nothing else changes.
"""
from __future__ import annotations

import heapq
import math


def finish_behind_one_link(start, size, first, first_capacity, top_capacity: float, cap, cancel) -> list[float]:
    """Completion times (math.inf: cancelled first) of flows `f` starting at start[f] with size[f] bytes, each
    crossing its first link first[f] (capacity first_capacity[first[f]], math.inf for a link that cannot
    fill) and one shared link of `top_capacity`, capped by cap[f]. Plain Python sequences in, a list out."""
    n = len(start)
    finish = [math.nan] * n
    members: dict[int, list[int]] = {}
    e = [0.0] * n
    mode = [0] * n  # 0 waiting, 1 free, 2 held, 3 over
    version = [0] * n
    mark = [0.0] * n  # held: V at completion; free: bytes left at `since`
    since = [0.0] * n
    free_done, held_done, free_top, held_low, stops = [], [], [], [], []
    state = {"now": 0.0, "V": 0.0, "free_sum": 0.0, "held": 0, "level": math.inf}
    arrivals = sorted(range(n), key=lambda f: start[f])

    def left(f):
        return mark[f] - state["V"] if mode[f] == 2 else mark[f] - e[f] * (state["now"] - since[f])

    def become(f, new_mode, remaining, demand=None):
        """Flow f, `remaining` bytes left now, from its set to `new_mode`'s (with a new e, if given)."""
        version[f] += 1
        now, v = state["now"], version[f]
        if mode[f] == 1:
            state["free_sum"] -= e[f]
        elif mode[f] == 2:
            state["held"] -= 1
        if demand is not None:
            e[f] = demand
        mode[f] = new_mode
        if new_mode == 1:
            state["free_sum"] += e[f]
            mark[f], since[f] = remaining, now
            heapq.heappush(free_done, (now + remaining / e[f], v, f))
            heapq.heappush(free_top, (-e[f], v, f))
        elif new_mode == 2:
            state["held"] += 1
            mark[f] = state["V"] + remaining
            heapq.heappush(held_done, (mark[f], v, f))
            heapq.heappush(held_low, (e[f], v, f))

    def top(heap, wanted_mode):
        while heap and (version[heap[0][2]] != heap[0][1] or mode[heap[0][2]] != wanted_mode):
            heapq.heappop(heap)
        return heap[0] if heap else None

    def relevel_cell(cell):
        if first_capacity[cell] == math.inf:
            return  # a first link that cannot fill: every flow through it keeps its cap
        flows = members.get(cell, [])
        level = _water_level(sorted(cap[f] for f in flows), first_capacity[cell])
        for f in flows:
            want = min(cap[f], level)
            if want != e[f]:
                become(f, mode[f], left(f), want)

    def relevel_top():
        while True:
            held = state["held"]
            level = (top_capacity - state["free_sum"]) / held if held else math.inf
            fastest = top(free_top, 1)
            if fastest is not None and (-fastest[0] > level or (not held and state["free_sum"] > top_capacity)):
                f = fastest[2]
                become(f, 2, left(f))
                continue
            slowest = top(held_low, 2)
            if slowest is not None and slowest[0] < level:
                f = slowest[2]
                become(f, 1, left(f))
                continue
            state["level"] = level
            return

    def leave(f, when):
        finish[f] = when
        become(f, 3, 0.0)
        cell = first[f]
        if cell in members:
            members[cell].remove(f)
            relevel_cell(cell)

    nxt = 0
    while nxt < n or state["held"] or top(free_done, 1) is not None:
        candidates = []
        if nxt < n:
            candidates.append((start[arrivals[nxt]], 0, arrivals[nxt]))
        done = top(free_done, 1)
        if done is not None:
            candidates.append((done[0], 1, done[2]))
        done = top(held_done, 2)
        if done is not None:
            candidates.append((state["now"] + (done[0] - state["V"]) / state["level"], 1, done[2]))
        while stops and mode[stops[0][1]] not in (1, 2):
            heapq.heappop(stops)
        if stops:
            candidates.append((stops[0][0], 2, stops[0][1]))
        when, kind, f = min(candidates)
        if state["held"]:
            state["V"] += state["level"] * (when - state["now"])
        state["now"] = when
        if kind == 0:
            nxt += 1
            if cancel[f] <= when:
                finish[f] = math.inf
                mode[f] = 3
                continue
            if first_capacity[first[f]] != math.inf:
                members.setdefault(first[f], []).append(f)
            become(f, 1, float(size[f]), cap[f])
            heapq.heappush(stops, (cancel[f], f))
            relevel_cell(first[f])
        elif kind == 1:
            leave(f, when)
        else:
            heapq.heappop(stops)
            leave(f, math.inf)
        relevel_top()
    return finish


def _water_level(caps: list[float], capacity: float) -> float:
    """The level at which flows of these caps (ascending) fill `capacity` (math.inf if they all fit):
    fair_share._water_levels for one link, in plain Python (a cell's handful of flows, where numpy's calls
    would cost more than the arithmetic)."""
    below, n = 0.0, len(caps)
    for k, c in enumerate(caps):
        if below + (n - k) * c >= capacity:
            return (capacity - below) / (n - k)
        below += c
    return math.inf

"""Groups of a handful of flows sharing one link and nothing else (a cell's few transfers), run by scanning
them: at each event every running flow's rate is min(its cap, the link's water level), and the next event is
the first arrival, completion or cancel among them. Heaps (one_bottleneck.py, which runs the other groups)
would cost more than they save here. Compiled by numba at first use (emulator/compiled.py)."""
from __future__ import annotations

import math

import numpy as np

from emulator.compiled import compile_in

SMALL = 16  # a group of at most this many flows, and no cell below its link, is scanned
WAITING, RUNNING, OVER = 0, 1, 2
_compiled: list = []  # _scan_groups


def scan_small_groups(arrivals, group_lo, group_hi, group_top, given, cell, finish) -> np.ndarray:
    """Each group's flows arrivals[group_lo[g]:group_hi[g]] by start, on a link of group_top[g]; `given`: rows
    start, size, cap and cancel; cell[f] >= 0: f crosses a cell below. Runs the groups of at most SMALL flows
    and no cell, their completion times into `finish` (np.inf: cancelled first); returns which it ran."""
    if not _compiled:
        compile_in(globals(), ("_scan_groups", "_one_scan", "_scan_level"))
        _compiled.append(globals()["_scan_groups"])
    n = len(finish)
    scanned = np.zeros(len(group_lo), dtype=np.bool_)
    _compiled[0](arrivals, group_lo, group_hi, group_top, given, cell, finish, scanned, np.zeros(n), np.zeros(n),
                 np.zeros(n, dtype=np.int8))
    return scanned


def _scan_groups(arrivals, group_lo, group_hi, group_top, given, cell, finish, scanned, rate, left, mode):
    """scan_small_groups' loop: `rate`, `left` and `mode` each flow's (work rows, modes starting WAITING)."""
    for g in range(len(group_lo)):
        flows = arrivals[group_lo[g]:group_hi[g]]
        if len(flows) > SMALL:
            continue
        for f in flows:
            if cell[f] >= 0:
                break
        else:
            scanned[g] = True
            _one_scan(flows, group_top[g], given[0], given[1], given[2], given[3], finish, rate, left, mode)


def _one_scan(arrivals, top, start, size, cap, cancel, finish, rate, left, mode):
    """One group, event by event: every running flow at min(its cap, the level), to the next arrival,
    completion or cancel among them."""
    n, nxt, running = len(arrivals), 0, 0
    now = start[arrivals[0]] if n else 0.0
    while nxt < n or running:
        level = _scan_level(arrivals, nxt, top, cap, mode)
        when = start[arrivals[nxt]] if nxt < n else math.inf
        for k in range(nxt):
            f = arrivals[k]
            if mode[f] == RUNNING:
                rate[f] = min(cap[f], level)
                when = min(when, now + left[f] / rate[f], cancel[f])
        for k in range(nxt):
            f = arrivals[k]
            if mode[f] == RUNNING:
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
                left[f], mode[f] = size[f], RUNNING
                running += 1


def _scan_level(arrivals, arrived, top, cap, mode) -> float:
    """The water level of the running flows among the first `arrived` on a link of capacity `top` (math.inf
    if their caps all fit): their caps taken in ascending order by repeated scans (a handful of flows)."""
    count = 0
    for k in range(arrived):
        if mode[arrivals[k]] == RUNNING:
            count += 1
    below, seen, last = 0.0, 0, -math.inf
    while seen < count:
        low, ties = math.inf, 0
        for k in range(arrived):
            f = arrivals[k]
            if mode[f] == RUNNING and last < cap[f] < low:
                low, ties = cap[f], 1
            elif mode[f] == RUNNING and cap[f] == low:
                ties += 1
        for _ in range(ties):
            if below + (count - seen) * low >= top:
                return (top - below) / (count - seen)
            below += low
            seen += 1
        last = low
    return math.inf

"""Max-min fair rates (emulator/system/fair_share.py), against the textbook cases, against a plain progressive
filling that raises every rising flow in small exact steps, and against the property that defines them:
every flow is at its own cap or crosses a full link on which no flow goes faster."""
from __future__ import annotations

import numpy as np
import pytest

from emulator.system.fair_share import max_min_rates
from emulator.system.fluid import finish_times


def progressive_filling(links, capacity, cap):
    """The definition, step by step: raise every rising flow together until a link fills or a flow reaches
    its cap; freeze those; repeat (one freeze at a time: slow, plainly right)."""
    links, capacity, cap = np.asarray(links), np.asarray(capacity, float), np.asarray(cap, float)
    rate, left, rising = np.zeros(len(cap)), capacity.copy(), np.ones(len(cap), bool)
    while rising.any():
        sharing = np.array([sum(1 for f in np.flatnonzero(rising) if link in links[f]) for link in range(len(left))])
        step = min([left[k] / sharing[k] for k in range(len(left)) if sharing[k]] + list(cap[rising] - rate[rising]))
        rate[rising] += step
        left -= step * sharing
        full = {k for k in range(len(left)) if sharing[k] and left[k] <= 1e-9 * capacity[k]}
        for f in np.flatnonzero(rising):
            if rate[f] >= cap[f] * (1 - 1e-12) or full & set(links[f][links[f] >= 0].tolist()):
                rising[f] = False
    return rate


def tree(rng, flows, cells, regions, uncapped=0.1):
    """Devices behind cells behind regions behind one server link: (links, capacity, cap)."""
    cell = rng.integers(0, cells, flows)
    region_of_cell = rng.integers(0, regions, cells)
    links = np.stack([cell, cells + region_of_cell[cell], np.full(flows, cells + regions)], axis=1)
    links[rng.random(flows) < 0.2, 1] = -1  # some cells hang off the server directly
    capacity = rng.lognormal(3, 1, cells + regions + 1)
    cap = rng.lognormal(1.5, 1, flows)
    cap[rng.random(flows) < uncapped] = np.inf
    cap[rng.random(flows) < 0.2] = cap[0]  # ties
    return links, capacity, cap


def test_equal_flows_on_one_link_share_it_equally_and_finish_together():
    rates = max_min_rates(np.zeros((7, 1), int), [14.0], np.full(7, np.inf))
    assert np.allclose(rates, 2.0)
    size = 3.0  # each flow's bytes: all finish at N x size / capacity
    assert np.allclose(size / rates, 7 * size / 14.0)


def test_a_capped_flow_leaves_its_share_to_the_others():
    rates = max_min_rates(np.zeros((3, 1), int), [12.0], [1.0, np.inf, np.inf])
    assert np.allclose(rates, [1.0, 5.5, 5.5])


def test_the_textbook_line_network():
    """One long flow across two links, one short flow on each: the long one gets a third of the narrow link."""
    links = [[0, 1], [0, -1], [1, -1]]
    assert np.allclose(max_min_rates(links, [1.0, 1.0], [np.inf] * 3), [0.5, 0.5, 0.5])
    assert np.allclose(max_min_rates(links, [1.0, 3.0], [np.inf] * 3), [0.5, 0.5, 2.5])


@pytest.mark.parametrize("seed", range(6))
def test_random_trees_match_progressive_filling_and_every_flow_has_a_bottleneck(seed):
    rng = np.random.default_rng(seed)
    links, capacity, cap = tree(rng, flows=int(rng.integers(5, 60)), cells=int(rng.integers(1, 8)),
                                regions=int(rng.integers(1, 3)))
    rates = max_min_rates(links, capacity, cap)
    assert np.allclose(rates, progressive_filling(links, capacity, cap), rtol=1e-9)
    use = np.bincount(links[links >= 0], weights=np.repeat(rates, (links >= 0).sum(axis=1)),
                      minlength=len(capacity))
    assert np.all(use <= capacity * (1 + 1e-9))
    full = use >= capacity * (1 - 1e-9)
    for f in range(len(rates)):
        crossed = links[f][links[f] >= 0]
        at_cap = rates[f] >= cap[f] * (1 - 1e-9)
        fastest_on_a_full_link = any(full[k] and rates[f] >= rates[(links == k).any(axis=1)].max() * (1 - 1e-9)
                                     for k in crossed)
        assert at_cap or fastest_on_a_full_link, f


def test_bad_topologies_are_refused_naming_what_is_wrong():
    with pytest.raises(ValueError, match="crosses link 3, but there are 2 links"):
        max_min_rates([[0], [3]], [1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match="positive"):
        max_min_rates([[0]], [0.0], [1.0])
    with pytest.raises(ValueError, match="unbounded"):
        max_min_rates([[0], [-1]], [1.0], [np.inf, np.inf])
    assert np.allclose(max_min_rates([[-1]], [1.0], [4.0]), [4.0])  # no shared link: its own cap
    for tree in (False, True):  # the event loop's own checks (compiled, before any time is computed)
        with pytest.raises(ValueError, match="crosses link 3, but there are 2 links"):
            finish_times([0, 0], [1, 1], [[0], [3]], [1.0, 1.0], [1.0, 1.0], tree=tree)
        with pytest.raises(ValueError, match="positive"):
            finish_times([0], [1], [[0]], [np.nan], [1.0], tree=tree)
        with pytest.raises(ValueError, match="positive"):
            finish_times([0, 0], [1, 1], [[0], [0]], [1.0], [1.0, 0.0], tree=tree)


def test_flows_finish_when_simgrid_s_fluid_model_says():
    """benchmarks/reference/simgrid_flows.json: SimGrid 3.32's completion times (CM02, no TCP corrections, no
    cross-traffic: the settings are in the file) for flows starting at different times through device caps,
    cells, a region and the server's link. The emulator's event-by-event fluid model agrees to 1e-9."""
    import json
    from pathlib import Path


    reference = json.loads((Path(__file__).resolve().parents[1] / "benchmarks" / "reference" /
                            "simgrid_flows.json").read_text())
    assert "--cfg=network/model:CM02" in reference["settings"]
    for name, topology in reference["topologies"].items():
        flows = topology["flows"]
        hops = max(len(route) for *_, route in flows)
        links = np.array([route + [-1] * (hops - len(route)) for *_, route in flows])
        times = finish_times([f[0] for f in flows], [f[1] for f in flows], links, topology["links"],
                             [f[2] for f in flows])
        assert np.allclose(times, reference["finish_s"][name], rtol=1e-9), name


def test_a_cancelled_flow_leaves_its_share_to_the_others_from_that_instant():
    """Two flows of 10 on a link of 1: each at 0.5 until the second is cancelled at t = 4 (2 moved each),
    then the first alone at 1 for its last 8: done at 12. A flow that never starts never finishes."""

    times = finish_times([0, 0, np.inf], [10, 10, 10], [[0], [0], [0]], [1.0], [np.inf] * 3, cancel=[np.inf, 4, 9])
    assert times[0] == pytest.approx(12.0) and np.isinf(times[1]) and np.isinf(times[2])
    late = finish_times([0, 0], [10, 10], [[0], [0]], [1.0], [np.inf] * 2, cancel=[np.inf, 25])
    assert np.allclose(late, [20, 20])  # a cancel after the flow completed changes nothing


def strict_tree(rng, flows, cells, regions):
    """`tree`, but every flow of a cell climbs the same way (a fifth of the cells straight to the server)."""
    cell = rng.integers(0, cells, flows)
    region_of_cell = np.where(rng.random(cells) < 0.2, -1, cells + rng.integers(0, regions, cells))
    links = np.stack([cell, region_of_cell[cell], np.full(flows, cells + regions)], axis=1)
    return links, rng.lognormal(3, 1, cells + regions + 1), rng.lognormal(1.5, 1, flows)


@pytest.mark.parametrize("seed", range(6))
def test_on_a_tree_the_tier_by_tier_levels_are_the_max_min_rates(seed):
    from emulator.system.fair_share import tree_rates

    links, capacity, cap = strict_tree(np.random.default_rng(seed), 300, 30, 4)
    cap[::7] = np.inf
    assert np.allclose(tree_rates(links, capacity, cap), max_min_rates(links, capacity, cap), rtol=1e-9)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("only_cells_fill", [False, True])
def test_links_that_cannot_fill_and_unrelated_groups_change_no_finish_time(seed, only_cells_fill):
    """finish_times leaves out links whose flows' caps fit in them and advances groups sharing no link side by
    side on their own clocks; run as one group, event by event over every flow and link, the times are the
    same; and on a tree the tier-by-tier rates give them too."""
    from emulator.system.fluid import _advance, finish_times

    rng = np.random.default_rng(seed)
    links, capacity, cap = strict_tree(rng, 60, 12, 3)
    capacity[-1] = 1e9  # a roomy server link: cells and regions form separate groups
    capacity[rng.random(len(capacity)) < 0.4] *= 50  # and some other links roomy enough never to fill
    if only_cells_fill:  # regions roomy too: a flow's rate is its cap lowered to its cell's level alone
        capacity[12:] = 1e9
    start = rng.uniform(0, 20, 60)
    size = rng.uniform(5, 50, 60)
    cancel = np.where(rng.random(60) < 0.2, start + rng.uniform(0, 10, 60), np.inf)
    whole = _advance(start, size, links, capacity, cap, cancel, np.zeros(60, np.int64), tree=False)
    whole[whole > cancel] = np.inf
    assert np.allclose(finish_times(start, size, links, capacity, cap, cancel), whole, rtol=1e-9)
    assert np.allclose(finish_times(start, size, links, capacity, cap, cancel, tree=True), whole, rtol=1e-9)
    assert np.isinf(whole).sum() > 0 and np.isfinite(whole).sum() > 40


def test_no_flows_finish_at_no_times():

    assert finish_times([], [], np.zeros((0, 2), np.int64), [1.0], []).shape == (0,)


@pytest.mark.parametrize("tree", [False, True])
def test_a_link_idle_between_its_flows_waits_for_the_next_one(tree):
    """Two flows that could fill a link between them, one after the other: each alone at its cap."""

    times = finish_times([0, 5], [1.0, 1.0], [[0, -1], [0, -1]], [1.5, 10.0], [1.0, 1.0], tree=tree)
    assert np.allclose(times, [1.0, 6.0])


@pytest.mark.parametrize("seed", range(8))
def test_flows_behind_one_shared_link_finish_as_the_whole_event_loop_says(seed):
    """one_bottleneck.py (held flows on one virtual clock, an event touching only its cell and the flows whose
    demand the level crossed) against the lockstep loop recomputing every rate at every event."""
    from emulator.system.fluid import _advance
    from emulator.system.one_bottleneck import finish_in_groups

    rng = np.random.default_rng(seed)
    n, cells = int(rng.integers(20, 90)), int(rng.integers(2, 12))
    first = rng.integers(0, cells, n)
    first_capacity = rng.lognormal(2, 1, cells)
    first_capacity[rng.random(cells) < 0.3] = np.inf  # cells that cannot fill
    top, cap = float(rng.lognormal(3, 1)), rng.lognormal(1.5, 1, n)
    start, size = rng.uniform(0, 20, n), rng.uniform(5, 50, n)
    cancel = np.where(rng.random(n) < 0.2, start + rng.uniform(0, 10, n), np.inf)
    got = finish_in_groups(start, size, cap, cancel, np.zeros(n, np.int64), [top], first, first_capacity)
    capacity = np.r_[np.where(np.isinf(first_capacity), 1e18, first_capacity), top]
    whole = _advance(start, size, np.stack([first, np.full(n, cells)], axis=1), capacity, cap, cancel,
                     np.zeros(n, np.int64), tree=True)
    whole[whole > cancel] = np.inf
    assert np.array_equal(np.isinf(got), np.isinf(whole)) and np.isinf(whole).any()
    assert np.allclose(np.where(np.isinf(whole), 0, got), np.where(np.isinf(whole), 0, whole), rtol=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_flows_tied_in_start_cap_and_cancel_behind_one_link_finish_as_the_whole_event_loop_says(seed):
    """A round's transfers tie often (downloads starting together, a fleet of equal caps, cancels at one
    deadline): the event loop's orders (numpy's stable sort where values tie, ties by index) give
    the lockstep loop's completion times."""
    from emulator.system.fluid import _advance
    from emulator.system.one_bottleneck import finish_in_groups

    rng = np.random.default_rng(200 + seed)
    n, cells = 300, 40
    first = rng.integers(0, cells, n)
    first_capacity = np.full(cells, 12.0)
    top, cap = 400.0, rng.choice([2.0, 4.0, 8.0], n)
    start, size = rng.choice([0.0, 1.0, 2.5], n), rng.choice([20.0, 30.0], n)
    cancel = np.where(rng.random(n) < 0.3, 9.0, np.inf)
    got = finish_in_groups(start, size, cap, cancel, np.zeros(n, np.int64), [top], first, first_capacity)
    whole = _advance(start, size, np.stack([first, np.full(n, cells)], axis=1), np.r_[first_capacity, top], cap,
                     cancel, np.zeros(n, np.int64), tree=True)
    whole[whole > cancel] = np.inf
    assert np.array_equal(np.isinf(got), np.isinf(whole)) and np.isinf(whole).any() and np.isfinite(whole).any()
    assert np.allclose(np.where(np.isinf(whole), 0, got), np.where(np.isinf(whole), 0, whole), rtol=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_crowded_cells_and_late_cancels_behind_one_link_finish_as_the_whole_event_loop_says(seed):
    """Cells holding more flows than flow_order puts by cap by insertion (numpy's sort then, caps tied), and
    cancels far after the transfers (left out of the event loop's cancels) or among them: the lockstep loop's
    completion times."""
    from emulator.system.flow_order import SMALL_CELL
    from emulator.system.fluid import _advance
    from emulator.system.one_bottleneck import finish_in_groups

    rng = np.random.default_rng(400 + seed)
    n, cells = 6 * SMALL_CELL, 3
    first = rng.integers(0, cells, n)
    first_capacity = np.full(cells, 60.0)
    top, cap = 150.0, rng.choice([1.0, 2.0, 3.5], n)
    start, size = rng.uniform(0, 5, n), rng.uniform(5, 20, n)
    cancel = start + np.where(rng.random(n) < 0.2, rng.uniform(0, 30, n), rng.uniform(1e4, 1e5, n))
    got = finish_in_groups(start, size, cap, cancel, np.zeros(n, np.int64), [top], first, first_capacity)
    whole = _advance(start, size, np.stack([first, np.full(n, cells)], axis=1), np.r_[first_capacity, top], cap,
                     cancel, np.zeros(n, np.int64), tree=True)
    whole[whole > cancel] = np.inf
    assert np.bincount(first).min() > SMALL_CELL and np.isinf(whole).any() and np.isfinite(whole).sum() > n // 2
    assert np.array_equal(np.isinf(got), np.isinf(whole))
    assert np.allclose(np.where(np.isinf(whole), 0, got), np.where(np.isinf(whole), 0, whole), rtol=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_the_cancels_the_event_loop_leaves_out_never_stop_a_transfer(seed):
    """flow_order._cancellable keeps a flow's cancel only where it may come before the flow completes (a flow
    gets at least its share of each link it crosses): every flow the lockstep loop sees cancelled mid-transfer
    is kept, and those cancelled long after any transfer could last are left out."""
    from emulator.system.flow_order import _cancellable
    from emulator.system.fluid import _advance

    rng = np.random.default_rng(500 + seed)
    n, cells = 120, 15
    first = rng.integers(0, cells, n)
    first_capacity, top = rng.lognormal(2, 0.5, cells), float(rng.uniform(50, 200))
    cap, start, size = rng.lognormal(1.5, 0.6, n), rng.uniform(0, 20, n), rng.uniform(5, 50, n)
    cancel = start + rng.choice([rng.uniform(0, 15), 1e6], n)
    kept = _cancellable(start, size, cap, cancel, np.zeros(n, np.int64), first, first_capacity, np.array([top]))
    uncancelled = _advance(start, size, np.stack([first, np.full(n, cells)], axis=1), np.r_[first_capacity, top],
                           cap, np.full(n, np.inf), np.zeros(n, np.int64), tree=True)
    stopped = np.flatnonzero(cancel < uncancelled)
    assert len(stopped) and set(stopped.tolist()) <= set(kept.tolist())
    assert not (cancel[kept] >= 1e6).any() and np.array_equal(kept, np.sort(kept))


@pytest.mark.parametrize("seed", range(4))
def test_flows_starting_together_settle_in_one_step_as_the_whole_event_loop_says(seed):
    """A round's downloads all start at one instant: they join their empty group in one step (each one's demand
    at its cell's level, the link's level water-filled over them, each into the set it settles in), with the
    completion times of the lockstep loop; those cancelled at that instant never start."""
    from emulator.system.fluid import _advance
    from emulator.system.one_bottleneck import finish_in_groups

    rng = np.random.default_rng(300 + seed)
    n, cells = 500, 120
    first = rng.integers(0, cells, n)
    first_capacity = rng.lognormal(2.5, 0.5, cells)
    top, cap = float(rng.uniform(100, 400)), rng.lognormal(1.5, 0.6, n)
    start, size = np.full(n, 3.0), rng.uniform(5, 50, n)
    cancel = np.where(rng.random(n) < 0.2, 3.0 + rng.choice([0.0, 2.0, 6.0], n), np.inf)
    got = finish_in_groups(start, size, cap, cancel, np.zeros(n, np.int64), [top], first, first_capacity)
    whole = _advance(start, size, np.stack([first, np.full(n, cells)], axis=1), np.r_[first_capacity, top], cap,
                     cancel, np.zeros(n, np.int64), tree=True)
    whole[whole > cancel] = np.inf
    assert np.array_equal(np.isinf(got), np.isinf(whole)) and np.isinf(got[cancel == 3.0]).all()
    assert cap.sum() > top and np.isfinite(whole).sum() > n // 2  # the link is contended, most complete
    assert np.allclose(np.where(np.isinf(whole), 0, got), np.where(np.isinf(whole), 0, whole), rtol=1e-9)


@pytest.mark.parametrize("seed", range(12))
def test_a_few_flows_on_one_link_scanned_finish_as_the_whole_event_loop_says(seed):
    """Groups of a few flows with nothing below their link (a cell's transfers) are scanned, not heaped: the
    same completion times as the lockstep loop, through ties of caps and starts, cancels and idle gaps."""
    from emulator.system.fluid import _advance
    from emulator.system.few_flows import SMALL
    from emulator.system.one_bottleneck import finish_in_groups

    rng = np.random.default_rng(100 + seed)
    groups = int(rng.integers(1, 6))
    sizes = rng.integers(1, SMALL + 1, groups)
    n, group = int(sizes.sum()), np.repeat(np.arange(groups), sizes)
    top = rng.lognormal(2, 0.5, groups)
    cap = np.where(rng.random(n) < 0.3, 4.0, rng.lognormal(1.5, 1, n))  # some caps tie
    start = np.where(rng.random(n) < 0.2, 3.0, rng.uniform(0, 20, n))  # some starts tie
    size = rng.uniform(5, 50, n)
    cancel = np.where(rng.random(n) < 0.2, start + rng.uniform(-1, 10, n), np.inf)  # some before they start
    got = finish_in_groups(start, size, cap, cancel, group, top, np.full(n, -1), np.zeros(0))
    got[got > cancel] = np.inf
    whole = _advance(start, size, group[:, None], top, cap, cancel, group, tree=True)
    whole[whole > cancel] = np.inf
    assert np.array_equal(np.isinf(got), np.isinf(whole))
    assert np.allclose(np.where(np.isinf(whole), 0, got), np.where(np.isinf(whole), 0, whole), rtol=1e-9)


def test_without_numba_the_same_event_loop_runs_as_plain_python_and_gives_the_same_times(monkeypatch):
    """one_bottleneck.py's event loop is plain Python that numba compiles at its first use: where numba is not
    installed the interpreter runs it (slower), with the same completion times."""
    import importlib
    import sys

    from emulator.system import one_bottleneck

    rng = np.random.default_rng(11)
    n = 60
    args = (rng.uniform(0, 20, n), rng.uniform(5, 50, n), rng.lognormal(1.5, 1, n),
            np.where(rng.random(n) < 0.2, 30.0, np.inf), rng.integers(0, 3, n), rng.lognormal(3, 1, 3),
            rng.integers(-1, 6, n), np.r_[rng.lognormal(2, 1, 5), np.inf])
    compiled = one_bottleneck.finish_in_groups(*args)
    assert hasattr(one_bottleneck._event_loop(), "py_func")  # a numba dispatcher
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba now fails
    try:
        plain = importlib.reload(one_bottleneck)
        assert np.array_equal(plain.finish_in_groups(*args), compiled)
        assert plain._event_loop() is plain._run_groups and not hasattr(plain._run_groups, "py_func")
    finally:
        monkeypatch.undo()
        importlib.reload(one_bottleneck)


def test_the_event_loop_s_orders_are_numpy_s_stable_sort_however_the_values_tie():
    """flow_order._by_value (a quicksort, then the few tied runs put in index order, or the identity where all
    tie) gives the stable sort's order: continuous values, a few ties, many, all, infinities."""
    from emulator.system.flow_order import _by_value

    rng = np.random.default_rng(7)
    for trial in range(400):
        n = int(rng.integers(1, 80))
        values = [rng.random(n), rng.choice([0.0, 1.0, np.inf], n), np.full(n, 3.0), rng.random(n)][trial % 4]
        if trial % 4 == 3:  # a few values repeated
            picked = rng.integers(0, n, (int(rng.integers(0, 5)), 2))
            values[picked[:, 0]] = values[picked[:, 1]]
        assert np.array_equal(_by_value(values), np.argsort(values, kind="stable"))

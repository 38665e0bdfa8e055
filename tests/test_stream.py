"""The continuous protocol of asynchronous aggregation: concurrency, order, refills, deadlines, resume (no Ray)."""
import pickle
import time
from collections import Counter

import numpy as np
import pytest

from emulator.algorithms.selection import Uniform
from emulator.parts import validate_scenario
from emulator.system import SimulatedSystem
from emulator.system.stream import AsyncStream

MODEL_BYTES = 1_000_000
SYSTEM_FIELDS = ("deadline_s", "selection_timeout_s", "checkin_poll_s")


def world(devices=200, seed=0, **fields):
    """A SimulatedSystem over a small scenario; system fields go to `system`, the rest to `population`."""
    population, system = {"devices": devices}, {"model": "simulated"}
    for key, value in fields.items():
        (system if key in SYSTEM_FIELDS else population)[key] = value
    return SimulatedSystem(validate_scenario({"name": "s", "rounds": 1, "seed": seed, "population": population,
                                              "system": system, "algorithm": {"clients_per_round": 1}}))


def stream(system, concurrency=20, samples=100, seed=0, replace=False, deadline_s=None):
    return AsyncStream(system, concurrency, Uniform(replace=replace), seed, MODEL_BYTES, MODEL_BYTES,
                       lambda devices: np.full(len(devices), samples), deadline_s=deadline_s)


def run(s, segments, reports):
    return [s.advance(reports, version) for version in range(segments)]


# A world with state (Markov availability and its stream), going offline, dropout and a deadline.
STATEFUL = {"devices": 100, "availability": [{"kind": "markov", "mean_on_s": 120, "mean_off_s": 120}],
            "dropout_per_hour": 30.0}


def stateful_stream(seed=4):
    return stream(world(seed=seed, **STATEFUL), concurrency=30, samples=1000, seed=seed, deadline_s=8.0)


# ------------------------------------------------------------------------------------------ protocol
def test_concurrency_is_held_when_everyone_is_online():
    s = stream(world(), concurrency=20)
    for segment in run(s, 30, 3):
        assert segment.concurrency_max == 20
        assert segment.concurrency_mean == pytest.approx(20.0)
        assert len(segment.reports) == 3 and not segment.failed
        assert len(s.in_flight()) == 19  # the slot the last report freed is refilled with the next version


def test_sampling_with_replacement_still_fills_every_slot_with_distinct_devices():
    s = stream(world(devices=30), concurrency=30, replace=True)
    for segment in run(s, 10, 2):
        assert segment.concurrency_max == 30
        devices = [t.device for t in s.in_flight()]
        assert len(set(devices)) == len(devices)


def test_tasks_end_in_time_order_within_their_segment():
    segments = run(stream(world(), concurrency=25), 40, 4)
    finished = [t for segment in segments for t in segment.finished]
    assert [(t.ends_s, t.task_id) for t in finished] == sorted((t.ends_s, t.task_id) for t in finished)
    for segment in segments:
        assert all(segment.start_s <= t.ends_s <= segment.end_s for t in segment.finished)
        assert segment.reports == [t for t in segment.finished if t.outcome == "report"]
        assert segment.reports[-1].ends_s == segment.end_s
    ids = [t.task_id for segment in segments for t in segment.dispatched]
    assert ids == list(range(len(ids)))


def test_versions_are_recorded_as_given_and_reports_can_be_stale():
    segments = run(stream(world(), concurrency=30), 20, 2)
    for version, segment in enumerate(segments):
        assert {t.version for t in segment.dispatched} <= {version}
        assert all(t.version <= version for t in segment.reports)
    staleness = [version - t.version for version, segment in enumerate(segments) for t in segment.reports]
    assert max(staleness) > 0


def test_freed_slots_are_refilled_at_the_instant_they_free():
    s = stream(world(), concurrency=20)
    carried = 0
    for segment in run(s, 25, 3):
        expected = Counter({segment.start_s: 20 - carried}) + Counter(t.ends_s for t in segment.finished[:-1])
        assert Counter(t.dispatched_s for t in segment.dispatched) == expected
        carried = len(s.in_flight())


def test_same_inputs_same_segments_and_another_seed_differs():
    assert run(stateful_stream(), 15, 3) == run(stateful_stream(), 15, 3)
    assert run(stateful_stream(seed=5), 15, 3) != run(stateful_stream(), 15, 3)


def test_a_stream_resumed_from_a_checkpoint_gives_the_same_segments():
    whole = stateful_stream()
    expected = run(whole, 12, 3)
    first = stateful_stream()
    run(first, 6, 3)
    saved = pickle.loads(pickle.dumps({"system": first.system.state(), "stream": first.state()}))
    resumed = stateful_stream()
    resumed.system.load_state(saved["system"])
    resumed.load_state(saved["stream"])
    assert [resumed.advance(3, version) for version in range(6, 12)] == expected[6:]
    for name, counts in whole.system.ledger.counts.items():
        assert np.array_equal(counts, resumed.system.ledger.counts[name]), name
    assert resumed.in_flight() == whole.in_flight()


# ------------------------------------------------------------------------------------------ losses
def test_tasks_past_the_deadline_are_abandoned_at_it():
    segments = run(stream(world(), concurrency=20, deadline_s=2.5), 20, 3)
    finished = [t for segment in segments for t in segment.finished]
    abandoned = [t for t in finished if t.outcome == "abandoned"]
    assert abandoned and all(t.ends_s == pytest.approx(t.dispatched_s + 2.5) for t in abandoned)
    assert all(t.bytes_up == 0 and t.compute_s > 0 for t in abandoned)
    assert all(t.ends_s - t.dispatched_s <= 2.5 + 1e-9 for t in finished)
    assert sum(s.wasted_compute_s for s in segments) == pytest.approx(sum(t.compute_s for t in abandoned))


def test_dropout_loses_tasks_midway_and_the_segment_still_collects_its_reports():
    segments = run(stream(world(dropout_per_hour=60.0), concurrency=20, samples=1000), 15, 3)
    dropped = [t for segment in segments for t in segment.finished if t.outcome == "dropped"]
    assert dropped and all(t.bytes_up == 0 for t in dropped)
    assert all(len(segment.reports) == 3 for segment in segments)
    assert all(segment.bytes_up == 3 * MODEL_BYTES for segment in segments)


def test_the_ledger_counts_every_dispatch_and_every_end():
    s = stateful_stream()
    segments = run(s, 15, 3)
    counts = {name: int(c.sum()) for name, c in s.system.ledger.counts.items()}
    outcomes = Counter(t.outcome for segment in segments for t in segment.finished)
    assert counts["selected"] == sum(len(segment.dispatched) for segment in segments)
    assert counts["selected"] == sum(outcomes.values()) + len(s.in_flight())
    assert (counts["reported"], counts["dropped"], counts["straggled"]) == (
        outcomes["report"], outcomes["dropped"], outcomes["abandoned"])
    assert outcomes["dropped"] and outcomes["abandoned"]


def test_slots_left_free_by_too_few_devices_online_are_filled_by_polls():
    system = world(devices=40, availability=[{"kind": "markov", "mean_on_s": 600, "mean_off_s": 600}],
                   checkin_poll_s=30.0)
    s = stream(system, concurrency=40, samples=50_000)  # tasks take minutes: polls come before most ends
    segments = run(s, 10, 2)
    assert all(segment.concurrency_max < 40 for segment in segments)
    ends = {t.ends_s for segment in segments for t in segment.finished}
    starts = {segment.start_s for segment in segments}
    polled = {t.dispatched_s for segment in segments for t in segment.dispatched} - ends - starts
    assert polled


def test_nobody_online_fails_cleanly_after_the_selection_timeout():
    system = world(availability=[{"kind": "never", "share": 1.0}], selection_timeout_s=600.0, checkin_poll_s=60.0)
    segment = stream(system).advance(1, 0)
    assert segment.failed and segment.reports == [] and segment.dispatched == []
    assert segment.end_s == system.now_s == 600.0
    assert system.ledger.counts["selected"].sum() == 0


def test_bad_input_names_the_field():
    system = world(devices=10)
    for concurrency in (0, 11):
        with pytest.raises(ValueError, match="algorithm.concurrency"):
            stream(system, concurrency=concurrency)
    with pytest.raises(ValueError, match="reports"):
        stream(system, concurrency=5).advance(0, 0)


def test_timing_at_a_hundred_thousand_devices():
    s = stream(world(devices=100_000), concurrency=1000)
    started = time.perf_counter()
    s.advance(1, 0)
    first = time.perf_counter() - started
    started = time.perf_counter()
    for version in range(1, 1001):
        s.advance(1, version)
    one_by_one = time.perf_counter() - started
    started = time.perf_counter()
    s.advance(1000, 1001)
    buffered = time.perf_counter() - started
    print(f"\n10^5 devices, concurrency 1000: first segment (1000 dispatches) {first:.3f} s, "
          f"1000 x advance(1) {one_by_one:.3f} s, advance(1000) {buffered:.3f} s")

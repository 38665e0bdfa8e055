"""The simulated world: availability statistics, dropout, stragglers, deadlines, over-selection, accounting."""
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import small_scenario
from emulator.algorithms.selection import Uniform
from emulator.scenario import ScenarioError
from emulator.parts import validate_scenario
from emulator.system import CohortRequest, SimulatedSystem
from emulator.system.availability import read_trace
from emulator.system.availability_mix import AvailabilityMix

MODEL_BYTES = 1_000_000


def world(devices=200, seed=0, **population_and_system):
    population = {"devices": devices, "compute_jitter": 0.0}
    system = {"model": "simulated"}
    for key, value in population_and_system.items():
        (system if key in ("over_selection", "deadline_s", "min_report_fraction", "selection_timeout_s",
                           "checkin_poll_s", "snapshot_deadline_s", "events") else population)[key] = value
    scenario = validate_scenario({"name": "w", "rounds": 1, "seed": seed, "population": population,
                                  "system": system, "algorithm": {"clients_per_round": 1}})
    return SimulatedSystem(scenario)


def request(round_index, target, samples=100, snapshot=False, replace=False):
    return CohortRequest(round_index=round_index, target=target, selection=Uniform(replace=replace),
                         rng=np.random.default_rng(round_index), bytes_down=MODEL_BYTES, bytes_up=MODEL_BYTES,
                         samples_processed=lambda devices: np.full(len(devices), samples), snapshot=snapshot)


def run_rounds(system, rounds, target, **kwargs):
    return [system.client_round(request(r, target, **kwargs)) for r in range(1, rounds + 1)]


# ------------------------------------------------------------------------------------- availability
def test_markov_duty_cycle_matches_mean_on_over_mean_on_plus_off():
    mix = AvailabilityMix(validate_scenario({"name": "m", "rounds": 1, "population": {
        "devices": 3000, "availability": [{"kind": "markov", "mean_on_s": 3600, "mean_off_s": 3 * 3600}]}}
    ).population.availability, 3000, seed=1)
    everyone = np.arange(3000)
    shares = [mix.online(everyone, t).mean() for t in np.arange(0, 7 * 86400, 1800.0)]
    assert np.mean(shares) == pytest.approx(0.25, abs=0.01)
    # Each device alone, over a long time, is also online a quarter of the time.
    later = np.arange(7 * 86400, 207 * 86400, 3600.0)  # queries move forward in time, as in a run
    per_device = np.mean([mix.online(everyone[:50], t) for t in later], axis=0)
    assert np.abs(per_device - 0.25).max() < 0.12


def test_markov_next_changes_agree_with_online():
    entries = validate_scenario({"name": "m", "rounds": 1, "population": {
        "devices": 500, "availability": [{"kind": "markov", "mean_on_s": 600, "mean_off_s": 900}]}}
    ).population.availability
    mix = AvailabilityMix(entries, 500, seed=2)
    devices = np.arange(500)
    t = 1000.0
    online = mix.online(devices, t)
    offline_at = mix.next_offline(devices[online], t)
    assert (offline_at > t).all()
    assert mix.online(devices[online], float(offline_at.min()) - 1e-6)[np.argmin(offline_at)]
    online_at = mix.next_online(devices[~online], t)
    assert (online_at > t).all() and mix.online(devices[~online], float(online_at.max()) + 1e-9)[np.argmax(online_at)]


def diurnal_world(**extra):
    window = {"kind": "diurnal", "start_hour": 22, "hours": 4,
              "timezones": {"offsets_h": [-5, 0, 8], "shares": [0.3, 0.4, 0.3]}}
    window.update(extra)
    return world(devices=600, availability=[window], events=True, over_selection=1.2)


def local_hour(system, devices, t):
    model = system.availability.models[0]
    return ((np.asarray(t) + model.zone_s[system.availability.local[devices]]) / 3600.0) % 24.0


def test_diurnal_devices_only_work_and_report_inside_their_window():
    system = diurnal_world()
    outcomes = run_rounds(system, 80, target=20, samples=200)
    reports = [(t, d) for o in outcomes for t, d, e in o.events if e == "reported"]
    selections = [(t, d) for o in outcomes for t, d, e in o.events if e == "selected"]
    assert len(reports) > 500
    for pairs in (reports, selections):
        times, devices = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
        hours = local_hour(system, devices, times)
        assert ((hours >= 22) | (hours <= 2)).all()


def test_diurnal_jitter_moves_windows_from_day_to_day_but_keeps_their_length():
    system = diurnal_world(jitter_h=1.0)
    mix, devices = system.availability, np.arange(600)
    starts = []
    for day in range(6):
        t = day * 86400.0 + 12 * 3600.0  # local noon-ish: windows still ahead
        opens = mix.next_online(devices, t)
        closes = system._offline_after(devices, opens)
        ahead = opens > t  # (a jittered window may already be open at t: only its remainder is left)
        assert ahead.mean() > 0.9
        np.testing.assert_allclose((closes - opens)[ahead], 4 * 3600.0, rtol=1e-9)
        starts.append(np.where(ahead, opens - day * 86400.0, np.nan))
    assert np.nanmean(np.nanstd(np.array(starts), axis=0)) > 1800  # about an hour of day-to-day jitter


@pytest.mark.parametrize("window", [
    {"start_hour": 21, "hours": 8, "start_spread_h": 3, "jitter_h": 0.5},
    {"start_hour": 1, "hours": 20, "start_spread_h": 6, "jitter_h": 2.0},  # windows that overlap day edges
])
def test_diurnal_whole_population_cache_matches_direct_answers(window):
    system = world(devices=2000, availability=[{"kind": "diurnal", **window,
                                                "timezones": {"offsets_h": [-8, 0, 5.5, 9]}}])
    model = system.availability.models[0]
    everyone = np.arange(2000)
    for t in np.arange(0, 3 * 86400, 1234.5):
        assert np.array_equal(model.online_all(t), model.online(everyone, t))


def test_never_devices_never_take_part_even_when_sampled_by_snapshots():
    system = world(devices=300, availability=[{"kind": "never", "share": 0.3}, {"kind": "always", "share": 0.7}],
                   snapshot_deadline_s=3600.0)
    run_rounds(system, 30, target=20)
    run_rounds(system, 10, target=20, snapshot=True)
    never = system.availability.kind_of(np.arange(300)) == "never"
    counts = system.ledger.counts
    assert never.sum() == 90
    assert counts["reported"][never].sum() == 0
    assert counts["selected"][never].sum() > 0  # snapshots sample them; they never show up
    assert counts["reported"][~never].sum() > 0


def test_trace_availability_follows_the_file_and_repeats(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("device_id,start_s,end_s\na,100,200\na,150,300\nb,0,50\nb,500,600\n")
    device, starts, ends = read_trace(trace)
    assert list(starts) == [100, 0, 500] and list(ends) == [300, 50, 600]  # a's overlap merged
    entries = validate_scenario({"name": "t", "rounds": 1, "algorithm": {"clients_per_round": 1},
                                 "population": {"devices": 4, "availability": [
                                     {"kind": "trace", "file": str(trace), "repeat_s": 1000}]}}).population.availability
    mix = AvailabilityMix(entries, 4, seed=0)
    # devices 0, 2 play trace device a; 1, 3 play b
    assert list(mix.online(np.arange(4), 120.0)) == [True, False, True, False]
    assert list(mix.online(np.arange(4), 1120.0)) == [True, False, True, False]  # the next cycle
    assert mix.next_offline(np.array([0]), 120.0)[0] == 300.0
    assert mix.next_online(np.array([1]), 60.0)[0] == 500.0
    assert mix.next_online(np.array([1]), 700.0)[0] == 1000.0  # wraps to b's first interval
    bad = tmp_path / "bad.csv"
    bad.write_text("device_id,start_s,end_s\na,5,1\n")
    with pytest.raises(ScenarioError, match="line 2"):
        read_trace(bad)


# ---------------------------------------------------------------------------------- round protocol
def test_dropout_fraction_matches_the_hazard():
    # one compute tier and no jitter: every device works exactly 1000 samples x 3.6 s = 1 h
    system = world(devices=2000, compute={"tiers": [{"share": 1.0, "s_per_sample": 3.6}]},
                   network={"tiers": [{"share": 1.0, "down_mbps": 1e6, "up_mbps": 1e6, "latency_s": 0.0}]},
                   dropout_per_hour=0.5, over_selection=1.0, min_report_fraction=0.01)
    outcomes = run_rounds(system, 20, target=100, samples=1000)
    dropped = sum(len(o.dropped) for o in outcomes) / sum(len(o.selected) for o in outcomes)
    assert dropped == pytest.approx(1 - np.exp(-0.5), abs=0.04)  # 0.39


def test_devices_that_go_offline_mid_work_are_lost():
    system = world(devices=1000, availability=[{"kind": "markov", "mean_on_s": 600, "mean_off_s": 600}],
                   compute={"tiers": [{"share": 1.0, "s_per_sample": 0.6}]}, over_selection=1.0,
                   min_report_fraction=0.01)
    outcomes = run_rounds(system, 10, target=50, samples=1000)  # 600 s of work vs 600 s mean online time
    rate = sum(len(o.dropped) for o in outcomes) / sum(len(o.selected) for o in outcomes)
    assert rate == pytest.approx(1 - np.exp(-1), abs=0.08)  # exponential residual on-time beats 600 s


def test_slow_devices_under_a_tight_deadline_never_report():
    system = world(devices=400, compute={"tiers": [{"share": 0.5, "s_per_sample": 0.01, "name": "fast"},
                                                   {"share": 0.5, "s_per_sample": 1.0, "name": "slow"}]},
                   deadline_s=300.0, over_selection=1.5, min_report_fraction=0.5)
    outcomes = run_rounds(system, 30, target=20, samples=1000)  # fast: ~10 s of compute, slow: 1000 s
    slow = system.profiles.compute_tier == 1
    counts = system.ledger.counts
    assert counts["reported"][slow].sum() == 0
    # a slow device is a straggler when its round closed at the deadline, cancelled when the fast ones
    # reached the target first
    assert counts["selected"][slow].sum() > 100
    assert counts["straggled"][slow].sum() + counts["cancelled"][slow].sum() == counts["selected"][slow].sum()
    assert counts["reported"][~slow].sum() > 0
    # participation is incomplete: rounds close at the deadline or the target, short of the slow half
    assert all(o.duration_s <= 300.0 + 1e-9 for o in outcomes)
    assert sum(len(o.stragglers) for o in outcomes) > 0
    at_deadline = [o for o in outcomes if len(o.stragglers)]
    assert all(o.duration_s == pytest.approx(300.0) and len(o.cancelled) == 0 for o in at_deadline)


def test_over_selection_keeps_exactly_the_target():
    system = world(devices=500, over_selection=1.5)
    for outcome in run_rounds(system, 10, target=10):
        assert len(outcome.selected) == 15 and len(outcome.reported) == 10 and len(outcome.cancelled) == 5
        assert len(outcome.stragglers) == 0 and not outcome.failed


def test_too_few_reports_fail_the_round():
    system = world(devices=100, availability=[{"kind": "never", "share": 0.95}, {"kind": "always", "share": 0.05}],
                   selection_timeout_s=600, checkin_poll_s=60)
    outcome = system.client_round(request(1, target=10))
    assert outcome.failed and len(outcome.reported) == 0
    assert outcome.duration_s == pytest.approx(600.0)  # it waited for check-ins, then gave up


# ------------------------------------------------------------------------ stragglers vs cancelled
def discarded(system, outcomes):
    """(outcomes, ledger, events) counts of stragglers and of cancelled devices: the three must agree."""
    events = Counter(e for o in outcomes for _, _, e in o.events)
    counts = system.ledger.counts
    return ((sum(len(o.stragglers) for o in outcomes), int(counts["straggled"].sum()), events["straggler"]),
            (sum(len(o.cancelled) for o in outcomes), int(counts["cancelled"].sum()), events["cancelled"]))


def assert_each_selected_device_has_one_fate(outcome):
    fates = [outcome.reported, outcome.dropped, outcome.stragglers, outcome.cancelled]
    together = np.concatenate([np.unique(f) for f in fates])
    assert len(together) == len(np.unique(together))  # no device in two of them
    assert set(together.tolist()) == set(np.unique(outcome.selected).tolist())


def test_over_selected_devices_still_working_when_the_target_arrives_are_cancelled_not_stragglers():
    system = world(devices=500, over_selection=1.5, events=True)  # no deadline: every round closes on the target
    outcomes = run_rounds(system, 10, target=10)
    stragglers, cancelled = discarded(system, outcomes)
    assert stragglers == (0, 0, 0)
    assert cancelled == (50, 50, 50)  # 15 selected, 10 report, 5 a round are no longer needed
    for outcome in outcomes:
        assert_each_selected_device_has_one_fate(outcome)
        assert {t for t, _, e in outcome.events if e == "cancelled"} == {outcome.end_s}


def test_devices_missing_a_tight_deadline_are_stragglers_not_cancelled():
    system = world(devices=400, compute={"tiers": [{"share": 0.5, "s_per_sample": 0.01, "name": "fast"},
                                                   {"share": 0.5, "s_per_sample": 1.0, "name": "slow"}]},
                   deadline_s=300.0, over_selection=1.0, min_report_fraction=0.1, events=True)
    outcomes = run_rounds(system, 10, target=20, samples=1000)  # fast: ~10 s of compute, slow: 1000 s
    stragglers, cancelled = discarded(system, outcomes)
    assert stragglers[0] > 0 and stragglers == (stragglers[0],) * 3
    assert cancelled == (0, 0, 0)
    slow = system.profiles.compute_tier == 1
    assert system.ledger.counts["straggled"][slow].sum() == system.ledger.counts["selected"][slow].sum()
    for outcome in outcomes:
        assert outcome.duration_s == pytest.approx(300.0) and not outcome.failed
        assert_each_selected_device_has_one_fate(outcome)


def three_speeds(**system):
    """Three devices reporting about 8, 10 and 16 s after selection (see the hand computation below)."""
    return world(devices=3, compute={"tiers": [{"share": 1 / 3, "s_per_sample": 0.01},
                                               {"share": 1 / 3, "s_per_sample": 0.02},
                                               {"share": 1 / 3, "s_per_sample": 0.05}]},
                 network={"tiers": [{"share": 1.0, "down_mbps": 8.0, "up_mbps": 2.0, "latency_s": 0.5}]},
                 events=True, **system)


@pytest.mark.parametrize("target, over, deadline, fraction, reports, stragglers, cancelled, failed", [
    (3, 1.0, None, 0.8, 3, 0, 0, False),  # every device finished: nothing discarded
    (2, 1.5, None, 0.8, 2, 0, 1, False),  # closed on the target before the slowest finished
    (2, 1.5, 12.0, 0.8, 2, 0, 1, False),  # ... which would have missed the deadline anyway: still cancelled
    (2, 1.5, "second", 0.8, 2, 0, 1, False),  # the target arrives at the deadline's very instant: cancelled
    (3, 1.0, 12.0, 0.5, 2, 1, 0, False),  # closed at the deadline short of the target: a straggler
    (3, 1.0, 9.0, 0.8, 1, 2, 0, True),  # a failed round: whoever is still working is a straggler
])
def test_why_the_round_closed_decides_straggler_or_cancelled(target, over, deadline, fraction, reports, stragglers,
                                                             cancelled, failed):
    probe = three_speeds(over_selection=1.0).client_round(request(1, target=3, samples=200))
    arrivals = sorted(t for t, _, e in probe.events if e == "reported")
    assert arrivals == pytest.approx([8.0, 10.0, 16.0])
    if deadline == "second":
        deadline = arrivals[1]  # exactly, bit for bit: the second report and the deadline are simultaneous
    system = three_speeds(over_selection=over, deadline_s=deadline, min_report_fraction=fraction)
    outcome = system.client_round(request(1, target=target, samples=200))
    assert sorted(t for t, _, e in outcome.events if e == "reported") == arrivals[:reports]
    closes = arrivals[reports - 1] if deadline is None or reports == target else deadline
    assert outcome.end_s == closes and outcome.failed == failed
    assert (len(outcome.stragglers), len(outcome.cancelled)) == (stragglers, cancelled)
    assert discarded(system, [outcome]) == ((stragglers,) * 3, (cancelled,) * 3)
    assert len(outcome.reported) == (0 if failed else reports)


def test_a_snapshot_that_waits_for_all_takes_the_phones_that_wake_late_which_closing_at_the_first_cancels():
    """FAST's algorithm.snapshot_close: "first" closes at the target's first reports of an over-selected
    sample, so phones online only from noon are cancelled; "all" draws the target alone and waits for each."""
    mix = [{"kind": "always", "share": 0.5}, {"kind": "diurnal", "start_hour": 12, "hours": 6, "share": 0.5}]
    system = world(devices=200, availability=mix, over_selection=4.0)
    first = system.client_round(request(1, target=10, snapshot=True))
    late = system.availability.kind_of(first.cancelled) == "diurnal"
    assert len(first.selected) == 40 and len(first.reported) == 10 and late.any()
    assert (system.availability.kind_of(first.reported) == "always").all() and first.end_s < 3600

    system = world(devices=200, availability=mix, over_selection=4.0)
    wait = CohortRequest(round_index=1, target=10, selection=Uniform(), rng=np.random.default_rng(1),
                         bytes_down=MODEL_BYTES, bytes_up=MODEL_BYTES, snapshot=True, wait_for_all=True,
                         samples_processed=lambda devices: np.full(len(devices), 100))
    every = system.client_round(wait)
    kinds = system.availability.kind_of(every.reported)
    assert len(every.selected) == 10 and sorted(every.reported) == sorted(every.selected)
    assert (kinds == "diurnal").any() and len(every.cancelled) == 0 and every.end_s >= 12 * 3600


def test_snapshot_devices_that_never_check_in_are_cancelled_at_the_target_and_stragglers_short_of_it():
    mix = [{"kind": "never", "share": 0.5}, {"kind": "always", "share": 0.5}]
    reached = world(devices=200, availability=mix, over_selection=3.0, events=True)
    outcome = reached.client_round(request(1, target=10, snapshot=True))
    never = reached.availability.kind_of(outcome.cancelled) == "never"
    assert len(outcome.reported) == 10 and len(outcome.stragglers) == 0 and never.any()
    assert discarded(reached, [outcome])[1] == (len(outcome.cancelled),) * 3

    short = world(devices=200, availability=mix, over_selection=1.0, min_report_fraction=0.1, events=True)
    outcome = short.client_round(request(1, target=10, snapshot=True))
    # no deadline: the round closes once every device that can report has, and the rest never will
    assert 0 < len(outcome.reported) < 10 and len(outcome.cancelled) == 0
    assert (short.availability.kind_of(outcome.stragglers) == "never").all() and len(outcome.stragglers) > 0
    assert discarded(short, [outcome])[0] == (len(outcome.stragglers),) * 3
    assert_each_selected_device_has_one_fate(outcome)


def test_ledger_checkpoints_cancelled_and_an_older_checkpoint_without_it_loads_as_zeros():
    system = world(devices=50, over_selection=2.0)
    run_rounds(system, 3, target=5)
    state = system.state()
    assert state["ledger"]["cancelled"].sum() == 15
    restored = world(devices=50, over_selection=2.0)
    restored.load_state(state)
    assert all(np.array_equal(restored.ledger.counts[k], state["ledger"][k]) for k in state["ledger"])
    older = {**state, "ledger": {k: v for k, v in state["ledger"].items() if k != "cancelled"}}
    system.load_state(older)  # a checkpoint written before `cancelled` existed
    assert system.ledger.counts["cancelled"].sum() == 0
    assert np.array_equal(system.ledger.counts["selected"], state["ledger"]["selected"])


def test_run_records_stragglers_and_cancelled_apart_in_metrics_participation_and_events(ray_session, tmp_path):
    import pandas as pd

    from emulator.driver import run_scenario

    # 11 of 40 devices a round for 8 reports; three in ten are far too slow for the 60 s deadline: a round
    # with 8 fast devices closes on the target (the rest cancelled), one with fewer at the deadline
    # (stragglers); seed 3 gives both kinds of round in 6
    raw = small_scenario(rounds=6, **{
        "population.compute": {"tiers": [{"share": 0.7, "s_per_sample": 0.01}, {"share": 0.3, "s_per_sample": 10.0}]},
        "population.compute_jitter": 0.0,
        "population.network": {"tiers": [{"share": 1.0, "down_mbps": 10.0, "up_mbps": 10.0, "latency_s": 0.1}]},
        "system.deadline_s": 60.0, "system.min_report_fraction": 0.5, "system.events": True})
    result = run_scenario(validate_scenario(raw), tmp_path / "run")
    metrics = pd.read_csv(result.path / "metrics.csv")
    participation = pd.read_csv(result.path / "participation.csv")
    events = pd.read_csv(result.path / "events.csv")
    columns, ledger = list(metrics.columns), list(participation.columns)
    assert columns[columns.index("stragglers") + 1] == "cancelled"
    assert ledger[ledger.index("straggled") + 1] == "cancelled"
    counts = events.groupby("event").size()
    assert metrics.stragglers.sum() == participation.straggled.sum() == counts.get("straggler", 0) > 0
    assert metrics.cancelled.sum() == participation.cancelled.sum() == counts.get("cancelled", 0) > 0
    # a round has stragglers only when it closed at the deadline, cancelled devices only when it closed earlier
    assert not ((metrics.stragglers > 0) & (metrics.cancelled > 0)).any()
    assert np.allclose(metrics.round_duration_s[metrics.stragglers > 0], 60.0)
    assert (metrics.round_duration_s[metrics.cancelled > 0] < 60.0).all()


def test_round_time_and_bytes_match_a_hand_computation():
    system = world(devices=3, compute={"tiers": [{"share": 1 / 3, "s_per_sample": 0.01},
                                                 {"share": 1 / 3, "s_per_sample": 0.02},
                                                 {"share": 1 / 3, "s_per_sample": 0.05}]},
                   network={"tiers": [{"share": 1.0, "down_mbps": 8.0, "up_mbps": 2.0, "latency_s": 0.5}]},
                   over_selection=1.0)
    outcome = system.client_round(request(1, target=3, samples=200))
    # 1 MB down at 8 Mbit/s = 1 s, up at 2 Mbit/s = 4 s, plus 0.5 s latency each way; compute 200 x s.
    slowest = 0.5 + 1.0 + 200 * 0.05 + 0.5 + 4.0
    assert outcome.start_s == 0.0 and outcome.end_s == pytest.approx(slowest)
    assert outcome.bytes_down == 3 * MODEL_BYTES and outcome.bytes_up == 3 * MODEL_BYTES
    arrival = [0.5 + 1.0 + 200 * s + 0.5 + 4.0 for s in (0.01, 0.02, 0.05)]
    tiers = system.profiles.compute_tier[outcome.reported]
    assert sorted(arrival) == [arrival[t] for t in tiers]  # reports arrive fastest first
    second = system.client_round(request(2, target=3, samples=200))
    assert second.start_s == pytest.approx(slowest)  # the clock carries on from the last round


def test_snapshot_rounds_sample_everyone_and_wait_for_check_ins():
    system = world(devices=1000, availability=[{"kind": "diurnal", "start_hour": 0, "hours": 2}],
                   over_selection=1.0, snapshot_deadline_s=86400.0, events=True)
    system.now_s = 6 * 3600.0  # 06:00 UTC: every window (00:00-02:00) is closed
    assert len(system.availability.online_devices(system.now_s)) == 0
    outcome = system.client_round(request(1, target=20, snapshot=True))
    assert not outcome.failed and len(outcome.reported) == 20
    assert outcome.duration_s > 17 * 3600.0  # waited until midnight for the sampled devices
    assert sum(1 for _, _, e in outcome.events if e == "checked_in") == 20


def test_same_seed_same_participation():
    def history(seed):
        system = world(devices=500, seed=seed, availability=[{"kind": "markov", "mean_on_s": 900, "mean_off_s": 900}],
                       dropout_per_hour=1.0, deadline_s=400.0)
        outcomes = run_rounds(system, 15, target=15, samples=300)
        return [(tuple(o.reported), tuple(o.dropped), o.end_s) for o in outcomes], system.ledger.state()

    (a, ledger_a), (b, ledger_b), (c, _) = history(1), history(1), history(2)
    assert a == b and all(np.array_equal(ledger_a[k], ledger_b[k]) for k in ledger_a)
    assert a != c


def test_sampling_with_replacement_counts_draws_towards_the_target():
    system = world(devices=5, over_selection=1.0)
    outcome = system.client_round(request(1, target=12, replace=True))
    assert len(outcome.reported) == 12 and len(np.unique(outcome.reported)) <= 5


def test_shipped_trace_scenario_loads():
    root = Path(__file__).resolve().parents[1]
    trace = root / "scenarios" / "traces" / "example_trace.csv"
    device, starts, ends = read_trace(trace)
    assert len(np.unique(device)) >= 100 and (ends > starts).all()

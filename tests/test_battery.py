"""Each phone's battery on the simulated clock (emulator/system/battery.py): its level recomputed by hand from
events.csv and its profile, through charging, use, training and transfers; the floor honoured at check-in
and mid-round (an abort, counted apart from other dropouts); refused where it cannot be honoured."""
from __future__ import annotations

import csv

import numpy as np
import pytest

from conftest import comparable, small_scenario
from emulator.driver import resume_run, run_scenario
from emulator.parts import validate_scenario
from emulator.scenario import ScenarioError
from emulator.scenario.energy import LTE, WIFI
from emulator.algorithms.selection import BatteryFirst
from emulator.system import CohortRequest, SimulatedSystem

STEPS, BATCH = 5, 16  # small_scenario's local_steps and batch_size
CHARGING = (120.0, 300.0)  # every day, UTC: the windows below, without spread or jitter
IN_USE = (60.0, 90.0)
FLOOR, IDLE_W, IN_USE_W = 0.25, 0.07, 1.0


def _window(start_s, end_s) -> dict:
    return {"start_hour": start_s / 3600, "hours": (end_s - start_s) / 3600, "share": 1.0}


def _world(**overrides) -> dict:
    """Phones that train while idle (not only while charging), half of them over LTE (its tails), with tiny
    batteries and a power-hungry CPU, so training drains them to the floor within a few rounds; they charge
    later on."""
    raw = small_scenario(**{
        "rounds": 14, "population.compute_jitter": 0.0, "population.devices": 24,
        "population.energy": {"battery_wh": 0.01, "battery_sigma": 0.0, "compute_w": 20.0, "compute_sigma": 0.0,
                              "charge_sigma": 0.0, "idle_w": IDLE_W, "in_use_w": IN_USE_W, "cellular_share": 0.5},
        "system": {"model": "simulated", "over_selection": 1.5, "deadline_s": 600, "events": True,
                   "checkin_poll_s": 20.0, "min_report_fraction": 0.25},
        **overrides})
    raw["population"]["availability"] = [{
        "kind": "eligible", "requires": ["idle"], "min_soc": FLOOR,
        "charging": _window(*CHARGING), "in_use": _window(*IN_USE), "unmetered": _window(0.0, 86400.0),
        "timezones": {"offsets_h": [0.0]}}]
    return raw


def _table(path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _inside(t: float, window: tuple[float, float]) -> bool:
    return window[0] <= t % 86400.0 < window[1]


def _level_by_hand(k: int, run, scenario) -> tuple[float, list[tuple[float, float]], float]:
    """Device k's charge (J) from time 0 to the run's end, walked segment by segment: its habits' windows
    and its work's phases (from events.csv: selected, then download, training, upload until it reported,
    aborted, dropped or the round closed) cut time into pieces of constant power; a radio tail's energy is
    taken when each transfer it began ends. Returns its final charge, its charge at each of its aborts
    (before and after the tails that fell then) and its charge at each of its selections."""
    system = SimulatedSystem(scenario)
    p, e = system.profiles, system.fleet_energy.profiles
    capacity, radio = e.battery_wh[k] * 3600.0, LTE if e.cellular[k] else WIFI
    metrics, events = _table(run / "metrics.csv"), _table(run / "events.csv")
    model_bytes = max(int(r["bytes_up"]) // max(int(r["participants"]), 1) for r in metrics)
    down_s = float(p.latency_s[k]) + model_bytes * 8 / (float(p.down_mbps[k]) * 1e6)
    up_s = float(p.latency_s[k]) + model_bytes * 8 / (float(p.up_mbps[k]) * 1e6)
    train_s = STEPS * min(BATCH, int(_table(run / "participation.csv")[k]["samples"])) * float(p.s_per_sample[k])
    closes = {int(r["round"]): float(r["sim_time_s"]) for r in metrics}
    phases, tails, aborts, selections = [], [], [], []
    mine = [x for x in events if int(x["device"]) == k]
    for x in mine:
        if x["event"] != "selected":
            continue
        r, begin = int(x["round"]), float(x["time_s"])
        ends = [float(y["time_s"]) for y in mine if int(y["round"]) == r and y["event"] != "selected"]
        stop = min(ends + [closes[r]])
        edges = np.cumsum([begin, down_s, train_s, up_s])
        powers = (radio.base_w + radio.down_w_per_mbps * float(p.down_mbps[k]), float(e.compute_w[k]),
                  radio.base_w + radio.up_w_per_mbps * float(p.up_mbps[k]))
        phases += [(a, min(b, stop), w) for a, b, w in zip(edges[:-1], edges[1:], powers) if a < stop]
        tails += [min(edges[i + 1], stop) for i in (0, 2) if stop > edges[i]]
        selections.append(begin)
        aborts += [float(y["time_s"]) for y in mine if int(y["round"]) == r and y["event"] == "aborted"]
    end = closes[max(closes)]
    cuts = {0.0, end, *tails, *(t for a, b, _ in phases for t in (a, b))}
    for day in range(int(end // 86400) + 1):
        cuts |= {day * 86400.0 + t for t in (*CHARGING, *IN_USE)}
    cuts = sorted(t for t in cuts if t <= end)
    level = float(e.initial_soc[k]) * capacity
    at_abort, at_selection = [], []
    for a, b in zip(cuts[:-1], cuts[1:]):
        if a in selections:
            at_selection.append(level)
        middle = (a + b) / 2
        power = (float(e.charge_w[k]) * _inside(middle, CHARGING) - IDLE_W - IN_USE_W * _inside(middle, IN_USE)
                 - sum(w for x, y, w in phases if x <= middle < y))
        level = min(max(level + power * (b - a), 0.0), capacity)
        before_tails = level
        for _ in range(tails.count(b)):  # LTE's tail after each transfer (Wi-Fi's is 0 J)
            level = max(level - radio.tail_s * radio.tail_w, 0.0)
        if b in aborts:
            at_abort.append((before_tails, level))
    return level, at_abort, at_selection


@pytest.fixture(scope="module")
def drained(tmp_path_factory):
    scenario = validate_scenario(_world())
    return scenario, run_scenario(scenario, tmp_path_factory.mktemp("battery") / "run")


def test_a_phones_level_is_what_its_habits_and_work_give_by_hand(drained):
    scenario, result = drained
    devices = _table(result.path / "participation.csv")
    aborted = [int(d["device"]) for d in devices if int(d["aborted"])]
    assert aborted, "the world drains phones to their floor mid-round"
    busiest = max(range(len(devices)), key=lambda k: int(devices[k]["selected"]))
    capacity = 0.01 * 3600.0
    links = {d["link"] for d in devices if int(d["aborted"])}
    assert links == {"wifi", "cellular"}
    for k in {aborted[0], aborted[-1], busiest}:
        level, at_abort, at_selection = _level_by_hand(k, result.path, scenario)
        assert float(devices[k]["soc"]) == pytest.approx(level / capacity, rel=1e-5, abs=1e-9), k
        floor = FLOOR * capacity
        for before, after in at_abort:  # it ran down to its floor, or a radio tail took it below
            assert before == pytest.approx(floor, abs=1e-6) or after < floor <= before + 1e-9, (k, before, after)
        assert (len(at_abort) > 0) == (k in aborted), k
        assert all(x >= FLOOR * capacity - 1e-9 for x in at_selection), k  # eligible when chosen


def test_aborts_are_a_part_of_the_dropped_with_the_energy_they_spent(drained):
    _, result = drained
    rows, events = result.rows, _table(result.path / "events.csv")
    assert sum(r["aborted"] for r in rows) == sum(1 for x in events if x["event"] == "aborted") > 0
    for r in rows:
        assert r["aborted"] <= r["dropped"]
        assert 0.0 <= r["energy_aborted_j"] <= r["energy_wasted_j"] + 1e-12
        assert (r["energy_aborted_j"] > 0) == (r["aborted"] > 0)
    devices = _table(result.path / "participation.csv")
    assert all(int(d["aborted"]) <= int(d["dropped"]) for d in devices)
    assert sum(int(d["aborted"]) for d in devices) == sum(r["aborted"] for r in rows)


def test_every_phone_chosen_had_its_floor_and_drained_phones_wait_for_the_charger(drained):
    """At every selection each phone's level (by hand) met the floor; a phone that aborted at its floor is
    chosen again only once a charging window has lifted it."""
    scenario, result = drained
    events = _table(result.path / "events.csv")
    for k in range(scenario.population.devices):
        _, at_abort, at_selection = _level_by_hand(k, result.path, scenario)
        assert all(x >= FLOOR * 0.01 * 3600.0 - 1e-9 for x in at_selection), k
        for t in (float(x["time_s"]) for x in events if int(x["device"]) == k and x["event"] == "aborted"):
            again = [float(y["time_s"]) for y in events if int(y["device"]) == k and y["event"] == "selected"
                     and float(y["time_s"]) > t]
            assert all(_inside(a, CHARGING) or a - t >= 86400.0 or t < CHARGING[0] <= a for a in again), (k, t)


def test_a_resumed_run_keeps_the_batteries(tmp_path):
    raw = _world(**{"output.checkpoint_every": 2})
    whole = run_scenario(validate_scenario(raw), tmp_path / "whole").path
    part = run_scenario(validate_scenario({**raw, "rounds": 6}), tmp_path / "part").path
    resume_run(part, overrides=["rounds=14"], notify=lambda message: None)
    assert comparable(part) == comparable(whole)
    assert _table(part / "participation.csv") == _table(whole / "participation.csv")


@pytest.mark.parametrize(("change", "says"), [
    ({"min_soc": 1.5}, "min_soc"),
    ({"min_soc": -0.1}, "min_soc"),
])
def test_a_floor_outside_zero_to_one_is_refused_naming_the_field(change, says):
    raw = _world()
    raw["population"]["availability"][0].update(change)
    with pytest.raises(ScenarioError, match=says):
        validate_scenario(raw)


@pytest.mark.parametrize(("energy", "says"), [
    ({"charge_w": 0}, "population.energy.charge_w"),
    ({"idle_w": -0.1}, "population.energy.idle_w"),
    ({"initial_soc_min": 0.9, "initial_soc_max": 0.5}, "initial_soc_min"),
    ({"initial_soc_max": 1.2}, "population.energy.initial_soc_max"),
])
def test_bad_battery_fields_are_refused_naming_the_field(energy, says):
    raw = _world()
    raw["population"]["energy"].update(energy)
    with pytest.raises(ScenarioError, match=says):
        validate_scenario(raw)


def test_a_floor_without_batteries_is_refused():
    raw = _world()
    del raw["population"]["energy"]
    with pytest.raises(ScenarioError, match=r"population.availability\[0\].min_soc.*population.energy"):
        validate_scenario(raw)


def test_battery_first_draws_by_level_and_counts_an_unknown_level_as_full():
    levels = np.linspace(0.0, 1.0, 101)
    available = np.arange(1000, 1101)
    soc = lambda ids: levels[ids - 1000]  # noqa: E731
    greedy = BatteryFirst(greed=50.0).informed(soc=soc)
    picks = np.concatenate([greedy.select(available, 5, np.random.default_rng(s)) for s in range(40)])
    assert np.mean(levels[picks - 1000]) > 0.95  # the fullest few
    flat = BatteryFirst(greed=0.0).informed(soc=soc)
    draws = np.concatenate([flat.select(available, 5, np.random.default_rng(s)) for s in range(400)])
    assert 0.45 < np.mean(levels[draws - 1000]) < 0.55  # greed 0: a uniform draw
    unknown = BatteryFirst(greed=50.0).informed(soc=lambda ids: np.where(ids == 1000, np.nan, 0.5))
    assert unknown.select(available, 1, np.random.default_rng(0)).tolist() == [1000]
    empty = BatteryFirst(greed=1.0).informed(soc=lambda ids: np.zeros(len(ids)))
    assert len(set(empty.select(available, 7, np.random.default_rng(0)).tolist())) == 7  # the cohort still fills
    with pytest.raises(ValueError, match="informed"):
        BatteryFirst().select(available, 3, np.random.default_rng(0))


def test_battery_first_selection_picks_fuller_phones_which_abort_less(tmp_path):
    """EAFL's claim in our world: choosing by battery cuts the drop-outs of phones that run empty."""
    algorithm = {**small_scenario()["algorithm"], "selection": {"kind": "battery", "greed": 8.0}}
    uniform = run_scenario(validate_scenario(_world()), tmp_path / "uniform")
    battery = run_scenario(validate_scenario(_world(algorithm=algorithm)), tmp_path / "battery")
    aborted = [sum(r["aborted"] for r in run.rows) for run in (uniform, battery)]
    assert aborted[1] < aborted[0], aborted
    system = SimulatedSystem(validate_scenario(_world(algorithm=algorithm)))
    request = lambda policy: CohortRequest(1, 8, policy, np.random.default_rng(0), 1000, 1000)  # noqa: E731
    online = system.availability.online_devices(0.0)
    levels = system.batteries.soc_of(online, 0.0)
    chosen = system.client_round(request(BatteryFirst(8.0))).selected
    assert system.batteries.tracked[chosen].all()
    ranks = np.searchsorted(np.sort(levels), levels[np.searchsorted(online, chosen)])
    assert np.median(ranks) > 0.6 * len(online)  # from the fuller part of those online


def test_battery_first_needs_batteries():
    raw = small_scenario(algorithm={**small_scenario()["algorithm"], "selection": {"kind": "battery"}})
    with pytest.raises(ScenarioError, match="algorithm.selection.kind.*population.energy"):
        validate_scenario(raw)


def test_a_drained_phone_reaches_its_floor_when_its_charger_lifts_it_and_never_without_one():
    raw = _world()
    raw["population"]["availability"][0]["charging"]["share"] = 0.5
    system = SimulatedSystem(validate_scenario(raw))
    batteries, e = system.batteries, system.fleet_energy.profiles
    everyone = np.arange(raw["population"]["devices"])
    batteries.level_j[:] = 0.0  # every phone empty at time 0
    batteries.until[:] = 0.0
    ready = batteries.reaches_floor(everyone, np.zeros(len(everyone)))
    charges = batteries.charges
    assert charges.any() and (~charges).any()
    assert np.isinf(ready[~charges]).all()
    # from empty, standby drain and charging power from 120 s on: the floor's joules at the net rate
    floor = FLOOR * e.battery_wh * 3600.0
    net = e.charge_w - IDLE_W
    assert ready[charges] == pytest.approx((CHARGING[0] + floor / net)[charges], rel=1e-9)


def test_fast_snapshots_in_a_battery_world_start_each_phone_at_its_floor(tmp_path):
    raw = _world(rounds=6, algorithm={**small_scenario()["algorithm"], "name": "fast", "q": 0.5})
    raw["population"]["availability"][0]["charging"]["share"] = 0.5
    scenario = validate_scenario(raw)
    result = run_scenario(scenario, tmp_path / "fast")
    events = _table(result.path / "events.csv")
    assert any(x["event"] == "checked_in" for x in events)  # a snapshot's phone started later
    assert sum(r["participants"] for r in result.rows) > 0

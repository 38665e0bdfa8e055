"""Eligibility by daily habits (emulator/system/eligibility.py): a device is online while charging, idle and
on an unmetered network, each a daily window of its local time held by a share of the devices."""
from __future__ import annotations

import csv

import numpy as np
import pytest

from conftest import small_scenario
from emulator.driver import run_scenario
from emulator.parts import validate_scenario
from emulator.scenario import ScenarioError
from emulator.system.eligibility import Eligible, EligibleAvailability

HOUR = 3600.0
ZONES = {"offsets_h": [-5, 0, 8], "shares": [0.3, 0.4, 0.3]}


def _model(devices: int = 400, seed: int = 3, **config) -> Eligible:
    entry = EligibleAvailability(timezones=ZONES, **config)
    return Eligible(np.arange(devices), entry, np.random.default_rng(seed), key=seed)


def _grid(start: float, end: float, step: float = 60.0) -> np.ndarray:
    return np.arange(start, end, step)


@pytest.mark.parametrize("requires", [["charging", "unmetered", "idle"], ["charging", "idle"], ["unmetered"]])
def test_the_answers_agree_with_each_other_over_three_days(requires):
    """online_all is online for everyone; next_online is the first minute a device is online (none before
    it), next_offline the first at which it is not (online until then)."""
    model = _model(devices=120, requires=requires)
    local = np.arange(120)
    for t in _grid(0.0, 3 * 86400.0, 7 * HOUR + 123.0):
        assert np.array_equal(model.online_all(t), model.online(local, t))
        now = model.online(local, t)
        start = model.next_online(local, t)
        assert np.all(start[now] == t) and np.all(start >= t)
        assert model.online(local[np.isfinite(start)], start[np.isfinite(start)]).all()
        end = model.next_offline(local, t)
        assert np.all(end[~now] == t) and np.all(end[now] > t)
        for k in np.flatnonzero(~now & np.isfinite(start))[:15]:
            before = _grid(t, start[k])
            assert not model.online(np.full(len(before), k), before).any()
        for k in np.flatnonzero(now & np.isfinite(end))[:15]:
            during = _grid(t, end[k])
            assert model.online(np.full(len(during), k), during).all()
            assert not model.online(np.array([k]), end[k])[0]


def test_a_device_without_a_required_habit_never_takes_part_and_drops_out_when_not_required():
    model = _model(devices=2000)
    no_wifi = ~model.has["unmetered"]
    assert 0.15 < no_wifi.mean() < 0.35  # the default: a quarter of phones have no home Wi-Fi
    ever = np.zeros(2000, dtype=bool)
    for t in _grid(0.0, 2 * 86400.0, HOUR / 2):
        ever |= model.online_all(t)
    assert not ever[no_wifi].any() and ever[~no_wifi].mean() > 0.5
    assert np.isinf(model.next_online(np.flatnonzero(no_wifi), 0.0)).all()

    relaxed = _model(devices=2000, requires=["charging", "idle"])
    assert np.array_equal(relaxed.has["unmetered"], model.has["unmetered"])  # the same phones
    ever = np.zeros(2000, dtype=bool)
    for t in _grid(0.0, 2 * 86400.0, HOUR / 2):
        ever |= relaxed.online_all(t)
    assert ever[no_wifi & relaxed.has["charging"]].mean() > 0.5


def test_phones_are_eligible_at_night_in_their_own_time_zone_and_not_by_day():
    model = _model(devices=3000)
    zone_h = model.zone_s / HOUR
    for zone in (-5, 0, 8):
        mine = zone_h == zone
        night = model.online_all((3 - zone) * HOUR + 86400.0)[mine].mean()  # 03:00 local on day 1
        day = model.online_all((15 - zone) * HOUR + 86400.0)[mine].mean()   # 15:00 local
        assert night > 0.3 and day < 0.02, (zone, night, day)


@pytest.mark.parametrize(("override", "says"), [
    ({"charging": {"start_hour": 23, "hours": 0}}, "population.availability.0.charging.hours"),
    ({"unmetered": {"start_hour": 18, "hours": 8, "share": 1.5}}, "population.availability.0.unmetered.share"),
    ({"in_use": {"start_hour": 25, "hours": 8}}, "population.availability.0.in_use.start_hour"),
    ({"requires": ["charging", "wifi"]}, "population.availability.0.requires"),
    ({"requires": ["charging", "charging"]}, "population.availability.0.requires: names a clause twice"),
    ({"requires": []}, "population.availability.0.requires"),
])
def test_a_bad_field_is_refused_naming_it(override, says):
    with pytest.raises(ScenarioError, match=says.replace(".", r"\.")):
        validate_scenario(small_scenario(**{"population.availability": [{"kind": "eligible", **override}]}))


def test_a_run_records_each_devices_habits_and_only_eligible_phones_report(tmp_path):
    raw = small_scenario(rounds=6, **{
        "population.devices": 300, "algorithm.clients_per_round": 10,
        "population.availability": [{"kind": "eligible", "timezones": ZONES}],
        "system.selection_timeout_s": 86400, "system.checkin_poll_s": 600})
    result = run_scenario(validate_scenario(raw), tmp_path / "run")
    assert result.summary["status"] == "completed"
    with open(result.path / "participation.csv", newline="") as handle:
        devices = list(csv.DictReader(handle))
    wifi = np.array([int(d["has_unmetered"]) for d in devices])
    charging = np.array([int(d["has_charging"]) for d in devices])
    reported = np.array([int(d["reported"]) for d in devices])
    assert set(np.unique(wifi)) == {0, 1} and reported.sum() >= 60
    assert reported[(wifi == 0) | (charging == 0)].sum() == 0  # the policy holds for every report
    assert np.isfinite([float(d["timezone_h"]) for d in devices]).all()


def test_a_clause_of_your_own_is_an_availability_entry_that_must_hold_as_well():
    """`also` adds clauses: here a diurnal window (00:00-03:00 UTC) on top of charging (22:00-06:00)."""
    night = {"kind": "diurnal", "start_hour": 0, "hours": 3}
    config = EligibleAvailability(requires=["charging"], charging={"start_hour": 22, "hours": 8}, also=[night])
    model = Eligible(np.arange(50), config, np.random.default_rng(0), key=2)
    local = np.arange(50)
    for hour, expected in ((23.0, False), (1.0, True), (4.0, False)):
        assert (model.online(local, hour * HOUR) == (model.has["charging"] & expected)).all(), hour
    charging = np.flatnonzero(model.has["charging"])
    assert (model.next_online(charging, 20 * HOUR) == 24 * HOUR).all()  # both hold from midnight
    assert (model.next_offline(charging, 1 * HOUR) == 3 * HOUR).all()  # the window closes first
    starts = model.next_online(charging, np.full(len(charging), 2.5 * HOUR))  # one time per device
    assert (starts == 2.5 * HOUR).all()


def test_a_clause_of_an_unknown_kind_is_refused_naming_it():
    with pytest.raises(ValueError, match="nocturnal"):
        EligibleAvailability(also=[{"kind": "nocturnal"}])


def test_a_markov_clause_is_refused_since_the_search_looks_ahead():
    with pytest.raises(ValueError, match="also.0.kind.*markov"):
        EligibleAvailability(also=[{"kind": "markov", "mean_on_s": 60, "mean_off_s": 60}])

"""Eligibility from a behaviour trace (emulator/system/habit_traces.py): FLASH's state records and our CSV
give each phone's charging, Wi-Fi and use as recorded; a phone is eligible exactly when the trace says the
policy holds, and bad records are refused naming the device and the event."""
from __future__ import annotations

import csv
import datetime as dt
import json

import numpy as np
import pytest

from conftest import small_scenario
from emulator.driver import run_scenario
from emulator.parts import validate_scenario
from emulator.scenario import ScenarioError
from emulator.system.eligibility import Eligible, EligibleAvailability

DAY = 86400.0
# Two phones over two days (local time): one charges at night on Wi-Fi with its screen locked, one charges
# on LTE by day; battery levels and screen_on (without an unlock) change nothing.
PHONES = {
    "0": {"guid": "night-owl", "model": "x", "messages": "\n".join([
        "2020-01-02 08:00:00\tscreen_unlock", "2020-01-02 08:00:00\t4g", "2020-01-02 19:00:00\twifi",
        "2020-01-02 22:30:00\tscreen_lock", "2020-01-02 23:00:00\tbattery_charged_on", "2020-01-02 23:10:00\t80%",
        "2020-01-03 02:00:00\tscreen_on", "2020-01-03 06:30:00\tbattery_charged_off",
        "2020-01-03 07:00:00\tscreen_unlock", "2020-01-03 08:00:00\t4g", "2020-01-03 21:00:00\twifi",
        "2020-01-03 23:30:00\tbattery_charged_on", "2020-01-03 23:45:00\tscreen_off"])},
    "1": {"guid": "day-charger", "model": "y", "messages": "\n".join([
        "2020-01-02 12:00:00\tbattery_charged_on", "2020-01-02 12:00:00\t3g",
        "2020-01-02 14:00:00\tbattery_charged_off",
        "2020-01-03 01:00:00\twifi", "2020-01-03 03:00:00\tunknown"])},
}


def _flash(path, phones=PHONES):
    path.write_text(json.dumps(phones))
    return str(path)


def _by_hand(phone: dict, t: float) -> bool:
    """Charging, on Wi-Fi and not in use at t (seconds since 2020-01-02 00:00, repeating after 2 days)."""
    t = t % (2 * DAY)
    state = {"charging": False, "wifi": False, "in_use": False}
    for line in phone["messages"].splitlines():
        stamp, token = line.split("\t")
        when = (dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S") - dt.datetime(2020, 1, 2)).total_seconds()
        if when > t:
            break
        state["charging"] = {"battery_charged_on": True, "battery_charged_off": False}.get(token, state["charging"])
        state["wifi"] = True if token == "wifi" else False if token in ("2g", "3g", "4g", "5g", "unknown") \
            else state["wifi"]
        state["in_use"] = True if token == "screen_unlock" else False if token in ("screen_lock", "screen_off") \
            else state["in_use"]
    return state["charging"] and state["wifi"] and not state["in_use"]


def test_a_phone_is_eligible_exactly_when_its_flash_record_says_the_policy_holds(tmp_path):
    config = EligibleAvailability(trace={"file": _flash(tmp_path / "states.json"), "format": "flash"})
    model = Eligible(np.arange(4), config, np.random.default_rng(0), key=1)
    local = np.arange(4)  # device k plays phone k mod 2
    for t in np.arange(0.0, 5 * DAY, 337.0):
        expected = [_by_hand(PHONES[str(k % 2)], t) for k in local]
        assert model.online(local, t).tolist() == expected, t
        assert model.online_all(t).tolist() == expected, t
    start = model.next_online(np.array([0]), 0.0)[0]
    assert start == (23 * 60 + 0) * 60.0  # the first night: charging from 23:00, locked and on Wi-Fi since 22:30
    assert model.next_offline(np.array([0]), start)[0] == DAY + 6.5 * 3600  # unplugged at 06:30
    assert np.isinf(model.next_online(np.array([1]), 0.0)[0])  # never charging on Wi-Fi: never eligible
    assert model.has["charging"].all() and model.has["unmetered"].tolist() == [True] * 4


def test_our_csv_form_and_the_habits_it_gives(tmp_path):
    path = tmp_path / "habits.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["device_id", "habit", "start_s", "end_s"])
        writer.writerows([["a", "charging", 0, 3600], ["a", "unmetered", 0, 7200], ["a", "in_use", 1800, 2400],
                          ["b", "unmetered", 0, 100]])
    config = EligibleAvailability(trace={"file": str(path), "repeat_s": DAY})
    model = Eligible(np.arange(2), config, np.random.default_rng(0), key=1)
    assert model.online(np.array([0, 0, 0, 1]), np.array([100.0, 2000.0, 3000.0, 50.0])).tolist() == [
        True, False, True, False]
    assert model.next_online(np.array([0]), 2000.0)[0] == 2400.0
    assert model.next_online(np.array([0]), 3600.0)[0] == DAY  # the next day's charge
    assert model.has["charging"].tolist() == [True, False]


@pytest.mark.parametrize(("messages", "says"), [
    ("2020-01-02 08:00:00\tairplane_mode", "device '0', event 1: unknown state 'airplane_mode'"),
    ("2020-01-02 8 o'clock\twifi", "device '0', event 1: .* is not a time"),
])
def test_a_bad_flash_record_is_refused_naming_the_device_and_event(tmp_path, messages, says):
    config = EligibleAvailability(trace={"file": _flash(tmp_path / "s.json", {"0": {"messages": messages}}),
                                         "format": "flash"})
    with pytest.raises(ScenarioError, match=says):
        Eligible(np.arange(2), config, np.random.default_rng(0), key=1)


def test_a_bad_csv_habit_and_windows_beside_a_trace_are_refused(tmp_path):
    path = tmp_path / "habits.csv"
    path.write_text("device_id,habit,start_s,end_s\na,sleeping,0,10\n")
    with pytest.raises(ScenarioError, match="line 2: habit 'sleeping'"):
        Eligible(np.arange(2), EligibleAvailability(trace={"file": str(path)}), np.random.default_rng(0), key=1)
    with pytest.raises(ValueError, match="charging.*trace.file"):
        EligibleAvailability(trace={"file": str(path)}, charging={"start_hour": 1, "hours": 2})


def test_a_run_on_a_flash_trace_trains_phones_only_while_ready_and_charges_their_batteries(tmp_path):
    raw = small_scenario(rounds=5, **{
        "population.energy": {"cellular_share": 0.0},
        "system": {"model": "simulated", "deadline_s": 600, "events": True, "selection_timeout_s": 2 * DAY,
                   "checkin_poll_s": 600}})
    raw["algorithm"]["clients_per_round"] = 4
    raw["population"]["availability"] = [{"kind": "eligible", "trace": {"file": _flash(tmp_path / "s.json"),
                                                                        "format": "flash"}}]
    result = run_scenario(validate_scenario(raw), tmp_path / "run")
    with open(result.path / "events.csv", newline="") as handle:
        selected = [row for row in csv.DictReader(handle) if row["event"] == "selected"]
    assert selected and sum(r["participants"] for r in result.rows) > 0
    assert all(int(r["device"]) % 2 == 0 and _by_hand(PHONES["0"], float(r["time_s"])) for r in selected)
    with open(result.path / "participation.csv", newline="") as handle:
        devices = list(csv.DictReader(handle))
    assert all(0.0 <= float(d["soc"]) <= 1.0 for d in devices)

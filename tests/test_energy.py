"""The energy of devices' work (population.energy; emulator/system/energy.py): recomputed by hand from
events.csv, participation.csv and the scenario, round by round; refused where it cannot be honoured; and a
world without it unchanged."""
from __future__ import annotations

import csv
import json

import numpy as np
import pytest

from conftest import STATEFUL, comparable, small_scenario
from emulator.driver import resume_run, run_scenario
from emulator.parts import validate_scenario
from emulator.scenario import ScenarioError
from emulator.scenario.energy import LTE, WIFI
from emulator.system import SimulatedSystem

ENERGY = {"cellular_share": 0.5}
STEPS, BATCH = 5, 16  # small_scenario's local_steps and batch_size
SIMPLE = {"population.energy": ENERGY, "population.compute_jitter": 0.0,
          "system": {"model": "simulated", "over_selection": 1.5, "deadline_s": 3600, "events": True}}


def _table(path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _profiles(scenario) -> dict[int, dict]:
    """Each device's profile at full precision (participation.csv prints six digits): the run's world,
    drawn again from its seed."""
    system = SimulatedSystem(scenario)
    p, e = system.profiles, system.fleet_energy.profiles
    return {k: {"latency_s": p.latency_s[k], "down_mbps": p.down_mbps[k], "up_mbps": p.up_mbps[k],
                "s_per_sample": p.s_per_sample[k], "compute_w": e.compute_w[k],
                "link": "cellular" if e.cellular[k] else "wifi"} for k in range(scenario.population.devices)}


def _by_hand(run, scenario) -> tuple[dict[int, dict], dict[int, float]]:
    """Each round's energy columns and each device's joules, from events.csv and the devices' profiles:
    every selected device downloads from its selection, trains, uploads; a reporter stops at its report,
    the rest when the round closes. Transfer times from the links and the bytes a device moves (metrics.csv);
    training time from the samples its local steps put through the model (FedAvg: steps x min(batch, data))."""
    metrics, events = _table(run / "metrics.csv"), _table(run / "events.csv")
    devices = _profiles(scenario)
    sizes = {int(d["device"]): int(d["samples"]) for d in _table(run / "participation.csv")}
    rounds, spent = {}, {}
    for row in metrics:
        r = int(row["round"])
        mine = [e for e in events if int(e["round"]) == r]
        selected = {int(e["device"]): float(e["time_s"]) for e in mine if e["event"] == "selected"}
        reported = {int(e["device"]): float(e["time_s"]) for e in mine if e["event"] == "reported"}
        down_bytes, up_bytes = int(row["bytes_down"]) / len(selected), int(row["bytes_up"]) / len(reported)
        closed = float(row["sim_time_s"])
        total = wasted = radio_total = cancelled = 0.0
        told_to_stop = {int(e["device"]) for e in mine if e["event"] == "cancelled"}
        for k, start in selected.items():
            d = devices[k]
            radio = LTE if d["link"] == "cellular" else WIFI
            down_s = float(d["latency_s"]) + down_bytes * 8 / (float(d["down_mbps"]) * 1e6)
            up_s = float(d["latency_s"]) + up_bytes * 8 / (float(d["up_mbps"]) * 1e6)
            train_s = STEPS * min(BATCH, sizes[k]) * float(d["s_per_sample"])  # no jitter in this world
            stop = reported.get(k, closed)
            phases = np.cumsum([start, down_s, train_s, up_s])
            done = [min(max(stop - a, 0.0), b - a) for a, b in zip(phases[:-1], phases[1:])]
            tails = sum(1 for x in (done[0], done[2]) if x > 0) * radio.tail_s * radio.tail_w
            radio_j = ((radio.base_w + radio.down_w_per_mbps * float(d["down_mbps"])) * done[0]
                       + (radio.base_w + radio.up_w_per_mbps * float(d["up_mbps"])) * done[2] + tails)
            joules = float(d["compute_w"]) * done[1] + radio_j
            total, radio_total = total + joules, radio_total + radio_j
            wasted += 0.0 if k in reported else joules
            cancelled += joules if k in told_to_stop else 0.0
            spent[k] = spent.get(k, 0.0) + joules
        rounds[r] = {"energy_j": total, "energy_wasted_j": wasted, "energy_cancelled_j": cancelled,
                     "energy_radio_j": radio_total}
    return rounds, spent


def test_every_rounds_and_devices_energy_is_what_its_timeline_and_profile_give(tmp_path):
    scenario = validate_scenario(small_scenario(**SIMPLE))
    result = run_scenario(scenario, tmp_path / "run")
    rounds, spent = _by_hand(result.path, scenario)
    for row in result.rows:
        for column, value in rounds[row["round"]].items():
            assert row[column] == pytest.approx(value, rel=1e-9), (row["round"], column)
    assert sum(r["energy_cancelled_j"] for r in rounds.values()) > 0  # the over-selected were cancelled mid-work
    devices = _table(result.path / "participation.csv")
    for d in devices:  # participation.csv keeps six significant digits
        assert float(d["energy_j"]) == pytest.approx(spent.get(int(d["device"]), 0.0), rel=1e-5, abs=1e-9)
        assert float(d["battery_share"]) == pytest.approx(float(d["energy_j"]) / (float(d["battery_wh"]) * 3600),
                                                          rel=1e-4, abs=1e-12)
    links = {d["link"] for d in devices}
    assert links == {"wifi", "cellular"}
    radio = {link: [float(d["energy_j"]) for d in devices if d["link"] == link and int(d["reported"])]
             for link in links}
    assert np.median(radio["cellular"]) > np.median(radio["wifi"])  # LTE's tails


def test_eligible_phones_train_on_wifi_and_a_resume_keeps_the_energy(tmp_path):
    raw = small_scenario(**{**STATEFUL, "population.energy": {"cellular_share": 1.0}})
    raw["population"]["availability"] = [{"kind": "eligible", "requires": ["unmetered"],
                                          "unmetered": {"start_hour": 0, "hours": 24, "share": 0.5}},
                                         {"kind": "always"}]
    raw["population"]["availability"][0]["share"] = 0.5
    raw["population"]["availability"][1]["share"] = 0.5
    whole = run_scenario(validate_scenario(raw), tmp_path / "whole").path
    part = run_scenario(validate_scenario({**raw, "rounds": 4}), tmp_path / "part").path
    resume_run(part, overrides=["rounds=7"], notify=lambda message: None)
    assert comparable(part) == comparable(whole)
    assert _table(part / "participation.csv") == _table(whole / "participation.csv")
    devices = _table(whole / "participation.csv")
    eligible = [d for d in devices if d["availability"] == "eligible"]
    assert eligible and all(d["link"] == "wifi" for d in eligible)
    assert all(d["link"] == "cellular" for d in devices if d["availability"] == "always")
    assert all(float(d["energy_j"]) > 0 for d in devices if int(d["selected"]))


@pytest.mark.parametrize(("overrides", "says"), [
    ({"population.energy": {"battery_wh": 0}}, "population.energy.battery_wh"),
    ({"population.energy": {"compute_w": -1}}, "population.energy.compute_w"),
    ({"population.energy": {"wifi": {"base_w": -0.1, "up_w_per_mbps": 0.3, "down_w_per_mbps": 0.1}}},
     "population.energy.wifi.base_w"),
    ({"population.energy": {"cellular_share": 1.5}}, "population.energy.cellular_share"),
    ({"population.energy": {}, "system.model": "ideal"}, "population.energy: energy is spent by devices"),
    ({"population.energy": {}, "system.model": "simulated", "algorithm": {"name": "fedbuff", "buffer": 4,
                                                                          "concurrency": 8}},
     "population.energy: fedbuff is asynchronous"),
])
def test_energy_that_cannot_be_honoured_is_refused_naming_the_field(overrides, says):
    with pytest.raises(ScenarioError, match=says.replace(".", r"\.")):
        validate_scenario(small_scenario(**overrides))


def test_a_world_without_energy_writes_no_energy_column(tmp_path):
    raw = small_scenario(rounds=2, **{"system": {"model": "simulated"}})
    run = run_scenario(validate_scenario(raw), tmp_path / "run").path
    header = next(csv.reader(open(run / "metrics.csv")))
    assert not [c for c in header if c.startswith("energy")]
    assert "energy_j" not in next(csv.reader(open(run / "participation.csv")))
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"


def test_validate_counts_the_energy_and_the_batteries_a_world_holds():
    """footprint.py's bytes a device are what the energy profiles and the batteries really allocate."""
    from emulator.system.footprint import estimate

    raw = small_scenario(**{"population.energy": {}, "population.devices": 500, "system.model": "simulated"})
    raw["population"]["availability"] = [{"kind": "eligible"}]
    scenario = validate_scenario(raw)
    system = SimulatedSystem(scenario)
    profiles, batteries = system.fleet_energy.profiles, system.batteries
    held = sum(a.nbytes for a in vars(profiles).values()) + sum(
        a.nbytes for a in vars(batteries).values() if isinstance(a, np.ndarray) and a.shape == (500,)
        and a is not batteries.charge_w and a is not system.availability.group)  # the profile's, the mix's
    assert estimate(scenario).parts["energy and batteries"] == held
    raw["population"]["availability"] = [{"kind": "always"}]
    assert estimate(validate_scenario(raw)).parts["energy"] == sum(a.nbytes for a in vars(profiles).values())

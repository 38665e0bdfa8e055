"""Shared links (system.network; emulator/system/network.py): transfers that share a link take as long as the
fluid model says, end to end through a run; every topology field is validated naming it; a resume keeps the
devices' slowdowns; and a world without the section is the world it was."""
from __future__ import annotations

import csv

import numpy as np
import pytest

from conftest import STATEFUL, comparable, small_scenario
from emulator.driver import resume_run, run_scenario
from emulator.parts import validate_scenario
from emulator.parts.loading import scenario_from
from emulator.recording.checkpoint import results_fields
from emulator.scenario import ScenarioError
from emulator.system import SimulatedSystem

CELL = {"access": {"links": 1, "up_mbps": 2.0, "down_mbps": 8.0}}
EVEN = {"population.network": {"kind": "tiers", "tiers": [{"share": 1.0, "down_mbps": 20.0, "up_mbps": 5.0,
                                                            "latency_s": 0.05}]},
        "population.compute": {"kind": "tiers", "tiers": [{"share": 1.0, "s_per_sample": 0.01}]},
        "population.compute_jitter": 0.0}


def _table(path) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _network_run(tmp_path, network, rounds=3, **overrides):
    raw = small_scenario(rounds=rounds, **{**EVEN, "system": {"model": "simulated", "over_selection": 1.0,
                                                              "events": True, "network": network}, **overrides})
    scenario = validate_scenario(raw)
    return scenario, run_scenario(scenario, tmp_path / "run").path


def test_devices_behind_one_cell_share_it_and_the_round_lasts_what_the_fluid_model_says(tmp_path):
    """Eight equal devices behind one cell, all starting together: each download gets an eighth of the cell's
    down capacity (its own 20 Mbit/s would take more than that), each upload an eighth of the up capacity;
    so every device reports at latency + 8 x bytes_down / down + compute + latency + 8 x bytes_up / up."""
    scenario, run = _network_run(tmp_path, CELL)
    metrics, events = _table(run / "metrics.csv"), _table(run / "events.csv")
    cohort = scenario.algorithm.clients_per_round
    for row in metrics:
        selected = [e for e in events if e["round"] == row["round"] and e["event"] == "selected"]
        reported = [e for e in events if e["round"] == row["round"] and e["event"] == "reported"]
        assert len(selected) == len(reported) == cohort
        down_bytes, up_bytes = int(row["bytes_down"]) / cohort, int(row["bytes_up"]) / cohort
        compute = 0.01 * 5 * 16  # s_per_sample x local steps x batch
        expected = (0.05 + cohort * down_bytes * 8 / 8e6 + compute + 0.05 + cohort * up_bytes * 8 / 2e6)
        for event in reported:
            assert float(event["time_s"]) - float(selected[0]["time_s"]) == pytest.approx(expected, abs=1e-6)
        alone = down_bytes * 8 / 20e6 + up_bytes * 8 / 5e6
        assert float(row["network_wait_s"]) == pytest.approx(expected - 0.1 - compute - alone, abs=1e-7)
        assert float(row["access_up_utilisation"]) == pytest.approx(cohort * up_bytes / (
            2e6 / 8 * float(row["round_duration_s"])), rel=1e-9)
    devices = _table(run / "participation.csv")
    slowdowns = [float(d["transfer_slowdown"]) for d in devices if int(d["selected"])]
    assert slowdowns and all(s > 1.5 for s in slowdowns)
    assert all(d["transfer_slowdown"] == "nan" for d in devices if not int(d["selected"]))


def test_a_roomy_network_changes_no_time_and_a_tight_server_link_slows_everyone(tmp_path):
    """Links whose capacity exceeds what all their devices can send never slow anyone: the run's clock is the
    one without the section (to rounding). A server link smaller than the cohort's uplinks stretches the round."""
    roomy = {"access": {"links": 4, "up_mbps": 1e4, "down_mbps": 1e4}, "server": {"up_mbps": 1e5, "down_mbps": 1e5}}
    _, with_links = _network_run(tmp_path / "a", roomy)
    _, without = _network_run(tmp_path / "b", None)
    for a, b in zip(_table(with_links / "metrics.csv"), _table(without / "metrics.csv")):
        assert float(a["sim_time_s"]) == pytest.approx(float(b["sim_time_s"]), rel=1e-12)
        assert float(a["network_wait_s"]) < 1e-9
    tight = {"access": {"links": 4, "up_mbps": 1e4, "down_mbps": 1e4}, "server": {"up_mbps": 0.05, "down_mbps": 1e4}}
    _, slow = _network_run(tmp_path / "c", tight)
    assert all(float(a["round_duration_s"]) > 3 * float(b["round_duration_s"])
               for a, b in zip(_table(slow / "metrics.csv"), _table(without / "metrics.csv")))
    assert all(float(r["server_up_utilisation"]) > 0.5 for r in _table(slow / "metrics.csv"))


def test_a_device_lost_mid_transfer_frees_its_share_and_a_resume_keeps_the_slowdowns(tmp_path):
    network = {"access": {"links": 2, "up_mbps": 0.002, "down_mbps": 0.05}}  # a round of minutes: time to drop
    raw = small_scenario(**{**STATEFUL, "population.dropout_per_hour": 20.0,
                            "system": {"model": "simulated", "deadline_s": 400.0, "min_report_fraction": 0.25,
                                       "network": network}})
    whole = run_scenario(validate_scenario(raw), tmp_path / "whole").path
    part = run_scenario(validate_scenario({**raw, "rounds": 4}), tmp_path / "part").path
    resume_run(part, overrides=["rounds=7"], notify=lambda message: None)
    assert comparable(part) == comparable(whole)
    assert _table(part / "participation.csv") == _table(whole / "participation.csv")
    assert sum(int(r["dropped"]) for r in _table(whole / "metrics.csv")) > 0  # the hazard struck mid-round
    # a transfer cut short by its device's loss is no transfer done: no device went faster than alone
    slowdowns = [float(d["transfer_slowdown"]) for d in _table(whole / "participation.csv")]
    assert all(s >= 1 - 1e-9 for s in slowdowns if s == s) and any(s > 1.5 for s in slowdowns if s == s)
    dropped = [d for d in _table(whole / "participation.csv") if int(d["dropped"]) and not int(d["reported"])
               and not int(d["cancelled"]) and not int(d["straggled"])]
    assert dropped and all(d["transfer_slowdown"] == "nan" or float(d["transfer_slowdown"]) >= 1 for d in dropped)


def test_without_the_section_the_world_and_its_fingerprint_are_what_they_were():
    scenario = validate_scenario(small_scenario(system={"model": "simulated"}))
    assert "network" not in results_fields(scenario)["system"]
    assert SimulatedSystem(scenario).network is None


@pytest.mark.parametrize(("network", "says"), [
    ({"access": {"links": 2, "up_mbps": 0, "down_mbps": 5}}, "system.network.access.up_mbps"),
    ({"access": {"links": 2, "up_mbps": 1, "down_mbps": 5}, "server": {"up_mbps": 1, "down_mbps": 0}},
     "system.network.server.down_mbps"),
    ({"access": {"up_mbps": 1, "down_mbps": 5}}, "system.network.access: say how devices attach"),
    ({"access": {"links": 2, "devices_per_link": 5, "up_mbps": 1, "down_mbps": 5}}, "system.network.access"),
    ({"access": {"links": 2, "up_mbps": 1, "down_mbps": 5}, "regions": {"count": 3, "up_mbps": 1, "down_mbps": 1}},
     "system.network.regions.count: 3 regions but 2 access links"),
    ({"access": {"links": 2, "up_mbps": 1, "down_mbps": 5}, "regions": {"by": "zone", "up_mbps": 1, "down_mbps": 1}},
     "system.network.regions.by"),
    ({"access": {"links": 2, "attach": "zone", "up_mbps": 1, "down_mbps": 5}}, "system.network.access.attach"),
])
def test_a_topology_that_cannot_be_honoured_is_refused_naming_the_field(network, says):
    raw = small_scenario(system={"model": "simulated", "network": network})
    with pytest.raises(ScenarioError, match=says.replace(".", r"\.")):
        validate_scenario(raw)


def test_a_trace_must_attach_every_device_and_then_decides_who_shares(tmp_path):
    trace = tmp_path / "cells.csv"
    trace.write_text("device_id,link\n" + "".join(f"{k},cell-{k % 3}\n" for k in range(39)))  # 40 devices
    raw = small_scenario(system={"model": "simulated", "network": {"access": {
        "trace": str(trace), "up_mbps": 1, "down_mbps": 5}}})
    with pytest.raises(ScenarioError, match=r"system\.network\.access\.trace: 1 devices are attached to no link \(39\)"):
        scenario_from(raw, "scenario", tmp_path)
    trace.write_text("device_id,link\n" + "".join(f"{k},cell-{k % 3}\n" for k in range(40)))
    system = SimulatedSystem(scenario_from(raw, "scenario", tmp_path))
    assert system.network.access_links == 3
    assert np.array_equal(system.network.link_of, np.arange(40) % 3)
    # regions dealt the trace's links in turn: no more regions than links, as for links by count
    raw["system"]["network"]["regions"] = {"count": 4, "up_mbps": 5, "down_mbps": 5}
    with pytest.raises(ScenarioError, match=r"system\.network\.regions\.count: 4 regions but the trace .* names 3"):
        scenario_from(raw, "scenario", tmp_path)


def test_shared_links_need_the_simulated_clock_and_synchronous_rounds():
    network = {"access": {"links": 2, "up_mbps": 1, "down_mbps": 5}}
    with pytest.raises(ScenarioError, match=r"system\.network: shared links"):
        validate_scenario(small_scenario(system={"model": "ideal", "network": network}))
    with pytest.raises(ScenarioError, match=r"system\.network: shared links"):
        validate_scenario(small_scenario(system={"model": "simulated", "network": network},
                                         algorithm={"name": "fedbuff", "buffer": 4, "concurrency": 8}))


def test_devices_attached_by_zone_share_links_only_with_their_zone_and_regions_follow_zones():
    raw = small_scenario(**{"population.devices": 300, "algorithm.clients_per_round": 8,
                            "population.availability": [{"kind": "diurnal", "timezones": {"offsets_h": [-5, 1, 8]}}],
                            "system": {"model": "simulated", "network": {
                                "access": {"devices_per_link": 25, "attach": "zone", "up_mbps": 1, "down_mbps": 5},
                                "regions": {"by": "zone", "up_mbps": 10, "down_mbps": 50}}}})
    system = SimulatedSystem(validate_scenario(raw))
    network, zone = system.network, system.availability.timezone_h()
    assert network.access_links == 12 and network.regions == 3
    for link in range(network.access_links):
        assert len(np.unique(zone[network.link_of == link])) <= 1
    region_zone = {int(network.region_of_link[network.link_of[k]]): zone[k] for k in range(300)}
    assert len(set(region_zone.values())) == 3


def test_the_report_reads_the_waits_and_each_regions_slowdown_from_the_runs(tmp_path):
    from emulator.analysis.report import write_report

    network = {"access": {"links": 4, "up_mbps": 0.5, "down_mbps": 5}, "regions": {"count": 2, "up_mbps": 1.2,
                                                                                   "down_mbps": 10}}
    runs = []
    for seed in (3, 4):
        raw = small_scenario(seed=seed, rounds=3, system={"model": "simulated", "network": network})
        runs.append(run_scenario(validate_scenario(raw), tmp_path / f"run{seed}").path)
    write_report(runs, tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "network wait s" in text and "## Shared links by region" in text
    devices = [d for run in runs for d in _table(run / "participation.csv")]
    for region in ("0", "1"):
        mine = [d for d in devices if d["region"] == region]
        moved = [float(d["transfer_slowdown"]) for d in mine if d["transfer_slowdown"] != "nan"]
        reports = sum(int(d["reported"]) for d in mine) / sum(int(d["reported"]) for d in devices)
        row = f"| {region} | {len(mine) / len(devices):.1%} | {reports:.1%} | {np.mean(moved):.2f} |"
        assert row in text, row


def test_validate_counts_the_bytes_the_shared_links_keep_for_each_device():
    """footprint.py's bytes a device are what the network really allocates per device."""
    from emulator.system.footprint import estimate

    raw = small_scenario(**{"population.devices": 500, "system": {"model": "simulated", "network": {
        "access": {"links": 7, "up_mbps": 1, "down_mbps": 5}, "regions": {"count": 3, "up_mbps": 5, "down_mbps": 9}}}})
    scenario = validate_scenario(raw)
    network = SimulatedSystem(scenario).network
    held = sum(a.nbytes for a in vars(network).values() if isinstance(a, np.ndarray) and a.shape == (500,))
    assert estimate(scenario).parts["shared links"] == held
    assert "shared links" not in estimate(validate_scenario(small_scenario(system={"model": "simulated"}))).parts

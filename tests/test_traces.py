"""Trace files (emulator/system/traces.py): FedScale's behave-trace and capacity pickles, CSV traces, and
how the world replays them. Test vectors from FedScale's own tests and /work/shared/traces.md section 1c."""
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import ROOT, small_scenario
from emulator.recording.checkpoint import fingerprint
from emulator.cli import main
from emulator.scenario import ScenarioError
from emulator.parts import load_scenario, validate_scenario
from emulator.system import CohortRequest, SimulatedSystem
from emulator.system.availability_mix import AvailabilityMix
from emulator.algorithms.selection import Uniform
from emulator.system.profiles import DeviceProfiles
from emulator.system.traces import TraceWarning, read_availability, read_capacity

# section 1c: one device, two windows [0, 100] and [200, 300] (whole seconds, ends included), period 400
BEHAVE_1C = {1: {"active": [0, 200], "inactive": [100, 300], "finish_time": 400, "duration": 200,
                 "model": "synthetic"}}
# FedScale's test_client_metadata.py: windows [1, 1], [3, 4], [6, 7], [9, 10], period 10
BEHAVE_FEDSCALE = {7: {"active": [1, 3, 6, 9], "inactive": [1, 4, 7, 10], "finish_time": 10, "duration": 3,
                       "model": "test"}}
CAPACITY_1C = {1: {"computation": 100.0, "communication": 8000.0}, 2: {"computation": 400.0, "communication": 1000.0}}


def dump(path: Path, data) -> Path:
    path.write_bytes(pickle.dumps(data))
    return path


def availability(path: Path, devices: int, seed: int = 0, **entry) -> AvailabilityMix:
    entries = validate_scenario({"name": "t", "rounds": 1, "algorithm": {"clients_per_round": 1}, "population": {
        "devices": devices, "availability": [{"kind": "trace", "file": str(path), **entry}]}}).population.availability
    return AvailabilityMix(entries, devices, seed=seed)


def population(devices: int, **fields):
    return validate_scenario({"name": "t", "rounds": 1, "algorithm": {"clients_per_round": 1},
                              "population": {"devices": devices, **fields}}).population


# ------------------------------------------------------------------------------------- availability
def test_section_1c_vector_is_answered_statelessly(tmp_path):
    mix = availability(dump(tmp_path / "behave.pkl", BEHAVE_1C), 1, format="fedscale")
    expected = {50: True, 100: True, 150: False, 250: True, 350: False, 450: True, 1250: True}
    device = np.array([0])
    assert {t: bool(mix.online(device, float(t))[0]) for t in expected} == expected
    # any order, any repetition: the same answers (FedScale's stateful pointer gives other answers here)
    for t in [1250, 50, 350, 100, 450, 250, 150, 50]:
        assert bool(mix.online(device, float(t))[0]) == expected[t]


def test_fedscale_test_vector_and_its_pointer_quirks(tmp_path):
    mix = availability(dump(tmp_path / "behave.pkl", BEHAVE_FEDSCALE), 1, format="fedscale")
    device = np.array([0])
    answers = [bool(mix.online(device, t)[0]) for t in (2.0, 6.0, 8.0, 9.0, 10.0, 15.0)]
    assert answers == [False, True, False, True, False, False]
    # FedScale answers these wrongly (its pointer advances one window per call and never rewinds):
    fresh = availability(tmp_path / "behave.pkl", 1, format="fedscale")
    assert fresh.online(device, 6.5)[0]          # first query at 6.5: inside [6, 7]
    assert fresh.online(device, 9.0)[0] and fresh.online(device, 13.0)[0]  # 13 wraps to 3, inside [3, 4]


def test_inclusive_ends_are_whole_seconds(tmp_path):
    mix = availability(dump(tmp_path / "behave.pkl", BEHAVE_1C), 1, format="fedscale")
    device = np.array([0])
    assert mix.online(device, 100.0)[0] and mix.online(device, 100.999)[0] and not mix.online(device, 101.0)[0]
    assert mix.next_offline(device, 50.0)[0] == 101.0
    assert mix.next_online(device, 150.0)[0] == 200.0
    assert mix.next_online(device, 350.0)[0] == 400.0      # wraps to the next period's first window
    assert mix.next_offline(device, 1250.0)[0] == 1301.0   # period 3: [1200, 1301)
    assert list(mix.models[0].online_s) == [202.0]          # 101 + 101 online seconds a period


def test_per_device_periods_and_wrap_around_are_vectorised(tmp_path):
    trace = {
        "a": {"active": [0, 200], "inactive": [100, 300], "finish_time": 400},
        "b": {"active": [1, 3, 6, 9], "inactive": [1, 4, 7, 10], "finish_time": 10},
        "c": {"active": [0, 300], "inactive": [99, 399], "finish_time": 400},  # runs on across the wrap
        "d": {"active": [], "inactive": [], "finish_time": 50},                # never online
        "e": {"active": [0], "inactive": [59], "finish_time": 60},              # always online
    }
    mix = availability(dump(tmp_path / "behave.pkl", trace), 5, format="fedscale")
    everyone = np.arange(5)
    assert list(mix.online(everyone, 350.0)) == [False, False, True, False, True]   # b: 350 mod 10 = 0
    assert list(mix.next_online(everyone, 350.0)) == [400.0, 351.0, 350.0, np.inf, 350.0]
    assert list(mix.next_offline(everyone[[2, 4]], 350.0)) == [500.0, np.inf]       # c: [300, 400) + [0, 100)
    assert list(mix.online(everyone, 403.0)) == [True, True, True, False, True]
    assert list(mix.models[0].online_s) == [202.0, 6.0, 200.0, 0.0, 60.0]
    # the array answers are the one-device answers, at any time
    for t in np.random.default_rng(0).uniform(0, 5000, 200):
        assert list(mix.online(everyone, t)) == [bool(mix.online(np.array([k]), t)[0]) for k in range(5)]
        reference = [any(start <= t % period < end for start, end in windows) if windows else False
                     for windows, period in ([((0, 101), (200, 301)), 400], [((1, 2), (3, 5), (6, 8), (9, 10)), 10],
                                             [((0, 100), (300, 400)), 400], [(), 50], [((0, 60),), 60])]
        assert list(mix.online(everyone, t)) == reference


def test_repeat_s_replaces_each_devices_finish_time(tmp_path):
    mix = availability(dump(tmp_path / "behave.pkl", BEHAVE_1C), 1, format="fedscale", repeat_s=250)
    device = np.array([0])
    # windows [0, 101) and [200, 250): the second runs on into the next period's first window
    assert mix.online(device, 240.0)[0] and mix.online(device, 260.0)[0] and not mix.online(device, 360.0)[0]
    assert mix.next_offline(device, 240.0)[0] == 351.0
    assert mix.next_online(device, 360.0)[0] == 450.0


def test_csv_trace_still_reads_as_before(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("device_id,start_s,end_s\na,100,200\na,150,300\nb,0,50\nb,500,600\n")
    windows = read_availability(trace, "csv", 1000)
    assert list(windows.starts) == [100, 0, 500] and list(windows.ends) == [300, 50, 600]
    assert windows.names == ("a", "b") and list(windows.online_s()) == [200.0, 150.0]
    mix = availability(trace, 2)  # no repeat_s: past the end, never online again
    assert mix.next_online(np.array([1]), 700.0)[0] == np.inf and not mix.online(np.array([0]), 1150.0)[0]


# ---------------------------------------------------------------------------------------- capacity
def test_fedscale_capacity_conversion_gives_the_1c_round_times(tmp_path):
    file = dump(tmp_path / "capacity.pkl", CAPACITY_1C)
    table = read_capacity(file)
    assert table.s_per_sample == pytest.approx([0.3, 1.2])   # 3 x ms per inference sample / 1000
    assert table.down_mbps == pytest.approx([8.0, 1.0]) and table.up_mbps == pytest.approx([8.0, 1.0])
    scenario = validate_scenario({
        "name": "t", "rounds": 1, "algorithm": {"clients_per_round": 2},
        "population": {"devices": 2, "compute_jitter": 0.0, "compute": {"kind": "trace", "file": str(file)},
                       "network": {"kind": "trace", "file": str(file), "latency_s": 0.0}},
        "system": {"model": "simulated", "over_selection": 1.0, "events": True}})
    system = SimulatedSystem(scenario)
    # batch 20 x 10 steps = 200 samples; an 8192-kbit model (FedScale's kbit: 1,024,000 bytes here)
    outcome = system.client_round(CohortRequest(
        round_index=1, target=2, selection=Uniform(), rng=np.random.default_rng(0), bytes_down=1_024_000,
        bytes_up=1_024_000, samples_processed=lambda devices: np.full(len(devices), 200)))
    reported = {device: time - outcome.start_s for time, device, event in outcome.events if event == "reported"}
    assert reported[0] == pytest.approx(60 + 2.048, rel=1e-6)     # client 1: 60 s compute, 2.048 s comm
    assert reported[1] == pytest.approx(240 + 16.384, rel=1e-6)   # client 2: 240 s and 16.384 s


def test_csv_capacity_with_and_without_latency(tmp_path):
    file = tmp_path / "capacity.csv"
    file.write_text("device_id,s_per_sample,down_mbps,up_mbps,latency_s\nx,0.01,20,5,0.2\ny,0.04,2,1,\n")
    profiles = DeviceProfiles.draw(population(4, compute={"kind": "trace", "file": str(file), "format": "csv"},
                                              network={"kind": "trace", "file": str(file), "format": "csv",
                                                       "latency_s": 0.07}), np.random.default_rng(0))
    assert profiles.s_per_sample == pytest.approx([0.01, 0.04, 0.01, 0.04])   # device k plays row k mod 2
    assert profiles.down_mbps == pytest.approx([20, 2, 20, 2]) and profiles.up_mbps == pytest.approx([5, 1, 5, 1])
    assert profiles.latency_s == pytest.approx([0.2, 0.07, 0.2, 0.07])         # empty cell: the entry's latency


def test_compute_and_network_from_one_file_share_the_row(tmp_path):
    rows = {k: {"computation": 1000.0 * (k + 1) / 3, "communication": 1000.0 * (k + 1)} for k in range(7)}
    file = dump(tmp_path / "capacity.pkl", rows)
    pop = population(50, compute={"kind": "trace", "file": str(file), "assign": "random"},
                     network={"kind": "trace", "file": str(file), "assign": "random"})
    profiles = DeviceProfiles.draw(pop, np.random.default_rng(5))
    row_from_compute = np.round(profiles.s_per_sample).astype(int) - 1
    assert list(row_from_compute) == list(np.round(profiles.down_mbps).astype(int) - 1)
    assert row_from_compute.tolist() != [k % 7 for k in range(50)]  # random, not the cycle
    assert sorted(np.bincount(row_from_compute, minlength=7)) == [7, 7, 7, 7, 7, 7, 8]  # every row used evenly
    again = DeviceProfiles.draw(pop, np.random.default_rng(5))
    other = DeviceProfiles.draw(pop, np.random.default_rng(6))
    assert np.array_equal(again.s_per_sample, profiles.s_per_sample)
    assert not np.array_equal(other.s_per_sample, profiles.s_per_sample)


def test_lognormal_and_tier_draws_are_unchanged():
    # the numbers these draws gave before trace capacities existed
    profiles = DeviceProfiles.draw(population(3, compute={"tiers": [{"share": 0.5, "s_per_sample": 0.1},
                                                                    {"share": 0.5, "s_per_sample": 0.2}]}),
                                   np.random.default_rng(1))
    rng = np.random.default_rng(1)
    from emulator.seeding import assign_by_share
    tiers = assign_by_share([0.5, 0.5], 3, rng)
    assert np.array_equal(profiles.compute_tier, tiers)
    down = 20.0 * np.exp(0.5 * rng.standard_normal(3))
    assert np.array_equal(profiles.down_mbps, down.astype(np.float32))


# ------------------------------------------------------------------------------------ assign, reuse
def test_assign_random_is_deterministic_per_seed_and_uses_every_trace_device(tmp_path):
    trace = {k: {"active": [k], "inactive": [k], "finish_time": 100} for k in range(10)}
    file = dump(tmp_path / "behave.pkl", trace)

    def played(seed):
        return availability(file, 25, seed=seed, format="fedscale", assign="random").models[0].trace_device

    assert np.array_equal(played(1), played(1))
    assert not np.array_equal(played(1), played(2))
    assert sorted(np.bincount(played(1), minlength=10)) == [2] * 5 + [3] * 5
    cycle = availability(file, 25, format="fedscale").models[0].trace_device
    assert list(cycle) == [k % 10 for k in range(25)]
    # fewer devices than trace devices: distinct trace devices, drawn from all of them
    few = [set(availability(file, 4, seed=s, format="fedscale", assign="random").models[0].trace_device)
           for s in range(8)]
    assert all(len(f) == 4 for f in few) and set().union(*few) - {0, 1, 2, 3}


def test_reuse_false_needs_a_trace_device_per_member(tmp_path):
    file = dump(tmp_path / "behave.pkl", {k: BEHAVE_1C[1] for k in range(5)})
    scenario = tmp_path / "s.yaml"
    entries = [{"kind": "always", "share": 0.5},
               {"kind": "trace", "file": "behave.pkl", "format": "fedscale", "reuse": False, "share": 0.5}]
    scenario.write_text(yaml.safe_dump(small_scenario(**{"population.devices": 12,
                                                         "population.availability": entries})))
    with pytest.raises(ScenarioError, match=r"population\.availability\.1\.reuse.*behave\.pkl.*5 devices.*6 devices"):
        load_scenario(scenario)
    # ten devices, five in the entry: every member has its own trace device
    loaded = load_scenario(scenario, ["population.devices=10"])
    mix = AvailabilityMix(loaded.population.availability, 10, seed=0)
    assert sorted(mix.models[1].trace_device) == [0, 1, 2, 3, 4]
    with pytest.raises(ScenarioError, match=r"reuse.*5 devices.*6 devices"):  # the world checks too
        availability(file, 6, format="fedscale", reuse=False)
    assert len(availability(file, 6, format="fedscale").models[0].trace_device) == 6  # reuse: true (default)


def test_a_rank_tie_hands_the_most_online_traces_to_the_devices_with_most_data(tmp_path):
    # trace device k is online k + 1 seconds a period (periods differ per device)
    trace = {k: {"active": [0], "inactive": [k], "finish_time": 20 + k} for k in range(8)}
    file = dump(tmp_path / "behave.pkl", trace)
    counts = np.array([[s, 0] for s in (30, 10, 80, 20, 70, 40, 60, 50)])  # samples per device
    scenario = validate_scenario({
        "name": "t", "rounds": 1, "algorithm": {"clients_per_round": 1},
        "population": {"devices": 8, "availability": [{"kind": "trace", "file": str(file), "format": "fedscale"}],
                       "ties": [{"by": "samples", "sets": "trace"}]}})
    model = SimulatedSystem(scenario, counts).availability.models[0]
    assert list(model.trace_device) == list(np.argsort(np.argsort(counts[:, 0])))  # more data, more online
    assert list(model.online_s[model.trace_device]) == list(np.argsort(np.argsort(counts[:, 0])) + 1.0)


# ---------------------------------------------------------------------------------------- bad input
BAD_PICKLES = [
    ("empty", b"", "empty"),
    ("not a pickle", b"device_id,start_s,end_s\na,1,2\n", "not a readable pickle.*format: csv"),
    ("truncated", pickle.dumps(BEHAVE_1C)[:-5], "not a readable pickle"),
    ("a list", pickle.dumps([1, 2]), "dict of devices.*list"),
    ("entry not a dict", pickle.dumps({3: [0, 1]}), "key 3: each entry must be a dict"),
    ("missing key", pickle.dumps({3: {"active": [0], "inactive": [1]}}), "key 3: the entry lacks 'finish_time'"),
    ("lengths", pickle.dumps({3: {"active": [0, 5], "inactive": [1], "finish_time": 9}}),
     "key 3: 'active' has 2 entries, 'inactive' 1"),
    ("reversed", pickle.dumps({3: {"active": [4], "inactive": [1], "finish_time": 9}}),
     r"key 3: active\[0\] = 4 is after inactive\[0\] = 1"),
    ("after finish", pickle.dumps({3: {"active": [4], "inactive": [12], "finish_time": 9}}),
     r"key 3: inactive\[0\] = 12 is after finish_time = 9"),
    ("overlap", pickle.dumps({1: BEHAVE_1C[1], "x": {"active": [0, 3], "inactive": [5, 8], "finish_time": 9}}),
     r"key 'x': inactive\[0\] = 5 is after active\[1\] = 3"),
    ("negative", pickle.dumps({3: {"active": [-1], "inactive": [1], "finish_time": 9}}), r"active\[0\] = -1 is negative"),
    ("finish 0", pickle.dumps({3: {"active": [], "inactive": [], "finish_time": 0}}),
     "'finish_time' must be a positive number"),
    ("not numbers", pickle.dumps({3: {"active": ["0"], "inactive": [1], "finish_time": 9}}),
     r"'active'\[0\] must be a number of seconds, got '0'"),
    ("no devices", pickle.dumps({}), "no devices"),
]


@pytest.mark.parametrize("case,content,message", BAD_PICKLES, ids=[c[0] for c in BAD_PICKLES])
def test_bad_behave_traces_are_clear_scenario_errors(tmp_path, case, content, message):
    file = tmp_path / "behave.pkl"
    file.write_bytes(content)
    with pytest.raises(ScenarioError, match=message) as error:
        read_availability(file, "fedscale")
    assert str(file) in str(error.value)


BAD_CAPACITIES = [
    ("missing", {"1": {"computation": 5.0}}, "key '1': each entry must be a dict with 'computation'"),
    ("zero", {1: {"computation": 5.0, "communication": 0.0}}, "key 1: 'communication' must be a positive number"),
    ("negative", {1: {"computation": -5.0, "communication": 3.0}}, "key 1: 'computation' must be a positive"),
    ("text", {1: {"computation": "fast", "communication": 3.0}}, "'computation' must be a number"),
    ("legacy list", {1: [5.0, 3.0]}, "key 1: each entry must be a dict"),
]


@pytest.mark.parametrize("case,data,message", BAD_CAPACITIES, ids=[c[0] for c in BAD_CAPACITIES])
def test_bad_capacity_pickles_are_clear_scenario_errors(tmp_path, case, data, message):
    with pytest.raises(ScenarioError, match=message):
        read_capacity(dump(tmp_path / "capacity.pkl", data))


BAD_CSVS = [
    ("availability", "start_s,end_s\n1,2\n", "line 1: an availability trace needs the columns.*missing device_id"),
    ("availability", "device_id,start_s,end_s\na,1,2\na,x,3\n", "line 3: start_s must be a number, got 'x'"),
    ("availability", "device_id,start_s,end_s\na,1,2\na,4,3\n", "line 3: needs 0 <= start_s < end_s"),
    ("availability", "device_id,start_s,end_s\na,1,inf\n", "line 2: needs 0 <= start_s < end_s"),
    ("availability", "device_id,start_s,end_s\n", "holds no intervals"),
    ("availability", "", "empty"),
    ("capacity", "device_id,s_per_sample,down_mbps\na,1,2\n", "line 1: a capacity trace needs.*missing up_mbps"),
    ("capacity", "device_id,s_per_sample,down_mbps,up_mbps\na,1,2,0\n", "line 2: up_mbps must be a positive"),
    ("capacity", "device_id,s_per_sample,down_mbps,up_mbps\na,1,2,3\na,1,2,3\n", "line 3: device_id 'a' already"),
    ("capacity", "device_id,s_per_sample,down_mbps,up_mbps,latency_s\na,1,2,3,-1\n", "line 2: latency_s must be >= 0"),
    ("capacity", "device_id,s_per_sample,down_mbps,up_mbps\na,fast,2,3\n", "line 2: s_per_sample must be a number"),
]


@pytest.mark.parametrize("kind,text,message", BAD_CSVS)
def test_bad_csv_traces_are_clear_scenario_errors(tmp_path, kind, text, message):
    file = tmp_path / "trace.csv"
    file.write_text(text)
    with pytest.raises(ScenarioError, match=message):
        read_availability(file, "csv") if kind == "availability" else read_capacity(file, "csv")


def test_a_pickle_given_as_csv_and_a_missing_file(tmp_path):
    file = dump(tmp_path / "capacity.pkl", CAPACITY_1C)
    with pytest.raises(ScenarioError, match="not a text CSV file; for FedScale's pickle set format: fedscale"):
        read_capacity(file, "csv")
    with pytest.raises(ScenarioError, match="no such trace file"):
        read_capacity(tmp_path / "nothing.pkl")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario(**{"population.compute": {"kind": "trace",
                                                                                "file": "nothing.pkl"}})))
    with pytest.raises(ScenarioError, match=r"population\.compute\.file: no trace file .*nothing\.pkl"):
        load_scenario(scenario)


def test_a_duration_that_disagrees_is_a_warning(tmp_path):
    trace = {1: {**BEHAVE_1C[1], "duration": 999}}
    with pytest.warns(TraceWarning, match="1 of 1 devices have a 'duration'"):
        windows = read_availability(dump(tmp_path / "behave.pkl", trace), "fedscale")
    assert list(windows.online_s()) == [202.0]


class RunsCode:
    def __reduce__(self):
        return os.system, (f"touch {MARKER}",)


MARKER = Path("/tmp") / f"trace-ran-code-{os.getpid()}"


def test_a_pickle_that_runs_code_is_refused(tmp_path):
    file = dump(tmp_path / "behave.pkl", {1: RunsCode()})
    with pytest.raises(ScenarioError, match=r"refers to (posix|os|nt)\.system.*never run code"):
        read_availability(file, "fedscale")
    assert not MARKER.exists()
    numpy_pickle = dump(tmp_path / "numpy.pkl", {1: {"computation": np.float64(3.0), "communication": 1.0}})
    with pytest.raises(ScenarioError, match="refers to numpy"):
        read_capacity(numpy_pickle)
    sets = dump(tmp_path / "sets.pkl", {1: {"computation": 3.0, "communication": 1.0, "tags": {1, 2}}})
    assert read_capacity(sets).count == 1  # builtin containers are fine


def test_cli_exits_2_without_a_traceback(ray_session, tmp_path, capsys):
    """In this process, on the session's Ray (exit codes of a fresh process: test_reliability, test_scenario)."""
    dump(tmp_path / "behave.pkl", {9: {"active": [4], "inactive": [1], "finish_time": 9}})
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario(**{"population.availability": [
        {"kind": "trace", "file": "behave.pkl", "format": "fedscale"}]})))
    assert main(["validate", str(scenario), "--quiet"]) == 2
    capsys.readouterr()
    assert main(["run", str(scenario), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "population.availability.0.file" in err and "key 9" in err
    assert "Traceback" not in err and not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------ files, runs
def test_trace_files_enter_the_fingerprint_by_content(tmp_path):
    dump(tmp_path / "capacity.pkl", CAPACITY_1C)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario(**{"population.network": {"kind": "trace",
                                                                                "file": "capacity.pkl"}})))
    first = fingerprint(load_scenario(scenario))
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    shutil.copy(tmp_path / "capacity.pkl", moved / "capacity.pkl")
    shutil.copy(scenario, moved / "s.yaml")
    assert fingerprint(load_scenario(moved / "s.yaml")) == first  # relative to the scenario file, by content
    dump(moved / "capacity.pkl", {1: {"computation": 100.0, "communication": 8001.0}})
    assert fingerprint(load_scenario(moved / "s.yaml")) != first


def test_shipped_examples_load_and_regenerate_byte_for_byte(tmp_path):
    traces = ROOT / "scenarios" / "traces"
    windows = read_availability(traces / "example_behave_trace.pkl", "fedscale")
    assert windows.count == 300 and set(windows.period) == {7 * 86400.0}
    assert 0.1 < windows.online_s().mean() / (7 * 86400) < 0.5
    capacity = read_capacity(traces / "example_device_capacity.pkl")
    assert capacity.count == 300 and (capacity.s_per_sample > 0).all()
    shutil.copy(traces / "make_example_trace.py", tmp_path)
    subprocess.run([sys.executable, str(tmp_path / "make_example_trace.py")], check=True, capture_output=True)
    for name in ("example_trace.csv", "example_behave_trace.pkl", "example_device_capacity.pkl"):
        assert (tmp_path / name).read_bytes() == (traces / name).read_bytes(), name


def test_two_rounds_with_fedscale_availability_and_capacity(ray_session, tmp_path):
    from emulator.driver import run_scenario
    from emulator.recording.rundir import read_metrics

    dump(tmp_path / "behave.pkl", {k: {"active": [0, 5000], "inactive": [3000 + 10 * k, 8000], "finish_time": 9000}
                                   for k in range(30)})
    dump(tmp_path / "capacity.pkl", CAPACITY_1C)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario(**{
        "rounds": 2, "population.compute_jitter": 0.0,
        "population.availability": [{"kind": "trace", "file": "behave.pkl", "format": "fedscale"}],
        "population.compute": {"kind": "trace", "file": "capacity.pkl"},
        "population.network": {"kind": "trace", "file": "capacity.pkl"},
        "system": {"model": "simulated", "deadline_s": 2000}})))
    result = run_scenario(load_scenario(scenario), tmp_path / "run")
    rows = read_metrics(result.path)
    assert len(rows) == 2 and all(int(r["participants"]) > 0 for r in rows)
    # every report computes 5 steps x 16 samples at 0.3 or 1.2 s a sample: a round lasts at least 24 s
    assert all(float(r["round_duration_s"]) >= 24.0 for r in rows)

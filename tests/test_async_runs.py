"""FedAsync and FedBuff as whole runs: rows are server updates, applied in simulated-time order, so the
numbers do not depend on the runner count, and a run resumed from a checkpoint taken mid-stream (devices
in flight) ends as the uninterrupted run does."""
import pytest

from conftest import comparable, small_scenario
from emulator.driver import resume_run, run_scenario
from emulator.scenario import ScenarioError
from emulator.parts import validate_scenario

WORLD = {"population.availability": [{"kind": "markov", "mean_on_s": 900, "mean_off_s": 900}],
         "population.dropout_per_hour": 2.0,
         "population.compute": {"kind": "lognormal", "median_s_per_sample": 0.5, "sigma": 0.8},
         "system.deadline_s": 120.0}
FEDBUFF = {"name": "fedbuff", "concurrency": 10, "buffer": 4, "client_lr": 0.05, "local_steps": 5, "batch_size": 16}
FEDASYNC = {"name": "fedasync", "concurrency": 6, "alpha": 0.6, "client_lr": 0.05, "local_steps": 5, "batch_size": 16,
            "staleness": {"kind": "hinge", "a": 1.0, "b": 2}}


def scenario(algorithm, **overrides):
    return validate_scenario(small_scenario(**{"algorithm": algorithm, "rounds": 8, **WORLD, **overrides}))


@pytest.mark.parametrize("algorithm", [FEDBUFF, FEDASYNC], ids=["fedbuff", "fedasync"])
def test_async_runs_are_identical_with_one_runner_or_three(ray_session, tmp_path, algorithm):
    one = comparable(run_scenario(scenario(algorithm, **{"runtime.runners": 1}), tmp_path / "one").path)
    three = comparable(run_scenario(scenario(algorithm, **{"runtime.runners": 3}), tmp_path / "three").path)
    assert one == three
    assert [int(r["version"]) for r in one] == list(range(1, 9))  # a row per server update
    per_update = algorithm.get("buffer", 1)
    assert all(int(r["participants"]) <= per_update for r in one)
    assert max(int(r["staleness_max"]) for r in one) > 0  # updates did arrive late
    assert all(float(r["concurrency_max"]) <= algorithm["concurrency"] for r in one)
    times = [float(r["sim_time_s"]) for r in one]
    assert times == sorted(times)
    assert float(one[-1]["test_acc"]) > float(one[0]["test_acc"])  # it learns


def test_resume_from_a_checkpoint_taken_mid_stream(ray_session, tmp_path):
    whole = run_scenario(scenario(FEDBUFF), tmp_path / "whole").path
    part = run_scenario(scenario(FEDBUFF, rounds=5, **{"output.checkpoint_every": 5}), tmp_path / "part").path
    resume_run(part, overrides=["rounds=8"], notify=lambda message: None)
    assert comparable(part) == comparable(whole)


def test_staleness_function_changes_the_model_not_the_world(ray_session, tmp_path):
    hinge = comparable(run_scenario(scenario(FEDASYNC), tmp_path / "hinge").path)
    constant = comparable(run_scenario(scenario({**FEDASYNC, "staleness": {"kind": "constant"}}), tmp_path / "c").path)
    system = ["sim_time_s", "participants", "dropped", "version", "staleness_max", "bytes_up"]
    assert [[r[c] for c in system] for r in hinge] == [[r[c] for c in system] for r in constant]
    assert hinge[0]["train_loss"] == constant[0]["train_loss"]  # the first update trains on version 0 either way
    assert max(int(r["staleness_max"]) for r in hinge) > FEDASYNC["staleness"]["b"]  # the hinge did bite
    assert [r["test_loss"] for r in hinge] != [r["test_loss"] for r in constant]


@pytest.mark.parametrize("algorithm, field, fix", [
    ({"name": "fedbuff", "concurrency": 0}, "algorithm.concurrency", "greater than 0"),
    ({"name": "fedbuff", "concurrency": 41}, "algorithm.concurrency", "raise population.devices"),
    ({"name": "fedbuff", "concurrency": 8, "buffer": 9}, "algorithm.buffer", "lower the buffer"),
    ({"name": "fedasync", "concurrency": 8, "staleness": {"kind": "exponential"}}, "algorithm.staleness.kind",
     "choose one of 'constant', 'polynomial' or 'hinge'"),
    ({"name": "fedasync", "concurrency": 8, "alpha": -0.5}, "algorithm.alpha", "greater than 0"),
    ({"name": "fedasync", "concurrency": 8, "server_optimizer": {"kind": "adam"}}, "algorithm.server_optimizer",
     "use fedbuff"),
])
def test_bad_async_settings_name_the_field(algorithm, field, fix):
    with pytest.raises(ScenarioError) as error:
        validate_scenario(small_scenario(algorithm=algorithm))
    assert f"{field}:" in str(error.value) and fix in str(error.value)


def test_async_needs_the_simulated_clock():
    with pytest.raises(ScenarioError, match=r"system\.model: fedbuff is asynchronous"):
        validate_scenario(small_scenario(algorithm={"name": "fedbuff", "concurrency": 8, "buffer": 2},
                                         **{"system.model": "ideal"}))


def test_async_trips_reach_events_csv(ray_session, tmp_path):
    import csv

    path = run_scenario(scenario(FEDBUFF, rounds=3, **{"system.events": True}), tmp_path / "events").path
    rows = list(csv.DictReader(open(path / "events.csv")))
    metrics = comparable(path)
    for r in (1, 2, 3):
        events = [row["event"] for row in rows if int(row["round"]) == r]
        assert events.count("reported") == int(metrics[r - 1]["participants"])
        assert events.count("selected") == int(metrics[r - 1]["selected"])
    assert [float(row["time_s"]) for row in rows] == sorted(float(row["time_s"]) for row in rows)

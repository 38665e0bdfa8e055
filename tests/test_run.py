"""End-to-end runs on the real local Ray instance."""
import json

import pytest
import yaml

from conftest import small_scenario
from emulator.cli import main
from emulator.driver import run_scenario
from emulator.recording.rundir import read_metrics
from emulator.scenario import ScenarioError
from emulator.parts import validate_scenario

REQUIRED = ["round", "kind", "sim_time_s", "participants", "dropped", "bytes_down", "bytes_up", "train_loss",
            "train_acc", "test_loss", "test_acc", "wall_time_s"]


def run(tmp_path, name="run", **overrides):
    scenario = validate_scenario(small_scenario(**overrides))
    return run_scenario(scenario, tmp_path / name)


def test_a_run_learns_and_writes_its_directory(ray_session, tmp_path):
    result = run(tmp_path, rounds=12, **{"evaluation.every": 4, "system.model": "ideal"})
    rows = read_metrics(result.path)
    assert [int(r["round"]) for r in rows] == list(range(1, 13))
    assert all(column in rows[0] for column in REQUIRED)
    evaluated = [r for r in rows if r["test_acc"] != ""]
    assert [int(r["round"]) for r in evaluated] == [4, 8, 12]
    assert rows[0]["test_acc"] == "" and rows[0]["train_acc"] != ""
    # 10 classes: chance is about 0.1 and the trained model must do far better.
    assert float(evaluated[-1]["test_acc"]) > 0.4
    assert float(evaluated[-1]["test_loss"]) < float(evaluated[0]["test_loss"])
    assert all(int(r["participants"]) == 8 for r in rows)
    model_bytes = (60 * 10 + 10) * 4
    assert all(int(r["bytes_down"]) == 8 * model_bytes == int(r["bytes_up"]) for r in rows)
    assert [float(r["sim_time_s"]) for r in rows] == [60.0 * k for k in range(1, 13)]
    summary = json.loads((result.path / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 12
    assert summary["final_test_acc"] == pytest.approx(float(evaluated[-1]["test_acc"]))
    resolved = yaml.safe_load((result.path / "scenario.yaml").read_text())
    assert validate_scenario(resolved).algorithm.clients_per_round == 8


def test_same_seed_same_metrics_with_one_and_two_runners(ray_session, tmp_path):
    one = read_metrics(run(tmp_path, "one", **{"runtime.runners": 1}).path)
    two = read_metrics(run(tmp_path, "two", **{"runtime.runners": 2}).path)
    strip = lambda rows: [{k: v for k, v in r.items() if k != "wall_time_s"} for r in rows]
    assert strip(one) == strip(two)
    other_seed = read_metrics(run(tmp_path, "other", seed=4).path)
    assert strip(other_seed) != strip(one)


def test_sampling_with_replacement_trains_repeats_once(ray_session, tmp_path):
    result = run(tmp_path, **{"algorithm.sampling": "with_replacement", "algorithm.clients_per_round": 30,
                              "population.devices": 10, "rounds": 2})
    rows = read_metrics(result.path)
    # 30 draws from 10 devices: repeats are certain, so fewer distinct participants than draws.
    assert all(int(r["participants"]) < 30 for r in rows)


def test_existing_run_directory_is_never_overwritten(ray_session, tmp_path):
    result = run(tmp_path, rounds=1)
    before = (result.path / "metrics.csv").read_text()
    with pytest.raises(ScenarioError, match="already holds a run"):
        run(tmp_path, rounds=1)
    assert (result.path / "metrics.csv").read_text() == before


def test_cli_run(ray_session, tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_scenario(rounds=2)))
    assert main(["run", str(path), "--out", str(tmp_path / "cli"), "--quiet", "--set", "rounds=3"]) == 0
    assert len(read_metrics(tmp_path / "cli")) == 3
    assert "3 rounds" in capsys.readouterr().out


def test_simulated_run_writes_participation_and_events_that_agree_with_metrics(ray_session, tmp_path):
    import pandas as pd

    result = run(tmp_path, rounds=6, **{
        "population.availability": [{"kind": "markov", "mean_on_s": 1200, "mean_off_s": 1200}],
        "population.dropout_per_hour": 3.0, "population.compute": {"median_s_per_sample": 0.5},
        "system.deadline_s": 200.0, "system.min_report_fraction": 0.25, "system.events": True})
    metrics = pd.read_csv(result.path / "metrics.csv")
    participation = pd.read_csv(result.path / "participation.csv")
    events = pd.read_csv(result.path / "events.csv")
    assert len(participation) == 40 and set(participation.availability) == {"markov"}
    assert participation.samples.sum() > 0 and (participation.s_per_sample > 0).all()
    ok = metrics.failed == 0
    assert participation.reported.sum() == metrics.participants[ok].sum()
    assert participation.selected.sum() == metrics.selected.sum()
    assert participation.dropped.sum() == metrics.dropped.sum() > 0
    assert participation.straggled.sum() == metrics.stragglers.sum()
    assert (metrics.sim_time_s.diff().dropna() > 0).all()
    assert (metrics.round_duration_s <= 200.0 + 1e-6).all()
    counts = events.groupby("event").size()
    assert counts["selected"] == metrics.selected.sum() and counts["dropped"] == metrics.dropped.sum()
    assert set(events["round"]) == set(metrics["round"])


@pytest.mark.heavy
def test_the_data_built_while_ray_starts_survives_its_process_forks():
    """The driver builds the federation in a thread while ray.init forks Ray's processes (with their
    pthread_atfork handlers). OpenBLAS's handler stops its worker threads, so a threaded matrix product in
    flight in the data thread (the synthetic labels, devices of thousands of samples) waited for them forever:
    a quickstart hung so. Forks as Ray's (a preexec_fn makes Python fork rather than vfork), until the build
    ends: before the fix, the first build here hung."""
    import subprocess
    import time

    from emulator.driver.data import DataBuilder
    from emulator.runtime.startup import StartupProfile

    scenario = validate_scenario(small_scenario(**{
        "population.devices": 200, "data.synthetic": {"iid": True, "min_samples": 1500, "max_samples": 2500}}))
    for _ in range(3):
        data = DataBuilder(scenario, None, StartupProfile(), background=True, notify=lambda line: None)
        deadline = time.monotonic() + 60
        while data.thread.is_alive() and time.monotonic() < deadline:
            subprocess.run(["true"], preexec_fn=lambda: None)
        data.thread.join(timeout=5)
        assert not data.thread.is_alive(), "the data build hung while the process forked"
        assert data.result().num_devices == 200

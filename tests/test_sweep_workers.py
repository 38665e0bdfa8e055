"""A sweep's runs in worker processes of this machine (emulator/sweep_workers.py): which runs go there, that
they give the metrics of runs made one by one, and that a stop request reaches every worker's run."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import comparable, small_scenario
from emulator.driver import run_scenario
from emulator.parts import validate_scenario
from emulator.sweep_workers import in_process, needs_ray, usable_cores
from emulator.sweeps import plan_sweep, run_sweep


@pytest.mark.parametrize("runtime, address, ray", [
    ({}, None, False),  # the backend left to the sweep
    ({"backend": "inline"}, None, False),
    ({"backend": "ray"}, None, True),  # asked for: honoured
    ({}, "10.0.0.1:6379", True),  # a cluster
    ({"address": "10.0.0.1:6379"}, None, True),
    ({"address": "local"}, None, False),
    ({"num_gpus": 0.25}, None, True),  # GPU shares are Ray's
])
def test_which_runs_need_ray(runtime, address, ray):
    raw = small_scenario()
    raw["runtime"] = {"runners": 1, **runtime}
    scenario = validate_scenario(raw)
    assert needs_ray(scenario, address) is ray
    if not ray:
        assert in_process(scenario).runtime.backend == "inline"
        assert in_process(scenario).model_dump() == {**scenario.model_dump(), "runtime": {
            **scenario.runtime.model_dump(), "backend": "inline"}}


@pytest.mark.heavy
def test_a_sweep_in_worker_processes_gives_the_metrics_of_runs_made_one_by_one_and_a_failed_run_loses_itself(
        tmp_path, capsys, forked_sweep_workers):
    raw = small_scenario(rounds=3)
    del raw["runtime"]["backend"]  # the sweep's to choose
    (tmp_path / "s.yaml").write_text(json.dumps(raw))
    runs = plan_sweep(tmp_path / "s.yaml", [], [("algorithm.client_lr", ["0.1", "1e30"])], 2, tmp_path / "sweep")
    result = run_sweep(runs, tmp_path / "sweep", parallel=4)
    assert f"4 of the sweep's runs go to {min(4, usable_cores())} worker processes" in capsys.readouterr().err
    diverging = [run for run in runs if run.scenario.algorithm.client_lr == 1e30]
    assert result.failed == diverging and all(run.error.startswith("diverged") for run in diverging)
    assert result.report is not None
    for run in runs:
        if run not in diverging:
            alone = run_scenario(run.scenario, tmp_path / "alone" / run.name)  # here, one after another
            assert comparable(run.path) == comparable(alone.path)
        assert "backend: inline" in (run.path / "scenario.yaml").read_text()  # what ran is what is recorded


@pytest.mark.heavy
def test_sigterm_to_the_sweep_stops_every_workers_run_and_keeps_its_rounds(tmp_path):
    raw = small_scenario(rounds=100000, **{"evaluation.every": 50})
    del raw["runtime"]["backend"]
    (tmp_path / "s.yaml").write_text(json.dumps(raw))
    sweep = subprocess.Popen([sys.executable, "-m", "emulator", "sweep", "s.yaml", "--seeds", "2", "--out", "sw",
                              "--quiet"], cwd=tmp_path, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        metrics = [tmp_path / "sw" / f"tiny-seed{seed}" / "metrics.csv" for seed in (3, 4)]
        deadline = time.monotonic() + 120
        while not all(m.exists() and len(m.read_text().splitlines()) > 3 for m in metrics):
            assert time.monotonic() < deadline and sweep.poll() is None, "the runs did not start"
            time.sleep(0.2)
        workers = _descendants(sweep.pid)
        assert len(workers) == min(2, usable_cores())  # a worker process a run, one a core
        sweep.send_signal(signal.SIGTERM)
        _, err = sweep.communicate(timeout=60)
    finally:
        if sweep.poll() is None:  # a failed check above: nothing of the sweep may outlive the test
            os.killpg(sweep.pid, signal.SIGKILL)
            sweep.wait()
    assert sweep.returncode == 128 + signal.SIGTERM, err
    assert "Traceback" not in err
    for m in metrics:
        summary = json.loads((m.parent / "summary.json").read_text())
        assert summary["status"] == "interrupted"
        assert len(m.read_text().splitlines()) - 1 >= 3  # the rounds recorded before the stop are kept
    assert not [pid for pid in workers if _alive(pid)]  # no worker left running


def _descendants(pid: int) -> list[int]:
    parent = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            parent[int(entry)] = int(open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, of in parent.items() if of in frontier]
        found += children
        frontier = children
    return found


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"

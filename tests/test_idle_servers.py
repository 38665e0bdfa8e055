"""Server actors kept between the runs of a session (emulator/runtime/idle_servers.py): a later run is served
by the process an earlier one used, with the metrics a fresh process gives; a run that did not end normally
keeps nothing."""
from __future__ import annotations

import pytest
import ray

from conftest import comparable, small_scenario
from emulator.driver import run_scenario
from emulator.parts import validate_scenario
from emulator.runtime import idle_servers


def _on_ray(**overrides):
    return validate_scenario(small_scenario(**{"runtime.backend": "ray", "runtime.runners": 1, **overrides}))


def _idle_pids() -> list[int]:
    return sorted(ray.get([server.pid.remote() for server in idle_servers.idle_servers()]))


def test_a_later_run_is_served_by_an_earlier_run_s_process_with_a_fresh_process_s_metrics(ray_session, tmp_path):
    for server in idle_servers.idle_servers():  # whatever earlier tests left: this test's first server is new
        ray.kill(server)
    idle_servers._IDLE.clear()

    run_scenario(_on_ray(seed=1), tmp_path / "first")
    (kept,) = _idle_pids()
    assert ray.get(idle_servers.idle_servers()[0].serving.remote()) is None  # it forgot the run
    run_scenario(_on_ray(seed=2, **{"algorithm.name": "fedavgm", "algorithm.momentum": 0.5}), tmp_path / "other")
    run_scenario(_on_ray(seed=1), tmp_path / "again")
    assert _idle_pids() == [kept]  # one process served all three runs
    assert comparable(tmp_path / "again") == comparable(tmp_path / "first")
    assert comparable(tmp_path / "other") != comparable(tmp_path / "first")


def test_a_run_that_fails_does_not_hand_its_server_back(ray_session, tmp_path):
    run_scenario(_on_ray(seed=4), tmp_path / "ok")
    before = _idle_pids()
    assert before  # the run above handed its server back

    def fail_at_round_two(row):
        if row["round"] == 2:
            raise RuntimeError("stopped by the test")

    with pytest.raises(RuntimeError, match="stopped by the test"):
        run_scenario(_on_ray(seed=4), tmp_path / "failed", on_round=fail_at_round_two)
    assert len(_idle_pids()) == len(before) - 1  # it took an idle server and stopped it at the end

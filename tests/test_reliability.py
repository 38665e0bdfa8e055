"""Reliability: resume, Ctrl-C, a runner killed mid-run, and bad input (a two-node cluster: test_two_node_cluster.py)."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import ray

from conftest import STATEFUL, comparable, digest, small_scenario
from emulator.cli import main
from emulator.driver import resume_run, run_scenario
from emulator.recording.rundir import read_metrics
from emulator.runtime.pool import shared_runners
from emulator.parts import validate_scenario

BAD = sorted((Path(__file__).parent / "bad_scenarios").glob("*.yaml"))

@pytest.fixture(scope="module")
def reference(ray_session, tmp_path_factory):
    """The stateful scenario run without interruption."""
    path = tmp_path_factory.mktemp("ref") / "run"
    run_scenario(validate_scenario(small_scenario(**STATEFUL)), path)
    return path


def test_an_interrupted_run_resumes_to_the_same_metrics(reference, tmp_path):
    path = tmp_path / "run"

    def stop_after_round_5(row):
        if row["round"] == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_scenario(validate_scenario(small_scenario(**STATEFUL)), path, on_round=stop_after_round_5)
    summary = json.loads((path / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["rounds_completed"] == 5
    assert len(read_metrics(path)) == 5  # every finished round is kept

    result = resume_run(path)  # the last checkpoint is after round 4: round 5 is run again
    assert result.summary["status"] == "completed" and result.summary["resumed_from_round"] == 4
    assert comparable(path) == comparable(reference)


def test_resume_from_the_command_line_and_extend(reference, tmp_path):
    path = tmp_path / "run"
    raw = small_scenario(**{**STATEFUL, "rounds": 4})
    run_scenario(validate_scenario(raw), path)
    assert main(["run", "--resume", str(path), "--set", "rounds=7", "--quiet"]) == 0
    assert comparable(path) == comparable(reference)
    assert main(["run", "--resume", str(path), "--set", "algorithm.client_lr=1.0"]) == 2  # not a resumable change


def test_same_metrics_with_one_two_and_four_runners(reference, tmp_path):
    for runners in (1, 4):
        raw = small_scenario(**STATEFUL, **{"runtime.runners": runners, "runtime.backend": "ray"})  # Ray's dispatch
        run_scenario(validate_scenario(raw), tmp_path / f"r{runners}")
        assert comparable(tmp_path / f"r{runners}") == comparable(reference)


def test_a_runner_killed_mid_round_costs_time_not_results(reference, tmp_path):
    raw = small_scenario(**{**STATEFUL, "runtime.runners": 2, "runtime.backend": "ray"})
    killed = {}

    def kill_during_round_3(row):
        if row["round"] == 2:
            def kill():
                time.sleep(0.05)  # round 3 has started: its jobs are in flight on both runners
                victim = shared_runners()[0]
                killed["pid"] = ray.get(victim.pid.remote())
                killed["victim"] = victim
                os.kill(killed["pid"], signal.SIGKILL)
            threading.Thread(target=kill, daemon=True).start()

    run_scenario(validate_scenario(raw), tmp_path / "run", on_round=kill_during_round_3)
    assert comparable(tmp_path / "run") == comparable(reference)
    # the runner really died and Ray started it again (its unfinished calls were retried)
    assert ray.get(killed["victim"].pid.remote()) != killed["pid"]


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_input_gets_one_clear_paragraph_and_exit_code_2(ray_session, path, tmp_path, capsys):
    expected = path.read_text().splitlines()[0].removeprefix("# expect: ")
    # point --out at a finished run: whatever the mistake, that run must come through untouched
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "metrics.csv").write_text("round,test_acc\n1,0.5\n")
    (existing / "summary.json").write_text("{}")
    before = digest(existing)
    for out in (existing, tmp_path / "fresh"):
        code = main(["run", str(path), "--out", str(out), "--quiet"])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "Traceback" not in err and "\n\n" not in err.strip()
        if out.name == "fresh":
            assert expected in err, err
            assert not out.exists()
    assert digest(existing) == before


def test_bad_input_from_a_fresh_process_has_no_traceback(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "emulator", "run", str(BAD[0]), "--quiet"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and proc.stderr.startswith("error:")

"""benchmarks/round_probe: what benchmarks/round_costs.py reads as a round's training and its surroundings.
The probe patches the emulator only from the outside (at import, in every process it is on the path of), so a
run with it must give the run's own numbers, and its totals must add up."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import comparable

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = """
import json, sys
from emulator.driver import run_scenario
from emulator.parts import load_scenario
scenario = load_scenario(sys.argv[1], ["rounds=2", "runtime.backend=inline", "population.devices=40",
                                       "algorithm.clients_per_round=8"])
result = run_scenario(scenario, sys.argv[2])
print(json.dumps({"status": result.summary["status"]}))
"""


@pytest.mark.slow
def test_the_probe_times_training_inside_tasks_and_leaves_the_run_s_numbers_alone(tmp_path):
    probe = tmp_path / "probe"
    probe.mkdir()
    runs = {}
    for name, env in (("probed", {"PYTHONPATH": str(ROOT / "benchmarks" / "round_probe"),
                                  "ROUND_PROBE_DIR": str(probe)}), ("plain", {})):
        out = tmp_path / name
        done = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT / "scenarios" / "quickstart.yaml"), str(out)],
                              env={**os.environ, **env}, capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-2000:]
        runs[name] = comparable(out)
    assert runs["probed"] == runs["plain"]
    (totals,) = [json.loads(path.read_text()) for path in probe.glob("*.json")]  # the one process that trained
    assert totals["tasks"] >= 2
    assert 0 < totals["train_s"] < totals["task_s"]
    parts = totals["data_s"] + totals["load_s"] + totals["delta_s"] + totals["fold_s"]
    assert 0 < parts < totals["task_s"] - totals["train_s"] + 1e-3

"""Run directories written before the code moved into packages (commit 2df6435) still report and resume.

tests/fixtures/run_2df6435/ holds two runs of one stateful scenario (Markov availability, dropout, a
deadline, FedAvgM's server momentum, top-k uploads with error-feedback residuals) written by 2df6435:
`complete` ran 7 rounds, `short` the same scenario for 4. Their checkpoints were pickled by that code, on
the CPU named in cpu.txt (tests/conftest.py's cpu_identity).
"""
from __future__ import annotations

import shutil
from pathlib import Path

from conftest import close_rows, comparable, cpu_identity

from emulator.analysis import load_runs, write_report
from emulator.driver import resume_run

FIXTURES = Path(__file__).parent / "fixtures" / "run_2df6435"


def test_an_old_run_directory_reports(tmp_path):
    runs = load_runs([FIXTURES])
    assert sorted(run.path.name for run in runs) == ["complete", "short"]
    assert all(run.summary["status"] == "completed" for run in runs)
    assert [len(run.metrics) for run in sorted(runs, key=lambda r: r.path.name)] == [7, 4]
    report = write_report([FIXTURES / "complete", FIXTURES / "short"], tmp_path / "report")
    assert report.is_file() and "legacy" in report.read_text()


def test_an_old_run_directory_extends_to_the_metrics_of_the_uninterrupted_run(ray_session, tmp_path):
    """Its checkpoint unpickles in today's code and the three extra rounds come out bit-identical to the
    rounds 5-7 that 2df6435 ran without stopping."""
    run_dir = tmp_path / "short"
    shutil.copytree(FIXTURES / "short", run_dir)
    result = resume_run(run_dir, overrides=["rounds=7"])
    assert result.summary["status"] == "completed"
    got, want = comparable(run_dir / "metrics.csv"), comparable(FIXTURES / "complete" / "metrics.csv")
    if (FIXTURES / "cpu.txt").read_text().strip() == cpu_identity():
        assert got == want
    else:  # another CPU rounds the training's floats differently; the rest must match exactly
        close_rows(got, want)

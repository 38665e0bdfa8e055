"""A resume never loses a recorded round: when the run directory no longer matches what a resume could
honour it refuses (exit 2) and every recorded round stays as it was, whatever point the run had reached
(before its first checkpoint or after one); and a resume that rewinds to a checkpoint and then stops
before getting back puts the dropped rounds back. In process (runtime.backend: inline)."""
import pytest
import yaml
from conftest import small_scenario

from emulator.cli import main
from emulator.driver import resume_run, run_scenario
from emulator.parts import validate_scenario
from emulator.recording.rundir import read_metrics
from emulator.scenario import ScenarioError

ROUND_FILES = ("metrics.csv", "class_accuracy.csv", "events.csv")


def stopped_run(tmp_path, checkpoint_every: int, stop_after: int = 5):
    """A run of 8 rounds interrupted after `stop_after`, checkpointing every `checkpoint_every` (0: none yet)."""
    path = tmp_path / f"run-{checkpoint_every}"

    def stop(row):
        if row["round"] == stop_after:
            raise KeyboardInterrupt

    scenario = small_scenario(**{"rounds": 8, "output.checkpoint_every": checkpoint_every, "system.events": True})
    with pytest.raises(KeyboardInterrupt):
        run_scenario(validate_scenario(scenario), path, on_round=stop)
    return path


def snapshot(path) -> dict[str, bytes]:
    return {name: (path / name).read_bytes() for name in ROUND_FILES if (path / name).exists()}


def edit(path, **changes):
    raw = yaml.safe_load((path / "scenario.yaml").read_text())
    for key, value in changes.items():
        node = raw
        *parents, last = key.split(".")
        for part in parents:
            node = node[part]
        node[last] = value
    (path / "scenario.yaml").write_text(yaml.safe_dump(raw))


# checkpoint_every 0: the run stopped before any checkpoint; 3: after the one of round 3
@pytest.mark.parametrize("checkpoint_every", [0, 3])
@pytest.mark.parametrize("change", [{"algorithm.client_lr": 0.5}, {"seed": 11}, {"population.devices": 39}])
def test_an_edited_experiment_is_refused_and_every_recorded_round_stays(tmp_path, capsys, checkpoint_every, change):
    path = stopped_run(tmp_path, checkpoint_every)
    edit(path, **change)
    before = snapshot(path)
    assert main(["run", "--resume", str(path), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "no longer describes the experiment" in err and next(iter(change)) in err, err
    assert snapshot(path) == before and len(read_metrics(path)) == 5


@pytest.mark.parametrize("checkpoint_every", [0, 3])
def test_fewer_rounds_than_on_record_are_refused_and_every_recorded_round_stays(tmp_path, checkpoint_every):
    path = stopped_run(tmp_path, checkpoint_every)
    before = snapshot(path)
    with pytest.raises(ScenarioError, match="rounds: 4, but this run has 5 rounds on record"):
        resume_run(path, overrides=["rounds=4"])
    assert snapshot(path) == before


@pytest.mark.parametrize("ending", [KeyboardInterrupt, RuntimeError])  # interrupted, or failed
def test_a_resume_that_stops_before_getting_back_puts_the_dropped_rounds_back(tmp_path, ending):
    path = stopped_run(tmp_path, 3)  # rounds 1-5 on record, the checkpoint after round 3
    before = snapshot(path)

    def stop(row):  # round 4 is run again and recorded, then the resume ends before round 5
        if row["round"] == 4:
            raise ending("stopped")

    with pytest.raises(ending):
        resume_run(path, on_round=stop)
    assert snapshot(path) == before  # rounds 4 and 5, dropped by the rewind, are back as they were
    assert not (path / ".before-rewind").exists()


def test_a_resume_that_gets_back_past_the_dropped_rounds_keeps_the_new_ones(tmp_path):
    path = stopped_run(tmp_path, 3)
    result = resume_run(path)
    assert result.summary["status"] == "completed" and len(read_metrics(path)) == 8
    assert not (path / ".before-rewind").exists()


@pytest.mark.parametrize("damage", [b"{\"status\": \"runn", b"[1, 2]", b"\x00\xff garbage"])
def test_a_damaged_summary_is_refused_not_overwritten(tmp_path, damage):
    path = stopped_run(tmp_path, 3)
    (path / "summary.json").write_bytes(damage)
    before = snapshot(path)
    with pytest.raises(ScenarioError, match="summary.json is damaged"):
        resume_run(path)
    assert snapshot(path) == before and (path / "summary.json").read_bytes() == damage

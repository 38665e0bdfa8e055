"""TensorBoard event files: tags, steps and values read back with TensorBoard's own reader; resume."""
import subprocess
import sys

import pytest
from tensorboard.backend.event_processing import plugin_event_accumulator
from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator
from tensorboard.util import tensor_util

from emulator.recording.tensorboard import TensorBoardLog


def metrics_row(r: int, **changes) -> dict:
    """A metrics.csv row as the server makes it: evaluated every 2nd round, FAST's q, a string `kind`."""
    row = {"round": r, "kind": "snapshot" if r % 3 == 0 else "client", "failed": 0,
           "sim_start_s": 100.0 * (r - 1) + 0.5, "sim_time_s": 100.0 * r + 0.5, "round_duration_s": 100.0,
           "selected": 26, "participants": 20, "dropped": 3, "stragglers": 2, "cancelled": 1,
           "bytes_down": 1000 * r, "bytes_up": 500, "server_compute_s": 0.0,
           "train_loss": 2.0 / r, "train_acc": 0.1 * r,
           "test_loss": 1.0 / r if r % 2 == 0 else None, "test_acc": 0.05 * r if r % 2 == 0 else None,
           "wall_time_s": 0.25 * r, "q": 0.5}
    row.update(changes)
    return row


def read_back(run_dir) -> EventAccumulator:
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={SCALARS: 0})
    events.Reload()
    return events


def points(events, tag: str) -> list[tuple[int, float]]:
    if isinstance(events, plugin_event_accumulator.EventAccumulator):  # scalars held as tensors
        return [(e.step, pytest.approx(float(tensor_util.make_ndarray(e.tensor_proto)), rel=1e-6))
                for e in events.Tensors(tag)]
    return [(e.step, pytest.approx(e.value, rel=1e-6)) for e in events.Scalars(tag)]


def read_back_as_the_server_does(run_dir):
    """The loader of `tensorboard --load_fast=false`, which ignores a run's first restart marker."""
    events = plugin_event_accumulator.EventAccumulator(str(run_dir / "tensorboard"),
                                                       size_guidance={plugin_event_accumulator.TENSORS: 0})
    events.Reload()
    return events


def test_each_round_becomes_scalars_with_the_round_as_step(tmp_path):
    with TensorBoardLog(tmp_path) as log:
        for r in range(1, 5):
            log.append(metrics_row(r))
    events = read_back(tmp_path)

    assert set(events.Tags()["scalars"]) == {
        "test/acc", "test/loss", "train/acc", "train/loss",
        "cohort/selected", "cohort/participants", "cohort/dropped", "cohort/stragglers", "cohort/cancelled",
        "cohort/failed", "bytes/down", "bytes/up", "bytes/down_total", "bytes/up_total", "bytes/total",
        "time/sim_time_s", "time/round_duration_s", "time/server_compute_s", "time/wall_time_s",
        "algorithm/q", "by_sim_time/test_acc", "by_sim_time/test_loss", "by_sim_time/train_acc",
        "by_sim_time/train_loss"}  # no `kind` (a string), no sim_start_s, no round
    assert points(events, "train/loss") == [(1, 2.0), (2, 1.0), (3, 2 / 3), (4, 0.5)]
    assert points(events, "test/acc") == [(2, 0.1), (4, 0.2)]  # rounds not evaluated have no point
    assert points(events, "cohort/participants") == [(r, 20) for r in range(1, 5)]
    assert points(events, "cohort/cancelled") == [(r, 1) for r in range(1, 5)]
    assert points(events, "bytes/down") == [(1, 1000), (2, 2000), (3, 3000), (4, 4000)]
    assert points(events, "bytes/down_total") == [(1, 1000), (2, 3000), (3, 6000), (4, 10000)]
    assert points(events, "bytes/up_total") == [(1, 500), (2, 1000), (3, 1500), (4, 2000)]
    assert points(events, "bytes/total") == [(1, 1500), (2, 4000), (3, 7500), (4, 12000)]
    assert points(events, "time/sim_time_s") == [(r, 100.0 * r + 0.5) for r in range(1, 5)]
    assert points(events, "time/round_duration_s") == [(r, 100.0) for r in range(1, 5)]
    assert points(events, "algorithm/q") == [(r, 0.5) for r in range(1, 5)]


def test_accuracy_against_simulated_time_has_whole_seconds_as_step(tmp_path):
    with TensorBoardLog(tmp_path) as log:
        for r in range(1, 5):
            log.append(metrics_row(r))
    events = read_back(tmp_path)
    assert points(events, "by_sim_time/test_acc") == [(200, 0.1), (400, 0.2)]  # 200.5 s -> step 200
    assert points(events, "by_sim_time/train_loss") == [(100, 2.0), (200, 1.0), (300, 2 / 3), (400, 0.5)]


def test_empty_and_non_numeric_cells_are_skipped_and_strings_from_the_csv_are_read(tmp_path):
    row = {k: ("" if v is None else str(v)) for k, v in metrics_row(1).items()}  # as csv.DictReader gives
    with TensorBoardLog(tmp_path) as log:
        log.append({**row, "note": "n/a", "q": None})
        log.append(metrics_row(2, train_acc=float("nan"), failed=True))
    events = read_back(tmp_path)
    tags = events.Tags()["scalars"]
    assert "algorithm/note" not in tags and "algorithm/kind" not in tags
    assert points(events, "train/loss") == [(1, 2.0), (2, 1.0)]
    assert points(events, "algorithm/q") == [(2, 0.5)]
    assert points(events, "cohort/failed") == [(1, 0), (2, 1)]
    assert [e.step for e in events.Scalars("test/acc")] == [2]
    assert [e.value != e.value for e in events.Scalars("train/acc")] == [False, True]  # NaN is kept


def test_each_round_is_on_disk_when_append_returns(tmp_path):
    log = TensorBoardLog(tmp_path)
    try:
        log.append(metrics_row(1))
        assert points(read_back(tmp_path), "train/loss") == [(1, 2.0)]
        log.append(metrics_row(2))
        assert points(read_back(tmp_path), "train/loss") == [(1, 2.0), (2, 1.0)]
    finally:
        log.close()
    log.close()  # twice is fine


def test_resume_shows_each_round_once_with_the_values_of_the_rerun(tmp_path):
    """The first attempt reaches round 5, the checkpoint is after round 3: rounds 4 and 5 are run again
    (here with other values, to tell them apart) and round 6 follows."""
    first = [metrics_row(r) for r in range(1, 6)]
    with TensorBoardLog(tmp_path) as log:
        for row in first:
            log.append(row)
    watching = [read_back(tmp_path), read_back_as_the_server_does(tmp_path)]  # open during the first attempt

    kept = [{k: ("" if v is None else str(v)) for k, v in row.items()} for row in first[:3]]  # rewind(3)
    with TensorBoardLog(tmp_path, history=kept) as log:
        for r in range(4, 7):
            log.append(metrics_row(r, train_loss=9.0 + r, test_acc=0.9 if r % 2 == 0 else None, bytes_up=7))
    for events in watching:
        events.Reload()

    # the open readers and fresh ones agree
    for events in [*watching, read_back(tmp_path), read_back_as_the_server_does(tmp_path)]:
        assert points(events, "train/loss") == [(1, 2.0), (2, 1.0), (3, 2 / 3), (4, 13.0), (5, 14.0), (6, 15.0)]
        assert points(events, "test/acc") == [(2, 0.1), (4, 0.9), (6, 0.9)]
        assert points(events, "by_sim_time/train_loss") == [
            (100, 2.0), (200, 1.0), (300, 2 / 3), (400, 13.0), (500, 14.0), (600, 15.0)]
        assert points(events, "by_sim_time/test_acc") == [(200, 0.1), (400, 0.9), (600, 0.9)]
        assert points(events, "bytes/up_total") == [(1, 500), (2, 1000), (3, 1500), (4, 1507), (5, 1514),
                                                     (6, 1521)]
        assert points(events, "bytes/down_total") == [(1, 1000), (2, 3000), (3, 6000), (4, 10000), (5, 15000),
                                                      (6, 21000)]
    walls = [e.wall_time for e in read_back(tmp_path).Scalars("train/loss")]
    assert walls == sorted(walls)  # the kept rounds are placed back in time by their wall_time_s


def test_resume_before_any_checkpoint_starts_over(tmp_path):
    with TensorBoardLog(tmp_path) as log:
        for r in range(1, 4):
            log.append(metrics_row(r))
    with TensorBoardLog(tmp_path, history=[]) as log:
        log.append(metrics_row(1, train_loss=7.0))
    for events in (read_back(tmp_path), read_back_as_the_server_does(tmp_path)):
        assert points(events, "train/loss") == [(1, 7.0)]
        assert points(events, "by_sim_time/train_loss") == [(100, 7.0)]


def test_a_row_without_a_round_is_refused(tmp_path):
    with TensorBoardLog(tmp_path) as log, pytest.raises(ValueError, match="round"):
        log.append({"test_acc": 0.5})


def test_importing_the_module_does_not_load_tensorboard():
    code = ("import sys, emulator.recording.tensorboard; "
            "print(sorted(m for m in sys.modules if m.startswith(('tensorboard', 'torch'))))")
    out = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]" and out.stderr == ""


def test_a_run_writes_its_metrics_to_tensorboard_and_a_resume_shows_each_round_once(ray_session, tmp_path):
    from conftest import STATEFUL, small_scenario
    from emulator.driver import resume_run, run_scenario
    from emulator.recording.rundir import read_metrics
    from emulator.parts import validate_scenario

    def stop_after_round_5(row):
        if row["round"] == 5:
            raise KeyboardInterrupt

    run = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt):
        run_scenario(validate_scenario(small_scenario(**STATEFUL)), run, on_round=stop_after_round_5)
    resume_run(run)  # from the checkpoint after round 4: round 5 runs again
    metrics = read_metrics(run)
    for load in (read_back, read_back_as_the_server_does):
        events = load(run)
        assert points(events, "test/acc") == [(int(r["round"]), float(r["test_acc"])) for r in metrics]
        assert points(events, "cohort/participants") == [(int(r["round"]), float(r["participants"]))
                                                         for r in metrics]
    off = small_scenario(**{**STATEFUL, "rounds": 2, "output.tensorboard": False})
    run_scenario(validate_scenario(off), tmp_path / "off")
    assert not (tmp_path / "off" / "tensorboard").exists()

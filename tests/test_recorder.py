"""The Recorder on its own: a round handed to it is in every output of a real run directory when `record`
returns, and a rewind to a checkpoint takes every output back to it (no Ray, no server actor)."""
import csv
import json

from conftest import small_scenario
from tensorboard.backend.event_processing.event_accumulator import SCALARS, EventAccumulator

from emulator.parts import validate_scenario
from dataclasses import dataclass

from emulator.recording.recorder import Recorder
from emulator.recording.rundir import RunDirectory, read_metrics

COLUMNS = ("round", "kind", "failed", "sim_time_s", "bytes_down", "bytes_up", "train_loss", "test_loss",
           "test_acc", "wall_time_s")


@dataclass
class Round:
    """A finished round as a server hands it to the recorder (RecordedRound)."""

    values: dict
    class_accuracy: list | None = None
    device_eval: dict | None = None

    round = property(lambda self: self.values["round"])
    sim_time_s = property(lambda self: self.values["sim_time_s"])

    def row(self) -> dict:
        return dict(self.values)


class Server:
    """What a server actor hands the recorder: its events, its state, its participation ledger."""

    def __init__(self):
        self.round, self.pending = 0, []

    def run_round(self, loss: float) -> Round:
        self.round += 1
        r = self.round
        self.pending = [(r, 10.0 * r, r % 3, "selected"), (r, 10.0 * r + 5, r % 3, "reported")]
        return Round({"round": r, "kind": "client", "failed": 0, "sim_time_s": 10.0 * r, "bytes_down": 100,
                      "bytes_up": 50, "train_loss": loss, "test_loss": 1.0 / r, "test_acc": 0.1 * r,
                      "wall_time_s": 0.5 * r}, class_accuracy=[0.1 * r, None])

    def events(self) -> list[tuple]:
        taken, self.pending = self.pending, []
        return taken

    def state(self) -> dict:
        return {"round": self.round}

    def participation(self, rounds: int) -> dict:
        return {"device": [0, 1, 2], "selected": [rounds, 0, 1]}


def recorder(tmp_path, **overrides):
    scenario = validate_scenario(small_scenario(**{"rounds": 6, "output.checkpoint_every": 2,
                                                   "output.tensorboard": True, "system.events": True,
                                                   **overrides}))
    directory = RunDirectory.create(scenario, tmp_path / "run")
    server = Server()
    return Recorder(directory, scenario, server), server


def board(run_dir, tag="train/loss") -> list[tuple[int, float]]:
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={SCALARS: 0})
    events.Reload()
    return [(e.step, round(e.value, 6)) for e in events.Scalars(tag)]


def column(path, name) -> list[str]:
    with open(path, newline="") as handle:
        return [row[name] for row in csv.DictReader(handle)]


def test_a_round_is_in_every_output_when_record_returns(tmp_path):
    rec, server = recorder(tmp_path)
    summary = {"name": "tiny", "status": "running"}
    rec.start(COLUMNS, summary)
    assert json.loads((rec.path / "summary.json").read_text())["status"] == "running"
    for r in (1, 2, 3):
        row = server.run_round(loss=2.0 / r)
        rec.record(row)
        assert "class_accuracy" not in rec.rows[-1]  # per-class accuracies are not a metrics column
        assert [int(m["round"]) for m in read_metrics(rec.path)] == list(range(1, r + 1))  # before the next round
        assert [step for step, _ in board(rec.path)] == list(range(1, r + 1))
        assert column(rec.path / "class_accuracy.csv", "acc_0")[-1] == repr(0.1 * r)
        assert column(rec.path / "events.csv", "round") == [str(k) for k in range(1, r + 1) for _ in range(2)]
        assert summary["rounds_completed"] == r and summary["bytes_down"] == 100 * r
    # checkpoint_every: 2 -> after round 2 only, so far
    point, notes = rec.latest_checkpoint()
    assert point.round == 2 and not notes

    summary["status"] = "completed"
    rec.finish(started=0.0)
    written = json.loads((rec.path / "summary.json").read_text())
    assert written["status"] == "completed" and written["rounds_completed"] == 3 and "finished_at" in written
    assert column(rec.path / "participation.csv", "selected") == ["3", "0", "1"]


def test_a_rewind_drops_the_rounds_past_the_checkpoint_from_every_output(tmp_path):
    rec, server = recorder(tmp_path)
    rec.start(COLUMNS, {"status": "running"})
    for r in range(1, 6):
        rec.record(server.run_round(loss=float(r)))
    point, _ = rec.latest_checkpoint()
    assert point.round == 4

    server.round = point.state["round"]  # the server restarted from the checkpoint
    kept = rec.rewind(point.round)
    assert [int(row["round"]) for row in kept] == [1, 2, 3, 4] and rec.rows is kept
    assert [int(m["round"]) for m in read_metrics(rec.path)] == [1, 2, 3, 4]
    assert column(rec.path / "class_accuracy.csv", "round") == ["1", "2", "3", "4"]
    assert column(rec.path / "events.csv", "round") == [str(k) for k in range(1, 5) for _ in range(2)]

    for r in (5, 6):  # run again, with other values to tell them apart; then the last round
        rec.record(server.run_round(loss=10.0 + r))
    assert [int(m["round"]) for m in read_metrics(rec.path)] == list(range(1, 7))
    assert board(rec.path) == [(1, 1.0), (2, 2.0), (3, 3.0), (4, 4.0), (5, 15.0), (6, 16.0)]
    assert rec.latest_checkpoint()[0].round == 6  # the last round is always checkpointed
    rec.finish(started=0.0)


def test_a_resume_rewinds_the_files_before_the_outputs_are_opened(tmp_path):
    rec, server = recorder(tmp_path, **{"output.tensorboard": False})
    rec.start(COLUMNS, {"status": "running"})
    for r in range(1, 4):
        rec.record(server.run_round(loss=float(r)))
    rec.finish(started=0.0)

    again = Recorder(RunDirectory(rec.path), rec.scenario, server)
    assert [int(row["round"]) for row in again.rewind(2)] == [1, 2]
    server.round = 2
    summary = {"status": "running"}
    again.start(COLUMNS, summary)
    assert summary["rounds_completed"] == 2  # the figures of the rounds kept
    again.record(server.run_round(loss=30.0))
    assert column(rec.path / "metrics.csv", "train_loss") == ["1.0", "2.0", "30.0"]
    assert not (rec.path / "tensorboard").exists()
    again.finish(started=0.0)


def test_participation_csv_is_written_a_chunk_of_devices_at_a_time_with_the_same_bytes(tmp_path, monkeypatch):
    """At 10^6 devices the ledger as text at once took ~900 MB in the driver; written in chunks it is the
    same file, whatever the chunk (one that does not divide the devices included)."""
    import numpy as np

    import emulator.recording.rundir as rundir

    rng = np.random.default_rng(0)
    columns = {"device": np.arange(1003), "selected": rng.integers(0, 9, 1003),
               "speed": rng.lognormal(0, 1, 1003), "tz": rng.choice([-8.0, 0.5], 1003)}
    files = []
    for chunk in (10 ** 6, 100, 7):
        monkeypatch.setattr(rundir, "PARTICIPATION_CHUNK", chunk)
        directory = RunDirectory.create(validate_scenario(small_scenario()), tmp_path / str(chunk))
        directory.write_participation(columns)
        files.append((directory.path / "participation.csv").read_bytes())
        directory.unlock()
    assert files[0] == files[1] == files[2]
    rows = list(csv.DictReader(files[0].decode().splitlines()))
    assert len(rows) == 1003 and rows[-1]["device"] == "1002" and float(rows[5]["speed"]) > 0

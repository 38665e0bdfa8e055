"""Faults tried on purpose: each must lose nothing and end in the metrics of an uninterrupted run.

Signals, kill -9, a killed server actor, damaged files (cut rows, corrupt checkpoints), an edited
scenario.yaml, a second process, bad output paths and a full disk."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray
import yaml

from conftest import ROOT, STATEFUL, comparable, digest, run_python, small_scenario
import emulator
from emulator.recording import checkpoint as checkpoints
from emulator.cli import main
from emulator.driver import resume_run, run_scenario
from emulator.recording.rundir import read_metrics
from emulator.parts import validate_scenario

EVENTS = {**STATEFUL, "system.events": True}


@pytest.fixture(scope="module")
def reference(ray_session, tmp_path_factory):
    """The stateful scenario (with device events) run without interruption."""
    path = tmp_path_factory.mktemp("ref") / "run"
    run_scenario(validate_scenario(small_scenario(**EVENTS)), path)
    return path


def stopped_after(path: Path, round_index: int, **overrides) -> Path:
    """The stateful run, interrupted after `round_index` (its checkpoints: every 2 rounds)."""
    def stop(row):
        if row["round"] == round_index:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_scenario(validate_scenario(small_scenario(**{**EVENTS, **overrides})), path, on_round=stop)
    return path


def events(path: Path) -> str:
    return (path / "events.csv").read_text()


def start_cli(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "emulator", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)


def wait_for_rows(out: Path, rows: int, proc: subprocess.Popen, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if (out / "metrics.csv").exists() and len(read_metrics(out)) >= rows:
            return
        if proc.poll() is not None:
            raise AssertionError(f"the run ended early: {proc.communicate()}")
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"no {rows} rounds within {timeout} s: {proc.communicate()}")


# ------------------------------------------------------------------------------------ finished runs
def test_resuming_a_finished_run_says_so_and_changes_nothing(reference, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    before = digest(run)
    assert main(["run", "--resume", str(run), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "already finished all 7 rounds" in err and "--set rounds=" in err and "Traceback" not in err
    assert digest(run) == before
    # asking for fewer rounds than it has is a clear error, and changes nothing either
    assert main(["run", "--resume", str(run), "--set", "rounds=5", "--quiet"]) == 2
    assert "rounds: 5" in capsys.readouterr().err
    assert digest(run) == before


def test_a_failed_resume_leaves_a_finished_summary_intact(reference, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    summary = (run / "summary.json").read_text()
    (run / checkpoints.CURRENT).write_bytes(b"")  # the final checkpoint is lost: the run is still finished
    assert main(["run", "--resume", str(run), "--quiet"]) == 0
    text = (run / "scenario.yaml").read_text()
    (run / "scenario.yaml").write_text(text.replace("seed: 3", "seed: 4"))
    assert main(["run", "--resume", str(run), "--set", "rounds=9", "--quiet"]) == 2  # an edited experiment
    capsys.readouterr()
    assert (run / "summary.json").read_text() == summary


def test_a_finished_summary_is_never_replaced_by_one_holding_less(reference, tmp_path):
    from emulator.recording.rundir import OutputError, RunDirectory

    run = tmp_path / "run"
    shutil.copytree(reference, run)
    before = (run / "summary.json").read_text()
    directory = RunDirectory(run)
    with pytest.raises(OutputError):
        directory.write_summary({"status": "failed", "rounds_completed": 3})
    assert (run / "summary.json").read_text() == before
    assert not [p for p in run.iterdir() if p.name.endswith(".tmp")]


def test_ctrl_c_during_an_extension_keeps_the_finished_figures(reference, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(reference, run)
    old = json.loads((run / "summary.json").read_text())

    def stop(row):
        raise KeyboardInterrupt  # after the first new round

    with pytest.raises(KeyboardInterrupt):
        resume_run(run, overrides=["rounds=12"], on_round=stop)
    new = json.loads((run / "summary.json").read_text())
    assert new["status"] == "interrupted" and new["rounds_completed"] == 8 and new["rounds"] == 12
    assert set(old) - {"error", "note"} <= set(new)  # nothing the finished summary held is lost
    assert new["started_at"] == old["started_at"]
    assert comparable(run)[:7] == comparable(reference)


# ---------------------------------------------------------------------------------- extending runs
def test_an_extension_is_recorded_and_survives_a_kill(ray_session, tmp_path):
    reference = tmp_path / "reference"
    run_scenario(validate_scenario(small_scenario(**{**EVENTS, "rounds": 20})), reference)
    run = tmp_path / "run"
    run_scenario(validate_scenario(small_scenario(**{**EVENTS, "rounds": 4})), run)

    proc = start_cli(["run", "--resume", str(run), "--set", "rounds=20", "--quiet"])
    wait_for_rows(run, 7, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert yaml.safe_load((run / "scenario.yaml").read_text())["rounds"] == 20  # the extension is on record
    assert 7 <= len(read_metrics(run)) < 20
    killed = json.loads((run / "summary.json").read_text())  # says it was running, claims no round figures
    assert killed["status"] == "running" and "rounds_completed" not in killed and "final_test_acc" not in killed
    assert emulator.load(run).summary["rounds_completed"] == len(read_metrics(run))  # the API reads the rows

    assert main(["run", "--resume", str(run), "--quiet"]) == 0  # no --set: the record says 20
    assert comparable(run) == comparable(reference)
    assert events(run) == events(reference)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 20 and summary["rounds"] == 20
    assert summary["final_test_acc"] == json.loads((reference / "summary.json").read_text())["final_test_acc"]


# --------------------------------------------------------------------------------- damaged files
@pytest.mark.parametrize("fragment", ["1", "6,client,0,12", "6,client,0,1600.5,1700.25,10", "\r", "6,clie\n7,"])
def test_a_row_cut_short_is_rewound_whatever_the_fragment(reference, tmp_path, fragment):
    run = stopped_after(tmp_path / "run", 5)
    with open(run / "metrics.csv", "a", newline="") as handle:
        handle.write(fragment)
    with open(run / "events.csv", "a", newline="") as handle:
        handle.write(fragment)
    resume_run(run)
    assert comparable(run) == comparable(reference)
    assert events(run) == events(reference)
    assert main(["run", "--resume", str(run), "--quiet"]) == 0  # and every later resume is fine too


@pytest.mark.parametrize("damage", ["truncated", "empty", "flipped bit", "garbage"])
def test_a_damaged_checkpoint_is_never_loaded_and_the_previous_one_is_used(reference, tmp_path, damage, capsys):
    run = stopped_after(tmp_path / "run", 5)  # checkpoints after rounds 4 (current) and 2 (previous)
    current = run / checkpoints.CURRENT
    data = bytearray(current.read_bytes())
    if damage == "truncated":
        data = data[:len(data) // 2]
    elif damage == "empty":
        data = bytearray()
    elif damage == "flipped bit":
        data[-100] ^= 0x10  # inside the pickled parameters: unpickles fine, but into different numbers
    else:
        data = bytearray(os.urandom(len(data)))
    current.write_bytes(bytes(data))

    assert main(["run", "--resume", str(run), "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "checkpoint.pkl" in err and "resuming from the checkpoint after round 2" in err, err
    assert "Traceback" not in err
    assert comparable(run) == comparable(reference)


def test_with_no_valid_checkpoint_a_run_starts_over_and_ends_the_same(reference, tmp_path, capsys):
    run = stopped_after(tmp_path / "run", 5)
    for name in (checkpoints.CURRENT, checkpoints.PREVIOUS):
        (run / name).write_bytes(b"not a checkpoint")
    assert main(["run", "--resume", str(run), "--quiet"]) == 0
    assert "resuming from round 0" in capsys.readouterr().err
    assert comparable(run) == comparable(reference)


@pytest.mark.parametrize("field, value", [("seed", "4"), ("algorithm.name", "fedavg"),
                                          ("population.dropout_per_hour", "0.5")])
def test_an_edited_scenario_is_refused_on_resume(reference, tmp_path, capsys, field, value):
    run = stopped_after(tmp_path / "run", 5)
    raw = yaml.safe_load((run / "scenario.yaml").read_text())
    node = raw
    *parents, leaf = field.split(".")
    for part in parents:
        node = node[part]
    node[leaf] = yaml.safe_load(value)
    if field == "algorithm.name":
        node.pop("momentum", None)
    (run / "scenario.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    before = digest(run)
    assert main(["run", "--resume", str(run), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert field in err and "mix two experiments" in err, err
    assert digest(run) == before
    # where it runs is not part of the experiment: runtime changes are accepted
    (run / "scenario.yaml").write_text(yaml.safe_dump(yaml.safe_load(
        (reference / "scenario.yaml").read_text()) | {"rounds": 7}, sort_keys=False))
    assert main(["run", "--resume", str(run), "--set", "runtime.runners=2", "--quiet"]) == 0
    assert comparable(run) == comparable(reference)


# ------------------------------------------------------------------------------ signals, processes
@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_one_signal_stops_a_run_within_two_seconds_and_it_resumes_identically(ray_session, tmp_path, signum,
                                                                                code):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(small_scenario(**{**EVENTS, "rounds": 100_000})))
    out = tmp_path / "run"
    proc = start_cli(["run", str(scenario), "--out", str(out), "--quiet"])
    wait_for_rows(out, 5, proc)

    second = start_cli(["run", "--resume", str(out), "--quiet"])  # a second process is refused...
    _, second_err = second.communicate(timeout=120)
    assert second.returncode == 2 and "another emulator process" in second_err, second_err

    pressed = time.time()
    proc.send_signal(signum)  # ...and one signal stops the first: its directory is final within 2 s
    while json.loads((out / "summary.json").read_text())["status"] == "running" and time.time() - pressed < 30:
        time.sleep(0.01)
    stopped = time.time() - pressed
    out_text, err = proc.communicate(timeout=60)
    exited = time.time() - pressed
    assert proc.returncode == code, f"stdout: {out_text}\nstderr: {err}"
    assert stopped < 2.0, f"stopping took {stopped:.2f} s"
    assert exited < 15.0, f"the process took {exited:.2f} s to exit (Ray's teardown included)"
    assert "Traceback" not in err and "Fatal Python error" not in err and "interrupted" in err, err
    assert f"saved in {out}; continue it with emulator run --resume {out}" in err, err  # the path, not RUN_DIR
    summary = json.loads((out / "summary.json").read_text())
    rows = read_metrics(out)
    assert summary["status"] == "interrupted" and summary["rounds_completed"] == len(rows) >= 5
    assert [int(r["round"]) for r in rows] == list(range(1, len(rows) + 1))
    participation = (out / "participation.csv").read_text().splitlines()
    assert len(participation) == 41  # every device, as of the last saved round

    done = len(rows)
    assert main(["run", "--resume", str(out), "--set", f"rounds={done + 2}", "--quiet"]) == 0
    fresh = tmp_path / "fresh"
    run_scenario(validate_scenario(small_scenario(**{**EVENTS, "rounds": done + 2})), fresh)
    assert comparable(out) == comparable(fresh)
    assert events(out) == events(fresh)


def test_a_killed_server_actor_is_restarted_from_the_last_checkpoint(reference, tmp_path, capsys):
    killed = []

    def kill_the_server_during_round_6(row):
        if row["round"] == 5 and not killed:  # killed now, it dies as round 6 starts (ray.kill does not wait)
            named = [ray.get_actor(n) for n in ray.util.list_named_actors() if n.startswith("server-")]
            playing = [s for s in named if ray.get(s.serving.remote()) is not None]  # not an idle one kept
            assert len(playing) == 1, playing
            ray.kill(playing[0], no_restart=True)
            killed.append(playing[0])

    run = tmp_path / "run"
    raw = small_scenario(**{**EVENTS, "runtime.backend": "ray"})
    result = run_scenario(validate_scenario(raw), run, on_round=kill_the_server_during_round_6)
    assert killed and result.summary["status"] == "completed"
    assert "the server actor died" in capsys.readouterr().err
    assert comparable(run) == comparable(reference)
    assert events(run) == events(reference)


@pytest.mark.heavy
# ------------------------------------------------------------------------------------ output paths
def test_a_bad_output_path_is_refused_before_ray_starts(tmp_path):
    file = tmp_path / "a-file"
    file.write_text("not a directory")
    scenario = ROOT / "scenarios" / "quickstart.yaml"
    for out, message in ((file, "is a file"), (file / "below", "is a file")):
        code = ("import sys, ray; from emulator.cli import main; "
                f"code = main(['run', {str(scenario)!r}, '--out', {str(out)!r}, '--quiet']); "
                "print('ray started' if ray.is_initialized() else 'no ray'); sys.exit(code)")
        # in a process of its own (one that has not started Ray), forked from the pre-imported one
        proc = run_python(code, tmp_path, capture_output=True, text=True, cwd=ROOT, timeout=120)
        assert proc.returncode == 2 and message in proc.stderr and "--out" in proc.stderr, proc.stderr
        assert "no ray" in proc.stdout and "Traceback" not in proc.stderr


def _mount_tmpfs(path: Path, options: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                          capture_output=True).returncode == 0


def _unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def test_a_read_only_output_directory_is_refused_before_ray_starts(tmp_path, capsys):
    target = tmp_path / "ro"
    if not _mount_tmpfs(target, "ro,size=64k"):
        if os.geteuid() == 0:
            pytest.skip("needs a read-only mount (root without mount permission here)")
        target.mkdir(exist_ok=True)
        target.chmod(0o500)
    try:
        code = main(["run", str(ROOT / "scenarios" / "quickstart.yaml"), "--out", str(target / "run"), "--quiet"])
        err = capsys.readouterr().err
        assert code == 2 and "cannot write" in err and "--out" in err, err
    finally:
        _unmount(target)


def test_a_full_disk_stops_cleanly_and_the_run_resumes_identically_once_space_is_freed(reference, tmp_path,
                                                                                       capsys):
    disk = tmp_path / "disk"
    if not _mount_tmpfs(disk, "size=48k"):
        pytest.skip("needs a small tmpfs mount to fill (root with mount permission)")
    try:
        run = disk / "run"
        code = main(["run", "--quiet", "--out", str(run), *_as_file(tmp_path, small_scenario(**EVENTS))])
        err = capsys.readouterr().err
        assert code == 1 and "disk is full" in err and "--resume" in err and "Traceback" not in err, err
        assert not [p for p in disk.rglob("*") if p.name.endswith(".tmp")]  # no stray temporary files
        summary = json.loads((run / "summary.json").read_text())  # written at the end, in the room kept for it
        assert summary["status"] == "interrupted" and "disk full" in summary["error"], summary
        assert summary["rounds_completed"] == len(read_metrics(run)), summary  # agrees with metrics.csv
        assert not (run / ".summary-room").exists()
        subprocess.run(["mount", "-o", "remount,size=4m", str(disk)], check=True)  # space is freed
        assert main(["run", "--resume", str(run), "--quiet"]) == 0
        assert comparable(run) == comparable(reference)
        assert events(run) == events(reference)
    finally:
        _unmount(disk)


def _as_file(directory: Path, raw: dict) -> list[str]:
    path = directory / "scenario.yaml"
    path.write_text(yaml.safe_dump(raw))
    return [str(path)]


def test_an_interruption_names_the_run_directory_to_resume_or_says_nothing_was_written(tmp_path):
    from emulator.cli import _where_the_rounds_are

    def stop_in_round_2(row):
        if row["round"] == 2:
            raise KeyboardInterrupt

    path = tmp_path / "run"
    with pytest.raises(KeyboardInterrupt) as stopped:
        run_scenario(validate_scenario(small_scenario(rounds=5)), path, on_round=stop_in_round_2)
    assert stopped.value.run_dir == path
    assert _where_the_rounds_are(stopped.value) == (f"every finished round is saved in {path}; continue it with "
                                                    f"emulator run --resume {path}")
    early = KeyboardInterrupt()
    early.run_dir = None  # what the driver says when the stop came before the run directory existed
    assert _where_the_rounds_are(early) == "stopped before the run started: nothing was written"

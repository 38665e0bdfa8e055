"""Continuing a run: what may change, and from which checkpoint it goes on, decided before Ray starts.

A resume refuses (ScenarioError, exit 2), touching nothing, whenever continuing would discard or
contradict a recorded round: scenario.yaml no longer describing the experiment the rounds on record
came from (checked against the checkpoints and against the fields summary.json recorded when the run
began, so a run stopped before its first checkpoint is protected too), or fewer rounds asked for than
metrics.csv already holds. Rounds after the checkpoint it continues from are run again; they come out
the same, since the run is deterministic.
"""
from __future__ import annotations

from pathlib import Path

from emulator.data.custom import cli_refusal, memory_record
from emulator.driver.request import to_stderr
from emulator.parts import load_scenario
from emulator.recording import checkpoint as checkpoints
from emulator.recording.rundir import RunDirectory
from emulator.scenario import Scenario, ScenarioError

RESULTS_FIELDS = "results_fields"  # summary.json: the scenario's results fields as the run began


class AlreadyFinished(Exception):
    """`--resume` of a run that has done all its rounds: nothing to do, nothing touched."""

    def __init__(self, path: Path, summary: dict):
        self.path, self.summary = path, summary
        rounds = summary.get("rounds_completed")
        super().__init__(f"{path}: this run already finished all {rounds} rounds; nothing was changed. To run "
                         f"more rounds, extend it: emulator run --resume {path} --set rounds={int(rounds or 0) * 2}")


def resumable_scenario(run_dir: str | Path, overrides: list[str] | None = None, data_given: bool = False,
                       notify=to_stderr) -> Scenario:
    """The scenario of a run to resume. Only `rounds` (to extend it), `runtime.*` (where it runs, which does
    not change its results) and `stop.*` may be overridden. A run on in-memory data is refused unless the
    caller brings the data again (`data_given`: emulator.resume(run_dir, data=...))."""
    run_dir = Path(run_dir)
    if not (run_dir / "scenario.yaml").is_file():
        raise ScenarioError(f"--resume {run_dir}: not a run directory (no scenario.yaml)")
    if not data_given:
        entry = memory_record(run_dir)
        if entry is not None:
            raise ScenarioError(cli_refusal(run_dir, entry))
    for text in overrides or []:
        if not text.startswith(("rounds=", "runtime.", "stop.")):
            raise ScenarioError(f"--resume with --set {text!r}: only rounds, runtime.* and stop.* can change when "
                                "resuming; start a new run for other changes")
    found = RunDirectory(run_dir).read_summary().get("plugin_paths") or []  # where its plugins were
    scenario = load_scenario(run_dir / "scenario.yaml", overrides or [], search=[Path(p) for p in found])
    if any(text.startswith("runtime") for text in overrides or []):
        recorded = load_scenario(run_dir / "scenario.yaml", [], search=[Path(p) for p in found]).runtime
        _check_runtime(recorded, scenario.runtime, notify)
    return scenario


def _check_runtime(recorded, asked, notify) -> None:
    before, now = recorded.numerics(), asked.numerics()
    for key in sorted(set(before) | set(now)):
        if before.get(key) != now.get(key):
            raise ScenarioError(f"--resume with --set runtime.{key}={getattr(asked, key)}: this run computes with "
                                f"runtime.{key}={getattr(recorded, key)}, which changes results, so it cannot change "
                                "when resuming; start a new run for the other setting")
    if (recorded.torch_threads or 1) != (asked.torch_threads or 1) and notify is not None:  # allowed, but said
        notify(f"warning: --resume with runtime.torch_threads {recorded.torch_threads or 1} -> "
               f"{asked.torch_threads or 1}: the rounds from here differ in the last bits from an "
               "uninterrupted run's (more than one thread splits sums differently; see docs/scenarios.md)")


def plan_resume(directory: RunDirectory, scenario: Scenario, notify) -> tuple[checkpoints.Checkpoint | None, dict]:
    """The checkpoint a run continues from (None: round 0) and the summary it held; or a refusal."""
    summary = _readable_summary(directory)
    _, rows = directory.whole_metrics()
    found, notes = checkpoints.verified(directory.path)
    _same_experiment(directory, scenario, found, summary, len(rows))
    done = max((p.round for p in found), default=0)
    finished = int(summary.get("rounds_completed") or 0)
    if summary.get("status") == "completed" and len(rows) >= finished >= scenario.rounds:
        if scenario.rounds < finished:
            raise ScenarioError(f"rounds: {scenario.rounds}, but this run already finished "
                                f"{summary['rounds_completed']} rounds; give more rounds to extend it")
        raise AlreadyFinished(directory.path, summary)
    recorded = max(done, len(rows))
    if scenario.rounds < recorded:  # going on would drop the rounds past the new end
        raise ScenarioError(f"rounds: {scenario.rounds}, but this run has {recorded} rounds on record; give at least "
                            f"{recorded} rounds (more to extend it), or start a new run; nothing was changed")
    # the newest verified checkpoint whose rounds are all whole on disk (a damaged row before it would
    # leave a gap: fall back to an older checkpoint, or to round 0)
    usable = next((p for p in sorted(found, key=lambda p: -p.round) if p.round <= len(rows)), None)
    if usable is None or usable.round < done:
        notes.append(f"metrics.csv holds {len(rows)} whole rounds, fewer than the checkpoint's {done}")
    for note in notes:
        notify(f"warning: {note}")
    if notes:
        where = f"the checkpoint after round {usable.round}" if usable else "round 0 (the run is deterministic)"
        notify(f"resuming from {where}")
    return usable, summary


def _readable_summary(directory: RunDirectory) -> dict:
    """summary.json as the run left it ({} where it never wrote one); a damaged one is refused rather than
    overwritten: it may hold what the resume needs (where the plugins were, the data's record)."""
    path = directory.path / "summary.json"
    summary = directory.read_summary()
    if not summary and path.exists():
        raise ScenarioError(f"--resume {directory.path}: {path.name} is damaged (not a JSON object), and resuming "
                            "would overwrite it; restore it, or move it aside to resume without it (its figures are "
                            "rebuilt from metrics.csv); nothing was changed")
    return summary


def _same_experiment(directory: RunDirectory, scenario: Scenario, found: list, summary: dict, rows: int) -> None:
    """Refuse a scenario.yaml that no longer describes the experiment whose rounds are on record."""
    current = checkpoints.results_fields(scenario)
    recorded = [(f"the checkpoint after round {p.round}", p.fields) for p in found
                if p.fingerprint != checkpoints.fingerprint(scenario)]
    if rows and isinstance(summary.get(RESULTS_FIELDS), dict):  # before the first checkpoint too
        recorded.append(("the run's start (summary.json)", summary[RESULTS_FIELDS]))
    for where, fields in recorded:
        changed = checkpoints.differing_fields(fields, current)
        if changed:
            raise ScenarioError(
                f"--resume {directory.path}: scenario.yaml no longer describes the experiment this run started "
                f"({', '.join(changed[:8])} changed since {where}); resuming would mix two experiments. Restore "
                "the file, or start a new run with the changes; nothing was changed")

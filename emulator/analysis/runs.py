"""Loading run directories into pandas, and grouping runs that differ only in their seed.

A report compares experiments; an experiment is everything in scenario.yaml but the seed, the name's
seed suffix, and the settings that cannot change a run's results (where it is written, the Ray resources
it ran on: one seed gives the same metrics with any runners, and whether device events were logged).
Only completed runs are compared, one per seed: `select_runs` sets apart the failed, interrupted and
unfinished ones and, where two runs of an experiment share a seed, keeps the latest.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pandas as pd

from emulator.analysis.files import (DamagedRunError, NotARunError, read_class_accuracy_table,
                                     read_device_eval_table, read_events_table, read_metrics_table,
                                     read_participation_table, read_scenario_file, read_summary_file)
from emulator.recording.checkpoint import OFF_BY_DEFAULT
from emulator.scenario import RuntimeConfig

NOT_PART_OF_THE_EXPERIMENT = ("seed", "output", "runtime", "system.events")  # dotted paths into scenario.yaml


@dataclass
class Run:
    path: Path
    scenario: dict
    metrics: pd.DataFrame
    summary: dict = field(default_factory=dict)
    participation: pd.DataFrame | None = None
    class_accuracy: pd.DataFrame | None = None  # round, sim_time_s, acc_0 ...; None for runs from before it
    device_eval: pd.DataFrame | None = None     # with evaluation.devices: a row per device and evaluation

    @property
    def name(self) -> str:
        return self.scenario.get("name", self.path.name)

    @property
    def seed(self) -> int:
        return int(self.scenario.get("seed", 0))

    @property
    def evaluated(self) -> pd.DataFrame:
        """The rounds with a test evaluation (test_acc is empty on the others)."""
        return self.metrics[self.metrics["test_acc"].notna()].reset_index(drop=True)

    @property
    def rounds_done(self) -> int:
        return int(self.metrics["round"].max()) if len(self.metrics) else 0

    @property
    def finished_at(self) -> float:
        """When the run ended (summary.json's finished_at), else when its last round was written."""
        try:
            return datetime.strptime(self.summary["finished_at"], "%Y-%m-%dT%H:%M:%S%z").timestamp()
        except (KeyError, TypeError, ValueError):
            return os.path.getmtime(self.path / "metrics.csv")


def load_run(path: str | Path) -> Run:
    """A run directory, every file checked (emulator/analysis/files.py): a damaged one raises DamagedRunError
    naming the file, the line and what is wrong. A run still going (or killed) may end in a line it had not
    finished; that line is not read."""
    path = Path(path)
    if not (path / "metrics.csv").is_file():
        if _started(path):  # a run writes metrics.csv (its header) when it starts
            raise DamagedRunError(path / "metrics.csv", "missing, beside the run's scenario.yaml and summary.json")
        raise NotARunError(f"{path}: not a run directory (no metrics.csv)")
    scenario = read_scenario_file(path / "scenario.yaml") if (path / "scenario.yaml").exists() else {}
    summary = read_summary_file(path / "summary.json") if (path / "summary.json").exists() else {}
    going = summary.get("status") in (None, "running")  # a line being written may be cut short
    metrics = read_metrics_table(path / "metrics.csv", cut_ok=going)
    _agree(path, scenario, summary, len(metrics))
    readers = {"class_accuracy": read_class_accuracy_table, "device_eval": read_device_eval_table,
               "events": read_events_table}  # events.csv: checked, though no figure reads it
    tables = {name: reader(path / f"{name}.csv", cut_ok=going) if (path / f"{name}.csv").exists() else None
              for name, reader in readers.items()}
    participation = (read_participation_table(path / "participation.csv") if (path / "participation.csv").exists()
                     else None)
    return Run(path, scenario, metrics, summary, participation, tables["class_accuracy"], tables["device_eval"])


def _agree(path: Path, scenario: dict, summary: dict, rows: int) -> None:
    """metrics.csv holds no more rounds than the scenario runs, nor than an ended run's summary counts."""
    if scenario.get("rounds") is not None and rows > scenario["rounds"]:
        raise DamagedRunError(path / "metrics.csv", f"{rows} rounds, but scenario.yaml runs {scenario['rounds']} "
                                                    "(a run writes one row per round)")
    done = summary.get("rounds_completed")
    if summary.get("status") not in (None, "running") and done is not None and rows > done:
        raise DamagedRunError(path / "metrics.csv", f"{rows} rounds, but summary.json says {done} were completed")


def find_runs(paths) -> list[Path]:
    """Run directories among `paths`: each path is a run, or a directory searched (recursively) for runs."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if (path / "metrics.csv").is_file() or _started(path):
            found.append(path)
        elif path.is_dir():
            found.extend(sorted({p.parent for p in path.rglob("metrics.csv")}
                                | {p.parent for p in path.rglob("summary.json") if _started(p.parent)}))
        else:
            raise NotARunError(f"{path}: no such run directory")
    if not found:
        raise NotARunError(f"no run directories (holding metrics.csv) under {', '.join(map(str, paths))}")
    return list(dict.fromkeys(found))


def _started(path: Path) -> bool:
    """A directory a run was started in: its scenario.yaml and summary.json, written before the first round."""
    return (path / "scenario.yaml").is_file() and (path / "summary.json").is_file()


def load_runs(paths) -> list[Run]:
    """Every run under `paths` (find_runs); a damaged one raises DamagedRunError naming its file."""
    return [load_run(p) for p in find_runs(paths)]


def read_runs(paths) -> tuple[list[Run], list[tuple[Path, DamagedRunError]]]:
    """(the runs under `paths` that read whole, (run directory, what is damaged) for each other one)."""
    runs, damaged = [], []
    for found in find_runs(paths):
        try:
            runs.append(load_run(found))
        except DamagedRunError as exc:
            damaged.append((found, exc))
    return runs, damaged


def pooled_participation(runs: list[Run], column: str) -> pd.DataFrame | None:
    """The participation.csv rows of an experiment's runs (its seeds) that have `column`, as one table (None:
    no run has it): a report section's by-group figures read the seeds together."""
    tables = [r.participation for r in runs if r.participation is not None and column in r.participation]
    return pd.concat(tables, ignore_index=True) if tables else None


def load_metrics(run_dir: str | Path, evaluated_only: bool = True) -> pd.DataFrame:
    """A run's metrics.csv. By default only the rounds with a test evaluation, so that
    `load_metrics(d).plot(x="sim_time_s", y="test_acc")` draws a line (test_acc is empty on rounds without
    one); `evaluated_only=False` gives every round, which bytes, round times and `time_to_accuracy` need."""
    run = load_run(run_dir)
    return run.evaluated if evaluated_only else run.metrics


def incomplete_reason(run: Run) -> str:
    """Why a run cannot be compared ("interrupted after 4 of 10 rounds"), or "" when it completed: its
    summary.json says completed and metrics.csv holds every round of the scenario."""
    rounds = int(run.scenario.get("rounds", run.summary.get("rounds", 0)) or 0)
    done = run.rounds_done
    if not run.summary:
        return f"no summary.json (killed, or still running) after {done} of {rounds} rounds"
    status = run.summary.get("status", "unknown")
    if status == "running":  # written when a run starts: it never got to record an end
        return f"still running, or killed, after {done} of {rounds} rounds"
    if status != "completed":
        error = f" ({run.summary['error']})" if run.summary.get("error") else ""
        return f"{status} after {done} of {rounds} rounds{error}"
    if done < rounds:
        return f"completed, but metrics.csv holds {done} of {rounds} rounds"
    return ""


@dataclass
class Selection:
    """What `select_runs` makes of a set of runs."""
    groups: dict[str, list[Run]]        # label -> the completed runs of one experiment, one per seed
    duplicates: list[tuple[Run, Run]]   # (left out, kept instead): the same experiment and seed twice
    incomplete: list[tuple[Run, str]]   # (left out, why): failed, interrupted or unfinished


def select_runs(runs: list[Run]) -> Selection:
    """Group the completed runs by experiment, one run per seed (the latest where a seed repeats), and
    set the others apart with the reason."""
    complete, incomplete = [], []
    for run in runs:
        reason = incomplete_reason(run)
        if reason:
            incomplete.append((run, reason))
        else:
            complete.append(run)
    latest: dict[tuple[str, int], Run] = {}
    for run in sorted(complete, key=lambda r: r.finished_at):  # a later run of a seed replaces an earlier one
        latest[(experiment_key(run), run.seed)] = run
    duplicates = [(run, latest[(experiment_key(run), run.seed)]) for run in complete
                  if latest[(experiment_key(run), run.seed)] is not run]
    return Selection(_group(list(latest.values())), duplicates, incomplete)


def experiment_key(run: Run) -> str:
    """Runs with equal keys are the same experiment, with the same or different seeds."""
    flat = {k: v for k, v in _flatten(run.scenario).items()
            if not any(k == skip or k.startswith(skip + ".") for skip in NOT_PART_OF_THE_EXPERIMENT)}
    for key, value in _numerics(run.scenario.get("runtime") or {}).items():  # bf16, vectorise change results;
        flat[f"runtime.{key}"] = value  # the defaults (and runs from before those fields) keep their keys
    for key, value in _flatten(OFF_BY_DEFAULT).items():  # off: the same key as runs from before these sections
        if key in flat and flat[key] == value:
            del flat[key]
    flat["name"] = _base_name(run.name)
    return json.dumps(flat, sort_keys=True, default=str)


def _numerics(runtime: dict) -> dict:
    """The runtime settings that change a run's numbers (scenario.RuntimeConfig.numerics)."""
    try:
        return RuntimeConfig.model_validate(runtime).numerics()
    except ValueError:  # a runtime section this version no longer reads: only its precision is known to matter
        precision = runtime.get("precision", "fp32")
        return {} if precision == "fp32" else {"precision": precision}


def group_runs(runs: list[Run]) -> dict[str, list[Run]]:
    """Label -> the completed runs (seeds) of one experiment, one per seed; incomplete runs and repeated
    seeds are left out (`select_runs` says which and why). Labels are the scenario names with any seed
    suffix dropped; experiments that share a name are told apart by the settings where they differ."""
    return select_runs(runs).groups


def _group(runs: list[Run]) -> dict[str, list[Run]]:
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(experiment_key(run), []).append(run)
    names: dict[str, list[str]] = {}
    for key, members in groups.items():
        names.setdefault(_base_name(members[0].name), []).append(key)
    labelled: dict[str, list[Run]] = {}
    for base, keys in names.items():
        for key in keys:
            label = base if len(keys) == 1 else f"{base} ({_difference(key, keys)})"
            labelled[label] = sorted(groups[key], key=lambda r: r.seed)
    return dict(sorted(labelled.items(), key=lambda item: _natural(item[0])))


def _natural(text: str) -> list:
    """Sort key that orders numbers by value: deadline_60 before deadline_120."""
    import re

    return [(0, float(part), "") if part.replace(".", "", 1).isdigit() else (1, 0.0, part)
            for part in re.split(r"(\d+(?:\.\d+)?)", text) if part]


def _base_name(name: str) -> str:
    import re

    return re.sub(r"[-_.]?seed[-_=]?\d+$", "", name)


def _flatten(tree, prefix=""):
    if isinstance(tree, dict):
        out = {}
        for k, v in tree.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: tree}


def _difference(key: str, keys: list[str]) -> str:
    """The settings in which experiment `key` differs from its namesakes, as a.b=value pairs."""
    flat = {k: json.loads(k) for k in keys}
    differing = sorted({field for other in keys for field in set(flat[key]) | set(flat[other])
                        if flat[key].get(field) != flat[other].get(field)})
    return ", ".join(f"{f}={flat[key].get(f)}" for f in differing) or "identical settings"

"""Loading run directories into pandas, and grouping runs that differ only in their seed."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

NOT_PART_OF_THE_EXPERIMENT = ("seed", "output", "runtime", "name")


@dataclass
class Run:
    path: Path
    scenario: dict
    metrics: pd.DataFrame
    summary: dict = field(default_factory=dict)
    participation: pd.DataFrame | None = None

    @property
    def name(self) -> str:
        return self.scenario.get("name", self.path.name)

    @property
    def seed(self) -> int:
        return int(self.scenario.get("seed", 0))

    @property
    def evaluated(self) -> pd.DataFrame:
        """The rounds with a test evaluation."""
        return self.metrics[self.metrics["test_acc"].notna()]


class NotARunError(ValueError):
    pass


def load_run(path: str | Path) -> Run:
    path = Path(path)
    if not (path / "metrics.csv").is_file():
        raise NotARunError(f"{path}: not a run directory (no metrics.csv)")
    scenario = yaml.safe_load((path / "scenario.yaml").read_text()) if (path / "scenario.yaml").exists() else {}
    summary = json.loads((path / "summary.json").read_text()) if (path / "summary.json").exists() else {}
    participation = pd.read_csv(path / "participation.csv") if (path / "participation.csv").exists() else None
    return Run(path, scenario or {}, pd.read_csv(path / "metrics.csv"), summary, participation)


def find_runs(paths) -> list[Path]:
    """Run directories among `paths`: each path is a run, or a directory searched (recursively) for runs."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if (path / "metrics.csv").is_file():
            found.append(path)
        elif path.is_dir():
            found.extend(sorted(p.parent for p in path.rglob("metrics.csv")))
        else:
            raise NotARunError(f"{path}: no such run directory")
    if not found:
        raise NotARunError(f"no run directories (holding metrics.csv) under {', '.join(map(str, paths))}")
    return list(dict.fromkeys(found))


def load_runs(paths) -> list[Run]:
    return [load_run(p) for p in find_runs(paths)]


def experiment_key(run: Run) -> str:
    """Runs with equal keys are the same experiment with different seeds."""
    relevant = {k: v for k, v in run.scenario.items() if k not in NOT_PART_OF_THE_EXPERIMENT}
    return json.dumps(relevant, sort_keys=True, default=str)


def group_runs(runs: list[Run]) -> dict[str, list[Run]]:
    """Label -> the runs (seeds) of one experiment. Labels are the scenario names with any seed suffix
    dropped; experiments that share a name are told apart by the settings where they differ."""
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
    flat = {k: _flatten(json.loads(k)) for k in keys}
    differing = sorted({field for other in keys for field in set(flat[key]) | set(flat[other])
                        if flat[key].get(field) != flat[other].get(field)})
    return ", ".join(f"{f}={flat[key].get(f)}" for f in differing) or "identical settings"

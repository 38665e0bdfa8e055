"""One real local Ray instance for the whole test session (starting Ray takes seconds)."""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from pathlib import Path

import pytest

from emulator.parts import load_parts

# A developer's warm instance (`emulator up`) must never join the tests: this session and every process it
# starts look for one in a state file of their own (tests/test_warm.py starts one there).
os.environ["EMULATOR_WARM_STATE"] = os.path.join(tempfile.mkdtemp(prefix="emulator-tests-"), "warm.json")

# The test session is an entry point like the CLI: it registers the built-in parts (and installed plugins)
# once, so tests that build a part by name, or parametrise over a registry, see them at collection.
load_parts()

ROOT = Path(__file__).resolve().parents[1]
FMNIST_DIR = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from emulator.runtime.cluster import configure_token_auth

    if not ray.is_initialized():
        configure_token_auth()  # token authentication on, as in every run, without Ray's warning
        ray.init(address="local", num_cpus=4, include_dashboard=False, logging_level=logging.WARNING,
                 runtime_env={"env_vars": {"PYTHONWARNINGS": "ignore::DeprecationWarning"}})
    yield ray
    ray.shutdown()


def small_scenario(**overrides) -> dict:
    """A few-second scenario: 40 synthetic devices with label skew, logistic regression, FedAvg, in process
    (runtime.backend inline: the metrics of a Ray run, test_inline.py; a test of Ray's part sets it to ray)."""
    raw = {
        "name": "tiny", "seed": 3, "rounds": 4,
        "data": {"dataset": "synthetic", "synthetic": {"iid": True, "max_samples": 200},
                 "partition": {"scheme": "dirichlet", "alpha": 0.5}},
        "model": "logreg",
        "algorithm": {"name": "fedavg", "clients_per_round": 8, "client_lr": 0.05, "local_steps": 5,
                      "batch_size": 16},
        "population": {"devices": 40},
        "runtime": {"runners": 1, "backend": "inline"},  # no Ray: where a test needs it, runtime.backend=ray
        "evaluation": {"every": 1},
    }
    for key, value in overrides.items():
        node = raw
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return raw


# A stateful world and algorithm, so a resume must restore more than the model: Markov availability
# (its trajectories and random stream), dropout, server momentum, the clock and the ledger.
STATEFUL = {
    "rounds": 7, "output.checkpoint_every": 2,
    "population.availability": [{"kind": "markov", "mean_on_s": 900, "mean_off_s": 900}],
    "population.dropout_per_hour": 2.0, "system.deadline_s": 400.0, "system.min_report_fraction": 0.25,
    "algorithm": {"name": "fedavgm", "momentum": 0.5, "clients_per_round": 8, "client_lr": 0.05,
                  "local_steps": 5, "batch_size": 16},
}


def comparable(path) -> list[dict]:
    """A run's metrics rows without the one column that may differ between identical runs."""
    from emulator.recording.rundir import read_metrics

    return [{k: v for k, v in row.items() if k != "wall_time_s"} for row in read_metrics(path)]


def digest(directory: Path) -> dict:
    """SHA-256 of every file in a directory (recursively), to show that nothing was touched."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(directory).rglob("*")) if p.is_file() and p.name != ".lock"}


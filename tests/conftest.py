"""One real local Ray instance for the whole test session (starting Ray takes seconds)."""
from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FMNIST_DIR = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(scope="session")
def ray_session():
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=4, include_dashboard=False, logging_level=logging.WARNING,
                 runtime_env={"env_vars": {"PYTHONWARNINGS": "ignore::DeprecationWarning"}})
    yield ray
    ray.shutdown()


def small_scenario(**overrides) -> dict:
    """A few-second scenario: 40 synthetic devices with label skew, logistic regression, FedAvg."""
    raw = {
        "name": "tiny", "seed": 3, "rounds": 4,
        "data": {"dataset": "synthetic", "synthetic": {"iid": True, "max_samples": 200},
                 "partition": {"scheme": "dirichlet", "alpha": 0.5}},
        "model": "logreg",
        "algorithm": {"name": "fedavg", "clients_per_round": 8, "client_lr": 0.05, "local_steps": 5,
                      "batch_size": 16},
        "population": {"devices": 40},
        "runtime": {"runners": 1},
        "evaluation": {"every": 1},
    }
    for key, value in overrides.items():
        node = raw
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return raw

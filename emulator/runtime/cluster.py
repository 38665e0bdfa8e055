"""Connecting to Ray: a local instance by default, an existing cluster when an address is given."""
from __future__ import annotations

import logging
import math
import os
from contextlib import contextmanager

import ray


@contextmanager
def ray_session(address: str | None = None):
    """Use the Ray instance already running in this process, else start or join one; shut down only
    what this call started. Yields True when the caller owns the session (it outlives this run)."""
    if ray.is_initialized():
        yield True
        return
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    try:
        ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True,
                 configure_logging=True)
    except (ConnectionError, TimeoutError, ValueError) as exc:
        if address is None:
            raise
        from emulator.scenario import ScenarioError

        raise ScenarioError(f"runtime.address: cannot reach a Ray cluster at {address!r} ({exc}). Start one with "
                            "`ray start --head` (see docs/cluster.md), check the address, or leave it unset to run "
                            "locally") from None
    try:
        yield False
    finally:
        ray.shutdown()


def runner_count(requested: int | None, num_cpus: float, num_gpus: float, reserved_cpus: float = 0.0) -> int:
    """As many runners as the cluster's resources hold at the given shares, unless a count is requested."""
    if requested:
        return requested
    total = ray.cluster_resources()
    fits = [math.floor((total.get("CPU", 0) - reserved_cpus) / num_cpus + 1e-9)]
    if num_gpus > 0:
        fits.append(math.floor(total.get("GPU", 0) / num_gpus + 1e-9))
    return max(1, min(fits))

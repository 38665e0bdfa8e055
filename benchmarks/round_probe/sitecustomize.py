"""Imported at start-up by every Python process that has this folder on its path (benchmarks/round_costs.py puts
it there for a measured run, Ray's runner processes included): when ROUND_PROBE_DIR is set, a runner's
`train_group` calls (its tasks) and the local training inside them (`train_locally`, `cohort.train_cohort`)
are timed, and each process writes its running totals to ROUND_PROBE_DIR/<pid>.json after every task.
The driver reads them between rounds: how long the runners trained, beside how long their tasks took.
Nothing of the emulator is changed but these three names, wrapped when their modules are first imported."""
from __future__ import annotations

import functools
import importlib.abc
import json
import os
import sys
import time

_DIR = os.environ.get("ROUND_PROBE_DIR")
_totals = {"task_s": 0.0, "train_s": 0.0, "tasks": 0, "data_s": 0.0, "load_s": 0.0, "delta_s": 0.0, "fold_s": 0.0}
_depth: dict[str, int] = {}  # calls nested in calls of the same total (a cohort training one device) count once


def _timed(function, total: str, then=None):
    """`function`, its seconds added to _totals[total] where it runs inside a task (a runner's warm-up training
    at start is no round's); `then` runs after each outermost call."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        _depth[total] = _depth.get(total, 0) + 1
        start = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            _depth[total] -= 1
            if not _depth[total] and (total == "task_s" or _depth.get("task_s", 0)):
                _totals[total] += time.perf_counter() - start
                if then is not None:
                    then()
    return wrapper


def _write_totals() -> None:
    """After each task: this process's running totals, replaced whole (the driver reads them between rounds)."""
    _totals["tasks"] += 1
    path = os.path.join(_DIR, f"{os.getpid()}.json")
    with open(path + ".tmp", "w") as file:
        json.dump(_totals, file)
    os.replace(path + ".tmp", path)


def _runner_class_timed(execute, module):
    """Ray wraps an actor class's methods when `ray.remote` makes it an actor (tracing hooks bound to the
    functions as they are then), so DeviceRunner.train_group is wrapped on its way into ray.remote."""
    import ray

    real = ray.remote

    def remote(*args, **kwargs):
        if len(args) == 1 and getattr(args[0], "__name__", None) == "DeviceRunner":
            args[0].train_group = _timed(args[0].train_group, "task_s", _write_totals)
            args[0]._samples = _timed(args[0]._samples, "data_s")
        return real(*args, **kwargs)

    ray.remote = remote
    try:
        execute(module)
    finally:
        ray.remote = real


def _after(patch):
    def run(execute, module):
        execute(module)
        patch(module)
    return run


def _params_timed(module):
    if hasattr(module, "ModelVector"):  # a runner's kept view of its model
        module.ModelVector.load = _timed(module.ModelVector.load, "load_s")
        module.ModelVector.delta = _timed(module.ModelVector.delta, "delta_s")
        return
    module.load = _timed(module.load, "load_s")
    if hasattr(module, "delta"):
        module.delta = _timed(module.delta, "delta_s")
    else:  # before the delta was read in one pass: flatten, then a subtraction in the runner
        module.flatten = _timed(module.flatten, "delta_s")


_PATCHES = {
    "emulator.params": _after(_params_timed),
    "emulator.aggregation.partial": _after(lambda m: setattr(m.HeldSums, "fold", _timed(m.HeldSums.fold, "fold_s"))
                                           if hasattr(m, "HeldSums") else None),
    "emulator.training.local": _after(lambda m: setattr(m, "train_locally", _timed(m.train_locally, "train_s"))),
    "emulator.training.cohort": _after(lambda m: setattr(m, "train_cohort", _timed(m.train_cohort, "train_s"))),
    "emulator.runtime.runner": _runner_class_timed,
}


class _Patcher(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in _PATCHES:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return None
        execute = spec.loader.exec_module

        spec.loader.exec_module = functools.partial(_PATCHES[name], execute)
        return spec


if _DIR:
    import importlib.util  # noqa: E402

    sys.meta_path.insert(0, _Patcher())

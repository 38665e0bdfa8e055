"""The Python API's arguments, checked before anything starts: a value of a kind a function does not take
(scenario=42, overrides="rounds=3", seeds="3", grid=5, a file where a run directory belongs) raises
`ArgumentError`, both a ScenarioError and a TypeError, naming the function, the parameter and what it takes.
What a value of the right kind says (a field's value, the data's shape) is checked where it is used."""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from emulator.errors import expect
from emulator.scenario import Scenario

SCENARIO = "a YAML file path, a dict (the YAML as Python) or an emulator.scenario.Scenario"
OVERRIDES = ('None, a dict of field paths to values ({"rounds": 3}) or a list of "field=value" strings '
             '(["rounds=3"])')
GRID = ('None, a dict of field paths to lists of values ({"algorithm.client_lr": [0.01, 0.1]}) or a list of '
        '"field=v1,v2" strings')


def is_path(value: Any) -> bool:
    return isinstance(value, (str, os.PathLike))


def _strings(value: Any, sign: str = "") -> bool:
    """A list or tuple of strings (each holding `sign`)."""
    return isinstance(value, (list, tuple)) and all(isinstance(v, str) and sign in v for v in value)


def _whole(value: Any, low: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _function(value: Any) -> bool:
    return value is None or callable(value)


def check_scenario(function: str, scenario: Any) -> None:
    expect(function, "scenario", scenario, isinstance(scenario, (Mapping, Scenario)) or is_path(scenario)
           and not Path(scenario).is_dir(), SCENARIO + (" (the path given is a directory)"
                                                         if is_path(scenario) else ""))


def check_overrides(function: str, overrides: Any) -> None:
    expect(function, "overrides", overrides, overrides is None or _strings(overrides, "=") or isinstance(
        overrides, Mapping) and all(isinstance(k, str) for k in overrides), OVERRIDES)


def check_run_dir(function: str, run_dir: Any) -> None:
    expect(function, "run_dir", run_dir, is_path(run_dir) and not Path(run_dir).is_file(),
           "the path of a run directory" + (" (the path given is a file)" if is_path(run_dir) else ""))


def check_out(function: str, out: Any, what: str) -> None:
    expect(function, "out", out, out is None or is_path(out) and not Path(out).is_file(),
           f"None or the path of a new {what} directory" + (" (the path given is a file)" if is_path(out) else ""))


def check_common(function: str, *, progress: Any = None, address: Any = None, plugins: Any = None,
                 notify: Any = None, text_progress: bool = True) -> None:
    """The parameters run, resume and sweep share."""
    takes = 'None, True, False, "text" or a function called with each round\'s metrics row'
    expect(function, "progress", progress, progress is None or isinstance(progress, bool) or text_progress and (
        progress == "text" or callable(progress)), takes if text_progress else "None, True or False")
    expect(function, "address", address, address is None or isinstance(address, str),
           'None or a Ray cluster address ("auto", "ray://host:10001", ...)')
    expect(function, "plugins", plugins, plugins is None or isinstance(plugins, str) or _strings(plugins),
           "None, a module name or a list of module names")
    expect(function, "notify", notify, _function(notify), "None or a function called with each warning")


def check_data_split(function: str, devices: Any, users: Any, features: Any, label: Any) -> None:
    """devices=, users=, features=, label=: of the right kinds (what the data says is checked with it)."""
    expect(function, "devices", devices, devices is None or hasattr(devices, "__len__") and not isinstance(
        devices, (str, bytes, Mapping)), "None or one list of training-sample indices per device")
    expect(function, "users", users, users is None or isinstance(users, str) or hasattr(users, "__len__") and not
           isinstance(users, (bytes, Mapping)), "None, a user id per training sample (an array) or a column name")
    for name, value in (("features", features), ("label", label)):
        expect(function, name, value, value is None or isinstance(value, str), "None or a column name")


def check_run(scenario, overrides, out, devices, users, features, label, progress, address, plugins,
              notify) -> None:
    function = "emulator.run"
    check_scenario(function, scenario)
    check_overrides(function, overrides)
    check_out(function, out, "run")
    check_data_split(function, devices, users, features, label)
    check_common(function, progress=progress, address=address, plugins=plugins, notify=notify)


def check_resume(run_dir, overrides, devices, users, features, label, progress, address, notify) -> None:
    function = "emulator.resume"
    check_run_dir(function, run_dir)
    check_overrides(function, overrides)
    check_data_split(function, devices, users, features, label)
    check_common(function, progress=progress, address=address, notify=notify)


def check_sweep(scenario, grid, seeds, overrides, out, parallel, target, address, progress, plugins) -> None:
    function = "emulator.sweep"
    check_scenario(function, scenario)
    expect(function, "grid", grid, grid is None or _strings(grid, "=") or isinstance(grid, Mapping) and all(
        isinstance(k, str) for k in grid), GRID)
    expect(function, "seeds", seeds, _whole(seeds, 1), "a whole number >= 1: seeds per grid point")
    check_overrides(function, overrides)
    check_out(function, out, "sweep")
    expect(function, "parallel", parallel, _whole(parallel, 1), "a whole number >= 1: runs in flight at once")
    expect(function, "target", target, target is None or isinstance(target, (int, float)) and not isinstance(
        target, bool) and math.isfinite(target) and 0 < target <= 1, "None or a test accuracy in (0, 1], such as 0.8")
    check_common(function, progress=progress, address=address, plugins=plugins, text_progress=False)

"""The Python API: `emulator.run`, `emulator.load`, `emulator.sweep`, `emulator.resume` and what they return.

    import emulator
    run = emulator.run("scenarios/quickstart.yaml", overrides={"rounds": 20})
    run.metrics.plot(x="sim_time_s", y="test_acc")

A scenario is a YAML path, a dict (the YAML as Python) or a `Scenario`; overrides are `--set` strings or a
dict of field paths to values. Bad input raises `emulator.ScenarioError` (a ValueError) with the messages
the command line prints. The runs of one process share one Ray session and one runner pool: the first run
starts Ray (or uses the session the caller started), later runs reuse it and its runners, and it ends when
the interpreter exits (or at `emulator.shutdown()`). In a notebook the progress is a notebook display, and
interrupting the kernel stops the run at its next poll, keeping every finished round (the run can be
continued with `emulator.resume`). Reference: docs/api.md.

Here the entry points and the Ray session; `results.py` holds Run and Sweep (a run directory read back,
every file checked), `arguments.py` the check of every argument's kind before anything starts.
"""
from __future__ import annotations

import atexit
import copy
import json
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Union

import yaml

# The driver, Ray, the sweeps and the data adapters are imported inside the calls that use them, for
# start-up speed: `import emulator` and `emulator.load(...)` of a finished run do not pay for them.
from emulator.api import arguments
from emulator.api.results import Run, Sweep
from emulator.parts import scenario_from
from emulator.scenario import Scenario, ScenarioError, apply_overrides, read_yaml, with_plugins
from emulator.scenario.yaml_text import load_yaml_text

__all__ = ["run", "load", "sweep", "resume", "shutdown", "Run", "Sweep", "ScenarioError"]

ScenarioLike = Union[str, os.PathLike, Mapping, Scenario]  # a YAML path, the YAML as a dict, or a Scenario


# ------------------------------------------------------------------------------------- entry points
def run(scenario: ScenarioLike, *, overrides: Mapping[str, Any] | Iterable[str] | None = None,
        out: str | os.PathLike | None = None, data: Any = None, devices: Iterable | None = None,
        users: Any = None, features: str | None = None, label: str | None = None,
        progress: bool | str | Callable[[dict], None] | None = None, address: str | None = None,
        plugins: Iterable[str] | None = None, notify: Callable[[str], None] | None = None) -> Run:
    """Run a scenario to the end and return its run directory as a `Run`.

    scenario: a YAML path, a dict or a Scenario. overrides: {"algorithm.client_lr": 0.1} or
    ["algorithm.client_lr=0.1"] (as --set). out: the run directory (default output.dir/NAME-TIMESTAMP).
    data: your own data instead of data.dataset: (x_train, y_train, x_test, y_test), a dict of them, or
    (train, test) torch / Hugging Face datasets; devices= (index lists, one per device) or users= (a user id
    per training sample, or the column holding it) give its own split, else data.partition deals it out;
    features= / label= name a Hugging Face dataset's columns. progress: None (a notebook or a terminal
    shows one), True, False, "text", or a function called with each round's metrics row. address: a Ray
    cluster (runtime.address). plugins: modules that register parts (added to the scenario's plugins).

    Ctrl-C (or interrupting the notebook kernel) stops the run at its next poll and raises
    KeyboardInterrupt (emulator.RunInterrupted, with `.run` the partial Run); every finished round is kept.
    An argument of a kind run does not take raises ArgumentError (a ScenarioError and a TypeError).
    """
    arguments.check_run(scenario, overrides, out, devices, users, features, label, progress, address, plugins,
                        notify)
    custom = _read_data(data, devices, users, features, label)
    overrides = _override_list(overrides) + ([f"runtime.address={address}"] if address else [])
    scenario = _scenario(scenario, overrides, plugins, custom)
    from emulator.driver import run_scenario
    from emulator.recording.rundir import check_writable, default_run_dir

    federation = source = None
    if custom is not None:
        from emulator.data.custom import build_custom_federation, record

        federation, source = build_custom_federation(scenario, custom), record(custom)
    check_writable(out, scenario.output.dir)
    path = Path(out) if out is not None else default_run_dir(scenario)
    _ensure_session(scenario.runtime)
    return _drive(scenario, path, progress, source is not None, lambda on_round, stop: run_scenario(
        scenario, path, on_round=on_round, federation=federation, stop=stop, notify=notify, data_source=source))


def resume(run_dir: str | os.PathLike, *, overrides: Mapping[str, Any] | Iterable[str] | None = None,
           data: Any = None, devices: Iterable | None = None, users: Any = None, features: str | None = None,
           label: str | None = None, progress: bool | str | Callable[[dict], None] | None = None,
           address: str | None = None, notify: Callable[[str], None] | None = None) -> Run:
    """Continue an interrupted run from its last checkpoint, in its own directory, ending with the metrics
    of an uninterrupted run; overrides={"rounds": N} extends a finished one (only rounds and runtime.* may
    change). A run on in-memory data needs the same data again (data=, with the same devices= or users=):
    its fingerprint is checked before anything is touched. A run with nothing left to do is returned as is."""
    arguments.check_resume(run_dir, overrides, devices, users, features, label, progress, address, notify)
    from emulator.driver import AlreadyFinished, resumable_scenario, resume_run

    run_dir = Path(run_dir)
    overrides = _override_list(overrides) + ([f"runtime.address={address}"] if address else [])
    custom = _read_data(data, devices, users, features, label)
    scenario = resumable_scenario(run_dir, overrides, data_given=custom is not None)
    federation = source = None
    if custom is not None:
        from emulator.data.custom import build_custom_federation, check_same_data, memory_record, record

        check_same_data(run_dir, memory_record(run_dir), custom)
        federation, source = build_custom_federation(scenario, custom), record(custom)
    _ensure_session(scenario.runtime)
    try:
        return _drive(scenario, run_dir, progress, source is not None, lambda on_round, stop: resume_run(
            run_dir, on_round=on_round, overrides=overrides, stop=stop, notify=notify, federation=federation,
            data_source=source))
    except AlreadyFinished as done:
        (notify or _to_stderr)(str(done))
        return Run(run_dir)


def load(run_dir: str | os.PathLike) -> Run:
    """A finished, interrupted or running run directory as a `Run` (nothing is started)."""
    arguments.check_run_dir("emulator.load", run_dir)
    path = Path(run_dir)
    if not path.is_dir():
        raise ScenarioError(f"emulator.load({str(run_dir)!r}): no such directory")
    if not (path / "scenario.yaml").is_file() and not (path / "metrics.csv").is_file():
        raise ScenarioError(f"emulator.load({str(run_dir)!r}): not a run directory (no scenario.yaml or metrics.csv)")
    return Run(path)


def sweep(scenario: ScenarioLike, grid: Mapping[str, Any] | Iterable[str] | None = None, *, seeds: int = 1,
          overrides: Mapping[str, Any] | Iterable[str] | None = None, out: str | os.PathLike | None = None,
          parallel: int = 4, target: float | None = None, address: str | None = None,
          progress: bool | None = None, plugins: Iterable[str] | None = None) -> Sweep:
    """`emulator sweep` from Python: every grid point x `seeds` seeds (seed, seed+1, ...), validated before
    any runs, run `parallel` at a time on the shared Ray session and runner pool, then compared in a report
    (SWEEP_DIR/report/report.md). grid: {"algorithm.client_lr": [0.01, 0.1], ...} (a product) or
    ["algorithm.client_lr=0.01,0.1"] (as --grid). A run that fails is listed in `.failed`, the others go on."""
    arguments.check_sweep(scenario, grid, seeds, overrides, out, parallel, target, address, progress, plugins)
    from emulator.sweeps import default_sweep_dir, parse_grid, plan_sweep, run_sweep

    overrides = _override_list(overrides) + ([f"runtime.address={address}"] if address else [])
    grid = parse_grid(_grid_list(grid))
    with tempfile.TemporaryDirectory(prefix="emulator-sweep-") as tmp:
        path = _scenario_file(scenario, Path(tmp))
        plugins = [plugins] if isinstance(plugins, str) else list(plugins or [])
        out = Path(out) if out is not None else default_sweep_dir(path, overrides, plugins)
        if out.exists() and any(out.iterdir()):
            raise ScenarioError(f"--out {out}: the directory is not empty; choose a new one")
        runs = plan_sweep(path, overrides, grid, seeds, out, plugins)
    show = (_notebook() or sys.stderr.isatty()) if progress is None else progress
    done = []

    def on_done(run_: Any) -> None:
        done.append(run_)
        if show:
            print(f"sweep: {len(done)}/{len(runs)} runs, {run_.name}: "
                  f"{'failed: ' + run_.error if run_.error else 'done'}", file=sys.stderr, flush=True)

    if any(r.scenario.runtime.backend == "ray" for r in runs):
        _ensure_session(runs[0].scenario.runtime)
    result = run_sweep(runs, out, parallel, target=target, address=runs[0].scenario.runtime.address, on_done=on_done)
    made = [Run(r.path, _point(r.overrides)) for r in result.runs if (r.path / "scenario.yaml").exists()]
    return Sweep(out, made, {r.name: r.error for r in result.failed}, result.report)


# ----------------------------------------------------------------------------------- the Ray session
_SESSION_LOCK = threading.Lock()
_session: tuple[Any, str | None] | None = None  # (the ray_session context, its address) that run() started
_exit_hooked = False


def _ensure_session(runtime) -> None:
    """Start (or join) Ray once for this process and keep it for later runs; a session the caller started
    is used as it is. An in-process run (runtime.backend: inline) needs none."""
    global _session, _exit_hooked
    if runtime.backend == "inline":
        return
    address = runtime.address
    import ray

    from emulator.runtime.cluster import ray_session

    local = (None, "local")
    with _SESSION_LOCK:
        if ray.is_initialized():
            if _session is not None and address != _session[1] and not (address in local and _session[1] in local):
                raise ScenarioError(f"runtime.address: {address!r}, but this process already runs on the Ray session "
                                    f"at {_session[1] or 'a local instance'}; call emulator.shutdown() first to "
                                    "switch")
            return
        manager = ray_session(address)
        manager.__enter__()
        _session = (manager, address)
        if not _exit_hooked:
            atexit.register(shutdown)
            _exit_hooked = True


def shutdown() -> None:
    """End the Ray session emulator.run started, with the runners it kept; the next run starts a new one.
    Runs at interpreter exit. A session the caller started with ray.init is left to the caller."""
    global _session
    with _SESSION_LOCK:
        manager, _session = (_session[0] if _session else None), None
    if manager is None:
        return
    from emulator.runtime import pool

    with pool._SHARED_LOCK:  # the runners die with the session: forget them
        pool._SHARED.clear()
        pool._IN_USE.clear()
    manager.__exit__(None, None, None)


# ------------------------------------------------------------------------------------------- helpers
def _drive(scenario: Scenario, path: Path, progress, in_memory: bool, call) -> Run:
    """Run `call(on_round, stop)` with a progress display and Ctrl-C as a clean stop."""
    from emulator.recording.progress import progress_for
    from emulator.runtime.interrupts import stop_on_signals

    callback = progress if callable(progress) else None
    display = progress_for(scenario, False if callback else progress)

    def on_round(row: dict) -> None:
        display.update(row)
        if callback is not None:
            callback(dict(row))

    with stop_on_signals() as stop:  # handlers only in the main thread (a notebook cell runs there)
        try:
            with display:
                result = call(on_round, stop)
        except KeyboardInterrupt as exc:
            if (path / "scenario.yaml").exists():
                exc.run = Run(path)
                data = ", data=..." if in_memory else ""
                print(f"interrupted: every finished round is kept in {path}; continue it with "
                      f"emulator.resume({str(path)!r}{data})", file=sys.stderr, flush=True)
            raise
    return Run(result.path)


def _read_data(data, devices, users, features, label):
    if data is None:
        if devices is not None or users is not None:
            raise ScenarioError("devices= and users= split the data given with data=; pass data= too")
        return None
    from emulator.data.custom import read_data

    return read_data(data, devices=devices, users=users, features=features, label=label)


def _override_list(overrides) -> list[str]:
    """`--set` strings from a dict of field paths to values (or a list of KEY=VALUE strings)."""
    if overrides is None:
        return []
    if isinstance(overrides, Mapping):
        return [f"{key}={_value(value)}" for key, value in overrides.items()]
    return [str(item) for item in overrides]


def _value(value: Any) -> str:
    """A Python value as the YAML text an override parses (strings pass as written, as on the command line)."""
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return json.dumps(list(value) if isinstance(value, tuple) else value)


def _grid_list(grid) -> list[str]:
    if grid is None:
        return []
    if isinstance(grid, Mapping):
        items = []
        for key, values in grid.items():
            if isinstance(values, str):
                items.append(f"{key}={values}")
                continue
            values = list(values) if isinstance(values, (list, tuple, range, set, frozenset)) else [values]
            items.append(f"{key}=" + ",".join(_value(v) for v in values))
        return items
    return [str(item) for item in grid]


def _point(overrides: list[str]) -> dict:
    point = {}
    for text in overrides:
        key, _, value = text.partition("=")
        point[key] = load_yaml_text(value, f"--grid {key}")  # as the sweep read it (1e-3 is a number)
    return point


def _raw(scenario) -> tuple[dict, str, Path]:
    """The raw scenario (YAML as Python), the name errors give it, and where its relative files are."""
    if isinstance(scenario, (str, os.PathLike)):
        path = Path(scenario)
        return read_yaml(path), str(path), path.resolve().parent
    if isinstance(scenario, Scenario):
        raw = scenario.model_dump(mode="json")
        if "devices" not in scenario.population.model_fields_set:
            raw["population"].pop("devices", None)  # left to the data's own split, as in a file without it
        return raw, "scenario", Path.cwd()
    if isinstance(scenario, Mapping):
        return copy.deepcopy(dict(scenario)), "scenario", Path.cwd()
    raise ScenarioError(f"scenario: {type(scenario).__name__} is not a scenario; give a YAML file path, a dict or an "
                        "emulator.scenario.Scenario")


def _scenario(scenario, overrides: list[str], plugins, custom) -> Scenario:
    raw, source, base = _raw(scenario)
    raw = apply_overrides(raw, overrides)
    raw = with_plugins(raw, plugins)
    if custom is not None:
        from emulator.data.custom import scenario_for

        raw = scenario_for(raw, custom)
    return scenario_from(raw, source, base)


def _scenario_file(scenario, tmp: Path) -> Path:
    """A path as given; a dict or Scenario written as YAML in `tmp` (relative files then resolve against the
    working directory, as they do for a dict given to run)."""
    if isinstance(scenario, (str, os.PathLike)):
        return Path(scenario)
    raw, _, _ = _raw(scenario)
    path = tmp / f"{raw.get('name') or 'scenario'}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def _notebook() -> bool:
    from emulator.recording.progress import in_notebook

    return in_notebook()


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)

"""Loading a scenario at an entry point (the CLI, the API, a sweep, the driver's resume): the built-in parts
and the plugins it names are registered first, then the schema validates it, then the system model checks
what only it can (trace files, behaviour tied to data) and what the server would refuse once started
(system/preflight.py: the model and algorithm built on the CPU). The schema itself never loads anything."""
from __future__ import annotations

from pathlib import Path

from emulator.parts.plugins import load_builtins, load_entry_points, load_plugins
from emulator.scenario import Scenario, ScenarioError, apply_overrides, parse_scenario, read_yaml, with_plugins
from emulator.system.checks import check_edges, check_population, machine_memory, population_fits, resolve_files
from emulator.system.preflight import preflight


def load_parts(plugins: list[str] | tuple[str, ...] = (), search: list[Path] | tuple[Path, ...] = ()) -> None:
    """Register our own parts, every installed package's entry points, then these plugin modules (looked
    for in `search`, then on sys.path); each at most once per process."""
    load_builtins()
    load_entry_points()
    if plugins:
        load_plugins(plugins, search)


def validate_scenario(raw: dict, source: str = "scenario", search: list[Path] | None = None) -> Scenario:
    """A Scenario from plain data; the plugins it names are imported first (looked for in `search`, then
    on sys.path), so the parts they register validate like the built-ins."""
    plugins = raw.get("plugins") if isinstance(raw, dict) else None
    load_parts(plugins if isinstance(plugins, list) else (), search or [Path.cwd()])
    scenario = parse_scenario(raw, source)
    check_population(scenario, source)
    too_big = population_fits(scenario.population.devices, machine_memory())
    if too_big:  # before the checks below allocate anything per device
        raise ScenarioError(too_big)
    check_edges(scenario, source)  # every edge server has devices
    preflight(scenario, source)  # what the server would refuse once started: the model and algorithm built here
    return scenario


def scenario_from(raw: dict, source: str, base: Path, search: list[Path] | None = None) -> Scenario:
    """Validate a raw scenario whose relative files and plugin modules live in `base` (else in the working
    directory, then `search`, then on sys.path), and resolve its files."""
    scenario = validate_scenario(raw, source=source, search=[base, Path.cwd(), *(search or [])])
    resolve_files(scenario, base, source=source)
    return scenario


def load_scenario(path: str | Path, overrides: list[str] | None = None, plugins: list[str] | None = None,
                  search: list[Path] | None = None) -> Scenario:
    """The scenario in a YAML file, with --set overrides and --plugin modules (added to its `plugins`);
    plugin modules are looked for beside the file, then in the working directory, then on sys.path."""
    raw = apply_overrides(read_yaml(path), overrides or [])
    return scenario_from(with_plugins(raw, plugins), str(path), Path(path).resolve().parent, search)

"""The checks of a scenario that need the system model: trace files found and readable, devices for every
edge server, and the rules of behaviour tied to data (population.ties and .types). The schema only
describes; the entry points run these right after it (emulator/parts/loading.py), before anything runs."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from emulator.errors import ScenarioError
from emulator.scenario import Scenario, ScenarioFieldError
from emulator.seeding import assign_by_share
from emulator.system import traces
from emulator.system.edges import EdgeServers
from emulator.system.network import Network, attachment_trace
from emulator.system.ties import check_ties


def check_population(scenario: Scenario, source: str = "scenario") -> None:
    """The cross-field rules of population.ties and .types, reported as the schema reports a problem."""
    population = scenario.population
    if not (population.ties or population.types):
        return
    try:
        check_ties(population)
    except ScenarioFieldError as exc:
        raise ScenarioError(f"{source}: 1 problem:\n  {exc.path}: {exc.message}") from None


def check_edges(scenario: Scenario, source: str = "scenario") -> None:
    """Every edge server (system.network.edges) has devices to serve. Regions by zone are the zones devices
    live in, and a trace names only links with devices (dealt to no more regions than there are links:
    resolve_files), so neither leaves a region empty; drawn links dealt to regions in turn may."""
    network = scenario.system.network
    if network is None or network.edges is None or network.regions.by == "zone" or network.access.trace is not None:
        return
    try:
        EdgeServers(network.edges, Network(network, scenario.population.devices, scenario.seed),
                    scenario.population.devices)
    except ScenarioFieldError as exc:
        raise ScenarioError(f"{source}: 1 problem:\n  {exc.path}: {exc.message}") from None


def resolve_files(scenario: Scenario, base: Path, source: str = "scenario") -> None:
    """Make the files a scenario names (trace files) absolute: relative to the scenario file's directory,
    else to the working directory. A missing file is an error naming the field; so is a file that does not
    read as its format says (emulator/system/traces.py reads it here, before anything runs)."""
    population = scenario.population

    def resolved(name: str, field: str) -> str:
        file = Path(name).expanduser()
        candidates = [file] if file.is_absolute() else [base / file, Path.cwd() / file]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            raise ScenarioError(f"{source}: {field}: no trace file {' or '.join(str(c) for c in candidates)}; "
                                "give a path relative to the scenario file or an absolute one")
        return str(found.resolve())

    def read(reader, field: str, *args):
        try:
            return reader(*args)
        except ScenarioError as exc:
            raise ScenarioError(f"{source}: {field}: {exc}") from None

    def entry_size(index: int) -> int | None:
        """Devices in availability entry `index` by its share, as AvailabilityMix deals them (None when ties
        or types may move devices between entries: the world checks reuse then)."""
        entries = population.availability
        if len(entries) == 1:
            return population.devices
        if population.types or any(t.sets == "availability" for t in population.ties):
            return None
        groups = assign_by_share([e.share for e in entries], population.devices, np.random.default_rng(0))
        return int(np.count_nonzero(groups == index))  # the sizes do not depend on the stream

    for i, entry in enumerate(population.availability):
        if entry.kind != "trace":
            continue
        field = f"population.availability.{i}"
        entry.file = resolved(entry.file, f"{field}.file")
        windows = read(traces.read_availability, f"{field}.file", entry.file, entry.format, entry.repeat_s)
        members = entry_size(i)
        if not entry.reuse and members is not None and windows.count < members:
            raise ScenarioError(f"{source}: {field}.reuse: the trace {entry.file} has {windows.count} devices for "
                                f"the entry's {members} devices; with reuse: false each device needs its own trace "
                                "device: use a larger trace, fewer devices, or reuse: true")
    for name in ("compute", "network"):
        config = getattr(population, name)
        if config.kind == "trace":
            config.file = resolved(config.file, f"population.{name}.file")
            read(traces.read_capacity, f"population.{name}.file", config.file, config.format)
    access = scenario.system.network.access if scenario.system.network is not None else None
    if access is not None and access.trace is not None:
        access.trace = resolved(access.trace, "system.network.access.trace")
        regions = scenario.system.network.regions
        try:
            _, links = attachment_trace(access.trace, population.devices)
            if regions is not None and regions.count is not None and regions.count > links:
                raise ScenarioFieldError("system.network.regions.count", f"{regions.count} regions but the trace "
                                         f"{access.trace} names {links} access links: a region would serve no "
                                         "device; use at most as many as access links")
        except ScenarioFieldError as exc:
            raise ScenarioError(f"{source}: 1 problem:\n  {exc.path}: {exc.message}") from None
    compute, network = population.compute, population.network
    if compute.kind == network.kind == "trace" and (compute.file, compute.format) == (network.file, network.format) \
            and compute.assign != network.assign:
        raise ScenarioError(f"{source}: population.network.assign: {network.assign!r}, but population.compute "
                            f"reads the same file with assign {compute.assign!r}; a device plays one row of a "
                            "capacity file for both, so give both the same assign")


# The least a device costs in memory before any of its data: its profile (speed, link), availability state,
# ledger counters, label counts and partition bounds, a few dozen 8-byte values. A lower bound (the world
# and data of a small synthetic population take several times more each, tests/test_honest.py), so that
# only a population that cannot fit is refused.
BYTES_PER_DEVICE = 100


def population_fits(devices: int, memory_bytes: int) -> str | None:
    """Why `devices` cannot fit in `memory_bytes` of memory, or None: checked before anything is allocated,
    instead of an out-of-memory crash after the first allocation."""
    needed = devices * BYTES_PER_DEVICE
    if needed <= memory_bytes:
        return None
    return (f"population.devices: {devices:,} devices need at least {needed / 2 ** 30:,.1f} GiB for their state "
            f"alone (about {BYTES_PER_DEVICE} bytes each, before any data), and this machine has "
            f"{memory_bytes / 2 ** 30:,.1f} GiB: at most about {memory_bytes // BYTES_PER_DEVICE:,} devices fit here; "
            "lower population.devices or run on a larger machine")


def machine_memory() -> int:
    """This machine's physical memory in bytes (what the driver's process could ever hold)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return 2 ** 62  # unknown: nothing is refused

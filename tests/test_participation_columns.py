"""participation.csv's columns as docs/scenarios.md lists them: those documented as always written are in every
world's file, each other column says when it is written, and no world writes a column the docs leave out."""
from __future__ import annotations

import csv
import re

import pytest
from conftest import ROOT, small_scenario

from emulator.driver import run_scenario
from emulator.parts import validate_scenario

TIERS = {"kind": "tiers", "tiers": [{"name": "fast", "share": 0.5, "s_per_sample": 0.001},
                                    {"name": "slow", "share": 0.5, "s_per_sample": 0.002}]}
LINKS = {"kind": "tiers", "tiers": [{"name": "wifi", "share": 0.5, "down_mbps": 50, "up_mbps": 20, "latency_s": 0.02},
                                    {"name": "cell", "share": 0.5, "down_mbps": 10, "up_mbps": 2, "latency_s": 0.1}]}


def documented() -> tuple[set[str], list[tuple[re.Pattern, str]]]:
    """(the columns written always, (pattern, when) of every documented column) from the table under the
    heading `participation.csv` columns in docs/scenarios.md."""
    text = (ROOT / "docs" / "scenarios.md").read_text()
    heading = re.search(r"^#+ `participation\.csv` columns$", text, re.M)
    assert heading, "docs/scenarios.md has no section `participation.csv` columns"
    table = re.search(r"(?:^\|.*\|\n)+", text[heading.end():], re.M).group(0)  # the first table under it
    rows = re.findall(r"^\|(.+?)\|(.+?)\|.*\|$", table, re.M)[2:]
    always, patterns = set(), []
    for names, when in rows:
        for name in re.findall(r"`([^`]+)`", names):
            pattern = re.compile(re.sub(r"<[^>]+>", "[a-z_]+", re.escape(name).replace(r"\<", "<").replace(r"\>", ">")))
            patterns.append((pattern, when.strip()))
            if when.strip() == "always":
                always.add(name)
    return always, patterns


def _trace(path) -> str:
    path.write_text("device_id,start_s,end_s\n" + "".join(f"d{i},{60 * i},{60 * i + 36000}\n" for i in range(4)))
    return str(path)


def worlds(tmp_path) -> dict[str, dict]:
    rich = small_scenario(rounds=1, **{
        "system": {"model": "simulated", "deadline_s": 600, "network": {
            "access": {"links": 4, "up_mbps": 2, "down_mbps": 10}, "regions": {"count": 2, "up_mbps": 5, "down_mbps": 20}}},
        "population.compute": TIERS, "population.network": LINKS,
        "population.availability": [
            {"kind": "diurnal", "share": 0.3, "hours": 24, "timezones": {"offsets_h": [-5, 8]}},
            {"kind": "eligible", "share": 0.1, "requires": ["charging"], "charging": {"start_hour": 0, "hours": 24}},
            {"kind": "trace", "share": 0.3, "file": _trace(tmp_path / "trace.csv"), "reuse": True},
            {"kind": "always", "share": 0.3, "name": "plugged"}],
        "population.types": [{"name": "casual", "share": 0.5}, {"name": "keen", "share": 0.5}],
        "population.energy": {"cellular_share": 0.5},
        "population.ties": [{"by": "samples", "sets": "dropout_per_hour", "scale": [0.0, 0.5]},
                            {"by": "samples", "sets": "network"},
                            {"by": "dominant_label", "sets": "compute", "groups": [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]],
                             "values": ["fast", "slow"]}]})
    return {"ideal": small_scenario(rounds=1, **{"system.model": "ideal"}), "simulated, tied to data": rich,
            "private": small_scenario(rounds=1, privacy={"noise_multiplier": 0.5, "clip": 1.0})}


@pytest.fixture(scope="module")
def headers(tmp_path_factory) -> dict[str, list[str]]:
    root = tmp_path_factory.mktemp("participation")
    written = {}
    for name, raw in worlds(root).items():
        path = run_scenario(validate_scenario(raw), root / name.replace(" ", "_").replace(",", "")).path
        with open(path / "participation.csv", newline="") as handle:
            written[name] = next(csv.reader(handle))
    return written


def test_every_world_writes_the_columns_documented_as_always_written(headers):
    always, _ = documented()
    assert {"device", "samples", "reported"} <= always
    for world, header in headers.items():
        assert always <= set(header), f"{world}: {sorted(always - set(header))} documented as always written"


def test_no_world_writes_a_column_the_docs_leave_out(headers):
    _, patterns = documented()
    for world, header in headers.items():
        unknown = [c for c in header if not any(p.fullmatch(c) for p, _ in patterns)]
        assert not unknown, f"{world} writes {unknown}, which docs/scenarios.md does not list"


def test_every_documented_column_is_written_by_some_world(headers):
    _, patterns = documented()
    seen = {c for header in headers.values() for c in header}
    for pattern, when in patterns:
        assert any(pattern.fullmatch(c) for c in seen), f"{pattern.pattern} ({when}) is written by no world here"

"""Checkpoints that are never trusted blindly: checksummed, fingerprinted, and kept two deep.

A checkpoint file is one header line of JSON (format, round, payload length, SHA-256 of the payload,
the scenario's fingerprint) followed by the pickled server state. Loading checks the length and the
checksum before unpickling, so a truncated, empty or bit-flipped file is refused and never loaded; the
previous checkpoint is kept beside the current one, and the run falls back to it (or, failing that, to
round 0: a run is deterministic, so redoing rounds costs time, never results).

The fingerprint covers the fields that change results (everything but `name`, `rounds`, `runtime`,
`output` and where the data is read from; of `runtime`, the fields that change numbers count where they
differ from their defaults: `precision`, and `vectorise` with `group_size`), so resuming after an edit of scenario.yaml is refused instead of silently mixing two
experiments.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
from dataclasses import dataclass
from pathlib import Path

from emulator.recording.rundir import atomic_file

FORMAT = "fl-emulator-checkpoint/1"
CURRENT, PREVIOUS = "checkpoint.pkl", "checkpoint.prev.pkl"

# Fields that say how or where a run executes, not what it computes.
# `stop` decides when a run ends early, not what its rounds compute: a resume may change it (to keep a
# diverged run going), and two runs differing only there are one experiment.
NOT_RESULTS = ("name", "rounds", "runtime", "output", "stop")
NOT_RESULTS_DATA = ("root", "download", "store")
# Sections that, switched off, leave a scenario's identity as it was before they existed (fingerprints,
# `emulator report`'s experiment keys): their values when off.
OFF_BY_DEFAULT = {"privacy": None, "secure_aggregation": None, "compression": {"kind": "none"}, "observers": []}


class CheckpointError(ValueError):
    """A checkpoint file that cannot be trusted (the message says why)."""


# -------------------------------------------------------------------------------------- fingerprint
def results_fields(scenario) -> dict:
    """The resolved scenario without the fields that cannot change results. Trace files enter by the
    SHA-256 of their content, not their path, so a run moved to another machine still matches."""
    fields = scenario.model_dump(mode="json")
    for key in NOT_RESULTS:
        fields.pop(key, None)
    for key in NOT_RESULTS_DATA:
        fields.get("data", {}).pop(key, None)
    runtime = getattr(scenario, "runtime", None)
    numerics = runtime.numerics() if runtime is not None else {}
    if numerics:  # bf16, vectorised groups compute other numbers; the defaults stay out (fingerprints as before)
        fields["runtime"] = numerics
    for key, off in OFF_BY_DEFAULT.items():  # off: fingerprints as before these sections existed
        if key in fields and fields[key] == off:
            del fields[key]
    population = fields.get("population", {})
    if population.get("energy", "") is None:  # a world without batteries: fingerprints as before they existed
        del population["energy"]
    system = fields.get("system", {})
    if system.get("network", "") is None:  # no shared links: fingerprints as before they existed
        del system["network"]
    access = (system.get("network") or {}).get("access") or {}
    if access.get("trace"):
        access["trace"] = "sha256:" + _file_digest(Path(access["trace"]))
    for entry in [*population.get("availability", []), population.get("compute"), population.get("network")]:
        if isinstance(entry, dict) and entry.get("kind") == "trace" and entry.get("file"):
            entry["file"] = "sha256:" + _file_digest(Path(entry["file"]))
    algorithm = fields.get("algorithm", {})
    for key, schedule in algorithm.items():  # a cosine spanning the scenario's rounds depends on `rounds`
        if key.endswith("_schedule") and isinstance(schedule, dict) and schedule.get("kind") == "cosine" \
                and schedule.get("rounds") is None:
            schedule["rounds"] = scenario.rounds
    return fields


def fingerprint(scenario) -> str:
    return _digest(results_fields(scenario))


def _digest(fields: dict) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


# Fields added to the schema after checkpoints were first written, with the value that keeps an older run's
# world unchanged: a checkpoint that lacks one of them matches a scenario holding exactly that value.
ADDED_FIELDS = {"name": None, "types": None, "ties": [], "correlation": 1.0, "format": "csv", "assign": "cycle",
                "reuse": True, "server_optimizer": None, "client_lr_schedule": None, "server_lr_schedule": None,
                "global_lr_schedule": None, "server_step_lr_schedule": None}
ADDED_FIELDS.update({"plugins": [], "options": None})  # plugins and a dataset's own options
ADDED_FIELDS.update({"fraction": None, "snapshot_close": "first"})  # data.server_set's, FAST's (2026-11-26)
ADDED_FIELDS.update({"local_test": None, "devices": None})  # data.local_test, evaluation.devices (2026-11-26)
ADDED_FIELDS.update({"aggregator": None, "attack": None})  # algorithm.aggregator, population.types[].attack
# system.server.s_per_operation prices only a robust aggregator's work, which no older run had: its default
ADDED_FIELDS.update({"s_per_operation": 1e-9})
# population.types[].behaves (None: best for attackers, drawn otherwise) and .attack.collude
ADDED_FIELDS.update({"behaves": None, "collude": False})
ADDED_FIELDS.update({"energy": None})  # population.energy
ADDED_FIELDS.update({"network": None})  # system.network (population.network was always there)


def differing_fields(recorded: dict, current: dict) -> list[str]:
    """Dotted paths of the fields that differ between two results_fields dicts (a field an older version
    did not know counts as equal while it holds its neutral value, see ADDED_FIELDS)."""
    a, b = _flatten(recorded), _flatten(current)

    def same(key):
        if key not in a and key in b:
            last = key.rsplit(".", 1)[-1]
            return last in ADDED_FIELDS and b[key] == ADDED_FIELDS[last]
        return a.get(key) == b.get(key)

    return sorted(key for key in set(a) | set(b) if not same(key))


def _flatten(tree, prefix: str = "") -> dict:
    if isinstance(tree, dict):
        out = {}
        for key, value in tree.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    if isinstance(tree, list):
        out = {}
        for i, value in enumerate(tree):
            out.update(_flatten(value, f"{prefix}{i}."))
        return out if tree else {prefix[:-1]: []}
    return {prefix[:-1]: tree}


def _file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return f"unreadable:{path}"


# ------------------------------------------------------------------------------------ reading, writing
@dataclass
class Checkpoint:
    round: int
    state: dict
    fields: dict  # results_fields of the scenario that wrote it
    fingerprint: str
    path: Path


def write(directory: Path, state: dict, scenario) -> None:
    """Write the state after round state['round']: the current checkpoint becomes the previous one, and
    the new one replaces it atomically (a crash at any point leaves at least one whole checkpoint)."""
    payload = pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)
    fields = results_fields(scenario)
    header = {"format": FORMAT, "round": int(state["round"]), "bytes": len(payload),
              "sha256": hashlib.sha256(payload).hexdigest(),
              "fingerprint": _digest(fields),
              "fields": fields}
    current = directory / CURRENT

    def keep_previous():
        if current.exists():
            os.replace(current, directory / PREVIOUS)

    with atomic_file(current, "wb", before_replace=keep_previous) as handle:
        handle.write(json.dumps(header, sort_keys=True).encode() + b"\n")
        handle.write(payload)


def read(path: Path) -> Checkpoint:
    """Load one checkpoint file, verifying its length and checksum before unpickling anything."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{path.name}: cannot be read ({exc.strerror})") from None
    newline = data.find(b"\n")
    if newline < 0:
        raise CheckpointError(f"{path.name}: empty or cut short (no header)")
    try:
        header = json.loads(data[:newline])
    except ValueError:
        raise CheckpointError(f"{path.name}: not a checkpoint of this emulator (damaged header)") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise CheckpointError(f"{path.name}: not a {FORMAT} file")
    payload = data[newline + 1:]
    if len(payload) != header.get("bytes"):
        raise CheckpointError(f"{path.name}: cut short ({len(payload)} of {header.get('bytes')} bytes)")
    if hashlib.sha256(payload).hexdigest() != header.get("sha256"):
        raise CheckpointError(f"{path.name}: checksum mismatch (the file was damaged)")
    state = pickle.loads(payload)  # verified: exactly the bytes this emulator wrote
    return Checkpoint(int(header["round"]), state, header["fields"], header["fingerprint"], path)


def verified(directory: Path) -> tuple[list[Checkpoint], list[str]]:
    """The checkpoints that verify, newest file first, and a note for each one that did not."""
    found, notes = [], []
    for name in (CURRENT, PREVIOUS):
        path = directory / name
        if not path.exists():
            continue
        try:
            found.append(read(path))
        except CheckpointError as exc:
            notes.append(str(exc))
    return found, notes


def latest(directory: Path) -> tuple[Checkpoint | None, list[str]]:
    """The newest checkpoint that verifies, and a note for each one that did not."""
    found, notes = verified(directory)
    return (found[0] if found else None), notes

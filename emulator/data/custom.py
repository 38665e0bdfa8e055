"""Bring your own data: numpy arrays, a torch Dataset or a Hugging Face `datasets.Dataset` as a Federation.

`read_data` (handed.py) turns what the user hands `emulator.run(data=...)` into arrays (a train and a test set), with
the data's own split when there is one: per-device index lists (`devices=[idx0, idx1, ...]`) or a user id
per training sample (`users=`, an array or a column name: device d holds the rows of the d-th smallest
user id). Without a split the scenario's `data.partition` deals the samples out, as for a built-in dataset.
Either way the server set (`data.server_set`) is carved from the devices' data and the test set cut to
`data.test_samples`, with the same random streams `build_federation` uses.

The data is fingerprinted (SHA-256 of the arrays and the split) and the run records where it came from:
`data.json` in the run directory, a `data` entry in summary.json and a comment heading scenario.yaml
(whose `data.dataset` does not say where the samples came from). Such a run cannot be resumed from the
command line, which has no way to get the arrays back; `emulator.resume(run_dir, data=...)` continues it
after checking that the data given has the recorded fingerprint.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Optional

import numpy as np
from pydantic import Field

from emulator.data import assemble_federation
from emulator.data.federation import Federation
from emulator.data.handed import FEATURE_COLUMNS, LABEL_COLUMNS, CustomData, fingerprint, read_data
from emulator.models.zoo import build_model
from emulator.recording.rundir import atomic_file, write_atomic
from emulator.scenario import DatasetOptions, ScenarioError

__all__ = ["MemoryOptions", "CustomData", "read_data", "fingerprint", "scenario_for", "build_custom_federation",
           "record", "public", "write_record", "scenario_header", "memory_record", "cli_refusal", "check_same_data",
           "LABEL_COLUMNS", "FEATURE_COLUMNS", "RECORD", "USERS", "SOURCE"]


class MemoryOptions(DatasetOptions):
    """Samples handed over from Python (emulator.run(data=...)): what the scenario can know of them."""

    shape: list[int] = Field(min_length=1)  # one sample's shape
    classes: int = Field(gt=0)
    fingerprint: str  # SHA-256 of the arrays and their split: a resume must get the same data
    form: str = "arrays"  # arrays, torch or huggingface
    split: Optional[str] = None  # devices or users (the data's own split), None: data.partition dealt it


RECORD = "data.json"      # where a run on in-memory data records it, beside scenario.yaml
USERS = "users.csv"       # device -> user id, for a run split by users=
SOURCE = "memory"


# ------------------------------------------------------------------------------- the scenario for it
def scenario_for(raw: dict, custom: CustomData) -> dict:
    """The raw scenario adjusted to the data (a copy): population.devices from the data's split when the
    scenario leaves it out, the partition (natural: the data's own split; iid when the scenario gives none
    and the data has no split), and, for the nominal dataset synthetic, its dimension and classes."""
    raw = copy.deepcopy(raw)
    # where samples come from no longer applies; how they are split, and where they are kept, does
    data = {key: value for key, value in (raw.get("data") or {}).items()
            if key in ("partition", "server_set", "test_samples", "store")}
    data["dataset"] = "memory"
    data["options"] = {"shape": list(custom.train.input_shape), "classes": custom.train.num_classes,
                       "fingerprint": custom.fingerprint or fingerprint(custom), "form": custom.form,
                       "split": custom.split}
    raw["data"] = data
    partition = data.get("partition") or None
    scheme = partition.get("scheme") if isinstance(partition, dict) else None
    if custom.per_device is not None:
        if scheme not in (None, "natural"):
            raise ScenarioError(f"data.partition.scheme: {scheme!r}, but data= comes split by {custom.split}= into "
                                f"devices; drop data.partition (the data's own split is used), or drop {custom.split}= "
                                "to let the partition deal the samples out")
        data["partition"] = {"scheme": "natural"}
        population = raw.setdefault("population", {}) or {}
        raw["population"] = population
        given = population.get("devices")
        if given is None:
            population["devices"] = custom.devices
        elif given != custom.devices:
            raise ScenarioError(f"population.devices: {given}, but data= comes split into {custom.devices} devices "
                                f"(by {custom.split}=); set population.devices to {custom.devices} or leave it out")
    elif scheme in (None, "natural"):
        # natural (the default for synthetic) would mean the data's own split, and there is none
        data["partition"] = {"scheme": "iid"}
    return raw


def build_custom_federation(scenario, custom: CustomData) -> Federation:
    """The Federation of a run on the user's data: their split or the scenario's partition, the server
    set carved and the test set cut as build_federation does (same random streams)."""
    per_device = None if custom.per_device is None else list(custom.per_device)
    federation = assemble_federation(scenario.data, scenario.population.devices, scenario.seed,
                                     scenario.population.types, custom.train, custom.test, per_device)
    _check_model(scenario, federation)
    return federation


def _check_model(scenario, federation: Federation) -> None:
    """Build the model on two samples of the data, so a model that cannot take them fails here, clearly,
    instead of inside a Ray actor."""
    import torch


    train = federation.train
    try:
        options = scenario.model.options() if hasattr(scenario.model, "options") else None  # a model's own
        model = (build_model(scenario.model.name, train.input_shape, train.num_classes, None, options) if options
                 else build_model(scenario.model.name, train.input_shape, train.num_classes))
        model.eval()
        with torch.no_grad():
            model(train.tensors(np.arange(min(2, len(train))))[0])
    except Exception as exc:
        if train.x.dtype.kind in "iu" and train.x.dtype != np.uint8:
            hint = ("; integer inputs (other than uint8) are token ids for an embedding model such as char_lstm: "
                    "give float32 features for logreg or mlp")
        else:
            hint = "; choose a model that fits the data (logreg and mlp fit any features)"
        raise ScenarioError(f"model.name: {scenario.model.name} cannot take the samples of data= (shape "
                            f"{train.input_shape}, {train.num_classes} classes): {type(exc).__name__}: {exc}{hint}"
                            ) from None


# ------------------------------------------------------------------------------------------ record
def record(custom: CustomData) -> dict:
    """What data.json and summary.json say about the data of a run on in-memory data."""
    entry = {"source": SOURCE, "form": custom.form, "fingerprint": custom.fingerprint, "split": custom.split,
             "train_samples": len(custom.train), "test_samples": len(custom.test),
             "input_shape": list(custom.train.input_shape), "classes": custom.train.num_classes}
    if custom.user_ids is not None:
        entry["users_file"] = USERS
        entry["_user_ids"] = custom.user_ids
    return entry


def public(entry: dict) -> dict:
    return {k: v for k, v in entry.items() if not k.startswith("_")}


def write_record(run_dir: Path, entry: dict) -> None:
    """data.json (and users.csv: which user each device is) in a new run directory, atomically."""
    write_atomic(Path(run_dir) / RECORD, json.dumps(public(entry), indent=2) + "\n")
    ids = entry.get("_user_ids")
    if ids is not None:
        with atomic_file(Path(run_dir) / USERS) as handle:
            handle.write("device,user\n")
            handle.writelines(f"{d},{_csv_cell(u)}\n" for d, u in enumerate(ids.tolist()))


def _csv_cell(value) -> str:
    text = str(value)
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"\n\r') else text


def scenario_header(entry: dict) -> str:
    """The comment heading scenario.yaml of a run on in-memory data."""
    return (f"# data: given in memory ({entry['form']}, {entry['train_samples']} train and {entry['test_samples']} "
            f"test samples, {entry['fingerprint']}),\n"
            "# (data.dataset: memory below; see data.json). Rerun or resume it from Python with the same data:\n"
            "# emulator.resume(RUN_DIR, data=...)\n")


def memory_record(run_dir: str | Path) -> dict | None:
    """The in-memory data record of a run directory (data.json, else summary.json's `data`), or None."""
    run_dir = Path(run_dir)
    try:
        entry = json.loads((run_dir / RECORD).read_text())
    except (OSError, ValueError):
        entry = None
    if not isinstance(entry, dict):
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
            entry = summary.get("data") if isinstance(summary, dict) else None
        except (OSError, ValueError):
            entry = None
    return entry if isinstance(entry, dict) and entry.get("source") == SOURCE else None


def cli_refusal(run_dir: str | Path, entry: dict) -> str:
    split = {"devices": ", devices=...", "users": ", users=..."}.get(entry.get("split"), "")
    return (f"--resume {run_dir}: this run trained on data given in memory ({entry.get('form')}, "
            f"{entry.get('fingerprint')}), which the command line cannot load again; nothing was changed. Resume it "
            f"from Python with the same data: emulator.resume({str(run_dir)!r}, data=...{split})")


def check_same_data(run_dir: str | Path, entry: dict | None, custom: CustomData) -> None:
    """Refuse to resume a run with other data than it started with (or a run that read its own data)."""
    if entry is None:
        raise ScenarioError(f"data=: {run_dir} did not run on in-memory data (it reads data.dataset); resume it "
                            "without data=")
    if entry.get("fingerprint") != custom.fingerprint:
        raise ScenarioError(f"data=: not the data {run_dir} started with: its fingerprint is "
                            f"{entry.get('fingerprint')}, the data given has {custom.fingerprint} (same arrays, in "
                            "the same order, with the same devices= or users= are needed); nothing was changed")

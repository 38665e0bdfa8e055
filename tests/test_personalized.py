"""Personalization with per-device state that lasts: FedPer's personal layers, Ditto's personal models, the
on-disk store that holds them (emulator/device_state.py), its checkpoints and kill -9."""
from __future__ import annotations

import csv
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import comparable, small_scenario
from test_faults import start_cli, wait_for_rows

from emulator.cli import main
from emulator.data import build_federation
from emulator.driver import run_scenario
from emulator.models.zoo import build_model
from emulator.params import layout
from emulator.params import load as load_params
from emulator.parts import validate_scenario
from emulator.recording import checkpoint as checkpoints
from emulator.device_state import DeviceStateStore
from emulator.training.local import evaluate_per_sample
from emulator.training.personal import personal_params

SKEWED = {"rounds": 20, "model": "mlp", "data.partition": {"scheme": "dirichlet", "alpha": 0.1},
          "data.local_test": {"fraction": 0.2, "min_samples": 1}, "evaluation.devices": {},
          "output.checkpoint_every": 5}
FEDPER = {"name": "fedper", "personal_layers": ["5"]}  # the MLP's output layer (a Sequential's index)
DITTO = {"name": "ditto", "lam": 0.1}


def scenario(algorithm: dict | None = None, **overrides):
    raw = small_scenario(**{**SKEWED, **overrides})
    raw["algorithm"] = {**raw["algorithm"], **(algorithm or {})}
    return raw


def last_row(path) -> dict:
    with open(path / "metrics.csv", newline="") as handle:
        return list(csv.DictReader(handle))[-1]


def device_rows(path, round_index: int) -> dict[int, dict]:
    with open(path / "device_eval.csv", newline="") as handle:
        return {int(r["device"]): r for r in csv.DictReader(handle) if int(r["round"]) == round_index}


# ------------------------------------------------------------------------------------------ the store
def test_the_store_returns_what_was_put_and_a_checkpoint_brings_back_exactly_its_bytes(tmp_path):
    store = DeviceStateStore(tmp_path, num_devices=10, width=3)
    assert store.get(4) is None and len(store) == 0
    store.put(4, np.array([1, 2, 3], np.float32))
    store.put(7, np.array([4, 5, 6], np.float32))
    saved = pickle.loads(pickle.dumps(store.state()))  # as a checkpoint holds it
    file = next(tmp_path.glob("slots-*.f32"))
    at_checkpoint = file.read_bytes()
    store.put(4, np.array([9, 9, 9], np.float32))  # rounds after the checkpoint: appended, never overwritten
    store.put(2, np.array([8, 8, 8], np.float32))
    assert store.get(4).tolist() == [9, 9, 9] and file.read_bytes().startswith(at_checkpoint)

    resumed = DeviceStateStore(tmp_path, num_devices=10, width=3)  # a new process after kill -9
    resumed.load_state(saved)
    assert file.read_bytes() == at_checkpoint  # what later rounds appended is cut off
    assert resumed.get(4).tolist() == [1, 2, 3] and resumed.get(7).tolist() == [4, 5, 6]
    assert resumed.get(2) is None and resumed.devices().tolist() == [4, 7]


def test_mostly_dead_slots_are_compacted_and_the_old_generation_outlives_one_checkpoint(tmp_path):
    store = DeviceStateStore(tmp_path, num_devices=4, width=2)
    for step in range(40):  # 4 live slots, 156 dead
        for device in range(4):
            store.put(device, np.full(2, step * 10 + device, np.float32))
    first = store.state()
    assert first["generation"] == 1 and first["slots"] == 4  # compacted into the next generation
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slots-0.f32", "slots-1.f32"]  # the old one kept
    assert [store.get(d).tolist() for d in range(4)] == [[390 + d] * 2 for d in range(4)]
    store.put(0, np.zeros(2, np.float32))
    store.state()  # the checkpoint after: generation 0 is no longer named by any checkpoint on disk
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slots-1.f32"]
    fresh = DeviceStateStore(tmp_path, num_devices=4, width=2)  # a fresh run never reuses an old file
    fresh.put(1, np.ones(2, np.float32))
    assert fresh.generation == 2 and store.get(1).tolist() == [391, 391]


def test_a_checkpoint_whose_file_is_gone_is_refused(tmp_path):
    store = DeviceStateStore(tmp_path, num_devices=2, width=2)
    store.put(0, np.ones(2, np.float32))
    saved = store.state()
    store.close()
    next(tmp_path.glob("slots-*.f32")).unlink()
    with pytest.raises(ValueError, match="missing or shorter"):
        DeviceStateStore(tmp_path, num_devices=2, width=2).load_state(saved)


def test_a_store_without_a_run_directory_leaves_nothing_behind_when_its_process_exits(tmp_path):
    code = ("import numpy as np; from emulator.device_state import DeviceStateStore; "
            "store = DeviceStateStore(None, num_devices=3, width=2); store.put(1, np.ones(2, np.float32)); "
            "print(store.directory)")
    shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "TMPDIR": str(tmp_path)})
    assert Path(shown.stdout.strip()).parent == tmp_path  # it was made there, with a slot file in it
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------------------------ the algorithms
@pytest.fixture(scope="module")
def skewed_runs(tmp_path_factory):
    """FedAvg, FedPer and Ditto on the same skewed world (Dirichlet 0.1: a device holds one or two labels)."""
    root = tmp_path_factory.mktemp("personal")
    return {name: run_scenario(validate_scenario(scenario(algorithm)), root / name).path
            for name, algorithm in [("fedavg", None), ("fedper", FEDPER), ("ditto", DITTO)]}


@pytest.mark.heavy
def test_fedper_and_ditto_serve_each_device_better_than_fedavg(skewed_runs):
    mean = {name: float(last_row(path)["device_acc_mean"]) for name, path in skewed_runs.items()}
    assert mean["fedper"] > mean["fedavg"] + 0.1 and mean["ditto"] > mean["fedavg"] + 0.1, mean


def test_fedper_uploads_only_the_shared_layers_and_ditto_pays_for_two_trainings(skewed_runs):
    rows = {name: last_row(path) for name, path in skewed_runs.items()}
    state = checkpoints.verified(skewed_runs["fedper"])[0][0].state
    total = len(state["params"])
    personal = state["algorithm"]["device_state"]["width"]
    per_device = {name: int(rows[name]["bytes_up"]) / int(rows[name]["participants"]) for name in rows}
    assert per_device["fedper"] == pytest.approx(per_device["fedavg"] * (total - personal) / total, rel=1e-6)
    assert per_device["ditto"] == per_device["fedavg"]  # Ditto uploads the global update alone
    assert float(rows["ditto"]["sim_time_s"]) > float(rows["fedavg"]["sim_time_s"])  # two trainings a round


def test_device_eval_scores_each_device_with_its_own_model(skewed_runs):
    """Recomputed by another path: the last checkpoint's global vector, the device's entries read from the
    store's file at the checkpoint's slot, put in place and evaluated directly on the device's split."""
    for name in ("fedper", "ditto"):
        path = skewed_runs[name]
        point = checkpoints.verified(path)[0][0]
        own = point.state["algorithm"]["device_state"]
        run = validate_scenario(yaml.safe_load((path / "scenario.yaml").read_text()))
        federation = build_federation(run.data, run.population.devices, run.seed)
        model = build_model("mlp", federation.train.input_shape, federation.train.num_classes, 0)
        mask = np.ones(len(point.state["params"]), bool)
        if name == "fedper":
            mask[:] = False
            for tensor, start, stop in layout(model):
                mask[start:stop] = tensor.startswith("5.")
        rows = device_rows(path, point.round)
        file = path / "device_state" / f"slots-{own['generation']}.f32"
        slots = np.fromfile(file, dtype=np.float32).reshape(-1, own["width"])
        x, y = federation.local_test.tensors()
        offsets = federation.local_offsets
        checked = 0
        for device, slot in list(zip(own["devices"], own["slot"]))[:4]:
            if federation.local_sizes[device] == 0:
                continue
            load_params(model, personal_params(point.state["params"], slots[slot], mask))
            _, correct = evaluate_per_sample(model, x[offsets[device]:offsets[device + 1]],
                                             y[offsets[device]:offsets[device + 1]], 256)
            assert float(rows[int(device)]["accuracy"]) == pytest.approx(correct.mean(), abs=1e-9), (name, device)
            checked += 1
        assert checked >= 2


@pytest.mark.heavy
def test_personal_state_survives_kill_9_and_resumes_bit_identically(tmp_path):
    """Ditto (a whole model per device) killed mid-run by SIGKILL, resumed: every metric, every device's
    score, and the store's bytes as an uninterrupted run has them."""
    raw = scenario(DITTO, rounds=20, **{"output.checkpoint_every": 2, "output.tensorboard": False})
    reference = run_scenario(validate_scenario(raw), tmp_path / "reference").path
    config = tmp_path / "ditto.yaml"
    config.write_text(yaml.safe_dump(raw))
    run = tmp_path / "run"
    proc = start_cli(["run", str(config), "--out", str(run), "--quiet"])
    wait_for_rows(run, 5, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert len(comparable(run)) < 20  # killed mid-run
    assert main(["run", "--resume", str(run), "--quiet"]) == 0
    assert comparable(run) == comparable(reference)
    assert (run / "device_eval.csv").read_text() == (reference / "device_eval.csv").read_text()
    final, again = (checkpoints.verified(p)[0][0].state["algorithm"]["device_state"] for p in (reference, run))
    assert final["devices"].tolist() == again["devices"].tolist()
    store = {p: DeviceStateStore(p / "device_state", 40, final["width"]) for p in (reference, run)}
    for directory, state in ((reference, final), (run, again)):
        store[directory].load_state(state)
    for device in final["devices"]:
        assert store[reference].get(int(device)).tobytes() == store[run].get(int(device)).tobytes()


@pytest.mark.parametrize("layers, says", [(["head"], "'head' names no parameter of model 'mlp'; its parameters "
                                                     "are 1.weight"),
                                          (["1", "3", "5"], "covers every parameter")])
def test_personal_layers_that_cannot_split_the_model_exit_2_naming_the_field(tmp_path, capsys, layers, says):
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(scenario({**FEDPER, "personal_layers": layers}, rounds=2)))
    assert main(["run", str(config), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "algorithm.personal_layers" in err and says in err
    assert not (tmp_path / "run").exists()  # nothing half-made


def test_a_users_personalized_algorithm_is_a_plugin(tmp_path):
    """LG-FedAvg (Liang et al., 2020: the lower layers stay on the device, the head is shared), written
    against emulator.extend alone: its state is kept, checkpointed and scored like FedPer's."""
    (tmp_path / "lg_plugin.py").write_text(
        "from typing import Literal\n"
        "import numpy as np\n"
        "from emulator.extend import ClientTraining, Personalization, Personalized, register_algorithm\n\n"
        "class LgConfig(ClientTraining):\n"
        "    name: Literal['lg_fedavg'] = 'lg_fedavg'\n"
        "    server_lr: float = 1.0\n\n"
        "class LgFedAvg(Personalized):\n"
        "    def __init__(self, config, context):\n"
        "        head = context.parameter_layout[-1][0].split('.')[0] + '.'\n"
        "        mask = np.zeros(context.num_params, bool)\n"
        "        for name, start, stop in context.parameter_layout:\n"
        "            mask[start:stop] = not name.startswith(head)\n"
        "        super().__init__(config, context, Personalization('layers', mask))\n\n"
        "register_algorithm('lg_fedavg', LgFedAvg, config=LgConfig)\n")
    raw = scenario({"name": "lg_fedavg"}, rounds=6, plugins=["lg_plugin"])
    config = tmp_path / "lg.yaml"
    config.write_text(yaml.safe_dump(raw))
    assert main(["run", str(config), "--out", str(tmp_path / "run"), "--quiet"]) == 0
    state = checkpoints.verified(tmp_path / "run")[0][0].state
    model = build_model("mlp", (60,), 10, 0)
    head = sum(stop - start for name, start, stop in layout(model) if name.startswith("5."))
    assert state["algorithm"]["device_state"]["width"] == len(state["params"]) - head  # the body is personal
    assert len(state["algorithm"]["device_state"]["devices"]) > 0
    assert float(last_row(tmp_path / "run")["device_acc_mean"]) > 0


def test_compression_with_layers_that_never_travel_is_refused(tmp_path, capsys):
    """The encoders would count FedPer's personal entries, which never leave the device: refused, not misprized."""
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(scenario(FEDPER, rounds=2, compression={"kind": "top_k", "fraction": 0.1})))
    assert main(["run", str(config), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    assert "compression: algorithm 'fedper' keeps part of the model" in capsys.readouterr().err


def test_checkpoints_from_before_the_store_load_their_controls_and_residuals(tmp_path):
    """SCAFFOLD's device controls and error feedback's residuals were dicts of arrays in a checkpoint; such a
    checkpoint still loads, into the stores that hold them now."""
    from emulator.algorithms import AlgorithmContext, build_algorithm
    from emulator.uplink.pipeline import UploadPipeline

    # two scenarios: SCAFFOLD's second vector has no encoder, so a run refuses compression with it
    scenario = validate_scenario(small_scenario(**{"algorithm": {**small_scenario()["algorithm"], "name": "scaffold"}}))
    compressed = validate_scenario(small_scenario(compression={"kind": "top_k", "fraction": 0.5}))
    context = AlgorithmContext(num_devices=40, device_sizes=np.full(40, 10), num_params=3, seed=0, total_rounds=4,
                               server_samples=0, server_train=None, model_name="m", state_dir=lambda: str(tmp_path))
    scaffold = build_algorithm(scenario.algorithm, context)
    old = {**scaffold.state(), "device_controls": {7: np.array([1, 2, 3], np.float32)}}
    scaffold.load_state(old)
    assert np.array_equal(scaffold.device_controls.get(7), [1, 2, 3]) and scaffold.device_controls.get(6) is None
    again = build_algorithm(scenario.algorithm, context)
    again.load_state(scaffold.state())  # and the new form round-trips
    assert np.array_equal(again.device_controls.get(7), [1, 2, 3])

    pipeline = UploadPipeline(compressed, 3, tmp_path)
    pipeline.load_state({"residuals": {5: np.array([0.5, 0, 1], np.float32)}, "residual_round": {5: 2}})
    assert np.array_equal(pipeline.residuals.get(5), [0.5, 0, 1]) and pipeline.residual_round[5] == 2
    restored = UploadPipeline(compressed, 3, tmp_path)  # a resume: the same run directory
    restored.load_state(pipeline.state())
    assert np.array_equal(restored.residuals.get(5), [0.5, 0, 1]) and restored.residual_round[5] == 2

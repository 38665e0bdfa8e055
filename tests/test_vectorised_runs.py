"""runtime.vectorise and runtime.group_size: devices trained in groups, one runner task per group.

Grouping alone changes no number (a device trained one at a time gives the same update in any group);
vectorised groups (emulator/training/cohort.py) agree with the sequential path within float32 rounding, and, since
groups are cut from the device order and the round's report count, never from the runner count, give
identical metrics with 1 runner or 3.
"""
import math
import time

import numpy as np
import pytest
import torch

from conftest import comparable, small_scenario
from emulator.recording import checkpoint as checkpoints
from emulator.training import precision
from emulator.data.federation import ArrayDataset, Federation
from emulator.driver import run_scenario
from emulator.runtime.grouping import TASK_S, DeviceCost
from emulator.runtime.pool import GROUP_BYTES, MAX_GROUP, group_jobs
from emulator.runtime.runner import DeviceJob, DeviceRunner, RunContext
from emulator.scenario import ScenarioError
from emulator.parts import validate_scenario
from emulator.training.local import LocalTraining

SYSTEM = ["round", "selected", "participants", "dropped", "sim_time_s", "bytes_down", "bytes_up", "label_tv"]
LOSS_TOL = 1e-4  # train/test loss, relative: the vectorised path differs from the sequential in the last bits


def run(tmp_path, name, **overrides):
    return comparable(run_scenario(validate_scenario(small_scenario(**overrides)), tmp_path / name).path)


# ------------------------------------------------------------------------------------------- groups
def test_vectorised_groups_follow_the_reports_never_the_runners():
    jobs = list(range(1000))
    for runners in (1, 2, 8, 64):
        groups = group_jobs(jobs, None, True, runners, model_bytes=800_000)
        assert len(groups) == 16 and {len(g) for g in groups} == {62, 63}  # 1000 / MAX_GROUP, near-equal
        assert [j for g in groups for j in g] == jobs  # consecutive, in device order
    assert [len(g) for g in group_jobs(jobs[:10], None, True, 2, 800_000)] == [2, 3, 2, 3]  # four groups
    big = 40 * 2 ** 20  # a model whose updates would hold GROUP_BYTES in two devices
    assert {len(g) for g in group_jobs(jobs, None, True, 2, big)} == {max(1, GROUP_BYTES // big)}
    assert [len(g) for g in group_jobs(jobs[:10], 4, True, 2, big)] == [4, 4, 2]  # runtime.group_size wins
    assert group_jobs([], None, True, 2, 1) == []
    assert MAX_GROUP == 64


def test_sequential_groups_spread_over_the_runners():
    jobs = list(range(1000))
    assert [len(g) for g in group_jobs(jobs[:10], None, False, 2, 800_000)] == [1] * 10  # a small cohort
    groups = group_jobs(jobs, None, False, 2, 800_000)
    assert len(groups) == 16 and [j for g in groups for j in g] == jobs
    assert len(group_jobs(jobs, None, False, 8, 800_000)) == 64  # eight tasks per runner


def test_devices_that_train_in_milliseconds_go_in_fewer_larger_tasks():
    """The quickstart's round: 20 MLP devices of ~4 ms each on 2 runners were 16 tasks of a few ms (a task
    costs milliseconds on Ray); measured, they go in tasks of about TASK_S of training, as many for every
    runner, one at the least. Slow devices keep the cut that balances best; a vectorised cut never reads the
    time."""
    jobs = list(range(20))
    assert len(group_jobs(jobs, None, False, 2, 800_000)) == 16  # not measured yet (a run's first round)
    assert [len(g) for g in group_jobs(jobs, None, False, 2, 800_000, device_seconds=0.004)] == [10, 10]
    assert len(group_jobs(jobs, None, False, 2, 800_000, device_seconds=0.12)) == 6  # 20 x 0.12 s / 0.5 s: 5
    assert len(group_jobs(jobs, None, False, 2, 800_000, device_seconds=0.5)) == 16  # a CNN: as before
    assert len(group_jobs(jobs, None, True, 2, 800_000, device_seconds=0.004)) == 4  # vectorised: the reports'
    assert [len(g) for g in group_jobs(jobs, 3, False, 2, 800_000, device_seconds=0.004)] == [3] * 6 + [2]
    assert 0.004 * 20 < TASK_S
    round_100k = group_jobs(list(range(1000)), None, False, 2, 218_000, device_seconds=0.0045)
    assert [len(g) for g in round_100k] == [100] * 10  # population_100k: 4.5 s of training in 10 tasks


def test_device_cost_measures_a_rounds_training_per_device_and_runner():
    cost = DeviceCost()
    with cost.timing(devices=4, runners=2):
        time.sleep(0.2)
    assert 0.1 <= cost.seconds < 0.2  # 0.2 s x 2 runners / 4 devices
    measured = cost.seconds
    with pytest.raises(RuntimeError):
        with cost.timing(devices=4, runners=2):
            raise RuntimeError("a round that fails measures nothing")
    assert cost.seconds == measured


def test_vectorise_enters_the_fingerprint_and_the_defaults_leave_it_as_before():
    plain = validate_scenario(small_scenario())
    grouped = validate_scenario(small_scenario(**{"runtime.group_size": 3}))
    vectorised = validate_scenario(small_scenario(**{"runtime.vectorise": True}))
    assert "runtime" not in checkpoints.results_fields(plain)
    assert checkpoints.fingerprint(plain) == checkpoints.fingerprint(grouped)  # grouping alone changes nothing
    assert checkpoints.differing_fields(checkpoints.results_fields(plain), checkpoints.results_fields(vectorised)) \
        == ["runtime.group_size", "runtime.vectorise"]
    with pytest.raises(ScenarioError, match=r"runtime\.group_size"):
        validate_scenario(small_scenario(**{"runtime.group_size": 0}))


# ----------------------------------------------------------------------------------- a runner, no Ray
def federation(shape, devices=6, per_device=20, seed=0) -> Federation:
    rng = np.random.default_rng(seed)
    n = devices * per_device
    train = ArrayDataset(rng.normal(size=(n, *shape)).astype(np.float32), rng.integers(0, 4, n), 4)
    test = ArrayDataset(rng.normal(size=(8, *shape)).astype(np.float32), rng.integers(0, 4, 8), 4)
    sizes = rng.integers(5, per_device + 1, devices)  # unequal data: unequal epochs
    indices = np.concatenate([np.arange(d * per_device, d * per_device + s) for d, s in enumerate(sizes)])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return Federation(train=train, test=test, device_indices=indices, device_offsets=offsets,
                      server_indices=np.arange(n - 4, n))


def jobs_for(devices, **spec):
    settings = dict(lr=0.05, batch_size=8, local_epochs=2, momentum=0.5, prox_mu=0.1) | spec
    return [DeviceJob(d, LocalTraining(**settings), seed=1000 + d) for d in devices]


@pytest.mark.parametrize("model", ["mlp", "logreg"])
def test_a_runner_group_is_the_devices_trained_one_by_one(model):
    runner = DeviceRunner()
    box = RunContext("ctx", federation((12,)), model, 0)
    start = runner._run(box)[1]
    params = np.concatenate([p.detach().reshape(-1).numpy() for p in start.state_dict().values()]).astype(np.float32)
    jobs = jobs_for(range(6))
    one_by_one = [runner.train(box, params, job) for job in jobs]
    grouped = runner.train_group(box, params, jobs, vectorise=False)
    vectorised = runner.train_group(box, params, jobs, vectorise=True)
    for a, b, c in zip(one_by_one, grouped, vectorised):
        assert a.device == b.device == c.device and a.num_samples == b.num_samples == c.num_samples
        assert np.array_equal(a.delta, b.delta) and a.stats == b.stats  # grouping alone: bit-identical
        assert np.abs(a.delta - c.delta).max() <= 1e-5 * max(1.0, np.abs(a.delta).max())
        assert c.stats.steps == a.stats.steps and c.stats.accuracy == a.stats.accuracy
        assert math.isclose(c.stats.loss, a.stats.loss, rel_tol=1e-5)


def test_a_model_vmap_cannot_train_falls_back_to_one_device_at_a_time():
    runner = DeviceRunner()
    box = RunContext("ctx", federation((3, 8, 8), devices=3, per_device=6), "resnet18", 0)
    start = runner._run(box)[1]
    params = np.concatenate([t.detach().reshape(-1).numpy() for t in start.state_dict().values()
                             if torch.is_floating_point(t)]).astype(np.float32)
    jobs = jobs_for(range(3), local_epochs=None, local_steps=1, momentum=0.0, prox_mu=0.0)
    vectorised = runner.train_group(box, params, jobs, vectorise=True)
    for job, update in zip(jobs, vectorised):
        alone = runner.train(box, params, job)
        assert np.array_equal(alone.delta, update.delta)  # BatchNorm: trained as before, bit for bit


def test_the_server_says_when_the_model_cannot_be_vectorised():
    from emulator.server.server import FederatedServer

    raw = validate_scenario(small_scenario(**{"runtime.vectorise": True})).model_dump(mode="json")
    fed = federation((60,), devices=40, per_device=10)
    assert FederatedServer(raw, RunContext("ctx", fed, "logreg", 0), runners=["unused"]).preflight() == []
    raw["model"] = {"name": "char_lstm"}  # refused by cohort.supports: a recurrent layer
    tokens = ArrayDataset(np.random.default_rng(0).integers(0, 80, (400, 12)), np.zeros(400, np.int64), 80)
    text = Federation(train=tokens, test=tokens.subset(np.arange(8)), device_indices=np.arange(400),
                      device_offsets=np.arange(0, 401, 10), server_indices=np.zeros(0, np.int64))
    notes = FederatedServer(raw, RunContext("ctx", text, "char_lstm", 0), runners=["unused"]).preflight()
    assert len(notes) == 1 and notes[0].startswith("runtime.vectorise: model 'char_lstm' trains one device at a time")
    assert "recurrent" in notes[0]


# ------------------------------------------------------------------------------------------ whole runs
def test_vectorised_runs_give_identical_metrics_with_one_runner_or_three(ray_session, tmp_path):
    settings = {"model": "mlp", "rounds": 3, "runtime.vectorise": True}
    one = run(tmp_path, "one", **settings, **{"runtime.runners": 1})
    three = run(tmp_path, "three", **settings, **{"runtime.runners": 3})
    assert one == three
    sequential = run(tmp_path, "seq", model="mlp", rounds=3)
    assert [[r[c] for c in SYSTEM] for r in one] == [[r[c] for c in SYSTEM] for r in sequential]
    assert [r["train_loss"] for r in one] != [r["train_loss"] for r in sequential]  # it did run vectorised
    for v, s in zip(one, sequential):
        for column in ("train_loss", "test_loss"):
            assert math.isclose(float(v[column]), float(s[column]), rel_tol=LOSS_TOL), column
        assert abs(float(v["test_acc"]) - float(s["test_acc"])) <= 0.01


@pytest.mark.parametrize("algorithm", [
    {"name": "scaffold", "clients_per_round": 8, "client_lr": 0.05, "local_steps": 5, "batch_size": 16},
    {"name": "fedprox", "mu": 0.1, "clients_per_round": 8, "client_lr": 0.05, "local_epochs": 1, "batch_size": 16},
])
def test_client_side_terms_vectorised_agree_with_sequential(ray_session, tmp_path, algorithm):
    settings = {"model": "mlp", "rounds": 3, "algorithm": algorithm}
    vectorised = run(tmp_path, "v", **settings, **{"runtime.vectorise": True, "runtime.runners": 2})
    sequential = run(tmp_path, "s", **settings)
    for v, s in zip(vectorised, sequential):
        for column in ("train_loss", "test_loss"):
            assert math.isclose(float(v[column]), float(s[column]), rel_tol=LOSS_TOL), column


def test_grouping_alone_changes_no_number(ray_session, tmp_path):
    assert run(tmp_path, "g1", **{"runtime.group_size": 1}) == run(tmp_path, "g3", **{"runtime.group_size": 3})


def test_resume_cannot_switch_vectorisation(ray_session, tmp_path):
    from emulator.driver import resumable_scenario

    path = run_scenario(validate_scenario(small_scenario(rounds=2)), tmp_path / "r").path
    with pytest.raises(ScenarioError, match=r"runtime\.vectorise=True: this run computes with runtime\.vectorise=False"):
        resumable_scenario(path, ["rounds=3", "runtime.vectorise=true"])
    assert resumable_scenario(path, ["rounds=3", "runtime.group_size=2"]).runtime.group_size == 2


@pytest.mark.skipif(not precision.cpu_bf16(), reason="this CPU has no bf16 (AVX512-BF16 or AMX)")
def test_bf16_vectorised_is_as_close_to_fp32_as_bf16_one_by_one():
    """bf16 rounds at ~4e-3, so the two bf16 paths differ from each other about as much as from fp32:
    the vectorised one must stay as close to fp32 as the sequential one is."""
    runner = DeviceRunner()
    deltas = {}
    for name in ("fp32", "bf16"):
        box = RunContext(name, federation((12,)), "mlp", 0, precision=name)
        start = runner._run(box)[1]
        params = np.concatenate([p.detach().reshape(-1).numpy() for p in start.state_dict().values()])
        jobs = jobs_for(range(6))
        deltas[name] = [runner.train(box, params, job).delta for job in jobs]
        deltas[name + " vectorised"] = [u.delta for u in runner.train_group(box, params, jobs, True)]
    off = {key: [np.linalg.norm(d - f) for d, f in zip(deltas[key], deltas["fp32"])]
           for key in ("bf16", "bf16 vectorised")}
    assert np.mean(off["bf16 vectorised"]) <= 2 * np.mean(off["bf16"])
    assert all(e <= 0.05 * np.linalg.norm(f) for e, f in zip(off["bf16 vectorised"], deltas["fp32"]))
    assert all(e > 0 for e in off["bf16 vectorised"])  # it did compute in bf16

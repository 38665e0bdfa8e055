"""The papers' algorithms on small problems with known answers."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from conftest import small_scenario
from emulator import params as param_vector
from emulator.algorithms import AlgorithmContext, build_algorithm
from emulator.algorithms.fast import adapt_q
from emulator.data import build_federation
from emulator.driver import run_scenario
from emulator.models.zoo import build_model
from emulator.recording.rundir import read_metrics
from emulator.runtime.runner import DeviceJob, DeviceRunner, RunContext
from emulator.parts import validate_scenario
from emulator.scenario import ScenarioError
from emulator.seeding import rng, torch_seed
from emulator.system import CohortRequest, IdealSystem

LEARNING = ["train_loss", "train_acc", "test_loss", "test_acc", "participants", "selected"]


def run_rows(tmp_path, name, **overrides):
    scenario = validate_scenario(small_scenario(**overrides))
    return read_metrics(run_scenario(scenario, tmp_path / name).path)


def columns(rows, names):
    return [{k: r[k] for k in names} for r in rows]


SERVER_SET = {"data.server_set": {"size": 120, "source": "iid"}, "system.model": "ideal", "rounds": 5}


def test_special_cases_reduce_to_fedavg(ray_session, tmp_path):
    base = run_rows(tmp_path, "fedavg", **SERVER_SET)
    safari = run_rows(tmp_path, "safari", **SERVER_SET, algorithm={**small_scenario()["algorithm"], "name": "safari",
                                                                   "q": 1.0})
    prox = run_rows(tmp_path, "prox", **SERVER_SET, algorithm={**small_scenario()["algorithm"], "name": "fedprox",
                                                               "mu": 0.0})
    fsl = run_rows(tmp_path, "fsl", **SERVER_SET, algorithm={**small_scenario()["algorithm"], "name": "fsl",
                                                             "gamma": 0.0, "server_steps": 3})
    # SAFARI with q = 1 and FedProx with mu = 0 are FedAvg, to the last bit, clock and bytes included.
    same = [k for k in base[0] if k != "wall_time_s"]
    assert columns(safari, same) == columns(base, same)
    assert columns(prox, same) == columns(base, same)
    # FSL with gamma = 0 learns exactly as FedAvg; only the (pointless) server compute is charged.
    assert columns(fsl, LEARNING) == columns(base, LEARNING)
    assert all(float(r["server_compute_s"]) > 0 for r in fsl)
    other = run_rows(tmp_path, "fsl1", **SERVER_SET, algorithm={**small_scenario()["algorithm"], "name": "fsl",
                                                                "gamma": 1.0, "server_steps": 3})
    assert columns(other, LEARNING) != columns(base, LEARNING)


def test_safari_with_q_zero_is_sgd_on_the_server_set(ray_session, tmp_path):
    raw = small_scenario(**{**SERVER_SET, "rounds": 6}, algorithm={
        "name": "safari", "q": 0.0, "server_lr": 0.5, "server_steps": 2, "server_batch_size": 1000})
    scenario = validate_scenario(raw)
    rows = read_metrics(run_scenario(scenario, tmp_path / "safari0").path)
    assert all(r["kind"] == "server" and r["participants"] == "0" and r["bytes_up"] == "0" for r in rows)

    # The same thing by hand: full-batch gradient descent on the server's set, 2 steps a round.
    federation = build_federation(scenario.data, scenario.population.devices, scenario.seed)
    x0, y0 = federation.train.tensors(federation.server_indices)
    model = build_model("logreg", federation.train.input_shape, federation.train.num_classes,
                        torch_seed(scenario.seed, "model-init"))
    for _ in range(6 * 2):
        model.zero_grad()
        F.cross_entropy(model(x0), y0).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.5 * p.grad
    test_x, test_y = federation.test.tensors()
    with torch.no_grad():
        expected_loss = F.cross_entropy(model(test_x), test_y).item()
    assert float(rows[-1]["test_loss"]) == pytest.approx(expected_loss, rel=1e-5)
    # the server's compute is charged on the clock: 2 steps x 120 samples x 1e-4 s
    assert float(rows[0]["server_compute_s"]) == pytest.approx(2 * 120 * 1e-4)


def test_scaffold_doubles_the_bytes(ray_session, tmp_path):
    rows = run_rows(tmp_path, "scaffold", rounds=2, **{"system.model": "ideal"},
                    algorithm={**small_scenario()["algorithm"], "name": "scaffold"})
    model_bytes = (60 * 10 + 10) * 4
    assert all(int(r["bytes_down"]) == int(r["bytes_up"]) == 2 * 8 * model_bytes for r in rows)


# ------------------------------------------------------------------------- SCAFFOLD vs FedAvg, in process
def heterogeneous_problem():
    """Four devices with very different data (synthetic(1, 1): each its own model and inputs)."""
    scenario = validate_scenario({
        "name": "quad", "rounds": 1, "seed": 5, "model": "logreg",
        "data": {"synthetic": {"alpha": 1.0, "beta": 1.0, "dimension": 10, "classes": 3,
                               "min_samples": 40, "max_samples": 40}},
        "population": {"devices": 4}, "system": {"model": "ideal"},
        "algorithm": {"clients_per_round": 4, "client_lr": 0.1, "local_steps": 20, "batch_size": 1000,
                      "weight_decay": 0.05}})
    federation = build_federation(scenario.data, 4, scenario.seed)
    return scenario, federation


ITERATIONS = 2000


def global_optimum(federation, weight_decay, model):
    """argmin (1/m) sum_i F_i(w) + (wd/2)||w||^2 by plain full-batch gradient descent."""
    data = [federation.train.tensors(federation.device_samples(d)) for d in range(federation.num_devices)]
    for _ in range(ITERATIONS):
        model.zero_grad()
        loss = sum(F.cross_entropy(model(x), y) for x, y in data) / len(data)
        loss = loss + 0.5 * weight_decay * sum((p ** 2).sum() for p in model.parameters())
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.5 * p.grad
    return param_vector.flatten(model)


def federated(name, scenario, federation, rounds):
    config = scenario.algorithm.model_copy(update={"name": name}) if name == "fedavg" else \
        validate_scenario({**scenario.model_dump(mode="json"), "algorithm": {
            **scenario.algorithm.model_dump(mode="json"), "name": name}}).algorithm
    model = build_model("logreg", federation.train.input_shape, federation.train.num_classes, 0)
    params = param_vector.flatten(model)
    algorithm = build_algorithm(config, AlgorithmContext(
        num_devices=4, device_sizes=federation.sizes, num_params=len(params), seed=0,
        parameter_mask=param_vector.parameter_mask(model)))
    context = RunContext("quad", federation, "logreg", 0)
    runner = DeviceRunner()
    for r in range(1, rounds + 1):
        jobs = [DeviceJob(d, algorithm.local_training(d), 0, 1, algorithm.job_payload(d)) for d in range(4)]
        updates = [runner.train(context, params, job) for job in jobs]
        params = algorithm.aggregate(params, iter(updates), r)
    return params


@pytest.mark.heavy
def test_scaffold_reaches_the_optimum_where_fedavg_with_many_local_steps_does_not():
    scenario, federation = heterogeneous_problem()
    optimum = global_optimum(federation, 0.05, build_model("logreg", (10,), 3, 0))
    fedavg = federated("fedavg", scenario, federation, 80)
    scaffold = federated("scaffold", scenario, federation, 80)
    fedavg_gap = np.linalg.norm(fedavg - optimum)
    scaffold_gap = np.linalg.norm(scaffold - optimum)
    assert scaffold_gap < 1e-3 * np.linalg.norm(optimum)
    assert fedavg_gap > 30 * scaffold_gap  # client drift: FedAvg settles somewhere else


# ------------------------------------------------------------------------------------------------- FAST
def fast_selection(q, kind="beta", rounds=60, devices=200):
    scenario = validate_scenario({
        "name": "fast", "rounds": rounds, "population": {"devices": devices}, "system": {"model": "ideal"},
        "algorithm": {"name": "fast", "q": q, "clients_per_round": 20, "selection": {"kind": kind}}})
    algorithm = build_algorithm(scenario.algorithm, AlgorithmContext(devices, np.full(devices, 10), 5, seed=1))
    system = IdealSystem(devices, 60.0)
    kinds, chosen = [], []
    for r in range(1, rounds + 1):
        plan = algorithm.plan_round(r)
        outcome = system.client_round(CohortRequest(r, plan.cohort, plan.selection, rng(1, "selection", r), 1, 1,
                                                    snapshot=plan.kind == "snapshot"))
        kinds.append(plan.kind)
        chosen.append(outcome.selected)
    return kinds, np.concatenate(chosen)


def test_fast_q_one_draws_uniform_cohorts_and_q_zero_only_the_regime():
    kinds, chosen = fast_selection(q=1.0)
    assert set(kinds) == {"snapshot"}
    counts = np.bincount(chosen, minlength=200)
    assert chosen.mean() == pytest.approx(99.5, abs=6)  # uniform over 0..199
    assert counts.max() < 20 and (counts > 0).mean() > 0.95
    kinds, chosen = fast_selection(q=0.0)
    assert set(kinds) == {"client"}
    # Beta(1, 10): device int(x * M) with x ~ Beta(1, 10); the first 20 distinct draws crowd the low ids
    assert chosen.mean() < 40 and np.quantile(chosen, 0.95) < 60
    kinds, _ = fast_selection(q=0.5, rounds=400)
    assert kinds.count("snapshot") / 400 == pytest.approx(0.5, abs=0.07)


def test_fast_snapshot_close_all_asks_the_world_to_wait_for_every_sampled_device():
    plans = {}
    for close in ("first", "all"):
        scenario = validate_scenario({"name": "fast", "rounds": 3, "population": {"devices": 50},
                                      "algorithm": {"name": "fast", "q": 1.0, "clients_per_round": 5,
                                                    "snapshot_close": close}})
        algorithm = build_algorithm(scenario.algorithm, AlgorithmContext(50, np.full(50, 10), 5, seed=1))
        plans[close] = algorithm.plan_round(1)
    assert plans["first"].kind == plans["all"].kind == "snapshot"
    assert not plans["first"].wait_for_all and plans["all"].wait_for_all
    with pytest.raises(ScenarioError, match="snapshot_close"):
        validate_scenario({"name": "f", "rounds": 1, "algorithm": {"name": "fast", "q": 1, "snapshot_close": "some"}})


@pytest.mark.parametrize("kind,low,high", [("gamma", 0, 50), ("weibull", 100, 200)])
def test_fast_regimes_concentrate_where_their_distribution_does(kind, low, high):
    _, chosen = fast_selection(q=0.0, kind=kind)
    # Gamma(10, 0.01) has mean 0.1 (ids near 20); Weibull(10, 1) / 1.2 sits around 0.8 (ids near 160)
    mean = {"gamma": 0.1, "weibull": 0.95 / 1.2}[kind] * 200
    assert abs(chosen.mean() - mean) < 25
    assert low <= np.quantile(chosen, 0.02) and np.quantile(chosen, 0.98) < high


def test_adaptive_q_follows_the_rule_on_a_given_accuracy_sequence():
    accuracy = [0.5, 0.6, 0.55, 0.7, 0.4, 0.45]
    lam = 2.0
    q, previous, expected = 0.0, 0.0, []
    for acc in accuracy:  # q_{r+1} = clip(q_r + lam (acc_{r-1} - acc_r), 0, 1), acc_{-1} = 0, q_0 = 0
        expected.append(q)
        q = min(1.0, max(0.0, q + lam * (previous - acc)))
        previous = acc
    scenario = validate_scenario({"name": "a", "rounds": 6, "algorithm": {"name": "fast", "adaptive": True,
                                                                         "lam": lam}})
    algorithm = build_algorithm(scenario.algorithm, AlgorithmContext(100, np.full(100, 10), 5, seed=0))
    recorded = []
    for r, acc in enumerate(accuracy, start=1):
        algorithm.plan_round(r)
        recorded.append(algorithm.after_round({"train_acc": acc})["q"])
    assert recorded == pytest.approx(expected)
    assert recorded == pytest.approx([0.0, 0.0, 0.0, 0.1, 0.0, 0.6])
    assert adapt_q(0.9, 0.8, 0.2, 1.0) == 1.0 and adapt_q(0.1, 0.2, 0.9, 1.0) == 0.0


# ------------------------------------------------------------------------------------ hosts and DS, unit
def test_fedavgm_accumulates_server_momentum():
    scenario = validate_scenario({"name": "m", "rounds": 1, "algorithm": {"name": "fedavgm", "momentum": 0.5,
                                                                         "server_lr": 1.0}})
    algorithm = build_algorithm(scenario.algorithm, AlgorithmContext(10, np.full(10, 5), 2, seed=0))
    from emulator.algorithms.base import ClientUpdate
    from emulator.training.local import TrainStats

    x = np.zeros(2, dtype=np.float32)
    step = [ClientUpdate(0, 5, np.array([1.0, -2.0], np.float32), TrainStats(1, 0.0, 0.0))]
    x = algorithm.aggregate(x, iter(step), 1)  # v = d, x = d
    x = algorithm.aggregate(x, iter(step), 2)  # v = 0.5 d + d, x = d + 1.5 d
    np.testing.assert_allclose(x, [2.5, -5.0])


def test_data_sharing_devices_train_on_their_data_plus_the_server_set():
    scenario = validate_scenario(small_scenario(**{"data.server_set": {"size": 50}}, algorithm={"name": "ds"}))
    federation = build_federation(scenario.data, 40, scenario.seed)
    algorithm = build_algorithm(scenario.algorithm, AlgorithmContext(40, federation.sizes, 610, seed=0))
    runner = DeviceRunner()
    model = build_model("logreg", (60,), 10, 0)
    update = runner.train(RunContext("ds", federation, "logreg", 0), param_vector.flatten(model),
                          DeviceJob(3, algorithm.local_training(3), 0))
    assert update.num_samples == federation.sizes[3] + 50
    work = algorithm.samples_processed(np.array([3]), federation.sizes)
    assert work[0] == algorithm.local_training(3).samples_processed(federation.sizes[3] + 50)


def test_scaffold_keeps_device_controls_on_disk_and_resumes_as_an_uninterrupted_run(tmp_path):
    """The devices' controls live in the run directory's device_state/scaffold/ (not one array per device in
    memory or in each checkpoint); a run stopped after round 5 (checkpoint at 4) and resumed ends with the
    metrics of one that was not, so the store gives back each control as it stood."""
    from conftest import comparable

    from emulator.driver import resume_run

    raw = small_scenario(**{"rounds": 7, "output.checkpoint_every": 2, "system.model": "ideal",
                            "algorithm": {**small_scenario()["algorithm"], "name": "scaffold"}})
    reference = run_scenario(validate_scenario(raw), tmp_path / "reference")
    assert any((reference.path / "device_state" / "scaffold").glob("slots-*.f32"))

    def stop(row):
        if row["round"] == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_scenario(validate_scenario(raw), tmp_path / "run", on_round=stop)
    resume_run(tmp_path / "run")
    assert comparable(tmp_path / "run") == comparable(reference.path)

"""Adaptive server optimizers (Reddi et al. 2021) and learning-rate schedules: known answers by hand,
their wiring into every host algorithm, checkpoints, one run end to end, and bad input."""
import json
import math
import pickle

import numpy as np
import pytest

from conftest import comparable, small_scenario
from emulator.aggregation.mean import server_update
from emulator.algorithms import AlgorithmContext, ClientUpdate, build_algorithm
from emulator.cli import main
from emulator.driver import resume_run, run_scenario
from emulator.recording.rundir import read_metrics
from emulator.scenario import ScenarioError
from emulator.parts import load_scenario, validate_scenario
from emulator.aggregation.schedules import lr_at
from emulator.aggregation.optimizers import (AdaptiveServerOptimizer, ServerOptimizer, adagrad_second_moment,
                                        adam_second_moment, build_server_optimizer, yogi_second_moment)
from emulator.training.local import TrainStats

# --------------------------------------------------------------------------- optimizers, by hand
# x_0 = [1, -1], eta = 0.5, beta1 = beta2 = 0.5, tau = 1 (so v_{-1} = tau^2 = 1), and three mean deltas.
X0 = [1.0, -1.0]
DELTAS = [[0.5, 2.0], [-1.0, 2.0], [0.0, -1.0]]
ETA, TAU = 0.5, 1.0
# m_t = 0.5 m_{t-1} + 0.5 Delta_t (the same for every adaptive kind):
#   m_1 = 0.5 [0.5, 2]                     = [0.25, 1]
#   m_2 = 0.5 [0.25, 1] + 0.5 [-1, 2]      = [-0.375, 1.5]
#   m_3 = 0.5 [-0.375, 1.5] + 0.5 [0, -1]  = [-0.1875, 0.25]
M = [[0.25, 1.0], [-0.375, 1.5], [-0.1875, 0.25]]
# Delta^2: [0.25, 4], [1, 4], [0, 1]
V = {
    # v_t = v_{t-1} + Delta_t^2:  1 + [0.25, 4] = [1.25, 5];  + [1, 4] = [2.25, 9];  + [0, 1] = [2.25, 10]
    "adagrad": [[1.25, 5.0], [2.25, 9.0], [2.25, 10.0]],
    # v_t = 0.5 v_{t-1} + 0.5 Delta_t^2:  0.5 + [0.125, 2] = [0.625, 2.5];  [0.3125, 1.25] + [0.5, 2] =
    # [0.8125, 3.25];  [0.40625, 1.625] + [0, 0.5] = [0.40625, 2.125]
    "adam": [[0.625, 2.5], [0.8125, 3.25], [0.40625, 2.125]],
    # v_t = v_{t-1} - 0.5 Delta_t^2 sign(v_{t-1} - Delta_t^2):
    #   t=1: v_0 - Delta^2 = [0.75, -3] -> signs [+, -]: [1 - 0.125, 1 + 2]          = [0.875, 3]
    #   t=2: [0.875, 3] - [1, 4] = [-0.125, -1] -> [-, -]: [0.875 + 0.5, 3 + 2]        = [1.375, 5]
    #   t=3: [1.375, 5] - [0, 1] = [1.375, 4] -> [+, +]: [1.375 - 0, 5 - 0.5]          = [1.375, 4.5]
    "yogi": [[0.875, 3.0], [1.375, 5.0], [1.375, 4.5]],
}
# x_t = x_{t-1} + 0.5 m_t / (sqrt(v_t) + 1), e.g. FedAdagrad's first entry at t = 2 and 3:
#   0.9840170 = 1.0590170 + 0.5 (-0.375) / (1.5 + 1),   0.9465170 = 0.9840170 + 0.5 (-0.1875) / 2.5
KNOWN = {
    "adagrad": [[1.0590170, -0.8454915], [0.9840170, -0.6579915], [0.9465170, -0.6279599]],
    "adam": [[1.0698102, -0.8062871], [0.9711980, -0.5386952], [0.9139418, -0.4878354]],
    "yogi": [[1.0645857, -0.8169873], [0.9782837, -0.5852246], [0.9351327, -0.5451774]],
}


def by_hand(kind):
    x, out = list(X0), []
    for m, v in zip(M, V[kind]):
        x = [x[i] + ETA * m[i] / (math.sqrt(v[i]) + TAU) for i in range(2)]
        out.append(x)
    return out


@pytest.mark.parametrize("kind", ["adagrad", "adam", "yogi"])
def test_adaptive_steps_match_the_hand_computation(kind):
    np.testing.assert_allclose(by_hand(kind), KNOWN[kind], rtol=0, atol=1e-7)  # the written arithmetic
    optimizer = AdaptiveServerOptimizer(kind, 2, beta1=0.5, beta2=0.5, tau=TAU)
    assert optimizer.v.tolist() == [1.0, 1.0]  # v_{-1} = tau^2
    x = np.array(X0, np.float32)
    for t, delta in enumerate(DELTAS):
        x = optimizer.step(x, np.array(delta, np.float32), ETA)
        assert x.dtype == np.float32
        np.testing.assert_allclose(optimizer.m, M[t], rtol=0, atol=1e-15)
        np.testing.assert_allclose(optimizer.v, V[kind][t], rtol=0, atol=1e-15)
        np.testing.assert_allclose(x, KNOWN[kind][t], rtol=0, atol=2e-7)


def test_sgd_is_todays_step_bit_for_bit():
    # x + eta Delta: [1, -1] + 0.5 [0.5, 2] = [1.25, 0];  + 0.5 [-1, 2] = [0.75, 1]
    sgd = build_server_optimizer(None, 2)
    assert type(sgd) is ServerOptimizer and sgd.state() == {}
    x = sgd.step(np.array(X0, np.float32), np.array(DELTAS[0], np.float32), ETA)
    x = sgd.step(x, np.array(DELTAS[1], np.float32), ETA)
    assert x.tolist() == [0.75, 1.0]
    rng = np.random.default_rng(0)
    params, delta = rng.normal(size=1000).astype(np.float32), rng.normal(size=1000).astype(np.float32)
    assert np.array_equal(sgd.step(params, delta, 0.3), server_update(params, delta, 0.3))


def test_second_moment_edges():
    # Yogi leaves v alone where v = Delta^2 (sign 0); Adagrad ignores beta2; Adam with beta2 = 0 is Delta^2
    assert yogi_second_moment(np.array([4.0]), np.array([2.0]), 0.5).tolist() == [4.0]
    assert adagrad_second_moment(np.array([1.0]), np.array([3.0]), 0.9).tolist() == [10.0]
    assert adam_second_moment(np.array([7.0]), np.array([3.0]), 0.0).tolist() == [9.0]


def test_statistics_take_the_plain_average_not_the_adaptive_step():
    mask = np.array([True, False])  # entry 1 is a buffer (e.g. BatchNorm's running mean)
    optimizer = AdaptiveServerOptimizer("adam", 2, beta1=0.5, beta2=0.5, tau=TAU, mask=mask)
    x = optimizer.step(np.array(X0, np.float32), np.array(DELTAS[0], np.float32), ETA)
    np.testing.assert_allclose(x, [KNOWN["adam"][0][0], -1.0 + 2.0], atol=2e-7)


def test_optimizer_state_round_trips_bit_for_bit():
    rng = np.random.default_rng(1)
    deltas = rng.normal(size=(5, 50)).astype(np.float32)
    for kind in ("adagrad", "adam", "yogi"):
        straight = AdaptiveServerOptimizer(kind, 50)
        x = np.zeros(50, np.float32)
        for d in deltas:
            x = straight.step(x, d, 0.1)
        first = AdaptiveServerOptimizer(kind, 50)
        y = np.zeros(50, np.float32)
        for d in deltas[:2]:
            y = first.step(y, d, 0.1)
        saved = pickle.loads(pickle.dumps(first.state()))
        second = AdaptiveServerOptimizer(kind, 50)
        second.load_state(saved)
        for d in deltas[2:]:
            y = second.step(y, d, 0.1)
        assert np.array_equal(x, y) and second.steps == 5
    with pytest.raises(ValueError, match="cannot resume"):
        AdaptiveServerOptimizer("adam", 50).load_state(AdaptiveServerOptimizer("yogi", 50).state())


# ------------------------------------------------------------------------------ schedules, by hand
def schedule(**fields):
    return validate_scenario({"name": "s", "rounds": 10, "algorithm": {"client_lr_schedule": fields}}) \
        .algorithm.client_lr_schedule


def test_rounds_are_numbered_from_one():
    with pytest.raises(ValueError, match="from 1"):
        lr_at(0.1, None, 0, 10)
    assert lr_at(0.1, None, 1, 10) == 0.1 and lr_at(0.1, schedule(kind="constant"), 7, 10) == 0.1


def test_step_schedule_fast_cifar10_halves_at_round_5000():
    fast = schedule(kind="step", milestones=[5000], gamma=0.5)
    assert [lr_at(0.01, fast, r, 10000) for r in (1, 4999, 5000, 5001, 10000)] == [0.01, 0.01, 0.005, 0.005, 0.005]
    # every N is the milestones N, 2N, ...: lr gamma^floor(r / N), so round N is the first decayed
    every = schedule(kind="step", every=10, gamma=0.1)
    assert [lr_at(1.0, every, r, 100) for r in (1, 9, 10, 19, 20)] == pytest.approx([1, 1, 0.1, 0.1, 0.01])
    both = schedule(kind="step", every=10, milestones=[5], gamma=0.5)  # round 12: 1 milestone + floor(12/10)
    assert [lr_at(1.0, both, r, 100) for r in (4, 5, 9, 10, 12)] == [1.0, 0.5, 0.5, 0.25, 0.25]


def test_exponential_and_cosine_schedules():
    exponential = schedule(kind="exponential", gamma=0.9)  # lr 0.9^(r - 1)
    assert [lr_at(2.0, exponential, r, 10) for r in (1, 2, 3)] == pytest.approx([2.0, 1.8, 1.62])
    # cosine over 5 rounds from 1 to 0.2: 0.2 + 0.8 (1 + cos(pi (r - 1) / 4)) / 2
    cosine = schedule(kind="cosine", min_lr=0.2, rounds=5)
    expected = [1.0, 0.2 + 0.4 * (1 + math.sqrt(0.5)), 0.6, 0.2 + 0.4 * (1 - math.sqrt(0.5)), 0.2, 0.2]
    assert [lr_at(1.0, cosine, r, 99) for r in (1, 2, 3, 4, 5, 8)] == pytest.approx(expected)
    spanning = schedule(kind="cosine")  # rounds: the scenario's (here 3): 1, 0.5, 0
    assert [lr_at(1.0, spanning, r, 3) for r in (1, 2, 3)] == pytest.approx([1.0, 0.5, 0.0])
    assert lr_at(1.0, schedule(kind="cosine", rounds=1), 1, 3) == 1.0  # a one-round span: the rate itself
    with pytest.raises(ValueError, match="total rounds"):
        lr_at(1.0, spanning, 1, None)


def test_warm_up_edges():
    # W = 4 from 0: rounds 1..4 get 1/4, 2/4, 3/4, 4/4; round 1 is never zero, round 4 the first at full rate
    warm = schedule(kind="constant", warmup_rounds=4)
    assert [lr_at(0.8, warm, r, 10) for r in (1, 2, 3, 4, 5)] == pytest.approx([0.2, 0.4, 0.6, 0.8, 0.8])
    # from a start factor s = 0.2: s + (1 - s) r / W = 0.4, 0.6, 0.8, 1.0
    started = schedule(kind="constant", warmup_rounds=4, warmup_start_factor=0.2)
    assert [lr_at(1.0, started, r, 10) for r in (1, 2, 3, 4)] == pytest.approx([0.4, 0.6, 0.8, 1.0])
    # warm-up multiplies the inner schedule and does not delay it: the milestone at 3 still acts at 3
    stepped = schedule(kind="step", milestones=[3], gamma=0.5, warmup_rounds=4)
    assert [lr_at(1.0, stepped, r, 10) for r in (1, 2, 3, 4, 5)] == pytest.approx([0.25, 0.5, 0.375, 0.5, 0.5])
    assert lr_at(1.0, schedule(kind="constant", warmup_rounds=1), 1, 10) == 1.0  # W = 1: no effect


# ----------------------------------------------------------------- wiring into every algorithm, in process
def update(delta, device=0, steps=1):
    return ClientUpdate(device, 5, np.asarray(delta, np.float32), TrainStats(steps, 0.0, 0.0))


class ServerSet:
    """The server's trainer for SAFARI and FSL: returns the model unchanged and remembers each spec's lr."""

    def __init__(self):
        self.lrs = []

    def __call__(self, params, spec, purpose):
        self.lrs.append(spec.lr)
        return params.copy(), TrainStats(spec.local_steps, 0.0, 0.0)


def built(algorithm: dict, rounds=10):
    scenario = validate_scenario({"name": "w", "rounds": rounds, "population": {"devices": 10},
                                  "data": {"server_set": {"size": 20}}, "algorithm": algorithm})
    trainer = ServerSet()
    context = AlgorithmContext(10, np.full(10, 5), 2, seed=0, server_samples=20, server_train=trainer,
                               total_rounds=rounds)
    return build_algorithm(scenario.algorithm, context), trainer


ADAM = {"kind": "adam", "beta1": 0.5, "beta2": 0.5, "tau": 1.0}
HOSTS = [({"name": "fedavg"}, 0.5), ({"name": "fedprox"}, 0.5), ({"name": "scaffold"}, 0.5), ({"name": "ds"}, 0.5),
         ({"name": "fast", "host": "fedavg", "q": 0.5}, 0.5), ({"name": "fast", "host": "fedprox", "every": 2}, 0.5),
         ({"name": "safari", "q": 1.0, "global_lr": 0.5}, 0.5),
         ({"name": "fsl", "gamma": 0.0, "server_steps": 1}, 0.5)]


@pytest.mark.parametrize("algorithm,eta", HOSTS, ids=lambda a: a["name"] + a.get("host", "") if isinstance(a, dict) else "")
def test_every_host_takes_the_adaptive_step(algorithm, eta):
    rate = "global_lr" if algorithm["name"] == "safari" else "server_lr"
    algo, _ = built({**algorithm, rate: eta, "server_optimizer": ADAM})
    x = np.array(X0, np.float32)
    for r, delta in enumerate(DELTAS, start=1):
        algo.plan_round(r)
        x = algo.aggregate(x, iter([update(delta)]), r)
    np.testing.assert_allclose(x, KNOWN["adam"][-1], atol=2e-7)
    # the moments are in the state (nested under the host for FAST), and restore bit for bit
    state = pickle.loads(pickle.dumps(algo.state()))
    moments = (state["host"] if algorithm["name"] == "fast" else state)["server_optimizer"]
    assert moments["kind"] == "adam" and moments["steps"] == 3
    again, _ = built({**algorithm, rate: eta, "server_optimizer": ADAM})
    again.load_state(state)
    y = again.aggregate(x, iter([update([1.0, 1.0])]), 4)
    z = algo.aggregate(x, iter([update([1.0, 1.0])]), 4)
    assert np.array_equal(y, z)


def test_default_state_and_columns_are_unchanged():
    """Without server_optimizer or schedules an algorithm saves what it saved and records what it recorded."""
    assert built({"name": "fedavg"})[0].state() == {}
    assert built({"name": "fedavg"})[0].columns == ()
    assert set(built({"name": "fedavgm"})[0].state()) == {"velocity"}
    assert built({"name": "fast", "q": 0.5})[0].columns == ("q",)
    assert built({"name": "fedavg", "server_optimizer": {"kind": "sgd"}})[0].state() == {}


def test_client_rate_follows_its_schedule_in_every_kind_of_round():
    step = {"kind": "step", "milestones": [3], "gamma": 0.5}
    fedavg, _ = built({"name": "fedavg", "client_lr": 0.2, "client_lr_schedule": step})
    assert fedavg.local_training(0).lr == 0.2  # before any round is planned: round 1's rate
    lrs = []
    for r in range(1, 5):
        fedavg.plan_round(r)
        lrs.append(fedavg.local_training(0).lr)
    assert lrs == [0.2, 0.2, 0.1, 0.1]
    assert fedavg.columns == ("client_lr", "server_lr")
    assert fedavg.after_round({}) == {"client_lr": 0.1, "server_lr": 1.0}
    # FAST: snapshot rounds (every one of them, q = 1) never ask the host to plan, and the rate still moves
    fast, _ = built({"name": "fast", "q": 1.0, "client_lr": 0.2, "client_lr_schedule": step})
    kinds, lrs = [], []
    for r in range(1, 5):
        kinds.append(fast.plan_round(r).kind)
        lrs.append(fast.local_training(0).lr)
    assert set(kinds) == {"snapshot"} and lrs == [0.2, 0.2, 0.1, 0.1]
    assert fast.columns == ("q", "client_lr", "server_lr") and fast.after_round({})["client_lr"] == 0.1


def test_server_side_rates_of_safari_and_fsl_follow_their_schedules():
    halve = {"kind": "step", "milestones": [2], "gamma": 0.5}
    safari, trainer = built({"name": "safari", "q": 0.0, "server_lr": 0.4, "server_lr_schedule": halve,
                             "global_lr_schedule": {"kind": "exponential", "gamma": 0.5}})
    x = np.zeros(2, np.float32)
    for r in (1, 2, 3):
        assert safari.plan_round(r).kind == "server"
        x, _ = safari.server_round(x, r)
    assert trainer.lrs == [0.4, 0.2, 0.2]
    assert safari.after_round({}) == {"client_lr": 0.01, "server_lr": 0.2, "global_lr": 0.25}
    # FSL, coupled: eta_0 = K eta_l eta_g / K_0 each round = 10 x eta_l x 1 / 5 (eta_l halved at round 2)
    fsl, trainer = built({"name": "fsl", "server_steps": 5, "client_lr": 0.1, "client_lr_schedule": halve})
    for r in (1, 2):
        fsl.plan_round(r)
        fsl.aggregate(np.zeros(2, np.float32), iter([update([1.0, 1.0])]), r)
    assert trainer.lrs == pytest.approx([0.2, 0.1])
    # FSL with a given eta_0 and its own schedule
    fsl, trainer = built({"name": "fsl", "server_step_lr": 0.3, "server_step_lr_schedule": halve})
    for r in (1, 2):
        fsl.aggregate(np.zeros(2, np.float32), iter([update([1.0, 1.0])]), r)
    assert trainer.lrs == pytest.approx([0.3, 0.15])


def test_an_algorithm_that_would_ignore_them_refuses_them():
    """A user's algorithm built on Algorithm (not FedAvg) has its own server step: no silent ignoring."""
    from emulator.algorithms import Algorithm

    class OwnStep(Algorithm):
        name = "own-step"

    context = AlgorithmContext(10, np.full(10, 5), 2, seed=0)
    for algorithm in ({"server_optimizer": {"kind": "adam"}}, {"server_lr_schedule": {"kind": "exponential",
                                                                                      "gamma": 0.9}}):
        config = validate_scenario({"name": "o", "rounds": 2, "algorithm": algorithm}).algorithm
        with pytest.raises(ValueError, match=f"does not apply algorithm.{next(iter(algorithm))}"):
            OwnStep(config, context)
    OwnStep(validate_scenario({"name": "o", "rounds": 2, "algorithm": {"server_optimizer": {"kind": "sgd"}}})
            .algorithm, context)


def test_scaffold_derives_controls_with_the_rounds_client_rate():
    scaffold, _ = built({"name": "scaffold", "client_lr": 0.5, "local_steps": 2,
                         "client_lr_schedule": {"kind": "step", "milestones": [2], "gamma": 0.5}})
    scaffold.plan_round(2)  # K = 2, eta_l = 0.25: delta_c = -delta / (K eta_l) - c = -[1, -1] / 0.5 - 0
    scaffold.aggregate(np.zeros(2, np.float32), iter([update([1.0, -1.0], steps=2)]), 2)
    np.testing.assert_allclose(scaffold.device_controls.get(0), [-2.0, 2.0])


# ------------------------------------------------------------------------------------- end to end
FEDADAM = {"name": "fedavg", "clients_per_round": 8, "client_lr": 0.05, "local_steps": 5, "batch_size": 16,
           "server_lr": 0.05, "server_optimizer": {"kind": "adam"},
           "client_lr_schedule": {"kind": "step", "milestones": [4], "gamma": 0.5},
           "server_lr_schedule": {"kind": "constant", "warmup_rounds": 2}}
E2E = {"rounds": 6, "output.checkpoint_every": 2, "algorithm": FEDADAM}


def test_fedadam_with_schedules_runs_records_its_rates_and_resumes_bit_for_bit(ray_session, tmp_path):
    reference = run_scenario(validate_scenario(small_scenario(**E2E)), tmp_path / "ref").path
    rows = read_metrics(reference)
    assert [float(r["client_lr"]) for r in rows] == [0.05, 0.05, 0.05, 0.025, 0.025, 0.025]
    assert [float(r["server_lr"]) for r in rows] == [0.025, 0.05, 0.05, 0.05, 0.05, 0.05]
    plain = read_metrics(run_scenario(validate_scenario(small_scenario(rounds=6)), tmp_path / "plain").path)
    assert "client_lr" not in plain[0]  # no schedule, no new columns
    assert [r["test_loss"] for r in rows] != [r["test_loss"] for r in plain]
    assert float(rows[-1]["test_loss"]) < float(rows[0]["test_loss"])  # FedAdam learns

    path = tmp_path / "run"

    def stop_after_round_5(row):
        if row["round"] == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_scenario(validate_scenario(small_scenario(**E2E)), path, on_round=stop_after_round_5)
    result = resume_run(path)  # from the checkpoint after round 4: Adam's moments and the rates carry over
    assert result.summary["resumed_from_round"] == 4
    assert comparable(path) == comparable(reference)


def test_a_cosine_over_the_scenarios_rounds_cannot_be_extended(ray_session, tmp_path):
    """Its rates depend on `rounds`, so `--set rounds=N` on resume would change the experiment: refused."""
    raw = small_scenario(rounds=2, algorithm={**small_scenario()["algorithm"],
                                              "client_lr_schedule": {"kind": "cosine", "min_lr": 0.01}})
    path = run_scenario(validate_scenario(raw), tmp_path / "cos").path
    with pytest.raises(ScenarioError, match="client_lr_schedule.rounds"):
        resume_run(path, overrides=["rounds=4"])


# ------------------------------------------------------------------------------------------ bad input
BAD = [
    ("server_optimizer: {kind: adam, tau: -0.1}", "algorithm.server_optimizer.tau", "greater than 0"),
    ("server_optimizer: {kind: yogi, beta2: 1.0}", "algorithm.server_optimizer.beta2", "less than 1"),
    ("server_optimizer: {kind: adam, beta1: -0.5}", "algorithm.server_optimizer.beta1", "greater than or equal"),
    ("server_optimizer: {kind: rmsprop}", "algorithm.server_optimizer.kind", "not a registered server optimizer; choose one of adagrad, adam, sgd, yogi"),
    ("server_optimizer: {kind: adagrad, beta2: 0.9}", "algorithm.server_optimizer.beta2", "unknown key"),
    ("client_lr_schedule: {kind: linear}", "algorithm.client_lr_schedule.kind", "'cosine'"),
    ("client_lr_schedule: {kind: step, every: 10, gamma: 0}", "algorithm.client_lr_schedule.gamma", "greater than 0"),
    ("server_lr_schedule: {kind: exponential, gamma: -1}", "algorithm.server_lr_schedule.gamma", "greater than 0"),
    ("client_lr_schedule: {kind: step, milestones: [50, 20], gamma: 0.5}", "algorithm.client_lr_schedule.milestones",
     "increasing"),
    ("client_lr_schedule: {kind: step, milestones: [0], gamma: 0.5}", "algorithm.client_lr_schedule.milestones",
     "from 1"),
    ("client_lr_schedule: {kind: step, gamma: 0.5}", "algorithm.client_lr_schedule", "milestones"),
    ("client_lr_schedule: {kind: cosine, warmup_start_factor: 0.1}",
     "algorithm.client_lr_schedule.warmup_start_factor", "warmup_rounds"),
    ("client_lr_schedule: {kind: constant, warmup_rounds: -1}", "algorithm.client_lr_schedule.warmup_rounds",
     "greater than or equal"),
    ("{name: fedavgm, server_optimizer: {kind: adam}}", "algorithm.server_optimizer", "momentum"),
    ("{name: fast, host: fedavgm, q: 0.5, server_optimizer: {kind: yogi}}", "algorithm.server_optimizer", "momentum"),
    ("{name: scaffold, client_lr_schedule: {kind: cosine}}", "algorithm.client_lr_schedule.min_lr", "above 0"),
    ("{name: fsl, server_step_lr_schedule: {kind: exponential, gamma: 0.9}}",
     "algorithm.server_step_lr_schedule", "server_step_lr"),
    ("global_lr_schedule: {kind: exponential, gamma: 0.9}", "algorithm.global_lr_schedule", "unknown key"),
]


@pytest.mark.parametrize("algorithm,where,what", BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_bad_input_names_the_yaml_path(tmp_path, algorithm, where, what):
    body = algorithm if algorithm.startswith("{") else "{" + algorithm + "}"
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: x\nrounds: 3\ndata: {{server_set: {{size: 10}}}}\nalgorithm: {body}\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(path)
    line = next((line for line in str(err.value).splitlines() if line.strip().startswith(where + ":")), None)
    assert line is not None and what in line, str(err.value)


def test_bad_schedule_exits_2_from_the_command_line(tmp_path, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text("name: x\nrounds: 3\nalgorithm: {server_optimizer: {kind: adam, tau: 0}}\n")
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert "algorithm.server_optimizer.tau" in err and "Traceback" not in err


def test_the_resolved_scenario_keeps_the_new_fields(tmp_path):
    raw = small_scenario(algorithm=FEDADAM)
    scenario = validate_scenario(raw)
    again = validate_scenario(json.loads(json.dumps(scenario.model_dump(mode="json"))))
    assert again == scenario and again.algorithm.server_optimizer.tau == 1e-3
    assert again.algorithm.server_optimizer.beta1 == 0.9 and again.algorithm.server_optimizer.beta2 == 0.99

"""What each device gets: its own test split (data.local_test), the oracle evaluation of the global model on
every device's split (evaluation.devices), device_eval.csv and the fleet statistics in metrics.csv."""
from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import STATEFUL, small_scenario

from emulator.cli import main
from emulator.data import build_federation
from emulator.data.local_split import carve_local_test, held_out
from emulator.driver import resume_run, run_scenario
from emulator.evaluation.fleet import device_scores, fleet_statistics, worst_share_mean
from emulator.models.zoo import build_model
from emulator.params import load as load_params
from emulator.parts import validate_scenario
from emulator.recording import checkpoint as checkpoints
from emulator.recording.rundir import read_metrics
from emulator.seeding import torch_seed
from emulator.training.local import evaluate_by_class

LOCAL_TEST = {"data.local_test": {"fraction": 0.25, "min_samples": 2}}
ORACLE = {**LOCAL_TEST, "evaluation.devices": {}}


def _rows(path):
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


# ------------------------------------------------------------------------------------------ the split
def test_each_device_holds_out_a_seeded_share_of_its_own_samples_and_trains_on_the_rest():
    rng = np.random.default_rng(0)
    sizes = np.array([0, 1, 3, 4, 10, 57, 200])
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    indices = rng.permutation(sizes.sum()) + 1000
    train_offsets, train, test_offsets, test = carve_local_test(offsets, indices, 0.25, 2,
                                                                np.random.default_rng(7))
    # 0 and 1 sample: nothing to hold out; 3 and 4: round(0.25 x n) = 1 < min_samples 2, so none either
    assert np.diff(test_offsets).tolist() == [0, 0, 0, 0, 2, 14, 50] == held_out(sizes, 0.25, 2).tolist()
    for d in range(len(sizes)):
        mine = indices[offsets[d]:offsets[d + 1]]
        kept, held = train[train_offsets[d]:train_offsets[d + 1]], test[test_offsets[d]:test_offsets[d + 1]]
        assert not set(kept) & set(held) and sorted([*kept, *held]) == sorted(mine)  # disjoint, nothing lost
        order = {v: i for i, v in enumerate(mine)}  # both keep the device's own order
        assert [order[v] for v in kept] == sorted(order[v] for v in kept)
        assert [order[v] for v in held] == sorted(order[v] for v in held)
    again = carve_local_test(offsets, indices, 0.25, 2, np.random.default_rng(7))
    other = carve_local_test(offsets, indices, 0.25, 2, np.random.default_rng(8))
    assert np.array_equal(again[3], test) and not np.array_equal(other[3], test)  # a function of the seed


def test_held_out_samples_are_random_within_each_device():
    """Over many seeds every sample of a device is held out about equally often (fraction of the time)."""
    offsets, indices = np.array([0, 40]), np.arange(40)
    counts = np.zeros(40)
    for seed in range(400):
        counts[carve_local_test(offsets, indices, 0.25, 1, np.random.default_rng(seed))[3]] += 1
    assert abs(counts.mean() - 100) < 1e-9 and counts.min() > 60 and counts.max() < 140


def test_the_federation_carves_the_local_test_from_the_training_data_and_nothing_else_moves():
    plain = validate_scenario(small_scenario())
    split = validate_scenario(small_scenario(**LOCAL_TEST))
    before = build_federation(plain.data, 40, plain.seed)
    after = build_federation(split.data, 40, split.seed)
    assert after.local_test is not None and before.local_test is None
    assert np.array_equal(after.sizes + after.local_sizes, before.sizes)
    assert after.local_sizes.sum() == len(after.local_test) > 0
    for d in range(40):  # the held-out samples are this device's own, never in its training data
        own = before.train.y[before.device_samples(d)]
        held = after.local_test.y[after.local_offsets[d]:after.local_offsets[d + 1]]
        trained = after.train.y[after.device_samples(d)]
        assert sorted([*held, *trained]) == sorted(own)
    assert np.array_equal(after.test.y, before.test.y)  # the central test set is untouched


# ------------------------------------------------------------------------------------- the statistics
def test_fleet_statistics_follow_their_definitions():
    owner = np.array([0, 0, 0, 0, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3])
    correct = np.array([1, 1, 1, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0], dtype=bool)
    loss = np.arange(16, dtype=np.float64)
    samples, accuracy, mean_loss = device_scores(owner, loss, correct, 5)
    assert samples.tolist() == [4, 2, 0, 10, 0]
    assert accuracy[[0, 1, 3]].tolist() == [0.75, 0.5, 0.8] and math.isnan(accuracy[2])
    assert mean_loss[1] == 4.5
    row = fleet_statistics(samples, accuracy, reported=np.array([3, 0, 0, 1, 0]))
    assert row["device_acc_mean"] == pytest.approx((0.75 + 0.5 + 0.8) / 3)
    assert row["device_acc_weighted"] == pytest.approx(12 / 16)  # the pooled accuracy: 3 + 1 + 8 of 16
    assert row["device_acc_worst10"] == 0.5  # ceil(10% of 3) = 1 device: the worst
    assert row["device_acc_p50"] == pytest.approx(0.75)
    assert row["device_acc_std"] == pytest.approx(np.std([0.75, 0.5, 0.8]))
    assert row["device_acc_never_reported"] == 0.5 and row["device_acc_reported"] == pytest.approx(0.775)
    assert row["devices_never_reported"] == 3  # devices without a local test count too
    assert worst_share_mean(np.array([0.9, 0.1, 0.5, 0.3] * 5), 0.1) == 0.1  # 2 of 20 devices, both 0.1


# --------------------------------------------------------------------------------------- whole runs
def test_device_eval_csv_holds_what_each_device_gets_recomputed_from_the_saved_model(tmp_path):
    scenario = validate_scenario(small_scenario(**ORACLE, **{"evaluation.every": 2, "model": "mlp"}))
    result = run_scenario(scenario, tmp_path / "run")
    rows = _rows(result.path / "device_eval.csv")
    assert {r["round"] for r in rows} == {"2", "4"}
    final = [r for r in rows if r["round"] == "4"]
    federation = build_federation(scenario.data, 40, scenario.seed)
    assert [int(r["device"]) for r in final] == np.flatnonzero(federation.local_sizes).tolist()

    # the independent path: the final checkpoint's model, each device's own split, evaluated directly
    found, _ = checkpoints.latest(result.path)
    model = build_model("mlp", federation.train.input_shape, federation.train.num_classes,
                        torch_seed(scenario.seed, "model-init"), scenario.model.options())
    load_params(model, found.state["params"])
    for r in final:
        d = int(r["device"])
        x, y = federation.local_test.tensors(np.arange(federation.local_offsets[d], federation.local_offsets[d + 1]))
        loss, accuracy, _, _ = evaluate_by_class(model, x, y, 1024, federation.train.num_classes)
        assert int(r["samples"]) == len(y)
        # float32 logits of a device's samples batched with others' differ in the last bits from alone
        assert float(r["accuracy"]) == accuracy and float(r["loss"]) == pytest.approx(loss, rel=1e-6)
    assert len({r["accuracy"] for r in final}) > 3  # devices differ: a comparison of constants would prove nothing

    metrics = read_metrics(result.path)[-1]
    samples = np.array([int(r["samples"]) for r in final])
    accuracy = np.array([float(r["accuracy"]) for r in final])
    assert float(metrics["device_acc_mean"]) == pytest.approx(accuracy.mean())
    assert float(metrics["device_acc_weighted"]) == pytest.approx((accuracy * samples).sum() / samples.sum())
    participation = {int(r["device"]): int(r["reported"]) for r in _rows(result.path / "participation.csv")}
    assert all(int(r["reported"]) == participation[int(r["device"])] for r in final)


def test_the_oracle_is_outside_the_clock_training_metrics_are_the_same_with_it_on(tmp_path):
    """The rule (docs/scenarios.md): the oracle evaluation costs no simulated time or bytes and draws no
    randomness, so switching it on leaves every training column as it was."""
    off = run_scenario(validate_scenario(small_scenario(**LOCAL_TEST, **STATEFUL)), tmp_path / "off")
    on = run_scenario(validate_scenario(small_scenario(**ORACLE, **STATEFUL)), tmp_path / "on")
    a, b = read_metrics(off.path), read_metrics(on.path)
    assert [{k: r[k] for k in a[0] if k != "wall_time_s"} for r in a] == \
        [{k: r[k] for k in a[0] if k != "wall_time_s"} for r in b]
    assert all(b_row["device_acc_mean"] != "" for b_row in b) and "device_acc_mean" not in a[0]


# a split that leaves 8 of the 40 devices without a local test: the count column must survive the rewind
RESUMED = {**ORACLE, **STATEFUL, "data.local_test": {"fraction": 0.1, "min_samples": 3}}


def _interrupted(path):
    """RESUMED stopped after round 5: the checkpoint is round 4's, so round 5 runs again on resume."""
    def stop(row):
        if row["round"] == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_scenario(validate_scenario(small_scenario(**RESUMED)), path, on_round=stop)


def test_a_resumed_run_has_the_device_eval_of_an_uninterrupted_one(tmp_path):
    reference = run_scenario(validate_scenario(small_scenario(**RESUMED)), tmp_path / "reference")
    assert {r["devices_without_local_test"] for r in _rows(reference.path / "device_eval.csv")} == {"8"}
    _interrupted(tmp_path / "run")
    resume_run(tmp_path / "run")
    assert (tmp_path / "run" / "device_eval.csv").read_text() == (reference.path / "device_eval.csv").read_text()


def test_a_device_eval_csv_from_before_the_count_column_takes_it_on_resume(tmp_path):
    """A run begun by a version without devices_without_local_test and resumed by this one: the file is
    rewritten with the new header (blank in the old rows) rather than given rows longer than its header."""
    _interrupted(tmp_path / "run")
    path = tmp_path / "run" / "device_eval.csv"
    old = [{k: v for k, v in r.items() if k != "devices_without_local_test"} for r in _rows(path)]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(old[0]))
        writer.writeheader()
        writer.writerows(old)
    resume_run(tmp_path / "run")
    rows = _rows(path)
    kept, again = [r for r in rows if int(r["round"]) <= 4], [r for r in rows if int(r["round"]) > 4]
    assert [{k: v for k, v in r.items() if k != "devices_without_local_test"} for r in kept] == \
        [r for r in old if int(r["round"]) <= 4]  # rewound to the checkpoint's round, its rows as they were
    assert {r["devices_without_local_test"] for r in kept} == {""}  # the older version did not count
    assert {r["round"] for r in again} == {"5", "6", "7"}
    assert {r["devices_without_local_test"] for r in again} == {"8"} and all(None not in r for r in again)


@pytest.mark.parametrize("oracle", [True, False])
def test_devices_without_a_local_test_are_counted_in_every_row_never_scored(tmp_path, oracle):
    """Tiny devices whose split would be under min_samples have none. Each device_eval.csv row counts those of
    the evaluated population: the whole fleet with the oracle; without it, the devices online at the ask (the
    pool the sample is drawn from), here the half that is always online. Recomputed from the federation's
    local_sizes and participation.csv's availability, not from the evaluation's code."""
    scenario = validate_scenario(small_scenario(**{
        "rounds": 2, "data.synthetic": {"iid": True, "max_samples": 200, "min_samples": 2, "size_log_mean": 3.0},
        "data.local_test": {"fraction": 0.2, "min_samples": 3},
        "population.availability": [{"kind": "always", "name": "on", "share": 0.5},
                                    {"kind": "never", "name": "off", "share": 0.5}],
        "system.min_report_fraction": 0.5, "evaluation.devices": {"oracle": oracle, "sample": 40}}))
    result = run_scenario(scenario, tmp_path / "run")
    empty = build_federation(scenario.data, 40, scenario.seed).local_sizes == 0
    online = np.array([r["availability"] == "on" for r in _rows(result.path / "participation.csv")])
    assert 0 < (empty & online).sum() < empty.sum() < 40  # some devices have none, online and offline both
    population = 40 if oracle else int(online.sum())
    left_out = int(empty.sum()) if oracle else int((empty & online).sum())
    rows = _rows(result.path / "device_eval.csv")
    for m in read_metrics(result.path):
        scored = [r for r in rows if r["round"] == m["round"]]
        assert {int(r["devices_without_local_test"]) for r in scored} == {left_out}
        assert all(int(r["samples"]) > 0 for r in scored)  # never scored as 0: not in the rows at all
        with_split = ~empty if oracle else ~empty & online  # the sample asks every online device with a split
        assert [int(r["device"]) for r in scored] == np.flatnonzero(with_split).tolist()
        assert len(scored) + left_out == population  # every device evaluated is scored or counted
        # the sample's own count (metrics.csv, with or without the oracle): the online devices it could not ask
        assert int(m["sampled_without_local_test"]) == int((empty & online).sum())
        assert int(m["sampled_asked"]) + int(m["sampled_without_local_test"]) == int(online.sum())
        assert sum(r["answered"] == "1" for r in scored) == int(m["sampled_answered"]) == int(m["sampled_asked"])


@pytest.mark.parametrize(("overrides", "field"), [
    ({"data.local_test": {"fraction": 0.7}}, "data.local_test.fraction"),
    ({"data.local_test": {"fraction": 0.2, "min_samples": 0}}, "data.local_test.min_samples"),
    ({"evaluation.devices": {}}, "evaluation.devices"),
    ({**LOCAL_TEST, "evaluation.devices": {"sample": 41}}, "evaluation.devices.sample"),
    ({**LOCAL_TEST, "evaluation.devices": {"oracle": False}}, "evaluation.devices"),
    ({**LOCAL_TEST, "evaluation.devices": {"sample": 5}, "system.model": "ideal"}, "evaluation.devices.sample"),
])
def test_bad_device_evaluation_settings_exit_2_naming_the_field(tmp_path, capsys, overrides, field):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_scenario(**overrides)))
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err, err


# ------------------------------------------------------------------------------- sampled, on the clock
def _sampled_against_oracle(result) -> tuple[np.ndarray, np.ndarray]:
    """Per evaluation: the sampled mean minus the oracle's device mean, and the sampled mean's standard error
    (a sample of n devices without replacement from the N with a local test: sd / sqrt(n) x sqrt(1 - n/N))."""
    rows = _rows(result.path / "device_eval.csv")
    gaps, errors = [], []
    for r in sorted({row["round"] for row in rows}, key=int):
        every = np.array([float(x["accuracy"]) for x in rows if x["round"] == r])
        asked = np.array([float(x["accuracy"]) for x in rows if x["round"] == r and x["answered"] == "1"])
        gaps.append(asked.mean() - every.mean())
        errors.append(every.std(ddof=1) / np.sqrt(len(asked)) * np.sqrt(1 - len(asked) / len(every)))
    return np.array(gaps), np.array(errors)


def test_in_an_always_online_world_the_sample_estimates_the_oracle_without_bias(tmp_path):
    scenario = validate_scenario(small_scenario(**LOCAL_TEST, **{
        "rounds": 12, "population.devices": 120, "evaluation.devices": {"sample": 30},
        "data.partition": {"scheme": "dirichlet", "alpha": 0.1}}))
    result = run_scenario(scenario, tmp_path / "run")
    gaps, errors = _sampled_against_oracle(result)
    metrics = read_metrics(result.path)
    assert all(m["sampled_answered"] == "30" and m["sampled_dropped"] == "0" for m in metrics)
    assert errors.min() > 0.01  # devices differ, so a sample could miss
    assert abs(gaps.sum()) / np.sqrt((errors ** 2).sum()) < 3  # the pooled gap is within sampling error


def test_when_the_devices_that_are_offline_hold_other_data_the_sample_misleads_and_the_oracle_says_by_how_much(
        tmp_path):
    """The devices whose data is mostly classes 0-4 are never online: they never train and are never asked,
    so the model serves them badly and the devices a server can ask overstate what the fleet gets."""
    scenario = validate_scenario(small_scenario(**LOCAL_TEST, **{
        "rounds": 8, "population.devices": 120, "evaluation.devices": {"sample": 30},
        "data.partition": {"scheme": "dirichlet", "alpha": 0.1},
        "population.availability": [{"kind": "always", "name": "on", "share": 0.5},
                                    {"kind": "never", "name": "off", "share": 0.5}],
        "population.ties": [{"by": "label_group", "groups": [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]],
                             "sets": "availability", "values": ["off", "on"]}],
        "algorithm.clients_per_round": 8, "system.min_report_fraction": 0.5}))
    result = run_scenario(scenario, tmp_path / "run")
    gaps, errors = _sampled_against_oracle(result)
    assert (gaps > 3 * errors).all(), (gaps, errors)  # every evaluation overstates, beyond sampling error
    last = read_metrics(result.path)[-1]
    assert float(last["device_acc_never_reported"]) < float(last["device_acc_reported"]) - 0.1


def test_asking_devices_on_the_clock_leaves_training_as_it_was_and_is_priced_apart(tmp_path):
    overrides = {**LOCAL_TEST, **STATEFUL, "population.dropout_per_hour": 20.0,
                 "population.compute": {"kind": "lognormal", "median_s_per_sample": 2.0, "sigma": 1.0}}
    off = run_scenario(validate_scenario(small_scenario(**overrides)), tmp_path / "off")
    on = run_scenario(validate_scenario(small_scenario(**overrides, **{
        "evaluation.devices": {"oracle": False, "sample": 12, "deadline_s": 20, "finetune": {"steps": 2}}})),
        tmp_path / "on")
    a, b = read_metrics(off.path), read_metrics(on.path)
    assert [{k: r[k] for k in a[0] if k != "wall_time_s"} for r in a] == \
        [{k: r[k] for k in a[0] if k != "wall_time_s"} for r in b]
    assert "device_acc_mean" not in b[0]  # no oracle asked for
    assert sum(int(r["sampled_dropped"]) for r in b) > 0  # devices drop out of evaluations too (20 an hour)
    assert sum(int(r["sampled_late"]) for r in b) > 0  # and slow ones miss its deadline
    assert all(0 < float(r["eval_span_s"]) <= 20 and int(r["eval_bytes_down"]) > 0 for r in b)
    rows = _rows(on.path / "device_eval.csv")  # without the oracle: only the devices that answered
    assert rows and all(r["answered"] == "1" for r in rows)
    assert all(sum(1 for x in rows if x["round"] == m["round"]) == int(m["sampled_answered"]) for m in b)


@pytest.mark.heavy
def test_the_report_draws_what_each_device_gets_when_the_runs_have_it(tmp_path):
    from emulator.analysis.device_plots import last_device_accuracy
    from emulator.analysis.runs import load_run

    with_devices = run_scenario(validate_scenario(small_scenario(**LOCAL_TEST, **{
        "evaluation.devices": {"sample": 10}, "population.compute": {
            "kind": "tiers", "tiers": [{"share": 0.5, "s_per_sample": 0.01}, {"share": 0.5, "s_per_sample": 0.1}]}})),
        tmp_path / "with")
    plain = run_scenario(validate_scenario(small_scenario(seed=4)), tmp_path / "plain")
    last = [r for r in _rows(with_devices.path / "device_eval.csv") if r["round"] == "4"]
    assert sorted(last_device_accuracy(load_run(with_devices.path))) == sorted(float(r["accuracy"]) for r in last)
    assert "device_acc_compute_tier_1" in read_metrics(with_devices.path)[0]

    assert main(["report", str(with_devices.path), str(plain.path), "--out", str(tmp_path / "report")]) == 0
    report = (tmp_path / "report" / "report.md").read_text()
    for stem in ("device_accuracy_cdf", "device_accuracy_groups"):
        assert (tmp_path / "report" / f"{stem}.png").stat().st_size > 10_000 and f"{stem}.png" in report
    assert main(["report", str(plain.path), "--out", str(tmp_path / "plain-report")]) == 0
    assert not (tmp_path / "plain-report" / "device_accuracy_cdf.png").exists()  # nothing to draw: no figure


def test_fine_tune_then_evaluate_scores_each_device_after_adapting_the_model_to_its_own_data(tmp_path):
    """Recomputed by an independent path for a few devices: the final model, trained on the device's own
    data with its seed (seed, finetune, round, device), evaluated on its split."""
    from emulator.training.local import LocalTraining, seed_dropout, seeded_generator, train_locally

    scenario = validate_scenario(small_scenario(**LOCAL_TEST, **{
        "model": "mlp", "evaluation.every": 4, "data.partition": {"scheme": "dirichlet", "alpha": 0.1},
        "evaluation.devices": {"finetune": {"steps": 8, "lr": 0.05, "batch_size": 16}}}))
    result = run_scenario(scenario, tmp_path / "run")
    final = [r for r in _rows(result.path / "device_eval.csv") if r["round"] == "4"]
    federation = build_federation(scenario.data, 40, scenario.seed)
    found, _ = checkpoints.latest(result.path)
    model = build_model("mlp", federation.train.input_shape, federation.train.num_classes,
                        torch_seed(scenario.seed, "model-init"), scenario.model.options())
    spec = LocalTraining(lr=0.05, batch_size=16, local_steps=8)
    for r in final[:5]:
        d = int(r["device"])
        load_params(model, found.state["params"])
        seed = torch_seed(scenario.seed, "finetune", 4, d)
        seed_dropout(seed)
        x, y = federation.train.tensors(federation.device_samples(d))
        train_locally(model, x, y, spec, seeded_generator(seed))
        tx, ty = federation.local_test.tensors(np.arange(federation.local_offsets[d], federation.local_offsets[d + 1]))
        _, accuracy, _, _ = evaluate_by_class(model, tx, ty, 1024, federation.train.num_classes)
        assert float(r["accuracy_ft"]) == accuracy
    metrics = read_metrics(result.path)[-1]
    tuned = np.array([float(r["accuracy_ft"]) for r in final])
    assert float(metrics["device_acc_ft_mean"]) == pytest.approx(tuned.mean())
    # each device holds a few classes (Dirichlet 0.1): adapting to them beats the global model
    assert float(metrics["device_acc_ft_mean"]) > float(metrics["device_acc_mean"]) + 0.1


def test_leaf_keeps_each_users_own_test_samples_as_that_devices_split(tmp_path):
    from leaf_fixtures import femnist_users, write_leaf

    sizes = {"writer_b": (5, 2), "writer_a": (3, 1), "writer_d": (4, 3), "writer_c": (4, 2), "writer_e": (6, 2)}
    users = femnist_users(sizes)
    root = write_leaf(tmp_path / "femnist", users)
    raw = small_scenario(**{"data": {"dataset": "femnist", "root": str(root),
                                     "local_test": {"split": "dataset", "min_samples": 2}},
                            "population.devices": 5, "algorithm.clients_per_round": 3, "model": "mlp"})
    scenario = validate_scenario(raw)
    federation = build_federation(scenario.data, 5, scenario.seed)
    order = sorted(users)  # devices are the users in id order
    for device, user in enumerate(order):
        held = federation.local_test.y[federation.local_offsets[device]:federation.local_offsets[device + 1]]
        expected = users[user][3] if sizes[user][1] >= 2 else []  # writer_a holds out 1 sample: fewer than 2
        assert held.tolist() == expected
        assert federation.sizes[device] == sizes[user][0]  # training data untouched
    raw["evaluation"] = {"every": 1, "devices": {}}
    result = run_scenario(validate_scenario({**raw, "rounds": 2}), tmp_path / "run")
    scored = [r for r in _rows(result.path / "device_eval.csv") if r["round"] == "2"]
    assert [(int(r["device"]), int(r["samples"])) for r in scored] == [(1, 2), (2, 2), (3, 3), (4, 2)]  # not writer_a
    # a dataset without a per-user split, and a fraction beside split: dataset, are refused by name
    with pytest.raises(Exception, match="data.local_test.split"):
        build_federation(validate_scenario(small_scenario(**{"data.local_test": {"split": "dataset"}})).data, 40, 3)
    with pytest.raises(Exception, match="data.local_test.fraction"):
        validate_scenario(small_scenario(**{"data.local_test": {"split": "dataset", "fraction": 0.2}}))


def test_device_eval_benchmark_runs_against_the_current_api(monkeypatch, capsys):
    """benchmarks/device_eval.py drives FleetEvaluation directly; a signature change once broke it silently."""
    import runpy
    import sys
    monkeypatch.setattr(sys, "argv", ["device_eval.py", "--devices", "60", "--repeat", "1"])
    runpy.run_path(str(Path(__file__).parent.parent / "benchmarks" / "device_eval.py"), run_name="__main__")
    table = capsys.readouterr().out
    assert "| central" in table and "| oracle" in table and "| per device: " in table

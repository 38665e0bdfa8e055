"""Compression and client-level DP as whole runs: bytes on the wire follow the encoder's payload, residuals are
device state that survives a resume, epsilon in metrics.csv is the accounting library's, and bad settings
exit naming the field."""
import csv
import math

import numpy as np
import pytest

from conftest import STATEFUL, comparable, small_scenario
from emulator.driver import resume_run, run_scenario
from emulator.scenario import ScenarioError
from emulator.parts import validate_scenario

LOGREG_VALUES = 60 * 10 + 10  # logreg on the synthetic data: 60 features x 10 classes + biases


def rows(path):
    with open(path / "metrics.csv") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.parametrize("scheme, bytes_each", [
    # 5 values of 32 bits + 5 indices of ceil(log2 610) = 10 bits: 210 bits -> 27 bytes
    ({"kind": "top_k", "k": 5}, math.ceil(5 * (32 + 10) / 8)),
    # ceil(610 / 128) = 5 buckets x 32 bits + 610 values x ceil(log2 9) = 4 bits: 2600 bits -> 325 bytes
    ({"kind": "qsgd", "levels": 4, "bucket": 128}, math.ceil((5 * 32 + 610 * 4) / 8)),
    ({"kind": "sign"}, math.ceil((610 + 32) / 8)),  # a bit a value and one float scale
], ids=["top_k", "qsgd", "sign"])
def test_upload_bytes_are_the_encoded_payload(ray_session, tmp_path, scheme, bytes_each):
    path = run_scenario(validate_scenario(small_scenario(compression=scheme)), tmp_path / "run").path
    plain = rows(run_scenario(validate_scenario(small_scenario()), tmp_path / "plain").path)
    for row in rows(path):
        assert int(row["bytes_up"]) == int(row["participants"]) * bytes_each
        assert 0 < float(row["compression_error"]) < 1.5
    assert int(plain[0]["bytes_up"]) == int(plain[0]["participants"]) * LOGREG_VALUES * 4  # float32 uploads


def test_error_feedback_residuals_carry_across_rounds_and_a_resume(ray_session, tmp_path):
    topk = {"compression": {"kind": "top_k", "fraction": 0.05}}
    whole = run_scenario(validate_scenario(small_scenario(**STATEFUL, **topk)), tmp_path / "whole").path
    part = run_scenario(validate_scenario(small_scenario(**{**STATEFUL, "rounds": 4}, **topk)), tmp_path / "part").path
    resume_run(part, overrides=["rounds=7"], notify=lambda message: None)
    assert comparable(part) == comparable(whole)
    # kept in the run directory's device state (slots on disk, a slot index in checkpoints), not on the heap
    assert any((whole / "device_state" / "residuals").glob("slots-*.f32"))
    ages = [r["residual_age"] for r in rows(whole)]
    assert any(age not in ("", None) and float(age) >= 1 for age in ages[4:])  # devices came back to their residual
    without = rows(run_scenario(validate_scenario(small_scenario(**STATEFUL, compression={
        "kind": "top_k", "fraction": 0.05, "error_feedback": False})), tmp_path / "no-ef").path)
    assert all(r["residual_norm"] in ("", None) for r in without)
    assert [r["test_loss"] for r in without] != [r["test_loss"] for r in rows(whole)]  # the residual changes training


@pytest.mark.parametrize("overrides, field, fix", [
    ({"privacy": {"noise_multiplier": -1, "clip": 1.0}}, "privacy.noise_multiplier", ">= 0"),
    ({"privacy": {"noise_multiplier": 1, "clip": 0}}, "privacy.clip", "must be above 0"),
    ({"privacy": {"noise_multiplier": 1, "clip": 1, "delta": 1.5}}, "privacy.delta", "outside (0, 1)"),
    ({"privacy": {"noise_multiplier": 1, "clip": 1, "delta": 0}}, "privacy.delta", "outside (0, 1)"),
    ({"compression": {"kind": "qsgd", "levels": 0}}, "compression.levels", "at least 1 level"),
    ({"privacy": {"noise_multiplier": 1, "clip": 1, "clipping": {"kind": "adaptive"}}},
     "privacy.clipping.count_stddev", "set count_stddev above 0.5"),
    ({"compression": {"kind": "top_k"}}, "compression.k", "give either k"),
    ({"privacy": {"noise_multiplier": 1, "clip": 1}, "algorithm": {"name": "scaffold"}}, "privacy",
     "use fedavg, fedprox"),
    ({"privacy": {"noise_multiplier": 1, "clip": 1}, "algorithm": {"name": "fedavg", "weighting": "samples"}},
     "algorithm.weighting", "use weighting: uniform"),
    ({"secure_aggregation": {"kind": "secagg", "threshold": 40}}, "secure_aggregation.threshold",
     "lower the threshold"),
    ({"secure_aggregation": {"kind": "secagg"}, "compression": {"kind": "sign"}}, "compression",
     "compression: {kind: none}"),
    ({"secure_aggregation": {"kind": "secagg"}, "system.model": "ideal"}, "secure_aggregation",
     "use system.model: simulated"),
])
def test_bad_privacy_and_compression_settings_name_the_field(overrides, field, fix):
    with pytest.raises(ScenarioError) as error:
        validate_scenario(small_scenario(**overrides))
    assert f"{field}:" in str(error.value) and fix in str(error.value)


def test_top_k_larger_than_the_model_exits_naming_the_field(ray_session, tmp_path):
    with pytest.raises(ScenarioError, match=r"compression\.k: 5000, but model 'logreg' has 610 values"):
        run_scenario(validate_scenario(small_scenario(compression={"kind": "top_k", "k": 5000})), tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.csv").exists() or len(rows(tmp_path / "run")) == 0


DP = {"noise_multiplier": 1.0, "clip": 0.5, "delta": 1e-4}


def test_dp_epsilon_each_round_is_the_accounting_library_s(ray_session, tmp_path):
    import dp_accounting
    from dp_accounting import rdp

    result = run_scenario(validate_scenario(small_scenario(rounds=5, privacy=DP)), tmp_path / "dp")
    path, table = result.path, rows(result.path)
    assert result.summary["dp_epsilon"] == pytest.approx(float(table[-1]["dp_epsilon"]))  # summary.json too
    assert result.summary["dp_sampling"] == table[-1]["dp_sampling"]
    q = 8 / 40  # clients_per_round / population.devices: the nominal Poisson rate
    event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(1.0))
    for t, row in enumerate(table, start=1):
        expected = rdp.RdpAccountant().compose(event, t).get_epsilon(1e-4)
        assert float(row["dp_epsilon"]) == pytest.approx(expected, rel=1e-9)
        assert row["dp_sampling"].startswith("poisson q=0.2000 (nominal")
        assert float(row["dp_noise_std"]) == pytest.approx(1.0 * 0.5 / 8)  # z C / expected cohort
        assert float(row["dp_clip"]) == 0.5
    counts = np.loadtxt(path / "participation.csv", delimiter=",", skiprows=1, usecols=_column(path, "reported"))
    last = table[-1]
    assert int(last["dp_max_participation"]) == int(counts.max())
    import emulator.uplink.accounting as accounting
    assert float(last["dp_epsilon_device_max"]) == pytest.approx(
        accounting.sampling_free_epsilon(1.0, int(counts.max()), 1e-4))
    per_device = np.loadtxt(path / "participation.csv", delimiter=",", skiprows=1, usecols=_column(path, "dp_epsilon"))
    for count, epsilon in zip(counts, per_device):  # each device's own bound, from its own reports
        assert epsilon == pytest.approx(accounting.sampling_free_epsilon(1.0, int(count), 1e-4), rel=1e-5)
    assert per_device.max() == pytest.approx(float(last["dp_epsilon_device_max"]), rel=1e-5)
    from emulator.analysis.report import write_report

    report = (write_report([path], tmp_path / "report")).read_text()
    assert "epsilon (nominal)" in report and f"{float(last['dp_epsilon']):.2f}" in report
    assert (tmp_path / "report" / "accuracy_vs_epsilon.png").exists()


def _column(path, name):
    with open(path / "participation.csv") as handle:
        return next(csv.reader(handle)).index(name)


def test_dp_noise_moves_the_model_and_clipping_alone_does_not_add_any(ray_session, tmp_path):
    plain = rows(run_scenario(validate_scenario(small_scenario()), tmp_path / "plain").path)
    # a clip no update reaches and no noise: the release differs from FedAvg only by its fixed denominator,
    # which equals the reports when every selected device reports (always online, no dropout, no deadline)
    loose = rows(run_scenario(validate_scenario(small_scenario(
        privacy={"noise_multiplier": 0.0, "clip": 1e6}, **{"system.over_selection": 1.0})), tmp_path / "loose").path)
    plain_exact = rows(run_scenario(validate_scenario(small_scenario(**{"system.over_selection": 1.0})),
                                    tmp_path / "plain1").path)
    assert [r["test_loss"] for r in loose] == [r["test_loss"] for r in plain_exact]
    assert all(float(r["dp_unclipped_fraction"]) == 1.0 for r in loose)
    assert float(loose[-1]["dp_epsilon"]) == math.inf
    noisy = rows(run_scenario(validate_scenario(small_scenario(privacy={"noise_multiplier": 5.0, "clip": 0.05})),
                              tmp_path / "noisy").path)
    assert [r["test_loss"] for r in noisy] != [r["test_loss"] for r in plain]
    assert [r["sim_time_s"] for r in noisy] == [r["sim_time_s"] for r in plain]  # DP changes the model, not the world
    assert all(float(r["dp_unclipped_fraction"]) < 1.0 for r in noisy)  # a clip of 0.05 bites


def test_adaptive_clip_moves_toward_the_update_norms(ray_session, tmp_path):
    adaptive = {"noise_multiplier": 0.5, "clip": 1e-3, "clipping": {"kind": "adaptive", "quantile": 0.5, "lr": 0.5}}
    table = rows(run_scenario(validate_scenario(small_scenario(rounds=6, privacy=adaptive)), tmp_path / "a").path)
    clips = [float(r["dp_clip"]) for r in table]
    assert clips[0] == 1e-3 and clips[-1] > 3 * clips[0]  # every update was clipped at first: the clip grows
    assert float(table[0]["dp_unclipped_fraction"]) == 0.0


CALM = {"system.over_selection": 1.0, "population.compute": {"kind": "lognormal", "median_s_per_sample": 0.01,
                                                            "sigma": 0.5}}  # everyone online and reporting


@pytest.mark.parametrize("kind", ["secagg", "secagg_plus"])
def test_secure_aggregation_leaves_the_aggregate_bit_identical_and_costs_time_and_bytes(ray_session, tmp_path, kind):
    from emulator.uplink.secagg import SecAggCost

    plain = rows(run_scenario(validate_scenario(small_scenario(**CALM)), tmp_path / "plain").path)
    secure = rows(run_scenario(validate_scenario(small_scenario(
        **CALM, secure_aggregation={"kind": kind})), tmp_path / kind).path)
    assert [r["test_loss"] for r in secure] == [r["test_loss"] for r in plain]  # the same sum, bit for bit
    assert [r["participants"] for r in secure] == [r["participants"] for r in plain]
    cost = SecAggCost(kind, LOGREG_VALUES)
    for s, p in zip(secure, plain):
        n, reports = int(s["selected"]), int(s["participants"])
        assert float(s["round_duration_s"]) > float(p["round_duration_s"]) + float(s["secagg_server_s"])
        setup, finish = cost.setup(n), cost.finish(n, reports)
        assert int(s["bytes_up"]) == (n * sum(x.bytes_up for x in setup) + reports * cost.masked_upload_bytes(n)
                                      + reports * sum(x.bytes_up for x in finish))
        assert int(s["bytes_down"]) == (int(p["bytes_down"]) + n * sum(x.bytes_down for x in setup)
                                        + n * cost.masked_download_bytes(n) + reports * sum(x.bytes_down for x in finish))
        assert int(s["secagg_field_bits"]) == 32 + math.ceil(math.log2(n)) and s["secagg_aborted"] == "0"


def test_secure_aggregation_aborts_below_its_threshold_and_wastes_the_round(ray_session, tmp_path):
    lossy = {"population.dropout_per_hour": 40.0, "system.min_report_fraction": 0.25, "rounds": 6,
             "population.compute": {"kind": "lognormal", "median_s_per_sample": 0.5, "sigma": 0.5}}
    table = rows(run_scenario(validate_scenario(small_scenario(
        **lossy, secure_aggregation={"kind": "secagg", "threshold": 8})), tmp_path / "lossy").path)
    aborted = [r for r in table if r["secagg_aborted"] == "1"]
    assert aborted, "dropout this high should leave some round below 8 survivors"
    for row in aborted:
        assert row["failed"] == "1" and int(row["participants"]) == 0 and int(row["bytes_up"]) > 0
        assert float(row["secagg_unmask_s"]) == 0.0
    done = [r for r in table if r["failed"] == "0"]
    assert all(int(r["participants"]) >= 8 for r in done)


def test_compression_prices_asynchronous_uploads_too(ray_session, tmp_path):
    fedbuff = {"name": "fedbuff", "concurrency": 10, "buffer": 4, "client_lr": 0.05, "local_steps": 5, "batch_size": 16}
    table = rows(run_scenario(validate_scenario(small_scenario(
        algorithm=fedbuff, rounds=4, compression={"kind": "sign"})), tmp_path / "fedbuff").path)
    for row in table:
        assert int(row["bytes_up"]) == int(row["participants"]) * math.ceil((LOGREG_VALUES + 32) / 8)
        assert float(row["compression_error"]) > 0


def test_a_resumed_private_compressed_run_ends_as_the_uninterrupted_one(ray_session, tmp_path):
    both = {"privacy": {"noise_multiplier": 0.8, "clip": 0.05, "clipping": {"kind": "adaptive", "count_stddev": 2.0}},
            "compression": {"kind": "qsgd", "levels": 2, "error_feedback": True}}
    whole = run_scenario(validate_scenario(small_scenario(**STATEFUL, **both)), tmp_path / "whole").path
    part = run_scenario(validate_scenario(small_scenario(**{**STATEFUL, "rounds": 4}, **both)), tmp_path / "part").path
    resume_run(part, overrides=["rounds=7"], notify=lambda message: None)
    assert comparable(part) == comparable(whole)  # the clip, the accountant and the residuals came back
    table = rows(whole)
    assert len({r["dp_clip"] for r in table}) > 1 and float(table[-1]["dp_epsilon"]) > float(table[0]["dp_epsilon"])

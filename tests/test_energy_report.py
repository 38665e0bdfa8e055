"""The report of runs with batteries (emulator/analysis/energy.py): the fleet's energy, to the target, wasted,
and who pays it, as the runs' own files say; TensorBoard files it under energy/."""
from __future__ import annotations

import math

import pandas as pd
import pytest

from conftest import small_scenario
from emulator.analysis import write_report
from emulator.analysis.energy import energy_by_group, top_share
from emulator.driver import run_scenario
from emulator.parts import validate_scenario
from emulator.recording.tensorboard import TensorBoardLog

TARGET = 0.3


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """Two seeds of a world where half the phones train over LTE, in two time zones."""
    root = tmp_path_factory.mktemp("energy-report")
    for seed in (1, 2):
        raw = small_scenario(name="powered", seed=seed, rounds=6, **{
            "population.energy": {"cellular_share": 0.5},
            "system": {"model": "simulated", "over_selection": 1.5, "deadline_s": 600}})
        raw["population"]["availability"] = [{"kind": "eligible", "requires": ["charging"],
                                              "charging": {"start_hour": 0, "hours": 24, "share": 0.9},
                                              "timezones": {"offsets_h": [-5, 8]}}]
        run_scenario(validate_scenario(raw), root / f"seed{seed}")
    out = write_report([root / "seed1", root / "seed2"], root / "report", target=TARGET)
    return root, out


def test_the_table_has_the_fleets_energy_as_the_runs_files_give_it(report):
    root, out = report
    summary = pd.read_csv(out.parent / "summary.csv").iloc[0]
    totals, to_target, tops = [], [], []
    for seed in (1, 2):
        metrics = pd.read_csv(root / f"seed{seed}" / "metrics.csv")
        devices = pd.read_csv(root / f"seed{seed}" / "participation.csv")
        totals.append(metrics["energy_j"].sum() / 1e3)
        reached = metrics.index[metrics["test_acc"].fillna(-1) >= TARGET]
        to_target.append(metrics.loc[:reached[0], "energy_j"].sum() / 1e3 if len(reached) else math.nan)
        spent = devices["energy_j"].sort_values(ascending=False)
        tops.append(spent.iloc[:math.ceil(0.1 * len(spent))].sum() / spent.sum())
    assert summary["fleet_kj"] == pytest.approx(sum(totals) / 2)
    assert summary["top10_energy_share"] == pytest.approx(sum(tops) / 2)
    reached = [x for x in to_target if not math.isnan(x)]
    assert reached and summary["kj_to_target"] == pytest.approx(sum(reached) / len(reached))
    assert 0 < summary["wasted_energy_share"] < 1
    text = out.read_text()
    assert "fleet energy kJ" in text and "accuracy_vs_energy.png" in text
    assert (out.parent / "accuracy_vs_energy.png").stat().st_size > 0


def test_who_pays_shares_add_up_and_lte_phones_pay_more_than_their_share(report):
    root, out = report
    devices = pd.concat([pd.read_csv(root / f"seed{s}" / "participation.csv") for s in (1, 2)])
    by_link = energy_by_group(devices, "link").set_index("link")
    assert by_link["device_share"].sum() == pytest.approx(1.0) and by_link["energy_share"].sum() == pytest.approx(1.0)
    # LTE's base power and its 11.6 s tail after each transfer: each cellular phone pays more than a Wi-Fi one
    assert (by_link.at["cellular", "energy_share"] / by_link.at["cellular", "device_share"]
            > by_link.at["wifi", "energy_share"] / by_link.at["wifi", "device_share"])
    text = out.read_text()
    assert "## Who pays" in text and "| radio | cellular |" in text and "| time zone (h from UTC) |" in text


def test_top_share_reads_the_heaviest_tenth():
    assert top_share([1.0] * 10) == pytest.approx(0.1)
    assert top_share([91.0] + [1.0] * 9) == pytest.approx(0.91)
    assert math.isnan(top_share([0.0, 0.0]))


def test_tensorboard_files_the_energy_columns_under_energy_with_the_fleets_total(tmp_path):
    from test_tensorboard import metrics_row, points, read_back

    with TensorBoardLog(tmp_path) as log:
        for r in range(1, 4):
            log.append(metrics_row(r, energy_j=100.0 * r, energy_wasted_j=10.0, energy_radio_j=1.0, aborted=r - 1,
                                   energy_aborted_j=2.0))
    events = read_back(tmp_path)
    assert points(events, "energy/round_j") == [(1, 100.0), (2, 200.0), (3, 300.0)]
    assert points(events, "energy/total_j") == [(1, 100.0), (2, 300.0), (3, 600.0)]
    assert points(events, "cohort/aborted") == [(1, 0), (2, 1), (3, 2)]
    tags = set(events.Tags()["scalars"])
    assert {"energy/wasted_j", "energy/radio_j", "energy/aborted_j"} <= tags
    assert not any(tag.startswith("algorithm/energy") for tag in tags)

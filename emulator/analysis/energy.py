"""Who pays for learning, in a world with batteries (population.energy): the fleet's energy per run, to a
target accuracy, wasted on work that was not used, and how it is shared between devices and their groups
(participation.csv's energy_j beside each device's link, zone, tier, type). Pure functions of a run's files."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from emulator.analysis.runs import pooled_participation

GROUPINGS = (("link", "radio"), ("timezone_h", "time zone (h from UTC)"), ("compute_tier", "compute tier"),
             ("network_tier", "network tier"), ("type", "type"), ("availability", "availability entry"))


def top_share(energy, fraction: float = 0.1) -> float:
    """The share of all energy borne by the `fraction` of devices that spent most (NaN if none was spent)."""
    values = np.sort(np.asarray(energy, dtype=np.float64))[::-1]
    total = values.sum()
    if not len(values) or total <= 0:
        return math.nan
    return float(values[:max(1, math.ceil(fraction * len(values)))].sum() / total)


def energy_stats(metrics: pd.DataFrame, participation: pd.DataFrame | None, target: float | None) -> dict:
    """One run's row of energy figures for the comparison table ({} for a run without energy)."""
    if "energy_j" not in metrics:
        return {}
    total = float(metrics["energy_j"].sum())
    row = {"fleet_kj": total / 1e3,
           "wasted_energy_share": float(metrics["energy_wasted_j"].sum()) / total if total > 0 else math.nan}
    if "energy_cancelled_j" in metrics and total > 0:  # over-selection's price
        row["cancelled_energy_share"] = float(metrics["energy_cancelled_j"].sum()) / total
    if "aborted" in metrics:
        row["aborted"] = int(metrics["aborted"].sum())
    if target is not None:
        reached = metrics.index[metrics["test_acc"].fillna(-1.0) >= target]
        row["kj_to_target"] = float(metrics.loc[:reached[0], "energy_j"].sum()) / 1e3 if len(reached) else math.nan
    if participation is not None and "energy_j" in participation:
        row["top10_energy_share"] = top_share(participation["energy_j"])
    return row


def energy_by_group(participation: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per value of `column`: its share of the devices and its share of the fleet's energy."""
    total = participation["energy_j"].sum()
    table = participation.groupby(column, dropna=False).agg(devices=("energy_j", "size"), energy=("energy_j", "sum"))
    table["device_share"] = table["devices"] / len(participation)
    table["energy_share"] = table["energy"] / total if total > 0 else math.nan
    return table.reset_index()[[column, "device_share", "energy_share"]]


def who_pays_lines(groups: dict[str, list]) -> list[str]:
    """report.md's section: for each experiment with energy (its seeds pooled), each grouping's shares of the
    devices and of the energy, so a group that pays more than its share stands out."""
    lines = []
    for label, runs in groups.items():
        pooled = pooled_participation(runs, "energy_j")
        if pooled is None:
            continue
        lines += [f"**{label}**: the top 10% of devices bore {top_share(pooled['energy_j']):.1%} of the energy.", "",
                  "| grouping | group | share of devices | share of energy |", "|---|---|---|---|"]
        for column, name in GROUPINGS:
            if column not in pooled or pooled[column].nunique(dropna=False) < 2:
                continue
            for _, row in energy_by_group(pooled, column).iterrows():
                lines.append(f"| {name} | {row[column]} | {row['device_share']:.1%} | {row['energy_share']:.1%} |")
        lines.append("")
    if lines:
        lines = ["## Who pays: the fleet's energy by group", "",
                 "Energy spent on learning (training and radios, wasted work included) over the run, pooled "
                 "over an experiment's seeds; a group whose share of energy exceeds its share of devices pays "
                 "more than its part.", ""] + lines
    return lines

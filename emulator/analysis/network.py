"""The shared links in a run (system.network): how long transfers waited for capacity, how busy the cells were,
with edge servers the backhaul's bytes and the edges' idle time, and, by region (else by time zone), whose
transfers slowed most (participation.csv's transfer_slowdown beside each device's region). Pure functions of
a run's files."""
from __future__ import annotations

import math

import pandas as pd

from emulator.analysis.runs import pooled_participation

GROUPINGS = (("region", "region"), ("timezone_h", "time zone (h from UTC)"))


def network_stats(metrics: pd.DataFrame, participation: pd.DataFrame | None) -> dict:
    """One run's row of network figures for the comparison table ({} for a run without shared links)."""
    if "network_wait_s" not in metrics:
        return {}
    row = {"network_wait_s": float(metrics["network_wait_s"].mean()),
           "access_up_busiest": float(metrics["access_up_utilisation"].mean())}
    if participation is not None and "transfer_slowdown" in participation:
        row["transfer_slowdown"] = float(participation["transfer_slowdown"].mean())  # NaN (never moved) left out
    if "backhaul_bytes_up" in metrics:  # edge servers: the edges' tier, and the time they waited for the cloud
        row["backhaul_gb"] = float(metrics["backhaul_bytes_up"].sum() + metrics["backhaul_bytes_down"].sum()) / 1e9
        row["edge_idle_s"] = float(metrics["edge_idle_s"].mean())
        row["edge_rounds_failed"] = int(metrics["edge_rounds_failed"].sum())
    return row


def slowdown_by_group(participation: pd.DataFrame, column: str) -> pd.DataFrame:
    """Per value of `column`: its share of the devices, of the reports, and its devices' mean slowdown."""
    reports = participation["reported"].sum()
    table = participation.groupby(column, dropna=False).agg(
        devices=("reported", "size"), reports=("reported", "sum"), slowdown=("transfer_slowdown", "mean"))
    table["device_share"] = table["devices"] / len(participation)
    table["report_share"] = table["reports"] / reports if reports > 0 else math.nan
    return table.reset_index()[[column, "device_share", "report_share", "slowdown"]]


def by_region_lines(groups: dict[str, list]) -> list[str]:
    """report.md's section: for each experiment with shared links (its seeds pooled), by region (else time
    zone) the share of devices, of reports, and the mean transfer slowdown, so a region that is heard less
    because its links are crowded stands out."""
    lines = []
    for label, runs in groups.items():
        pooled = pooled_participation(runs, "transfer_slowdown")
        if pooled is None:
            continue
        column, name = next(((c, n) for c, n in GROUPINGS if c in pooled and pooled[c].nunique() > 1),
                            ("access_link", "access link"))
        lines += [f"**{label}**, by {name}:", "",
                  f"| {name} | share of devices | share of reports | mean transfer slowdown |", "|---|---|---|---|"]
        for _, row in slowdown_by_group(pooled, column).iterrows():
            value = row[column]
            value = int(value) if isinstance(value, float) and value.is_integer() else value
            lines.append(f"| {value} | {row['device_share']:.1%} | {row['report_share']:.1%} | "
                         f"{row['slowdown']:.2f} |")
        lines.append("")
    if lines:
        lines = ["## Shared links by region", "",
                 "Each device's transfer slowdown is the mean, over the rounds it moved bytes in, of its transfers' "
                 "time over their time alone (participation.csv), pooled over an experiment's seeds; devices never "
                 "selected are left out of the mean.", ""] + lines
    return lines

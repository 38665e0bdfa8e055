"""The price of robustness in fairness: how often a robust aggregator accepted the honest reports of each
group of devices (compute tier, network tier, time zone, type: evaluation/fleet.py's GROUPING), round by
round.

A rule that drops or scales what looks unusual (Krum, norm bounding) also drops honest devices whose data
or speed make their updates unusual: the slow tier that holds rare classes, the time zone that trains on
other labels. These columns show it beside the attackers' share of what the rule accepted. The devices
without a value (no time zone) are a group of their own, `none`; a group without an honest device (a type
whose devices all attack) has no column, since it would be empty in every row.
"""
from __future__ import annotations

import numpy as np

from emulator.evaluation.fleet import group_column, groups_holding, members


def acceptance_columns(groups: dict[str, np.ndarray], honest: np.ndarray | None = None) -> tuple[str, ...]:
    """metrics.csv's names: accepted_<column>_<value>, the share of that group's honest reports accepted;
    `honest` (per device; None: everyone) leaves out the groups without an honest device."""
    return tuple(group_column("accepted", name, value) for name, value in groups_holding(groups, honest))


def acceptance_by_group(devices: np.ndarray, accepted: np.ndarray, groups: dict[str, np.ndarray],
                        honest: np.ndarray | None = None) -> dict:
    """Per group, the share of its honest devices' reports this round that the rule accepted (None where the
    group had no honest report). `devices` and `accepted` are the rule's (one entry per report)."""
    devices, accepted = np.asarray(devices, np.int64), np.asarray(accepted, bool)
    keep = np.ones(len(devices), bool) if honest is None else honest[devices]
    row = {}
    for name, value in groups_holding(groups, honest):
        inside = keep & members(groups[name][devices], value) if len(devices) else np.zeros(0, bool)
        row[group_column("accepted", name, value)] = float(accepted[inside].mean()) if inside.any() else None
    return row

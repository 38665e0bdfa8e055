"""What a run costs and achieves: pure functions of its metrics and participation tables."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from emulator.analysis.energy import energy_stats
from emulator.analysis.network import network_stats


def final_accuracy(metrics: pd.DataFrame, last: int = 5) -> float:
    """Mean test accuracy of the last `last` evaluations (FAST's metric); of all of them when a run has fewer
    (`summarize` says how many in final_acc_count)."""
    evaluated = metrics["test_acc"].dropna()
    return float(evaluated.tail(last).mean()) if len(evaluated) else math.nan


def time_to_accuracy(metrics: pd.DataFrame, target: float) -> dict:
    """The first evaluated round whose test accuracy reaches `target`: its round, simulated hours, and the
    bytes moved up to and including it. NaN everywhere when the run never gets there."""
    reached = metrics.index[metrics["test_acc"].fillna(-1.0) >= target]
    if len(reached) == 0:
        return {"round": math.nan, "sim_hours": math.nan, "bytes": math.nan}
    first = reached[0]
    moved = metrics.loc[:first, "bytes_down"].sum() + metrics.loc[:first, "bytes_up"].sum()
    return {"round": int(metrics.at[first, "round"]), "sim_hours": float(metrics.at[first, "sim_time_s"]) / 3600.0,
            "bytes": float(moved)}


def rise_time(metrics: pd.DataFrame, fraction: float = 0.9, last: int = 5) -> float:
    """FSL's rise time: the first round reaching `fraction` of the final accuracy."""
    final = final_accuracy(metrics, last)
    if math.isnan(final):
        return math.nan
    return time_to_accuracy(metrics, fraction * final)["round"]


def gini(values) -> float:
    """Gini coefficient of non-negative values: 0 when everyone counts the same, towards 1 when few do."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    if len(x) == 0 or x.sum() == 0:
        return 0.0
    n = len(x)
    return float((2 * np.arange(1, n + 1) - n - 1) @ x / (n * x.sum()))


def lorenz_curve(values) -> tuple[np.ndarray, np.ndarray]:
    """(share of devices, share of participation held by the least-participating share of devices)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    cumulative = np.concatenate([[0.0], np.cumsum(x)])
    total = cumulative[-1] if cumulative[-1] > 0 else 1.0
    return np.linspace(0, 1, len(x) + 1), cumulative / total


def participation_stats(participation: pd.DataFrame) -> dict:
    """How evenly devices took part: reports per device, its Gini, and who never took part."""
    reported = participation["reported"].to_numpy()
    return {
        "devices": len(participation),
        "mean_reports": float(reported.mean()) if len(reported) else math.nan,
        "gini_reports": gini(reported),
        "never_reported": float((reported == 0).mean()) if len(reported) else math.nan,
        "never_selected": float((participation["selected"] == 0).mean()) if len(reported) else math.nan,
        "dropped": int(participation["dropped"].sum()),
        "straggled": int(participation["straggled"].sum()),
        "cancelled": int(participation["cancelled"].sum()) if "cancelled" in participation else math.nan,
    }


def round_time_stats(metrics: pd.DataFrame) -> dict:
    durations = metrics["round_duration_s"].to_numpy()
    return {"median_s": float(np.median(durations)), "p90_s": float(np.quantile(durations, 0.9)),
            "max_s": float(durations.max()), "failed_rounds": int(metrics.get("failed", pd.Series(0)).sum())}


def snapshot_share(metrics: pd.DataFrame) -> float:
    """Share of FAST's snapshot rounds (the paper's "ratio" is one minus this)."""
    return float((metrics["kind"] == "snapshot").mean())


def bias_stats(metrics: pd.DataFrame) -> dict:
    """How far the reports' data was from the population's: the mean label TV over the rounds with reports,
    its mean excess over the random-cohort floor (the part a finite cohort does not explain), the share
    of training samples never reported by the end, and the worst class's accuracy at the last evaluation.
    NaN for runs written before these columns existed."""
    def column(name):
        return metrics[name].astype(float) if name in metrics else pd.Series(np.nan, index=metrics.index)

    tv, floor = column("label_tv"), column("label_tv_floor")
    unseen, worst = column("unseen_share").dropna(), column("worst_class_acc").dropna()
    return {"mean_label_tv": float(tv.mean()) if tv.notna().any() else math.nan,
            "label_tv_excess": float((tv - floor).mean()) if (tv - floor).notna().any() else math.nan,
            "unseen_share": float(unseen.iloc[-1]) if len(unseen) else math.nan,
            "worst_class_acc": float(worst.iloc[-1]) if len(worst) else math.nan}


def summarize(metrics: pd.DataFrame, participation: pd.DataFrame | None, target: float | None,
              last: int = 5) -> dict:
    """One row of the comparison table for one run."""
    evaluations = int(metrics["test_acc"].notna().sum())
    row = {
        "final_acc": final_accuracy(metrics, last),
        "final_acc_count": min(evaluations, last),  # the evaluations averaged: fewer than `last` in a short run
        "evaluations": evaluations,
        "best_acc": float(metrics["test_acc"].max()) if metrics["test_acc"].notna().any() else math.nan,
        "rounds": int(len(metrics)),
        "sim_hours": float(metrics["sim_time_s"].iloc[-1]) / 3600.0 if len(metrics) else math.nan,
        "gb_moved": float(metrics["bytes_down"].sum() + metrics["bytes_up"].sum()) / 1e9,
        "rise_round": rise_time(metrics, 0.9, last),
        "median_round_s": round_time_stats(metrics)["median_s"] if len(metrics) else math.nan,
        "failed_rounds": int(metrics["failed"].sum()) if "failed" in metrics else 0,
        "stragglers": int(metrics["stragglers"].sum()) if "stragglers" in metrics else math.nan,
        "cancelled": int(metrics["cancelled"].sum()) if "cancelled" in metrics else math.nan,  # not in older runs
        "snapshot_share": snapshot_share(metrics),
        **bias_stats(metrics),
        **privacy_stats(metrics),
        **energy_stats(metrics, participation, target),
        **network_stats(metrics, participation),
    }
    if target is not None:
        reach = time_to_accuracy(metrics, target)
        row.update({"tta_round": reach["round"], "tta_hours": reach["sim_hours"], "tta_gb": reach["bytes"] / 1e9})
    if participation is not None:
        stats = participation_stats(participation)
        row.update({"gini_reports": stats["gini_reports"], "never_reported": stats["never_reported"]})
    return row


def privacy_stats(metrics: pd.DataFrame) -> dict:
    """A private run's final epsilon: the nominal one (uniform Poisson cohorts assumed) and the sampling-free
    bound of the device that reported most (empty for a run without privacy)."""
    if "dp_epsilon" not in metrics or metrics["dp_epsilon"].isna().all():
        return {}
    return {"epsilon": float(metrics["dp_epsilon"].dropna().iloc[-1]),
            "epsilon_device": float(metrics["dp_epsilon_device_max"].dropna().iloc[-1])}


# Student's t, 97.5% quantile, by degrees of freedom. Between entries the one for fewer degrees of freedom
# (at most 1% wider than the exact value), past 120 the normal 1.96 (at most 1% narrower).
T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
         20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
         29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}


def t_975(df: int) -> float:
    """The 97.5% quantile of Student's t with `df` degrees of freedom (a two-sided 95% interval)."""
    if df < 1:
        return math.nan
    return T_975[max(d for d in T_975 if d <= df)] if df <= 120 else 1.960


def seed_statistics(values, min_seeds_for_ci: int = 3) -> dict:
    """Mean, sample standard deviation (n - 1 in the denominator) and the half-width of the 95% confidence
    interval of the mean (t * sd / sqrt(n)) of one measurement over seeds. Missing values (a seed that
    never reached a target) are left out and `n` counts the rest; sd needs 2 values, the interval
    `min_seeds_for_ci`, else NaN."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    n = len(x)
    mean = float(x.mean()) if n else math.nan
    std = float(x.std(ddof=1)) if n >= 2 else math.nan
    ci95 = t_975(n - 1) * std / math.sqrt(n) if n >= max(2, min_seeds_for_ci) else math.nan
    return {"mean": mean, "std": std, "ci95": ci95, "n": n}

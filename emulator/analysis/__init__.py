"""Analysis of run directories: load them into pandas, measure time-to-accuracy, draw and report.

    from analysis import load_runs, summarize, write_report
    runs = load_runs(["runs/"])
    write_report(["runs/"], "report/", target=0.8)
"""
from emulator.analysis.metrics import (final_accuracy, gini, lorenz_curve, participation_stats, rise_time, round_time_stats,
                              snapshot_share, summarize, time_to_accuracy)
from emulator.analysis.report import comparison_table, write_report
from emulator.analysis.runs import Run, find_runs, group_runs, load_run, load_runs

__all__ = ["Run", "load_run", "load_runs", "find_runs", "group_runs", "final_accuracy", "time_to_accuracy",
           "rise_time", "gini", "lorenz_curve", "participation_stats", "round_time_stats", "snapshot_share",
           "summarize", "comparison_table", "write_report"]

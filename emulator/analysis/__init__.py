"""Analysis of run directories: load them into pandas, measure time-to-accuracy, draw and report.

    from emulator.analysis import load_metrics, load_runs, write_report
    m = load_metrics("runs/quickstart-...")          # the evaluated rounds of one run
    m.plot(x="sim_time_s", y="test_acc")
    write_report(["runs/"], "report/", target=0.8)

Every file of a run directory is checked as it is read (files.py): a damaged one raises DamagedRunError (a
ScenarioError naming the file, the line and what is wrong); a report of several runs leaves it out and lists it.

The library is `emulator.analysis`; the top-level `analysis/` folder of the repository holds scripts that
use it. Its names are imported on first use, so reading a run (files.py) does not import matplotlib.
"""
from importlib import import_module

_WHERE = {  # name -> the module that defines it
    **dict.fromkeys(("bias_stats", "final_accuracy", "gini", "lorenz_curve", "participation_stats", "rise_time",
                     "round_time_stats", "seed_statistics", "snapshot_share", "summarize", "time_to_accuracy"),
                    "metrics"),
    **dict.fromkeys(("comparison_table", "write_report"), "report"),
    **dict.fromkeys(("DamagedRunError", "NotARunError", "Run", "Selection", "find_runs", "group_runs",
                     "incomplete_reason", "load_metrics", "load_run", "load_runs", "read_runs", "select_runs"),
                    "runs"),
}

__all__ = ["Run", "Selection", "NotARunError", "DamagedRunError", "load_run", "load_runs", "read_runs", "load_metrics",
           "find_runs", "group_runs", "select_runs", "incomplete_reason", "final_accuracy", "time_to_accuracy",
           "rise_time", "gini", "lorenz_curve", "participation_stats", "round_time_stats", "snapshot_share",
           "seed_statistics", "summarize", "bias_stats", "comparison_table", "write_report"]


def __getattr__(name: str):
    if name in _WHERE:
        value = getattr(import_module(f"emulator.analysis.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'emulator.analysis' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])

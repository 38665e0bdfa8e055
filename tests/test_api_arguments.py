"""Every parameter of every public function of the Python API refuses a value of a kind it does not take with
an error naming the function, the parameter and what it takes (ArgumentError: a ScenarioError and a
TypeError), before anything starts: no run, no Ray, nothing written. A new parameter without an entry in
WRONG fails test_every_parameter_has_a_wrong_value."""
from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import emulator
from conftest import small_scenario
from emulator.analysis import write_report

A_FILE = "<a file>"  # stands for a path that is a file where a directory belongs (made in tmp_path)
A_DIRECTORY = "<a directory>"

WRONG = {  # function -> parameter -> values of a kind it does not take
    "run": {"scenario": [42, None, ["rounds=3"], A_DIRECTORY], "overrides": ["rounds=3", 5, [3], {1: 2}],
            "out": [A_FILE, 7], "data": [42, "x.npz"], "devices": [5, "0,1"], "users": [3.5, {"a": 1}],
            "features": [3], "label": [["y"]], "progress": ["bar", 2], "address": [5], "plugins": [7, [1]],
            "notify": ["stderr"]},
    "resume": {"run_dir": [42, A_FILE, None], "overrides": ["rounds=3", 5], "data": [42], "devices": [5],
               "users": [3.5], "features": [3], "label": [1], "progress": ["bar"], "address": [5],
               "notify": [1]},
    "load": {"run_dir": [42, A_FILE, None]},
    "sweep": {"scenario": [42, A_DIRECTORY], "grid": [5, "algorithm.client_lr=0.1", [5]],
              "seeds": ["3", 0, 2.0, True], "overrides": ["rounds=3"], "out": [A_FILE, 3],
              "parallel": ["4", 0], "target": ["0.8", 2, float("nan")], "address": [5],
              "progress": ["text", 1.5], "plugins": [7]},
    "write_report": {"run_paths": [42, [], [3]], "out": [A_FILE, 5], "target": ["0.8"], "last": [2.5, "5"],
                     "title": [5], "figure_width": ["wide", -1], "formats": ["png", ("pdf",), ("png", "gif")],
                     "notify": ["stderr"]},
}
FUNCTIONS = {"run": emulator.run, "resume": emulator.resume, "load": emulator.load, "sweep": emulator.sweep,
             "write_report": write_report}


def needed(function: str, tmp_path: Path) -> dict:
    """The other arguments a call needs, of the right kinds (a scenario that would run in process, at once)."""
    scenario = small_scenario(rounds=1, **{"output.dir": str(tmp_path / "runs")})
    return {"run": {"scenario": scenario}, "resume": {"run_dir": tmp_path / "none"}, "load": {"run_dir": tmp_path},
            "sweep": {"scenario": scenario, "out": tmp_path / "sweep"},
            "write_report": {"run_paths": [tmp_path], "out": tmp_path / "report"}}[function]


def test_every_public_function_of_the_api_is_here():
    assert set(emulator._API) - {"Run", "Sweep"} == set(FUNCTIONS) - {"write_report"} | {"shutdown"}
    assert not inspect.signature(emulator.shutdown).parameters


@pytest.mark.parametrize("function", list(FUNCTIONS))
def test_every_parameter_has_a_wrong_value(function):
    assert set(inspect.signature(FUNCTIONS[function]).parameters) == set(WRONG[function])


@pytest.mark.parametrize("function, parameter, value", [
    pytest.param(f, p, v, id=f"{f}({p}={v!r})") for f, table in WRONG.items() for p, values in table.items()
    for v in values])
def test_a_value_of_the_wrong_kind_is_refused_naming_the_parameter(tmp_path, monkeypatch, function, parameter,
                                                                   value):
    monkeypatch.chdir(tmp_path)  # whatever a call that is not refused writes stays here
    (tmp_path / "file.txt").write_text("not a directory\n")
    value = {A_FILE: tmp_path / "file.txt", A_DIRECTORY: tmp_path}.get(value, value) if isinstance(value, str) \
        else value
    before = sorted(p.name for p in tmp_path.iterdir())
    arguments = {**needed(function, tmp_path), parameter: value}
    with pytest.raises(emulator.ScenarioError) as refused:
        FUNCTIONS[function](**arguments)
    message = str(refused.value)
    assert f"{parameter}=" in message, message
    if parameter != "data":  # what data= holds is read by the data's own reader: a ScenarioError naming data=
        assert isinstance(refused.value, TypeError) and isinstance(refused.value, emulator.ArgumentError)
        assert " takes " in message and message.startswith(("emulator.", "emulator.analysis.")), message
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "nothing is written before the refusal"

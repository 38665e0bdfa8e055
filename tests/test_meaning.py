"""Property tests of meaning, not only of crashes (issue 31): for the number fields of real scenarios,

- a `--set` of a valid value gives a resolved scenario holding exactly that value at exactly that path,
  and nothing else changed;
- a `--set` of a value outside the field's domain (not finite, a boolean, text, past a bound) is refused
  with a ScenarioError that names the path.

The fields are found by walking the validated scenarios (every section, every list item), so a new field is
covered without editing this file. Validation only: no run, well under a second an example.

And a fuzzer (issue 26): random mappings of the schema's own keys and hostile values, on top of a valid
name and rounds, must be refused with a ScenarioError or accepted; nothing else may escape.
"""
from __future__ import annotations

import math
import os
import typing
from typing import Any

import annotated_types
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from conftest import ROOT
from emulator.parts import load_scenario
from emulator.scenario import ScenarioError

SCENARIOS = ["quickstart.yaml", "papers/safari_fmnist.yaml", "system/diurnal_dropout.yaml",
             "algorithms/fedbuff.yaml", "privacy/private_slow_tier.yaml"]


def _plain(annotation: Any) -> type | None:
    """int or float when a field holds exactly one kind of number (Optional allowed), else None."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in (typing.Union, getattr(__import__("types"), "UnionType")):
        kinds = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _plain(kinds[0]) if len(kinds) == 1 else None
    return annotation if annotation in (int, float) else None


def _bounds(field) -> dict:
    found = {}
    for item in field.metadata:
        for name in ("gt", "ge", "lt", "le"):
            if isinstance(item, getattr(annotated_types, name.capitalize())):
                found[name] = getattr(item, name)
    return found


def number_fields(model: BaseModel, prefix: str = "") -> list[tuple[str, type, dict, Any]]:
    """(path, int or float, bounds, current value) of every number field under `model`."""
    found = []
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        path = f"{prefix}{name}"
        if isinstance(value, BaseModel):
            found += number_fields(value, path + ".")
        elif isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
            for i, item in enumerate(value):
                found += number_fields(item, f"{path}[{i}].")
        elif _plain(field.annotation) is not None and not isinstance(value, bool):
            found.append((path, _plain(field.annotation), _bounds(field), value))
    return found


FIELDS = [(name, *field) for name in SCENARIOS for field in number_fields(load_scenario(ROOT / "scenarios" / name))]


def _at(scenario: BaseModel, path: str) -> Any:
    node: Any = scenario
    for part in path.replace("[", ".").replace("]", "").split("."):
        node = node[int(part)] if part.isdigit() else getattr(node, part)
    return node


def _yaml(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else {math.inf: ".inf", -math.inf: "-.inf"}.get(value, ".nan")
    return str(value).lower() if isinstance(value, bool) else str(value)


def _valid(kind: type, bounds: dict) -> st.SearchStrategy:
    low = bounds.get("ge", bounds.get("gt"))
    high = bounds.get("le", bounds.get("lt"))
    if kind is int:
        return st.integers(min_value=(low if "ge" in bounds else (low + 1 if low is not None else -10 ** 6)),
                           max_value=(high if "le" in bounds else (high - 1 if high is not None else 10 ** 6)))
    return st.floats(min_value=low if low is not None else -1e6, max_value=high if high is not None else 1e6,
                     exclude_min="gt" in bounds, exclude_max="lt" in bounds, allow_nan=False, allow_infinity=False)


def test_the_walk_finds_the_fields_it_should():
    """Every section's numbers are reached, list items included (a walk that found nothing would pass)."""
    paths = {f[1] for f in FIELDS}
    assert {"rounds", "seed", "algorithm.client_lr", "population.devices", "data.partition.alpha",
            "population.availability[0].mean_on_s", "system.deadline_s"} <= paths
    assert len(FIELDS) > 100


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_set_changes_exactly_the_path_it_names(data):
    name, path, kind, bounds, _ = data.draw(st.sampled_from(FIELDS))
    value = data.draw(_valid(kind, bounds))
    base = load_scenario(ROOT / "scenarios" / name)
    try:
        changed = load_scenario(ROOT / "scenarios" / name, [f"{path}={_yaml(value)}"])
    except ScenarioError:
        return  # refused by a rule across fields (e.g. more clients a round than devices): refused, not bent
    assert _at(changed, path) == value and type(_at(changed, path)) is kind
    before, after = base.model_dump(mode="json"), changed.model_dump(mode="json")
    _drop(before, path), _drop(after, path)
    assert before == after, f"--set {path}={value} changed more than {path}"


def _drop(tree: dict, path: str) -> None:
    parts = path.replace("[", ".").replace("]", "").split(".")
    node: Any = tree
    for part in parts[:-1]:
        node = node[int(part)] if part.isdigit() else node[part]
    node.pop(parts[-1])


def _invalid(kind: type, bounds: dict) -> st.SearchStrategy:
    outside = []
    if "ge" in bounds:
        outside.append(st.just(bounds["ge"] - 1 if kind is int else bounds["ge"] - 0.5))
    if "gt" in bounds:
        outside.append(st.just(bounds["gt"]))
    if "le" in bounds:
        outside.append(st.just(bounds["le"] + 1))
    if "lt" in bounds:
        outside.append(st.just(bounds["lt"]))
    junk = [math.inf, -math.inf, math.nan, True, False, "'12'", "twelve"]
    if kind is int:
        junk.append(2.5)
    return st.one_of(st.sampled_from(junk), *outside)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_value_outside_a_fields_domain_is_refused_naming_it(data):
    name, path, kind, bounds, _ = data.draw(st.sampled_from(FIELDS))
    value = data.draw(_invalid(kind, bounds))
    with pytest.raises(ScenarioError) as refused:
        load_scenario(ROOT / "scenarios" / name, [f"{path}={_yaml(value)}"])
    shown = path.replace("[", ".").replace("]", "")
    message = str(refused.value).replace("[", ".").replace("]", "")
    assert shown in message, (path, value, str(refused.value))


@pytest.mark.heavy
def test_setting_every_field_to_the_value_it_holds_is_accepted_and_changes_nothing():
    """The walk's paths are real `--set` paths (the properties above would otherwise test refusals only)."""
    for name, path, _kind, _bounds, value in FIELDS:
        if "availability[" in path and "availability" not in load_scenario(ROOT / "scenarios" / name).population.model_fields_set:
            continue  # the default availability: a list the file does not hold, so no index to set
        base = load_scenario(ROOT / "scenarios" / name)
        again = load_scenario(ROOT / "scenarios" / name, [f"{path}={_yaml(value)}"])
        assert again.model_dump(mode="json") == base.model_dump(mode="json"), path


# ----------------------------------------------------------------- fuzzing: only ScenarioError escapes
def _keys() -> list[str]:
    """Every key the schema knows (at any depth), and a few it does not: fuzzed mappings mostly reach real
    sections and fields, so the values get past the first 'unknown key'."""
    names: set[str] = set()

    def walk(model: type[BaseModel]) -> None:
        for name, field in model.model_fields.items():
            names.add(name)
            for arg in [field.annotation, *typing.get_args(field.annotation)]:
                for inner in [arg, *typing.get_args(arg)]:
                    if isinstance(inner, type) and issubclass(inner, BaseModel) and inner.__name__ not in seen:
                        seen.add(inner.__name__)
                        walk(inner)

    seen: set[str] = set()
    walk(type(load_scenario(ROOT / "scenarios" / "quickstart.yaml")))
    return sorted(names) + ["kind", "name", "share", "bogus", ""]


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-10 ** 12, 10 ** 12), st.text(max_size=12),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(
                        ["fedavg", "fast", "safari", "markov", "diurnal", "always", "dirichlet", "mlp", "synthetic",
                         "inline", "ray", "bf16", "1e-3", "-1", "0", ".inf"]))
TREES = st.recursive(SCALARS, lambda children: st.one_of(
    st.lists(children, max_size=4), st.dictionaries(st.sampled_from(_keys()), children, max_size=5)), max_leaves=25)


# 300 examples in make test (a few seconds); EMULATOR_FUZZ_EXAMPLES=20000 for a longer run by hand.
@settings(max_examples=int(os.environ.get("EMULATOR_FUZZ_EXAMPLES", 300)), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(sections=st.dictionaries(st.sampled_from(_keys()), TREES, max_size=6))
def test_a_fuzzed_scenario_is_refused_with_a_scenario_error_or_accepted(sections):
    """Whatever mapping arrives (on top of a valid name and rounds), validation raises ScenarioError or
    returns a Scenario: no other exception escapes to the user as a traceback."""
    from emulator.parts import validate_scenario

    raw = {"name": "fuzz", "rounds": 2, **sections}
    try:
        validate_scenario(raw)
        event("accepted")
    except ScenarioError as refused:
        assert str(refused).strip()
        event("refused")

"""The ground the schema stands on: strict models and the errors that name a YAML path.

Strict is the base of every section and of every plugin's config, so what it refuses is refused
everywhere, for free: unknown keys; floats that are not finite (`.inf`, `.nan`: a rate, a share or a
learning rate that is not a number gives a NaN model or a clock that never moves); and, in a number
field, what is not written as a number (`true` is not the count 1, the text "3" is not 3). Ranges a
field's meaning allows are declared on the field (`Field(gt=0)`, `Fraction`, ...).
"""
from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError
from pydantic_core.core_schema import ErrorType

from emulator.errors import ScenarioError

__all__ = ["Count", "Fraction", "PositiveFloat", "ScenarioError", "ScenarioFieldError", "Strict"]

# Domains a field can name instead of spelling out its bounds (plugins get them from emulator.extend).
Fraction = Annotated[float, Field(ge=0, le=1)]      # a share or probability
PositiveFloat = Annotated[float, Field(gt=0)]       # a rate, a duration, a scale
Count = Annotated[int, Field(ge=0)]                 # a number of things: an integer, never true/false


def _admits(annotation: Any) -> set[type]:
    """The plain types a field annotation admits (Optional and unions unpacked, Annotated stripped)."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _admits(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return set().union(*(_admits(arg) for arg in typing.get_args(annotation)))
    if origin is typing.Literal:
        return {type(arg) for arg in typing.get_args(annotation)}
    return {origin or annotation} if isinstance(origin or annotation, type) else {object}


def _number_problem(value: Any, admitted: set[type]) -> str | None:
    """Why `value` is no value for a field admitting only numbers (or only booleans), or None."""
    kinds = admitted - {type(None)}
    if kinds and kinds <= {int, float}:
        what = "an integer" if kinds == {int} else "a number"
        if isinstance(value, bool):
            return f"{str(value).lower()} is a boolean, not {what}: write the number itself"
        if isinstance(value, str):
            try:
                float(value)
            except ValueError:
                return f"{value!r} is not {what}"
            return f"{value!r} is text (in quotes), not {what}: write it without quotes"
    if kinds == {bool} and not isinstance(value, (bool, type(None))):
        return f"{value!r} is not true or false"
    return None


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @model_validator(mode="wrap")
    @classmethod
    def _numbers_are_numbers(cls, raw: Any, handler) -> Any:
        problems = _number_problems(cls, raw)
        if not problems:
            return handler(raw)
        # each bad number is its own error, reported with every other problem of this section and below;
        # the section's own cross-field checks, which would see the coerced values, are left out
        lines = [InitErrorDetails(type="value_error", loc=(key,), input=raw[key], ctx={"error": ValueError(problem)})
                 for key, problem in problems.items()]
        try:
            handler(raw)
        except ValidationError as exc:
            lines += [_again(err) for err in exc.errors() if err["loc"] and err["loc"][0] not in problems]
        raise ValidationError.from_exception_data(cls.__name__, lines)


def _number_problems(model: type[BaseModel], raw: Any) -> dict[str, str]:
    """{key: why its value is no value for the field} for every number field of `model` given one."""
    if not isinstance(raw, dict):
        return {}
    problems = {}
    for name, field in model.model_fields.items():
        key = field.alias or name
        if key not in raw:
            continue
        value, annotation = raw[key], field.annotation
        problem = _number_problem(value, _admits(annotation))
        if problem is None and isinstance(value, list) and typing.get_origin(annotation) is list:
            items = _admits(typing.get_args(annotation)[0]) if typing.get_args(annotation) else {object}
            problem = next((p for p in (_number_problem(v, items) for v in value) if p), None)
        if problem:
            problems[key] = problem
    return problems


_KNOWN_ERRORS = frozenset(typing.get_args(ErrorType))


def _again(err: dict) -> InitErrorDetails:
    """A validation error as it was raised, to raise it again beside others."""
    kind = err["type"] if err["type"] in _KNOWN_ERRORS else PydanticCustomError(err["type"], "{message}",
                                                                                  {"message": err["msg"]})
    details = InitErrorDetails(type=kind, loc=err["loc"], input=err["input"])
    if err.get("ctx") and err["type"] in _KNOWN_ERRORS:
        details["ctx"] = err["ctx"]
    return details


class ScenarioFieldError(ValueError):
    """Raised inside validators to point at a field other than the one being validated."""

    def __init__(self, path: str, message: str, relative: bool | None = None):
        super().__init__(f"{path}: {message}")
        self.path, self.message = path, message
        # a path without a top-level section is relative to the model being validated (e.g. a Tie's `values`);
        # None: decided where the error is described, which knows the scenario's sections (describe.py)
        self.relative = relative

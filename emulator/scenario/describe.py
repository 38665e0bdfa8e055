"""Validation errors as one line per problem: the YAML path, what was given, what is allowed."""
from __future__ import annotations

import re
import typing
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel

from emulator.registry import Registry, did_you_mean
from emulator.scenario.base import ScenarioError, ScenarioFieldError
from emulator.scenario.root import Scenario


def _describe(err: dict, raw: Any = None) -> str:
    """One line per problem: the YAML path, what was given, and what is allowed."""
    loc, kind, ctx = list(err["loc"]), err["type"], err.get("ctx") or {}
    original = ctx.get("error")
    model, path = _walk(loc, raw)
    if isinstance(original, ScenarioFieldError):
        relative = original.relative if original.relative is not None else \
            original.path.split(".")[0] not in Scenario.model_fields
        if relative and path:
            return f"{'.'.join(str(p) for p in path)}.{original.path}: {original.message}"
        return f"{original.path}: {original.message}"
    if isinstance(original, ScenarioError):  # raised by a part's own check (a dataset's facts): names its field
        return str(original)
    where = ".".join(str(p) for p in path) or "(top level)"
    given = err.get("input", _MISSING)
    if kind == "plugged_unknown":
        return f"{where}.{err['msg']}"
    if kind == "plugged_tag_missing":
        return f"{where}: {err['msg']}"
    if kind == "extra_forbidden":
        allowed = ", ".join(model.model_fields) if model else "?"
        return f"{where}: unknown key; allowed here: {allowed}" + did_you_mean(path[-1] if path else None,
                                                                              model.model_fields if model else ())
    if kind == "missing":
        return f"{where}: required field is missing"
    if kind == "union_tag_invalid":
        return (f"{where}.{ctx['discriminator'].strip(chr(39))}: {ctx['tag']!r} is not known; choose one of "
                f"{ctx['expected_tags']}" + did_you_mean(ctx["tag"], _quoted(ctx["expected_tags"])))
    if kind == "union_tag_not_found":
        field = model.model_fields.get(path[-1]) if model is not None else None
        kinds = ", ".join(repr(_tag(m)) for m in _union_models(field.annotation)) if field else "?"
        return f"{where}: needs a {ctx['discriminator']} key; one of {kinds}"
    if kind == "literal_error":
        return (f"{where}: {given!r} is not allowed; choose one of {ctx.get('expected')}"
                + did_you_mean(given, _quoted(str(ctx.get("expected", "")))))
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if kind in ("value_error", "assertion_error"):
        return f"{where}: {msg}"
    return f"{where}: {msg} (got {given!r})" if given is not _MISSING else f"{where}: {msg}"


_MISSING = object()


def _quoted(choices: str) -> list[str]:
    """The choices pydantic lists as text ("'simulated' or 'ideal'")."""
    return re.findall(r"'([^']*)'", choices)


def _walk(loc: list, raw: Any = None) -> tuple[type[BaseModel] | None, list]:
    """Follow a pydantic error location through the schema, dropping discriminator tags; return the model
    that holds the last key (for listing the allowed keys) and the cleaned YAML path. A registered part's
    config class is found from its tag in the raw scenario."""
    path: list = []
    parent: Any = None
    annotation: Any = Scenario
    value = raw
    i = 0
    while i < len(loc):
        part = loc[i]
        path.append(part)
        i += 1
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            value = None
        if isinstance(part, int):  # a list index: step into the item type
            items = typing.get_args(_strip_annotated(annotation))
            annotation = items[0] if items else None
        else:
            model = annotation if _is_model(annotation) else None
            parent = model
            field = model.model_fields.get(part) if model is not None else None
            annotation = field.annotation if field is not None else None
            registry = next((m for m in field.metadata if isinstance(m, Registry)), None) if field else None
            if registry is not None:  # pydantic keeps a field's Annotated metadata apart
                annotation = Annotated[annotation, registry]
        if typing.get_origin(_strip_annotated(annotation)) is list:
            continue
        registry = _registry_of(annotation)
        if registry is not None:
            annotation = registry.config_of(value if not isinstance(value, str) else {registry.tag: value}) \
                or registry.base
            continue
        members = _union_models(annotation)
        tags = {_tag(m): m for m in members}
        if members and i < len(loc) and loc[i] in tags:
            annotation = tags[loc[i]]
            i += 1
        elif len(members) == 1:
            annotation = members[0]
    return parent, path


def _registry_of(annotation: Any) -> Registry | None:
    """The registry of a `Plugged` field (possibly inside Optional)."""
    if typing.get_origin(annotation) is Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _registry_of(args[0]) if len(args) == 1 else None
    if typing.get_origin(annotation) is Annotated:
        return next((m for m in annotation.__metadata__ if isinstance(m, Registry)), None)
    return None


def _strip_annotated(annotation: Any) -> Any:
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) is Union:  # Optional[list[...]]
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _strip_annotated(args[0])
    return annotation


def _is_model(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseModel)


def _union_models(annotation: Any) -> list:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Annotated:
        return _union_models(args[0])
    if typing.get_origin(annotation) in (Union, getattr(__import__("types"), "UnionType", Union)):
        out = []
        for arg in args:
            out.extend(_union_models(arg))
        return out
    return [annotation] if _is_model(annotation) else []


def _tag(model: type[BaseModel]) -> str | None:
    for key in ("scheme", "name", "kind", "model"):
        field = model.model_fields.get(key)
        if field is not None and typing.get_origin(field.annotation) is Literal:
            return typing.get_args(field.annotation)[0]
    return None

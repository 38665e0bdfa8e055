"""What is registered, for `emulator parts`: every registry's parts, each with where it comes from (our own,
or the plugin module that registered it) and a one-line description.

A part's description is its `description` fact when it registered one, else the first sentence of its
config class's docstring, else of its builder's."""
from __future__ import annotations

import inspect
import re
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import BaseModel

from emulator import registry
from emulator.errors import is_plugin
from emulator.parts.loading import load_parts
from emulator.registry import Entry, Registry
from emulator.scenario import Scenario, read_yaml

BUILT_IN = "built-in"
WIDTH = 100  # a description longer than this is cut, with "..."


@dataclass(frozen=True)
class Part:
    name: str
    origin: str  # BUILT_IN, or the plugin module that registered it
    description: str


def registries() -> list[Registry]:
    """Every kind of part there is, in the order emulator/registry.py declares them."""
    return [value for value in vars(registry).values() if isinstance(value, Registry)]


def plural(kind: str) -> str:
    return kind[:-1] + "ies" if kind.endswith("y") else kind + "s"


def describe(entry: Entry) -> str:
    """One line about a part: its `description` fact, else the first sentence of its config's or builder's
    docstring (a docstring of its own, not one inherited from a base class), else nothing."""
    text = entry.fact("description")
    for source in (entry.config, entry.build):
        if text:
            break
        if source is None or getattr(source, "__name__", "") == "<lambda>":
            continue
        own = source.__dict__.get("__doc__") if isinstance(source, type) else getattr(source, "__doc__", None)
        text = inspect.cleandoc(own).split("\n\n")[0].replace("\n", " ") if own else None
    if not text:
        return ""
    sentence = re.split(r"(?<=\.)\s+(?=[A-Z])", text.strip())[0]
    return sentence if len(sentence) <= WIDTH else sentence[:WIDTH - 3].rstrip() + "..."


def parts(kind: Registry) -> list[Part]:
    return [Part(name, kind.get(name).origin if is_plugin(kind.get(name).origin) else BUILT_IN,
                 describe(kind.get(name))) for name in kind.names()]


def plugins_of(scenario: str | Path) -> list[str]:
    """The plugin modules a scenario file names (read, not validated: the file may be the one being fixed)."""
    plugins = read_yaml(scenario).get("plugins") or []
    return [plugins] if isinstance(plugins, str) else list(plugins)


def places() -> dict[Registry, list[str]]:
    """Where a scenario names each kind's parts (`algorithm.name`, `population.availability[].kind`), found
    in the schema: its `Plugged` fields, and a plain field named after a kind's tag (`data.dataset`)."""
    found: dict[Registry, list[str]] = {}
    _fields(Scenario, "", found, set())
    return {kind: list(dict.fromkeys(paths)) for kind, paths in found.items()}


def _fields(model: type[BaseModel], prefix: str, found: dict, seen: set) -> None:
    if model in seen:
        return
    seen.add(model)
    for name, field in model.model_fields.items():
        _visit(field.annotation, list(field.metadata), prefix + name, found, seen)
        for kind in registries():
            if name == kind.tag and kind.tag not in ("name", "kind", "scheme") and field.annotation is str:
                found.setdefault(kind, []).append(prefix + name)


def _visit(annotation: Any, metadata: list, path: str, found: dict, seen: set) -> None:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Annotated:
        return _visit(args[0], [*metadata, *annotation.__metadata__], path, found, seen)
    kind = next((m for m in metadata if isinstance(m, Registry)), None)
    if kind is not None:
        found.setdefault(kind, []).append(f"{path}.{kind.tag}")
        if kind.base is not None:
            _fields(kind.base, path + ".", found, seen)
    elif origin in (Union, types.UnionType):
        for arg in args:
            _visit(arg, metadata, path, found, seen)
    elif origin is list and args:
        _visit(args[0], [], path + "[]", found, seen)
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        _fields(annotation, path + ".", found, seen)


def listing(plugins: list[str] = (), scenario: str | Path | None = None) -> str:
    """The registered parts, after loading ours, the installed entry points, the plugins a scenario names
    (looked for beside it) and these plugin modules (looked for in the working directory, then on sys.path)."""
    search = [Path.cwd()]
    named = list(plugins)
    if scenario is not None:
        named = [*plugins_of(scenario), *named]
        search.insert(0, Path(scenario).resolve().parent)
    load_parts(list(dict.fromkeys(named)), search)
    blocks, where = [], places()
    for kind in registries():
        found = parts(kind)
        header = f"{plural(kind.kind)} ({', '.join(where.get(kind, [kind.tag]))})"
        if not found:
            blocks.append(f"{header}\n  (none registered)")
            continue
        name_width = max(len(p.name) for p in found)
        origin_width = max(len(p.origin) for p in found)
        blocks.append("\n".join([header, *(f"  {p.name:<{name_width}}  {p.origin:<{origin_width}}  {p.description}"
                                           .rstrip() for p in found)]))
    return "\n\n".join(blocks) + "\n"

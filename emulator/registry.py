"""Registries: every extensible kind of part (algorithms, models, datasets, partitioners, selection policies,
availability models, server optimizers) is looked up by name in one of these.

The built-ins register through the same `register` a user's plugin calls, so nothing of ours takes a
special path. A registry never loads anything itself: the entry points fill it (emulator/parts/). An entry
is a name, a factory, an optional pydantic config class (validated with the same YAML-path errors as the
rest of a scenario) and a few facts the schema asks about (e.g. whether an algorithm needs server data). Names are unique: registering a taken name is an error naming both
modules, so two plugins never silently shadow each other.

A scenario field that holds a registered part is declared `Plugged(REGISTRY, Base)`: a pydantic type
whose validator looks the tag (`name`, `kind` or `scheme`) up at validation time, so parts registered by
plugins validate like ours, with extra keys forbidden.
"""
from __future__ import annotations

import difflib
import sys
from dataclasses import dataclass, field
from typing import Annotated, Any, Callable, Mapping

from pydantic import BaseModel, SerializeAsAny, ValidationInfo, WrapValidator
from pydantic_core import PydanticCustomError


class RegistryError(ValueError):
    """A plugin registered something the emulator cannot accept (a taken name, a bad config class)."""


@dataclass(frozen=True)
class Entry:
    name: str
    build: Callable
    config: type[BaseModel] | None
    origin: str  # the module that registered it: named in errors
    facts: Mapping[str, Any] = field(default_factory=dict)

    def fact(self, key: str, default: Any = None) -> Any:
        return self.facts.get(key, default)


class Registry:
    """Names -> entries for one kind of part; `tag` is the YAML key that names an entry (name/kind/scheme)."""

    def __init__(self, kind: str, tag: str, base: type[BaseModel] | None = None):
        self.kind, self.tag, self.base = kind, tag, base
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, build: Callable | None = None, *, config: type[BaseModel] | None = None,
                 **facts) -> Callable:
        """Add `build` under `name` (usable as a decorator). `config`, when given, is the pydantic model
        the scenario's section is validated with; it must subclass this kind's base class."""
        if build is None:
            return lambda fn: self.register(name, fn, config=config, **facts) or fn
        if not isinstance(name, str) or not name or not name.replace("_", "").replace("-", "").isalnum():
            raise RegistryError(f"{_caller()}: {self.kind} name {name!r} must be a non-empty word "
                                "(letters, digits, _ or -)")
        if config is not None:
            self._check_config(name, config)
        origin = _caller()  # the module that registers: named in errors, and a plugin unless it is ours
        taken = self._entries.get(name)
        if taken is not None and (taken.build is not build or taken.config is not config):
            if _identity(taken.build, taken.origin) != _identity(build, origin):  # not the same code imported again
                raise RegistryError(
                    f"{origin}: {self.kind} {name!r} is already registered by {taken.origin}; choose another "
                    "name (or leave out one of the two plugins)")
        self._entries[name] = Entry(name, build, config, origin, dict(facts))
        return build

    def _check_config(self, name: str, config) -> None:
        if not (isinstance(config, type) and issubclass(config, BaseModel)):
            raise RegistryError(f"{self.kind} {name!r}: config must be a pydantic model class, got {config!r}")
        if self.base is not None and not issubclass(config, self.base):
            raise RegistryError(f"{config.__module__}.{config.__qualname__}: the config of {self.kind} {name!r} "
                                f"must subclass {self.base.__module__}.{self.base.__qualname__}")
        if config.model_config.get("extra") != "forbid":
            raise RegistryError(f"{config.__module__}.{config.__qualname__}: the config of {self.kind} {name!r} "
                                "must forbid unknown keys (subclass emulator's Strict, or set "
                                "model_config = ConfigDict(extra='forbid')), so a typo is an error")
        tag = config.model_fields.get(self.tag)
        if tag is None and self.tag != "dataset":  # a dataset's options sit beside its name, not under it
            raise RegistryError(f"{config.__module__}.{config.__qualname__}: the config of {self.kind} {name!r} "
                                f"needs a {self.tag!r} field")

    def get(self, name: str) -> Entry:
        try:
            return self._entries[name]
        except KeyError:
            raise RegistryError(self.unknown(name)) from None

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def names(self) -> list[str]:
        return sorted(self._entries)

    def unknown(self, name: Any) -> str:
        if not self._entries:  # nothing loaded the parts: a caller below the entry points
            return (f"{name!r}: no {self.kind} is registered yet; load the parts first with "
                    "emulator.parts.load_parts() (the CLI, emulator.run and emulator.load do)")
        return (f"{name!r} is not a registered {self.kind}; choose one of {', '.join(self.names())} (a plugin "
                "registers more: name its module under `plugins:` in the scenario or with --plugin)"
                + did_you_mean(name, self.names()))

    def validate(self, value: Any, handler, info: ValidationInfo):
        """Validate a scenario section with the config class its tag names (pydantic wrap validator)."""
        if self.base is not None and isinstance(value, self.base):
            value = value.model_dump()
        if isinstance(value, str):  # `model: mlp` is short for `model: {name: mlp}`
            value = {self.tag: value}
        if not isinstance(value, dict):
            return handler(value)
        name = value.get(self.tag)
        if name is None:
            raise PydanticCustomError("plugged_tag_missing", "needs a {tag} key; one of {names}",
                                      {"tag": self.tag, "names": ", ".join(map(repr, self.names()))})
        if not isinstance(name, str) or name not in self.names():
            raise PydanticCustomError("plugged_unknown", "{tag}: {message}",
                                      {"tag": self.tag, "message": self.unknown(name)})
        config = self._entries[name].config or self.base
        return config.model_validate(value)

    def config_of(self, value: Any) -> type[BaseModel] | None:
        """The config class a raw section would validate with (for error paths), or None."""
        if isinstance(value, dict) and isinstance(value.get(self.tag), str) and value[self.tag] in self._entries:
            return self._entries[value[self.tag]].config or self.base
        return None


def did_you_mean(given: Any, choices) -> str:
    """`; did you mean 'fedavg'?` when `given` is a near miss of some of `choices` (the closest first), else ''."""
    if not isinstance(given, str):
        return ""
    close = difflib.get_close_matches(given, [str(c) for c in choices], n=3)
    if not close:
        return ""
    quoted = [repr(c) for c in close]
    return f"; did you mean {' or '.join([', '.join(quoted[:-1]), quoted[-1]] if len(quoted) > 1 else quoted)}?"


def Plugged(registry: Registry, base: type[BaseModel]):
    """A scenario field holding a part from `registry`, validated by the config class its tag names."""
    registry.base = base
    return Annotated[SerializeAsAny[base], WrapValidator(registry.validate), registry]


def _identity(build: Callable, origin: str) -> tuple:
    """Where a builder was defined: the same module imported twice (a reload, a second name) registers the
    same code again, which is allowed; anything else under a taken name is a clash."""
    code = getattr(build, "__code__", None)
    return origin, getattr(build, "__qualname__", repr(build)), getattr(code, "co_firstlineno", None)


def _caller() -> str:
    """The first module outside this one on the call stack."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    return frame.f_globals.get("__name__", "?") if frame is not None else "?"


# ----------------------------------------------------------------------------------------- the kinds
ALGORITHMS = Registry("algorithm", "name")
MODELS = Registry("model", "name")
DATASETS = Registry("dataset", "dataset")
PARTITIONS = Registry("partition scheme", "scheme")
SELECTIONS = Registry("selection policy", "kind")
AVAILABILITY = Registry("availability model", "kind")
SERVER_OPTIMIZERS = Registry("server optimizer", "kind")
AGGREGATORS = Registry("aggregator", "kind")
ATTACKS = Registry("attack", "kind")
OBSERVERS = Registry("observer", "kind")  # columns of a scenario's own (emulator/server/observers/)

register_algorithm = ALGORITHMS.register
register_model = MODELS.register
register_dataset = DATASETS.register
register_partition = PARTITIONS.register
register_selection = SELECTIONS.register
register_availability = AVAILABILITY.register
register_server_optimizer = SERVER_OPTIMIZERS.register
register_aggregator = AGGREGATORS.register
register_attack = ATTACKS.register
register_observer = OBSERVERS.register

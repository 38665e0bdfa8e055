"""Reading a scenario: YAML, `--set` overrides, validation into a Scenario with one line per problem, and
writing it back."""
from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from emulator.registry import did_you_mean
from emulator.scenario.base import ScenarioError
from emulator.scenario.describe import _describe, _strip_annotated, _walk
from emulator.scenario.root import Scenario
from emulator.scenario.yaml_text import load_yaml_text, read_yaml_file

# ------------------------------------------------------------------------------------ loading, errors
APPEND = "+"  # a path element of parse_override: append an item to the list (spelled `[+]`)
_PATH_TOKEN = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\.(-?[0-9]+)|\[\s*(-?[0-9]+|\+)\s*\]")
_PATH_EXAMPLES = "e.g. algorithm.client_lr, population.availability[0].mean_on_s or population.availability[+]"


def parse_override(text: str) -> tuple[list[str | int], Any]:
    """`a.b=value` -> (['a', 'b'], value parsed as YAML, so 50 is an int, true a bool and [1, 2] a list).

    A path element is a key (str), a list index (int; negative counts from the end), spelled `a[0]` or `a.0`,
    or APPEND, spelled `a[+]`, which adds the value as a new last item of the list."""
    if "=" not in text:
        raise ScenarioError(f"--set {text!r}: expected KEY=VALUE, e.g. --set rounds=50 or --set algorithm.client_lr=0.1")
    key, _, raw = text.partition("=")
    key = key.strip()
    first = re.match(r"[A-Za-z_][A-Za-z0-9_]*", key)
    if first is None:
        raise ScenarioError(f"--set {text!r}: {key!r} is not a field path: it must start with a field name, "
                            f"{_PATH_EXAMPLES}")
    path: list[str | int] = [first.group()]
    at = first.end()
    while at < len(key):
        token = _PATH_TOKEN.match(key, at)
        if token is None:
            raise ScenarioError(f"--set {text!r}: {key!r} is not a field path: after {key[:at]!r} expected "
                                f".FIELD, [INDEX] or [+] (to append), not {key[at:]!r}; {_PATH_EXAMPLES}")
        name, dotted, bracket = token.groups()
        index = dotted if dotted is not None else bracket
        path.append(name if name is not None else APPEND if index == "+" else int(index))
        at = token.end()
    value = load_yaml_text(raw, f"--set {text!r}: the value") if raw.strip() else None
    return path, value


def _format_path(path: list[str | int]) -> str:
    """The YAML path as written on the command line: population.availability[0].mean_on_s."""
    out = ""
    for part in path:
        if part == APPEND:
            out += "[+]"
        elif isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Set each `a.b=value` in a copy of the raw YAML mapping, creating missing sections; list items are
    reached by index (`a[0].b=value`, `a[-1]`) and added with `a[+]=value` (see parse_override).

    Indexing or appending to a list the file does not set is an error that shows the default and asks for
    the whole list (see _absent_list)."""
    import copy

    data = copy.deepcopy(raw)
    for text in overrides:
        path, value = parse_override(text)
        node: Any = data
        for i, part in enumerate(path):
            here, last = _format_path(path[:i]), i == len(path) - 1
            if isinstance(part, str) and part != APPEND:
                if isinstance(node, list):
                    raise ScenarioError(f"--set {text!r}: {here} is a list of {_items(node)}, not a section; pick "
                                        f"an item, e.g. {here}[0].{part}, or append one with {here}[+]=VALUE")
                if last:
                    node[part] = value
                    break
                child = node.get(part)
                if isinstance(path[i + 1], int) or path[i + 1] == APPEND:
                    if child is None:
                        raise _absent_list(text, path[:i + 1], path[i + 1])
                elif child is None or isinstance(child, str) and part == "model":
                    child = {} if child is None else {"name": child}
                    node[part] = child
                if not isinstance(child, (dict, list)):
                    raise _not_a_container(text, path[:i + 1], child)
                node = child
                continue
            if not isinstance(node, list):  # a section: values are stopped above
                raise ScenarioError(f"--set {text!r}: {here} is a section, not a list, so it has no item "
                                    f"{_format_path([part])}; use {here}.FIELD")
            if part == APPEND:
                if last:
                    node.append(value)
                    break
                node.append({} if isinstance(path[i + 1], str) else [])
                node = node[-1]
                continue
            if not -len(node) <= part < len(node):
                n = len(node)
                valid = ("no index is valid" if n == 0 else "valid indices are 0 and -1" if n == 1 else
                         f"valid indices are 0 to {n - 1}, or -{n} to -1 counting from the end")
                raise ScenarioError(f"--set {text!r}: {_format_path(path[:i + 1])}: index out of range; {here} "
                                    f"has {_items(node)}, so {valid}; add an item with {here}[+]=VALUE")
            if last:
                node[part] = value
                break
            if not isinstance(node[part], (dict, list)):
                raise _not_a_container(text, path[:i + 1], node[part])
            node = node[part]
    return data


def _items(items: list) -> str:
    return f"{len(items)} item{'' if len(items) == 1 else 's'}"


def _not_a_container(text: str, path: list[str | int], value: Any) -> ScenarioError:
    where = _format_path(path)
    return ScenarioError(f"--set {text!r}: {where} is a value ({value!r}), not a section or a list; set it "
                         f"whole with --set {where}=VALUE")


def _absent_list(text: str, path: list[str | int], item: int | str) -> ScenarioError:
    """An index or [+] under a field the file does not set. Filling in the schema's default list there would
    change it unseen (appending to [{kind: always}] keeps an item the user never wrote), so ask for the list."""
    where = _format_path(path)
    model = _walk(list(path))[0] if all(isinstance(p, str) for p in path) else None
    field = model.model_fields.get(path[-1]) if model is not None else None
    if model is not None and field is None:
        return ScenarioError(f"--set {text!r}: {where}: unknown key; allowed here: {', '.join(model.model_fields)}"
                             + did_you_mean(path[-1], model.model_fields))
    if field is not None and typing.get_origin(_strip_annotated(field.annotation)) is not list:
        return ScenarioError(f"--set {text!r}: {where} is not a list, so it has no item {_format_path([item])}; "
                             f"use {where}.FIELD or {where}=VALUE")
    default = ""
    if field is not None and not field.is_required():
        items = [d.model_dump(mode="json", exclude_none=True) if isinstance(d, BaseModel) else d
                 for d in field.get_default(call_default_factory=True) or []]
        default = f" (its default is {yaml.safe_dump(items, default_flow_style=True, width=10 ** 6).strip()})"
    return ScenarioError(f"--set {text!r}: {where} is not set in the scenario file, so it has no items to change "
                         f"or append to; set the whole list instead: --set '{where}=[...]'{default}")


def read_yaml(path: str | Path) -> dict:
    data = read_yaml_file(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: a scenario is a mapping of keys (name, rounds, data, ...), "
                            f"not a {type(data).__name__}")
    return data


def with_plugins(raw: dict, plugins) -> dict:
    """The raw scenario with these plugin modules added to its own (as --plugin adds them), in order, once."""
    if not plugins:
        return raw
    added = [plugins] if isinstance(plugins, str) else list(plugins)
    return {**raw, "plugins": list(dict.fromkeys([*(raw.get("plugins") or []), *added]))}


def parse_scenario(raw: dict, source: str = "scenario") -> Scenario:
    """A Scenario from plain data, against the parts registered so far (the entry points load the built-ins
    and the plugins first: emulator/parts/loading.py); every problem is one line naming its YAML path."""
    try:
        return Scenario.model_validate(raw)
    except ValidationError as exc:
        lines = [_describe(err, raw) for err in exc.errors()]
        raise ScenarioError(f"{source}: {len(lines)} problem{'s' if len(lines) > 1 else ''}:\n  "
                            + "\n  ".join(dict.fromkeys(lines))) from None


def dump_scenario(scenario: Scenario) -> str:
    return yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False)



"""YAML a user hands us (a scenario file, a `--set` value), read within bounds.

A scenario is a few kilobytes of text. Whatever else arrives where one is expected (a binary file, a
directory, a YAML document whose aliases expand to billions of values or that nests without end) is
refused with one line naming the file and what is wrong, before it can exhaust memory or the interpreter's
stack; nothing of it reaches Python's default error handler.

YAML that means something other than what it shows is refused or made plain too: a key written twice in
one mapping (YAML keeps the last silently, so a whole section could fall back to defaults) is an error
naming both lines, and a node used twice through an anchor and aliases becomes independent copies, so a
`--set` path names one value and changes only it.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from emulator.scenario.base import ScenarioError

MAX_FILE_BYTES = 4 * 2 ** 20  # the largest shipped scenario is under 4 KB; traces and data have files of their own
MAX_VALUES = 100_000  # values in a document, each alias counted every time it is used
MAX_DEPTH = 64  # mappings and lists nested in one another


def read_yaml_file(path: str | Path) -> Any:
    """The YAML document in `path`, which must be a readable UTF-8 text file of bounded size."""
    path = Path(path)
    if not path.exists():
        raise ScenarioError(f"{path}: no such scenario file")
    if path.is_dir():
        raise ScenarioError(f"{path}: is a directory, not a scenario file (a .yaml file, e.g. scenarios/quickstart.yaml)")
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ScenarioError(f"{path}: {size / 2 ** 20:.1f} MiB is not a scenario file (a scenario is a few KB "
                                f"of YAML; at most {MAX_FILE_BYTES // 2 ** 20} MiB are read)")
        raw = path.read_bytes()
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScenarioError(f"{path}: not a text file: byte 0x{raw[exc.start]:02x} at offset {exc.start} is not "
                            "UTF-8; a scenario is YAML text (see scenarios/quickstart.yaml)") from None
    if "\x00" in text:
        raise ScenarioError(f"{path}: not a text file (it holds NUL bytes at offset {text.index(chr(0))}); "
                            "a scenario is YAML text (see scenarios/quickstart.yaml)")
    return load_yaml_text(text, str(path))


class _DuplicateKey(Exception):
    def __init__(self, key: Any, first: int, second: int):
        self.key, self.first, self.second = key, first, second


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a key that a mapping holds twice (merge keys `<<` may still be
    overridden: that is what they are for)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            lines: dict[Any, int] = {}
            for key_node, _ in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node)
                line = key_node.start_mark.line + 1
                try:
                    if key in lines:
                        raise _DuplicateKey(key, lines[key], line)
                except TypeError:  # an unhashable key: PyYAML's own error follows
                    continue
                lines[key] = line
        return super().construct_mapping(node, deep=deep)


# YAML 1.1 (PyYAML) reads `1e-3` as text: a float needs a dot there (`1.0e-3`). Everyone writes learning
# rates as 1e-3, and a number field refuses text, so exponents without a dot are floats too (as in YAML 1.2).
_StrictLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def load_yaml_text(text: str, where: str) -> Any:
    """`text` parsed as YAML; `where` names it in errors (a file, or `--set KEY=VALUE: the value`)."""
    try:
        data = yaml.load(text, Loader=_StrictLoader)  # noqa: S506 (a SafeLoader)
    except _DuplicateKey as dup:
        raise ScenarioError(f"{where}: the key {dup.key!r} is written twice in one mapping (lines {dup.first} and "
                            f"{dup.second}); YAML would keep only the second silently: keep one") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError(f"{where}: not valid YAML{at}: {problem}") from None
    except RecursionError:
        raise ScenarioError(f"{where}: nests mappings or lists too deeply to read (a scenario nests at most "
                            f"{MAX_DEPTH} levels)") from None
    check_size(data, where)
    return unshared(data)


def unshared(data: Any) -> Any:
    """`data` with every mapping and list its own object: a YAML alias (`*name`) shares its anchor's node,
    so changing one use would change all of them. Bounded by check_size's count."""
    if isinstance(data, dict):
        return {key: unshared(value) for key, value in data.items()}
    if isinstance(data, list):
        return [unshared(value) for value in data]
    return data


def check_size(data: Any, where: str) -> None:
    """Refuse a document nested more than MAX_DEPTH deep (a self-referring alias nests without end) or holding
    more than MAX_VALUES values once its aliases are expanded; counted without expanding them."""
    counted: dict[int, int] = {}

    def values(node: Any, depth: int) -> int:
        if not isinstance(node, (dict, list)):
            return 1
        if depth > MAX_DEPTH:
            raise ScenarioError(f"{where}: nests mappings or lists more than {MAX_DEPTH} levels deep (or a YAML "
                                "alias refers to itself); a scenario nests a few levels")
        if id(node) not in counted:
            items = [*node.keys(), *node.values()] if isinstance(node, dict) else node
            total = 1
            for item in items:
                total += values(item, depth + 1)
                if total > MAX_VALUES:
                    raise ScenarioError(f"{where}: expands to more than {MAX_VALUES:,} values (YAML aliases used "
                                        "within aliases?); a scenario holds a few hundred")
            counted[id(node)] = total
        return counted[id(node)]

    values(data, 0)

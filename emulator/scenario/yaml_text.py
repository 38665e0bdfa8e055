"""YAML a user hands us (a scenario file, a `--set` value), read within bounds.

A scenario is a few kilobytes of text. Whatever else arrives where one is expected (a binary file, a
directory, a YAML document whose aliases expand to billions of values or that nests without end) is
refused with one line naming the file and what is wrong, before it can exhaust memory or the interpreter's
stack; nothing of it reaches Python's default error handler.
"""
from __future__ import annotations

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


def load_yaml_text(text: str, where: str) -> Any:
    """`text` parsed as YAML; `where` names it in errors (a file, or `--set KEY=VALUE: the value`)."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError(f"{where}: not valid YAML{at}: {problem}") from None
    except RecursionError:
        raise ScenarioError(f"{where}: nests mappings or lists too deeply to read (a scenario nests at most "
                            f"{MAX_DEPTH} levels)") from None
    check_size(data, where)
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

"""The structure the code keeps: small files, and a schema that describes without loading anything.

The layers themselves are checked by `lint-imports` (pyproject.toml's [tool.importlinter]), which
`make test` runs before pytest."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 450
MAX_CLASS_LINES = 250


def test_no_source_file_is_over_450_lines():
    long = {str(p.relative_to(ROOT)): n for p in (ROOT / "emulator").rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split these by concern (docs/architecture.md): {long}"


def test_no_class_is_over_250_lines():
    import ast

    fat = {}
    for path in (ROOT / "emulator").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                fat[f"{path.relative_to(ROOT)}:{node.name}"] = node.end_lineno - node.lineno + 1
    assert not fat, f"a class doing more than one job: split it (docs/architecture.md): {fat}"


def test_importing_the_schema_loads_no_part_of_the_emulator_above_it():
    """A fresh interpreter: validating needs only the frame, not the algorithms, the world or torch."""
    code = ("import sys, emulator.scenario; "
            "print(' '.join(sorted(m for m in sys.modules if m.startswith(('emulator', 'torch', 'ray')))))")
    loaded = set(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                cwd=ROOT).stdout.split())
    assert loaded <= {"emulator", "emulator.errors", "emulator.registry", "emulator.scenario"} | {
        m for m in loaded if m.startswith("emulator.scenario.")}, sorted(loaded)

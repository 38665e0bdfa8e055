"""The errors every layer may raise for bad input: on the ground floor, so that raising one never imports
the schema or anything above it. The CLI prints them as one line and exits with code 2."""
from __future__ import annotations


class ScenarioError(ValueError):
    """Bad input: every line names a field (its YAML path) and what would fix it."""

"""The ground the schema stands on: strict models (unknown keys refused) and the errors that name a
YAML path."""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from emulator.errors import ScenarioError

__all__ = ["ScenarioError", "ScenarioFieldError", "Strict"]


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)



class ScenarioFieldError(ValueError):
    """Raised inside validators to point at a field other than the one being validated."""

    def __init__(self, path: str, message: str, relative: bool | None = None):
        super().__init__(f"{path}: {message}")
        self.path, self.message = path, message
        # a path without a top-level section is relative to the model being validated (e.g. a Tie's `values`);
        # None: decided where the error is described, which knows the scenario's sections (describe.py)
        self.relative = relative



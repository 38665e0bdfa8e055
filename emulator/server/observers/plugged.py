"""A plugin's observer as the server runs it: each hook guarded (a failure names the plugin's file and
line), and what `after_round` returns checked against the columns it declared."""
from __future__ import annotations

from emulator.errors import PluginError, guard
from emulator.server.observers.base import Observer


class GuardedObserver(Observer):
    def __init__(self, inner: Observer, origin: str, part: str):
        self.inner, self.origin, self.part = inner, origin, part
        self.world = inner.world
        with guard(origin, part, "columns"):
            columns = tuple(inner.columns)
        if not all(isinstance(c, str) and c for c in columns):
            raise PluginError(f"plugin {origin}: {part}'s columns must be non-empty strings, got {columns!r}")
        self.columns = columns

    def after_round(self, record, played) -> dict:
        with guard(self.origin, self.part, "after_round", code=self.inner.after_round):
            values = self.inner.after_round(record, played)
        if not isinstance(values, dict):
            raise PluginError(f"plugin {self.origin}: {self.part}'s after_round returned {type(values).__name__}; "
                              "return a dict of its columns' values")
        undeclared = sorted(set(values) - set(self.columns))
        if undeclared:
            raise PluginError(f"plugin {self.origin}: {self.part}'s after_round returned {', '.join(undeclared)}, "
                              f"which its columns {self.columns!r} do not declare; add them to `columns`")
        return values

    def state(self) -> dict:
        with guard(self.origin, self.part, "state"):
            return self.inner.state()

    def load_state(self, state: dict) -> None:
        with guard(self.origin, self.part, "load_state"):
            self.inner.load_state(state)

"""An availability entry built into its model: ours as is, a plugin's guarded, so the clock gets answers it
can use or the user one line naming their own code. The population's mix (availability_mix.py) builds its
entries here, and so does an eligible entry its own clauses (`also`, eligibility.py)."""
from __future__ import annotations

import numpy as np

from emulator.errors import PluginError, build_part, guard
from emulator.registry import AVAILABILITY
from emulator.system.availability import AvailabilityModel


def build_availability(entry, members, stream, key, world=None) -> AvailabilityModel:
    """The model the entry's kind names (emulator.registry.AVAILABILITY: ours or a plugin's; a plugin's is
    guarded)."""
    return build_part(AVAILABILITY.get(entry.kind), f"availability model {entry.kind!r}", AvailabilityModel,
                      GuardedAvailability, entry, members, stream, key, world)


class GuardedAvailability(AvailabilityModel):
    """A plugin's availability model as the clock sees it: every call guarded (an exception names the plugin,
    the method and the plugin's own file and line: exit 2, never a Ray traceback) and every answer checked
    against what the clock needs (one value per device asked about; times not in the past)."""

    def __init__(self, model: AvailabilityModel, origin: str, part: str):
        super().__init__(model.members)
        self.kind = model.kind
        self._model, self._origin, self._part = model, origin, part

    def _call(self, method: str, *args):
        function = getattr(self._model, method)
        with guard(self._origin, self._part, method, code=function):
            return function(*args)

    def _bad(self, method: str, what: str, fix: str):
        raise PluginError(f"plugin {self._origin}: {self._part}'s {method} returned {what}; {fix}")

    def _answer(self, method: str, local, t: float, dtype) -> np.ndarray:
        raw = self._call(method, t) if method == "online_all" else self._call(method, local, t)
        try:
            answer = np.asarray(raw, dtype=dtype)
        except (TypeError, ValueError):
            self._bad(method, type(raw).__name__, f"return a numpy array of {dtype.__name__}, one per device asked")
        if answer.shape != (len(local),):
            self._bad(method, f"an array of shape {answer.shape} for {len(local)} devices",
                      "return one value per device asked about, in the order given")
        if dtype is np.float64:
            if np.isnan(answer).any():
                self._bad(method, "NaN times", "return a time in seconds, or inf for never")
            if (answer < t - 1e-9).any():
                self._bad(method, f"a time before t = {t:g}", "return a time at or after t (t itself for now)")
        return answer

    def online(self, local, t):
        return self._answer("online", local, t, bool)

    def online_all(self, t):
        own = type(self._model).online_all is not AvailabilityModel.online_all  # else: online() for all, named so
        return self._answer("online_all" if own else "online", np.arange(len(self.members)), t, bool)

    def next_offline(self, local, t):
        return self._answer("next_offline", local, t, np.float64)

    def next_online(self, local, t):
        return self._answer("next_online", local, t, np.float64)

    def state(self) -> dict:
        return self._call("state")

    def load_state(self, state: dict) -> None:
        self._call("load_state", state)

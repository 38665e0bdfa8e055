"""An availability plugin: phones that check in while they charge at night, each from its own hour."""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field

from emulator.extend import AvailabilityModel, AvailabilitySettings, register_availability

DAY = 86400.0  # the simulated clock is in seconds; t = 0 is midnight UTC of the first day


class NightlySettings(AvailabilitySettings):
    """Online every day for `hours` from a start hour drawn per device in start_h +- spread_h (UTC)."""

    kind: Literal["nightly"] = "nightly"
    start_h: float = Field(22.0, ge=0, lt=24)
    hours: float = Field(8.0, gt=0, lt=24)
    spread_h: float = Field(1.5, ge=0, le=12)


class Nightly(AvailabilityModel):
    """Answers for `local` indices into `members` (the global device ids this entry covers), vectorised."""

    kind = "nightly"

    def __init__(self, members: np.ndarray, config: NightlySettings, rng: np.random.Generator):
        super().__init__(members)
        offset = rng.uniform(-config.spread_h, config.spread_h, len(members))  # from the given generator only
        self.opens = ((config.start_h + offset) % 24) * 3600.0
        self.length = config.hours * 3600.0

    def _into_window(self, local: np.ndarray, t: float) -> np.ndarray:
        return (t - self.opens[local]) % DAY  # seconds since the device's latest window opened

    def online(self, local, t):
        return self._into_window(local, t) < self.length

    def next_offline(self, local, t):  # when each goes offline: t itself for one already offline
        into = self._into_window(local, t)
        return np.where(into < self.length, t + self.length - into, t)

    def next_online(self, local, t):  # when each comes online: t itself for one already online
        into = self._into_window(local, t)
        return np.where(into < self.length, t, t + DAY - into)


register_availability("nightly", lambda entry, members, rng, key, world: Nightly(members, entry, rng),
                      config=NightlySettings)

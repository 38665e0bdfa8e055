"""population.energy: what a device's learning costs its battery (the model: emulator/system/energy.py).

Defaults, with their sources (docs/system-model.md#energy):
- radios: Huang et al., "A Close Examination of Performance and Power Characteristics of 4G LTE Networks",
  MobiSys 2012: power = base + w/Mbps x throughput while transferring, and LTE's high-power tail after a
  transfer (11.6 s at 1.06 W); Wi-Fi's tail is negligible.
- battery: 15 Wh, a 4,000 mAh cell at 3.85 V, typical of current phones.
- training: 2.5 W, an assumption for a phone's CPU under sustained load (measure your fleet's and set it).
- standby 0.07 W and in use 1.0 W: the order Carroll & Heiser measured ("An Analysis of Power Consumption in
  a Smartphone", USENIX ATC 2010: tens of mW suspended, about a watt with the screen on and the phone busy).
- charging: 7.5 W into the battery (a 5 V, 1.5 A charger), an assumption; fast chargers give two to three times.
"""
from __future__ import annotations

from pydantic import Field, model_validator

from emulator.scenario.base import ScenarioFieldError, Strict


class RadioPower(Strict):
    """A radio's power while it moves data: base_w + up_w_per_mbps x upload Mbit/s (or down_w_per_mbps x
    download Mbit/s), then tail_w for tail_s after each transfer."""

    base_w: float = Field(ge=0)
    up_w_per_mbps: float = Field(ge=0)
    down_w_per_mbps: float = Field(ge=0)
    tail_s: float = Field(0.0, ge=0)
    tail_w: float = Field(0.0, ge=0)


WIFI = RadioPower(base_w=0.13286, up_w_per_mbps=0.28317, down_w_per_mbps=0.13701)
LTE = RadioPower(base_w=1.28804, up_w_per_mbps=0.43839, down_w_per_mbps=0.05197, tail_s=11.576, tail_w=1.06004)


class EnergyConfig(Strict):
    """Each device's battery and the power of its work, drawn once from the seed (lognormal between devices).

    A device trains on Wi-Fi unless it is among `cellular_share` of the devices (an `eligible` entry that
    requires `unmetered` keeps all its devices on Wi-Fi)."""

    battery_wh: float = Field(15.0, gt=0)       # the median capacity
    battery_sigma: float = Field(0.25, ge=0)    # its lognormal spread between devices
    compute_w: float = Field(2.5, gt=0)         # the median power while training
    compute_sigma: float = Field(0.3, ge=0)
    wifi: RadioPower = WIFI
    cellular: RadioPower = LTE
    cellular_share: float = Field(0.0, ge=0, le=1)
    # the battery's level, modelled where the availability says when a phone charges (the eligible kind):
    charge_w: float = Field(7.5, gt=0)          # the median power into the battery while plugged in
    charge_sigma: float = Field(0.3, ge=0)
    idle_w: float = Field(0.07, ge=0)           # standby drain, always
    in_use_w: float = Field(1.0, ge=0)          # added while the owner uses the phone
    initial_soc_min: float = Field(0.3, ge=0, le=1)  # each phone's level at time 0: uniform in [min, max]
    initial_soc_max: float = Field(1.0, ge=0, le=1)

    @model_validator(mode="after")
    def _initial_range(self):
        if self.initial_soc_min > self.initial_soc_max:
            raise ScenarioFieldError("initial_soc_min", f"{self.initial_soc_min} is above initial_soc_max "
                                     f"{self.initial_soc_max}; give min <= max")
        return self

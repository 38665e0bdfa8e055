"""The energy side of a simulated world (population.energy): each device's energy profile, the batteries
of the phones whose charging is known, and what a round's work costs them. The round (simulated.py) asks
it who may check in, when a snapshot round's device may start, when a battery empties mid-work, and
hands it each closed round to charge."""
from __future__ import annotations

import numpy as np

from emulator.seeding import rng
from emulator.system.battery import Batteries, batteries_for
from emulator.system.energy import EnergyProfiles, round_columns, round_energy, work_phases

AGREE_TRIES = 64  # a snapshot device's window and battery are asked this often to agree, then it never starts


class FleetEnergy:
    def __init__(self, config, devices: int, seed: int, availability, entries, links):
        """`links`: the devices' DeviceProfiles (their Mbit/s set the radios' power)."""
        self.config, self.links, self.availability = config, links, availability
        self.profiles = EnergyProfiles.draw(config, devices, rng(seed, "energy"), availability.unmetered())
        self.batteries: Batteries | None = batteries_for(self.profiles, config, availability, entries)

    def may_check_in(self, online: np.ndarray, t: float) -> np.ndarray:
        """Of the devices online at t, those whose battery meets their policy's floor."""
        return online if self.batteries is None else online[self.batteries.above_floor(online, t)]

    def next_start(self, devices: np.ndarray, start: np.ndarray) -> np.ndarray:
        """When each device of a snapshot round may check in, from when it is next online: with its battery
        at its floor too (a battery that climbs to it may have left the window: both are asked again until
        they agree)."""
        if self.batteries is None:
            return start
        searching = np.flatnonzero(self.batteries.tracked[devices] & np.isfinite(start))
        for _ in range(AGREE_TRIES):
            if not len(searching):
                return start
            charged = self.batteries.reaches_floor(devices[searching], start[searching])
            again = np.full(len(searching), np.inf)  # a battery that never reaches its floor: never
            able = np.isfinite(charged)
            again[able] = self.availability.next_online(devices[searching[able]], charged[able])
            moved = again > start[searching]
            start[searching] = again
            searching = searching[moved & np.isfinite(again)]
        start[searching] = np.inf  # never settled: the habits and the battery never agree
        return start

    def empties(self, devices: np.ndarray, plan: dict, stop: np.ndarray) -> np.ndarray:
        """When each device's battery reaches its floor while it works until `stop` (inf: never); keeps the
        work's phases in `plan` for the close."""
        if self.batteries is None:
            return np.full(len(devices), np.inf)
        config, p, links = self.config, self.profiles, self.links
        plan["phases"] = work_phases(plan, p.compute_w[devices], p.cellular[devices], links.down_mbps[devices],
                                     links.up_mbps[devices], config.wifi, config.cellular)
        return self.batteries.work(devices, plan["phases"], stop, commit=False)

    def spend(self, devices, plan, closed, used, cancelled, aborted, ledger) -> dict[str, float]:
        """Charge each selected device the energy of the work it did this round (system/energy.py) and take
        it from its battery; the round's energy columns. `used`: whether each device's report went into the
        model; `cancelled`: whether it was told to stop; `aborted`: whether its policy stopped holding while it worked (None: no eligible entry)."""
        config, links = self.config, self.links
        compute_j, radio_j = round_energy(plan, closed, self.profiles.compute_w[devices],
                                          self.profiles.cellular[devices], links.down_mbps[devices],
                                          links.up_mbps[devices], config.wifi, config.cellular)
        ledger.charge(devices, compute_j + radio_j)
        columns = round_columns(compute_j, radio_j, used, cancelled)
        if self.batteries is not None:
            self.batteries.work(devices, plan["phases"], np.minimum(plan["end"], closed), commit=True)
        if aborted is not None:
            columns["energy_aborted_j"] = float((compute_j + radio_j)[aborted].sum())
        return columns

    def columns(self) -> dict[str, np.ndarray]:
        """participation.csv's energy columns (the level, `soc`, is kept per round by the ledger's observer)."""
        p = self.profiles
        return {"battery_wh": p.battery_wh, "compute_w": p.compute_w, "link": np.where(p.cellular, "cellular", "wifi")}

    def state(self) -> dict:
        return {} if self.batteries is None else {"batteries": self.batteries.state()}

    def load_state(self, state: dict) -> None:
        if self.batteries is not None:
            self.batteries.load_state(state["batteries"])

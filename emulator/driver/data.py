"""The run's federation, built in a background thread while Ray and the actors start."""
from __future__ import annotations

import threading
from typing import Callable

from threadpoolctl import threadpool_limits

from emulator.data import federation_for
from emulator.data.federation import Federation
from emulator.driver.request import POLL_S
from emulator.runtime.startup import StartupProfile
from emulator.scenario import Scenario, ScenarioError
from emulator.system.ties import check_world


class DataBuilder:
    """The data, built in a background thread (or here, when nothing else waits); `result` joins it,
    raising what building it raised. Ties the data cannot satisfy are refused with it."""

    def __init__(self, scenario: Scenario, federation: Federation | None, profile: StartupProfile,
                 background: bool, notify: Callable[[str], None]):
        self.scenario, self.federation, self.profile, self.notify = scenario, federation, profile, notify
        self.error: BaseException | None = None
        self.thread = None
        if federation is not None:  # data handed over from Python: written to the data cache when on disk
            self.federation = federation_for(scenario.data, scenario.population.devices, scenario.seed,
                                             scenario.population.types, notify, given=federation)
            self._check(self.federation)
        elif background:
            self.thread = threading.Thread(target=self._build_quietly, name="emulator-data", daemon=True)
            self.thread.start()
        else:
            self.federation = self._build()

    def _build(self) -> Federation:
        scenario = self.scenario
        with self.profile.phase("data (load, partition)"):
            federation = federation_for(scenario.data, scenario.population.devices, scenario.seed,
                                        scenario.population.types, self.notify)
        self._check(federation)
        return federation

    def _check(self, federation: Federation) -> None:
        population = self.scenario.population
        if federation.num_devices != population.devices:
            raise ScenarioError(f"population.devices: {population.devices}, but the given federation has "
                                f"{federation.num_devices} devices")
        check_world(self.scenario, federation)  # ties the data cannot satisfy

    def _build_quietly(self) -> None:
        # BLAS on one thread here: Ray's start forks processes meanwhile, and OpenBLAS's fork handler stops its
        # worker threads, so a threaded product in flight (the synthetic labels) would wait for them forever
        try:
            with threadpool_limits(1, user_api="blas"):
                self.federation = self._build()
        except BaseException as exc:  # handed to the main thread by result()
            self.error = exc

    def result(self) -> Federation:
        if self.thread is not None:
            while self.thread.is_alive():
                self.thread.join(POLL_S)  # a short join, so Ctrl-C reaches the main thread meanwhile
            self.thread = None
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        return self.federation

"""The run's actors as the driver holds them: the runner pool, and the server, started again from the last
checkpoint if it dies.

The server's process is started empty first, so that it imports torch while the driver loads the data;
`start` gives it the run (and a checkpoint's state). Bad input raised inside an actor (or a runner under
it) reaches the user as such: one line, exit 2, no Ray traceback."""
from __future__ import annotations

import pickle

import ray

from emulator.driver.request import POLL_S
from emulator.parts.plugins import innermost, users_paths
from emulator.runtime import inline, warm
from emulator.runtime.interrupts import RunInterrupted, StopRequest
from emulator.runtime.pool import RunnerPool
from emulator.scenario import Scenario, ScenarioError
from emulator.server.server import FederatedServer, ServerActor


def start_actors(scenario: Scenario, run_key: str, shipped: dict | None, session_outlives_run: bool,
                 notify) -> tuple[RunnerPool, "ServerHandle"]:
    """The runner pool and an empty server, their processes starting (in this process: runtime.backend
    inline)."""
    runtime = scenario.runtime
    if runtime.backend == "inline":  # the same runner and server objects, in this process
        pool = RunnerPool.in_process(runtime.runners or 1, runtime.torch_threads, gpu=runtime.num_gpus > 0)
        return pool, ServerHandle(scenario, run_key, pool)
    pool, spare, keep = warm.run_actors(runtime, shipped, session_outlives_run, notify)
    return pool, ServerHandle(scenario, run_key, pool, shipped, spare, keep)


class ServerHandle:
    """The server actor of a run; what the Recorder pulls from it (recorder.Source)."""

    def __init__(self, scenario: Scenario, run_key: str, pool: RunnerPool, runtime_env: dict | None = None,
                 spare=None, keep=None):
        """`spare`: an empty server actor already started (an idle one, runtime/idle_servers.py), used first;
        `keep(actor)`: where a run that ended normally hands its server back for a later run (None: it is
        stopped)."""
        self.scenario, self.run_key, self.pool = scenario, run_key, pool
        self.runtime_env = runtime_env
        self.run = None  # the run's handle for the runners (RunContext, or RunHandle on Ray)
        self.state_dir: str | None = None  # the run directory's device_state/ (personalized algorithms)
        self.actor = None
        self.starts = 0
        self.keep = keep
        self.spawn(spare)

    def spawn(self, spare=None) -> None:
        """A new, empty server (its process starting, on Ray); the old one is stopped."""
        if self.actor is not None:
            inline.kill(self.actor)
        self.starts += 1
        self.idle_taken = spare is not None
        if spare is not None:
            self.actor = spare
            return
        if self.pool.inline or self.scenario.runtime.server == "driver":
            self.actor = inline.InlineActor(FederatedServer())
            return
        # named, so that operators (and tests) can find it (ray.util.list_named_actors(); `serving()` says
        # which run a server plays: a server kept idle plays a later run under its first name)
        options = dict(num_cpus=self.scenario.runtime.server_num_cpus, name=f"server-{self.run_key}-{self.starts}")
        if self.runtime_env:
            options["runtime_env"] = self.runtime_env
        self.actor = ServerActor.options(**options).remote()

    def start(self, run=None, state: dict | None = None, fresh: bool = True) -> int:
        """Set the server up for the run (a new one unless `fresh` is False), from `state` when given; the
        round it continues after. `run`: the run's handle, the first time (a restart reuses it)."""
        if fresh:
            self.spawn()
        if run is not None:
            self.run = run
        setup = ("setup", {"plugins": list(self.scenario.plugins)}, self.run, self.pool.runners,
                 self.scenario.runtime.torch_threads, pickle.dumps(self.scenario), self.state_dir)
        try:
            self.call(*setup)
        except ray.exceptions.RayActorError:
            if not self.idle_taken:
                raise
            self.spawn()  # an idle server that died while it waited: a new one
            self.call(*setup)
        self.idle_taken = False
        return self.call("load_state", state) if state is not None else 0

    def prepare_runners(self, gpu_trial=None) -> None:
        """Every runner loads the run (GPU runners check their share), a runner's bad input as such."""
        _unwrapped(lambda: self.pool.prepare(self.run, gpu_trial))

    def call(self, method: str, *args, stop: StopRequest | None = None):
        """Call a server method, polling so that a stop request is honoured within POLL_S (in process, the
        call has returned already: a stop request is honoured after it)."""
        ref = getattr(self.actor, method).remote(*args)
        while stop is not None:
            ready, _ = inline.wait([ref], timeout=POLL_S)
            if ready:
                break
            if stop.is_set():
                raise RunInterrupted(stop.signum)
        return _unwrapped(lambda: inline.get(ref))

    def answers(self) -> bool:
        """Whether the server is alive and idle: it answers a call of its rounds' queue at once (after a
        plugin's error, raised in a call that has returned, it does; one that died or still plays a round
        does not)."""
        try:
            inline.get(self.actor.pid.remote(), timeout=5)
            return True
        except Exception:
            return False

    def finish(self, idle: bool) -> None:
        """The run ended: a server that is idle (it played the run to its end, or answered with a plugin's
        error) goes back for a later run where one is kept (its first start only: a restarted one may be of
        another shape), any other is stopped."""
        if idle and self.keep is not None and self.actor is not None and self.starts == 1:
            try:
                self.keep(self.actor)  # it stops the server itself when it cannot keep it
                self.actor = None
                return
            except Exception:  # the warm instance went down meanwhile: the run's result stands, the server goes
                pass
        if self.actor is not None:
            inline.kill(self.actor)

    # what the Recorder pulls, when a round needs it (recorder.Source)
    def events(self) -> list[tuple]:
        return self.call("take_events")

    def state(self) -> dict:
        return self.call("get_state")

    def participation(self, rounds: int) -> dict | None:
        return inline.get(self.actor.participation_after.remote(rounds), timeout=5)


def _unwrapped(get):
    """`get()`, with bad-input errors raised inside an actor reaching the user as such."""
    try:
        return get()
    except ray.exceptions.RayTaskError as exc:
        inner = innermost(exc)
        if isinstance(inner, ScenarioError):
            raise type(inner)(users_paths(str(inner))) from None
        raise

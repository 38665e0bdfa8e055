"""A warm instance: a local Ray instance, a runner pool and idle server actors kept between runs.

`emulator up` starts a holder process that owns a local Ray instance (so stopping the holder frees all of
it) and, inside it, a warden actor that owns the warm runners and an idle, empty server actor whose process
has already imported torch. A later `emulator run` or `emulator.run(...)` with no address (and no
RAY_ADDRESS) finds the instance through a state file and attaches to it (about a second), takes the warm
runners and an idle server (the warden starts the next one when it was the last). `emulator down`
stops the holder.

Nothing carries from one run to the next: runners keep nothing of a run after it ends (`release`) and
every job is seeded by itself; a run that ends normally hands its server back, which forgets the run
(`FederatedServer.release`) and serves a later one as a fresh process would (runtime/idle_servers.py).
The warm actors are used only where they run the same code as the run: the emulator's source files are
fingerprinted when the instance starts, and a run whose code differs (an edit since) or that asks for another
resource shape gets fresh actors on the same Ray instance instead. A run that ships plugin modules from the
user's directory gets warm actors that imported those very files (Ray names shipped modules by their
content): the warden keeps the runners of one set of modules at a time (the warm runners hold the CPUs, so
a run shipping other modules, or none, has them replaced), and idle servers for runs shipping nothing and
for the latest modules shipped. Iterating on a plugin (edit, run, run again) pays for new actors only after
an edit.

Where the instance is (its state file) and the code fingerprint live in runtime/warm_state.py, which
runtime/cluster.py reads when a run may attach.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

import ray

from emulator.runtime import idle_servers
from emulator.runtime.idle_servers import shipped_modules
from emulator.runtime.cluster import (LOCAL_SYSTEM_CONFIG, attached_warm_instance, configure_token_auth,
                                      lighten_local_instance, runner_count)
from emulator.runtime.pool import RunnerPool
from emulator.runtime.warm_state import WarmInstance, alive, code_fingerprint, find, state_path

__all__ = ["WarmInstance", "down", "find", "give_back_server", "idle_server_pids", "lease_runners", "release_runners",
           "run_actors", "take_server", "up"]

NAMESPACE = "fl-emulator-warm"
WARDEN = "warden"
UP_TIMEOUT_S = 120


# ------------------------------------------------------------------------------------- in a run
def lease_runners(count: int, shipped: dict | None = None) -> list:
    """The warm runners (`count` of them; the warden starts more where its pool holds fewer) that imported the
    plugin modules `shipped` ships (a runtime_env; None: none)."""
    return ray.get(_warden().runners.remote(count, shipped))


def release_runners() -> None:
    """Stop the warm runners, freeing their resources for a run that starts its own actors on the instance
    (they would otherwise hold every CPU and that run's runners would wait forever); the next lease starts
    them again."""
    ray.get(_warden().release_runners.remote())


def take_server(shipped: dict | None = None):
    """An idle server actor (empty, its process started) that imported the modules `shipped` ships; for a run
    shipping none, the warden starts the next one when none is left."""
    return ray.get(_warden().take_server.remote(shipped))


def give_back_server(server, shipped: dict | None = None) -> bool:
    """Hand a finished run's server back to the warden, for a later run shipping the same modules (False: it
    was stopped instead)."""
    return ray.get(_warden().give_back_server.remote(server, shipped))


def idle_server_pids() -> list[int]:
    """The processes of the warden's idle servers."""
    return ray.get(_warden().idle_server_pids.remote())


def run_actors(runtime, shipped: dict | None, session_outlives_run: bool, notify) -> tuple[RunnerPool, object, object]:
    """The run's runner pool, an idle server actor or None, and where the run hands its server back when it
    ends (None: nowhere, it is stopped). On a warm instance (runtime/warm.py) its runners and an idle server,
    when they run this code at this runtime shape; otherwise runners of our own, kept for later runs with an
    idle server where the caller owns the session (RunnerPool.shared, runtime/idle_servers.py)."""
    count = runner_count(runtime.runners, runtime.num_cpus, runtime.num_gpus, runtime.server_num_cpus)
    instance = attached_warm_instance()
    if instance is not None and runtime.server_num_cpus == 0 and instance.matches(
            runtime.num_cpus, runtime.num_gpus, runtime.torch_threads):
        notify(f"note: on the warm instance (emulator up) at {instance.address}; emulator down stops it")
        pool = RunnerPool(lease_runners(count, shipped))
        pool.leased = True
        if runtime.server != "actor":
            return pool, None, None
        return pool, take_server(shipped), partial(give_back_server, shipped=shipped)
    if instance is not None:  # its runners would hold the CPUs this run's own need
        notify("note: the warm instance's actors run other code, or this run asks for another runtime shape: it "
               "starts its own actors there (emulator down && emulator up refreshes the warm ones)")
        release_runners()
    begin = RunnerPool.shared if session_outlives_run else RunnerPool.start
    pool = begin(count, runtime.num_cpus, runtime.num_gpus, runtime.torch_threads, shipped, wait=False)
    if not session_outlives_run or runtime.server != "actor" or runtime.server_num_cpus:
        return pool, None, None  # an idle server holding CPUs would keep them from a later run's runners
    return pool, idle_servers.take(shipped), partial(idle_servers.give_back, shipped=shipped)


def _environment(shipped: dict | None) -> dict:
    return {"runtime_env": shipped} if shipped else {}


def _warden():
    return ray.get_actor(WARDEN, namespace=NAMESPACE)


class Warden:
    """Owns the warm runners and the idle servers (actors live as long as their owner), hands them out.

    Runners are of one set of shipped modules at a time (`self.modules`; () for none), since they hold the
    instance's CPUs; idle servers hold no CPU and are kept per set: for runs shipping nothing (one is always
    ready) and for the latest modules shipped."""

    def __init__(self, shape: tuple, runners: int, server: str):
        """`server`: the server actor class as "module:name" (the server package is above this layer: the
        entry point that starts the instance names it)."""
        # imported here, for start-up speed: `emulator up` and `down` need no torch (the warden's process does)
        import importlib

        from emulator.runtime.runner import RunnerActor

        module, _, name = server.partition(":")
        self.runner_actor, self.server_actor = RunnerActor, getattr(importlib.import_module(module), name)
        self.shape = shape
        self.modules: tuple = ()  # what the runners in self.pool imported
        self.pool = [self._runner(None) for _ in range(runners)]
        self.idle: dict[tuple, list] = {(): [self._server(None)]}
        self.lock = threading.Lock()
        ray.get([r.ping.remote() for r in self.pool] + [self.idle[()][0].ping.remote()])

    def _runner(self, shipped: dict | None):
        num_cpus, num_gpus, torch_threads = self.shape
        return self.runner_actor.options(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=-1, max_task_retries=-1,
                                         scheduling_strategy="SPREAD", **_environment(shipped)).remote(torch_threads)

    def _server(self, shipped: dict | None):
        return self.server_actor.options(num_cpus=0, **_environment(shipped)).remote()

    def runners(self, count: int, shipped: dict | None = None) -> list:
        with self.lock:
            if shipped_modules(shipped) != self.modules:  # runners of other modules hold the CPUs: replaced
                self._stop_runners()
                self.modules = shipped_modules(shipped)
            while len(self.pool) < count:
                self.pool.append(self._runner(shipped))
            return self.pool[:count]

    def release_runners(self) -> None:
        with self.lock:
            self._stop_runners()

    def _stop_runners(self) -> None:
        for runner in self.pool:
            ray.kill(runner)
        self.pool = []

    def take_server(self, shipped: dict | None = None):
        """An idle server of these modules; for a run shipping none, when it was the last, the next one starts
        now (a parallel run's, or a run's that failed and kept its own). Idle servers of older shipped
        modules (an edited plugin's) are stopped."""
        modules = shipped_modules(shipped)
        with self.lock:
            for other in [key for key in self.idle if modules and key not in ((), modules)]:
                for server in self.idle.pop(other):
                    ray.kill(server)
            idle = self.idle.setdefault(modules, [])
            server = idle.pop() if idle else self._server(shipped)
            if not modules and not idle:
                idle.append(self._server(None))
        return server

    def give_back_server(self, server, shipped: dict | None = None) -> bool:
        with self.lock:
            idle = self.idle.setdefault(shipped_modules(shipped), [])
        return idle_servers.park(server, idle, self.lock)

    def idle_server_pids(self) -> list[int]:
        """Those of the idle servers for runs shipping nothing."""
        with self.lock:
            idle = list(self.idle.get((), []))
        return ray.get([server.pid.remote() for server in idle])

    def ready(self) -> bool:
        return True


# ------------------------------------------------------------------------------------- up / down
def up(server: str, num_cpus: int | None = None, runners: int | None = None) -> WarmInstance:
    """Start the warm instance (or return the one running) and wait until its actors are ready. `server`:
    the server actor class its idle servers are made of, as "module:name"."""
    found = find()
    if found is not None:
        return found
    path = state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    log = path.with_suffix(".log")
    command = [sys.executable, "-m", "emulator.runtime.warm", "hold", "--state", str(path), "--server", server]
    if num_cpus:
        command += ["--num-cpus", str(num_cpus)]
    if runners:
        command += ["--runners", str(runners)]
    with open(log, "w") as handle:
        holder = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)  # not stopped by the terminal's Ctrl-C
    deadline = time.time() + UP_TIMEOUT_S
    while time.time() < deadline:
        if holder.poll() is not None:
            raise RuntimeError(f"the warm instance did not start (exit {holder.returncode}); see {log}")
        found = find()
        if found is not None and found.pid == holder.pid:
            return found
        time.sleep(0.1)
    holder.terminate()
    raise RuntimeError(f"the warm instance did not start within {UP_TIMEOUT_S} s; see {log}")


def down() -> WarmInstance | None:
    """Stop the warm instance (its Ray processes and actors with it); the one stopped, or None."""
    found = find()
    if found is None:
        return None
    os.kill(found.pid, signal.SIGTERM)
    deadline = time.time() + 30
    while alive(found.pid) and time.time() < deadline:
        time.sleep(0.1)
    if alive(found.pid):
        os.kill(found.pid, signal.SIGKILL)
    state_path().unlink(missing_ok=True)
    return found


def _hold(state: Path, server: str, num_cpus: int | None, runners: int | None) -> None:
    """The holder process: a local Ray instance with the warden in it, until SIGTERM or SIGINT."""
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    configure_token_auth()
    ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, logging_level=logging.WARNING,
             namespace=NAMESPACE, _system_config=LOCAL_SYSTEM_CONFIG)
    lighten_local_instance()
    try:
        shape = (1.0, 0.0, None)  # the default runtime: one CPU per runner, one torch thread
        count = runners or runner_count(None, 1.0, 0.0)
        warden = ray.remote(Warden).options(name=WARDEN, num_cpus=0, max_concurrency=8).remote(shape, count, server)
        ray.get(warden.ready.remote())
        record = {"address": ray.get_runtime_context().gcs_address, "pid": os.getpid(), "code": code_fingerprint(),
                  "runners": count, "shape": list(shape), "started": time.time()}
        temporary = state.with_name(f".{state.name}.{os.getpid()}")
        temporary.write_text(json.dumps(record))
        temporary.replace(state)
        print(f"warm instance at {record['address']}: {count} runners and an idle server", flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        try:
            if json.loads(state.read_text()).get("pid") == os.getpid():
                state.unlink()
        except (OSError, ValueError):
            pass
        ray.shutdown()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m emulator.runtime.warm")
    parser.add_argument("command", choices=["hold"])
    parser.add_argument("--state", required=True)
    parser.add_argument("--server", required=True, help="the server actor class, module:name")
    parser.add_argument("--num-cpus", type=int)
    parser.add_argument("--runners", type=int)
    args = parser.parse_args(argv)
    _hold(Path(args.state), args.server, args.num_cpus, args.runners)


if __name__ == "__main__":
    main()

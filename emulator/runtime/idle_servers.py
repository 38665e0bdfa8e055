"""Server actors kept between runs, so that a run does not pay for a new process importing torch.

A server actor's process costs about 3.5 s of CPU to start (Ray's worker, then torch and the emulator), as
much as several rounds of a small run, and on a 2-core machine it competes with the run's own training. A
run that ends normally hands its server back (`FederatedServer.release` forgets the run and resets torch's
global generator) and the next run of the same session takes it: metrics are those of a fresh process bit
for bit (tests/test_idle_servers.py). Kept here: the servers of a Ray session that outlives its runs (a
notebook, a sweep, the tests); a warm instance's warden keeps its own (runtime/warm.py). A run that ended
on a plugin's error hands back its server if it answers at once (a user's next try of a plugin being fixed
pays no new process); a run stopped or failed otherwise never does. A server that imported plugin
modules shipped to it serves only a later run that ships the same ones (the same files: Ray names shipped
modules by their content), as the session's shared runners do (RunnerPool.shared).
"""
from __future__ import annotations

import threading

import ray

MAX_IDLE = 2  # per session and shipped modules: a sweep's parallel runs each hand one back; more would only idle


def shipped_modules(shipped: dict | None) -> tuple:
    """What tells apart the actors of runs shipping different plugin files (`shipped`: their runtime_env):
    the uploaded packages' URIs, which Ray derives from the files' content. () for none."""
    return tuple((shipped or {}).get("py_modules", ()))


def _key(shipped: dict | None) -> tuple:
    context = ray.get_runtime_context()  # after ray.shutdown() and ray.init() the job id repeats: the session too
    return context.get_session_name(), context.get_job_id(), shipped_modules(shipped)


def take(shipped: dict | None = None):
    """An idle server of this session that ships the modules `shipped` ships (a runtime_env, None: none), or
    None. Only servers without a CPU share of their own are kept (runtime.server_num_cpus 0, the default): an
    idle one holding CPUs would keep them from a later run's runners."""
    if not ray.is_initialized():
        return None
    key = _key(shipped)
    with _LOCK:
        for stale in [k for k in _IDLE if k[:2] != key[:2]]:  # an ended session's servers ended with it
            del _IDLE[stale]
        for other in [k for k in _IDLE if k != key]:  # other modules (an edited plugin's older files): stopped,
            for server in _IDLE.pop(other):           # as the shared runners of another shape are
                ray.kill(server)
        idle = _IDLE.get(key, [])
        return idle.pop() if idle else None


def give_back(server, shipped: dict | None = None) -> bool:
    """Keep `server` for a later run of this session that ships the same modules (see `park`)."""
    with _LOCK:
        idle = _IDLE.setdefault(_key(shipped), [])
    return park(server, idle, _LOCK)


def park(server, idle: list, lock) -> bool:
    """Add `server` to `idle` (guarded by `lock`) once it has forgotten its run; False, and it is stopped,
    when it cannot: it died, or MAX_IDLE are idle already. A warm instance's warden parks its own here too."""
    try:
        ray.get(server.release.remote(), timeout=30)
    except (ray.exceptions.RayError, TimeoutError):
        ray.kill(server)
        return False
    with lock:
        if len(idle) < MAX_IDLE:
            idle.append(server)
            return True
    ray.kill(server)
    return False


def idle_servers() -> list:
    """Every server kept idle in this process, of any session still alive or not."""
    with _LOCK:
        return [server for servers in _IDLE.values() for server in servers]


_IDLE: dict[tuple, list] = {}
_LOCK = threading.Lock()

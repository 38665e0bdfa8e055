"""Connecting to Ray: a local instance by default, an existing cluster when an address is given."""
from __future__ import annotations

import logging
import math
import os
import secrets
from contextlib import contextmanager
from pathlib import Path

import ray

from emulator.errors import MachineError
from emulator.runtime import warm_state
from emulator.scenario import ScenarioError

AUTH_MODE = "RAY_AUTH_MODE"
TOKEN_SOURCES = ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")  # Ray reads these before the default token file
LOCAL_ADDRESSES = (None, "auto", "local")  # start a local instance, or join the one on this machine
# Ray settings for an instance this process starts. Ray runs its worker processes at niceness 15 (worker_niceness)
# so that they yield to the driver and Ray's own daemons; here the workers (runners, the server) do all the
# training, so on a machine shared with anything else they were starved (20 quickstart rounds beside two busy
# processes on 2 cores: 218 s at niceness 15, 22 s at 0; no change on an idle machine): they run at the
# driver's priority. Results do not depend on it. Nor does Ray start idle worker processes ahead of need (one a
# CPU, each importing Ray for a second of CPU, then polling): every process a run uses is an actor, which starts
# its own; an idle instance then costs half the CPU (3.3% of a core instead of 6%: a warm instance, the tests'
# session).
LOCAL_SYSTEM_CONFIG = {"worker_niceness": 0, "prestart_worker_first_driver": False, "enable_worker_prestart": False}


def default_token_path() -> Path:
    """Where Ray looks for the token when neither RAY_AUTH_TOKEN nor RAY_AUTH_TOKEN_PATH is set."""
    return Path.home() / ".ray" / "auth_token"


def configure_token_auth(address: str | None = None) -> str | None:
    """Turn Ray's token authentication on explicitly, as Ray documents it (RAY_AUTH_MODE=token and a token
    in ~/.ray/auth_token), before ray.init; returns the mode now in force, None when left to Ray.

    Ray 2.60 turns token authentication on by itself for a local instance, but then warns on every start
    that it did so. Setting RAY_AUTH_MODE ourselves keeps authentication on and the warning away:

    - RAY_AUTH_MODE=disabled (any mode but token): the user's choice, left alone.
    - A token available (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token): token mode.
    - Otherwise, for a local instance (address None, "auto" or "local", and RAY_ADDRESS unset or one of
      those): a new token is written to ~/.ray/auth_token, readable by this user only (0600), once per user,
      and token mode is set (also when RAY_AUTH_MODE=token was set by the user). Ray would write the same
      file itself, readable by everyone.
    - Otherwise (an explicit cluster address and no token here): left to Ray, which connects without a
      token unless RAY_AUTH_MODE=token; a cluster with authentication on refuses that, and Ray's error says
      where the token goes.

    The mode is set in os.environ, so the Ray processes this process starts inherit it, and Ray's cached
    config is reloaded, as Ray's own default does.
    """
    mode = (os.environ.get(AUTH_MODE) or "").lower() or None
    if mode not in (None, "token"):
        return mode
    if not any(os.environ.get(name) for name in TOKEN_SOURCES) and not default_token_path().is_file():
        if (address or os.environ.get("RAY_ADDRESS") or None) not in LOCAL_ADDRESSES:
            return mode  # an explicit cluster address (ray.init(address=None) goes to RAY_ADDRESS if set)
        _write_token(default_token_path())
    if mode is None:
        os.environ[AUTH_MODE] = "token"
        _reload_ray_config()
    return "token"


def _reload_ray_config() -> None:
    """Make this process see the new RAY_AUTH_MODE: `import ray` has already read it into Ray's cached
    config, and a driver that still believes auth is off sends no token to the GCS it started. Ray's own
    default (ray._private.authentication.authentication_token_setup._enable_token_auth) does the same."""
    from ray._raylet import Config

    Config.initialize("")


def _write_token(path: Path) -> None:
    """A fresh random token (256 bits, as `ray get-auth-token --generate` makes) at `path`, mode 0600, written
    to a temporary file and linked into place, so a concurrent run never reads a half-written token and an
    existing token is never replaced."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "w") as handle:
            handle.write(secrets.token_hex(32))
        os.link(temporary, path)
    except FileExistsError:
        pass  # another run wrote one first: use that
    finally:
        temporary.unlink(missing_ok=True)


@contextmanager
def ray_session(address: str | None = None):
    """Use the Ray instance already running in this process, else start or join one; shut down only
    what this call started. Yields True when the caller owns the session (it outlives this run).

    Token authentication is on (see configure_token_auth) unless RAY_AUTH_MODE=disabled says otherwise."""
    global _warm
    if ray.is_initialized():
        yield True
        return
    os.environ.setdefault("RAY_DEDUP_LOGS", "1")
    # No address: the user's warm instance (`emulator up`, runtime/warm.py) when one is running, else a fresh
    # local instance (or RAY_ADDRESS, as Ray's job submission sets it), never a cluster that happens to be
    # running on this machine, which a bare ray.init() would join.
    found = warm_state.find() if address is None and not os.environ.get("RAY_ADDRESS") else None
    configure_token_auth(address if found is None else "local")
    target = address if address is not None else (os.environ.get("RAY_ADDRESS") or "local")
    if found is not None:
        target = found.address
    options = {"_system_config": LOCAL_SYSTEM_CONFIG} if target == "local" else {}  # only a new instance takes one
    try:
        ray.init(address=target, include_dashboard=False, logging_level=logging.WARNING, log_to_driver=True,
                 configure_logging=True, **options)
    except Exception as exc:
        if address is None:  # a local start that failed: the machine (disk, limits, ports), named in one line
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise MachineError(f"Ray could not start on this machine ({type(exc).__name__}: {reason}). Check the "
                               "free space and limits where Ray writes its session (df -h /tmp; ulimit -f, ulimit "
                               "-n), or run without Ray: --set runtime.backend=inline") from None
        raise ScenarioError(f"runtime.address: cannot reach a Ray cluster at {address!r} ({exc}). Start one with "
                            "`ray start --head` (see docs/cluster.md), check the address, or leave it unset to run "
                            "locally") from None
    if target == "local":
        lighten_local_instance()
    _warm = found
    try:
        yield False
    finally:
        _warm = None
        _stop_autoscaler_monitor()
        ray.shutdown()


_warm: "warm_state.WarmInstance | None" = None


def attached_warm_instance() -> "warm_state.WarmInstance | None":
    """The warm instance the current ray_session joined, if it joined one."""
    return _warm


def lighten_local_instance() -> None:
    """Stop the two daemons a local instance this process started runs for nothing: the autoscaler monitor
    (a local instance does not autoscale) and the dashboard, which include_dashboard=False still starts in
    a minimal mode (usage statistics only). ~110 MB of memory of their own (benchmarks/scale.py); nothing
    the emulator or a run uses talks to them."""
    _stop_autoscaler_monitor()
    _kill_head_daemon("kill_dashboard")


def _stop_autoscaler_monitor() -> None:
    """Kill the autoscaler monitor of the instance this process started, just before ray.shutdown.

    ray.shutdown stops Ray's processes one by one with SIGTERM and a 1 s grace period; the monitor's SIGTERM
    handler tries to report its own death to the GCS that shutdown has already stopped, so it never exits
    in time and every shutdown waits the full second (shutdown 1.4 -> 0.4 s on a 2-core machine). The
    monitor only drives autoscaling, which a local instance does not do, so it is killed outright (Ray's
    own Node.kill_monitor). Through Ray's internals: if they change, shutdown is just slower again."""
    _kill_head_daemon("kill_monitor")


def _kill_head_daemon(kill: str) -> None:
    """Ray's Node.<kill>() on the head node this process started (none when it joined one): a Ray without
    that method or process type keeps the daemon, and runs as before."""
    node = getattr(ray._private.worker, "_global_node", None)
    if node is None or not node.is_head():
        return
    try:
        getattr(node, kill)(check_alive=False)
    except Exception:
        pass


def runner_count(requested: int | None, num_cpus: float, num_gpus: float, reserved_cpus: float = 0.0) -> int:
    """As many runners as the cluster's resources hold at the given shares, unless a count is requested."""
    if requested:
        return requested
    total = ray.cluster_resources()
    fits = [math.floor((total.get("CPU", 0) - reserved_cpus) / num_cpus + 1e-9)]
    if num_gpus > 0:
        fits.append(math.floor(total.get("GPU", 0) / num_gpus + 1e-9))
    return max(1, min(fits))

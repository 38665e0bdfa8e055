"""A pre-imported Python for the doc tests: `emulator ...` and Python blocks without paying the imports.

Each `emulator` command of a doc block and each Python block would start a Python that imports torch, Ray
and the emulator (about 2 s of CPU on the reference machine, some 60 times in the docs). Instead, one
server process per test worker imports them once and forks a child per command: the child takes the
command's argv, working directory, environment and standard streams (passed as file descriptors), runs the
console script's `main` (or the Python file) and exits with its exit code, as the real process would.

    python tests/doc_launcher.py serve SOCKET               # the server (DocLauncher below starts it)
    python -S tests/doc_launcher.py cli SOCKET ARGS...      # `emulator ARGS...`, through the server
    python -S tests/doc_launcher.py script SOCKET FILE      # `python FILE`, through the server
    python -S tests/doc_launcher.py module SOCKET NAME ...  # `python -m NAME ...`, through the server

A sweep's worker processes (`python -m emulator.sweep_workers`, started by the sweep with sys.executable)
come from the server too: in a forked child sys.executable is a small shell script (`python-shim`, written
by the server) that hands that one command to the server and runs every other one with the real python.

The client runs with `-S` (no site-packages: a few milliseconds) and forwards SIGINT and SIGTERM to the
child. What a forked child cannot show (a console script's own start-up, Ray starting in a fresh process)
is tested with real processes elsewhere: test_reliability.py, test_faults.py and test_token_auth.py.
"""
from __future__ import annotations

import array
import json
import os
import shlex
import signal
import socket
import struct
import sys
import time

HEADER = struct.Struct("!I")
FORKED_MODULES = ("emulator.sweep_workers",)  # `python -m NAME` commands the shim hands to the server
PYTHON = sys.executable  # the real one (a child's sys.executable is the shim)
PRE_IMPORTED = ("torch", "numpy", "ray", "yaml", "pydantic", "simpy", "matplotlib.pyplot", "emulator.cli",
                "emulator.driver", "emulator.analysis.report", "emulator.sweeps", "emulator.api")


def _send_json(conn: socket.socket, payload: dict, fds: list[int] = ()) -> None:
    data = json.dumps(payload).encode()
    if fds:
        conn.sendmsg([HEADER.pack(len(data)) + data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))])
    else:
        conn.sendall(HEADER.pack(len(data)) + data)


def _receive_json(conn: socket.socket) -> tuple[dict, list[int]]:
    data, fds = b"", []
    while len(data) < HEADER.size or len(data) < HEADER.size + HEADER.unpack_from(data)[0]:
        chunk, ancillary, _, _ = conn.recvmsg(1 << 16, socket.CMSG_SPACE(16 * array.array("i").itemsize))
        if not chunk:
            raise EOFError("the other side closed the connection")
        data += chunk
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds += list(array.array("i", payload[: len(payload) - len(payload) % 4]))
    return json.loads(data[HEADER.size:HEADER.size + HEADER.unpack_from(data)[0]]), fds


# ------------------------------------------------------------------------------------------ the server

def serve(path: str) -> None:
    import importlib

    os.environ.setdefault("MPLBACKEND", "Agg")
    for name in PRE_IMPORTED:
        importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel: no zombies to wait for
    shim = _write_shim(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    print("ready", flush=True)
    while True:
        conn, _ = listener.accept()
        try:
            request, fds = _receive_json(conn)
        except (EOFError, OSError, ValueError):
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            listener.close()
            _child(conn, request, fds, shim)  # never returns
        for fd in fds:
            os.close(fd)
        conn.close()


def _write_shim(path: str) -> str:
    """sys.executable for the forked children (its path, beside the socket `path`): `python -m` one of
    FORKED_MODULES through this server, anything else the real python."""
    real, me = shlex.quote(PYTHON), shlex.quote(os.path.abspath(__file__))
    cases = "|".join(FORKED_MODULES)
    shim = os.path.join(os.path.dirname(path), "python-shim")
    with open(shim, "w") as handle:
        handle.write(f"""#!/bin/sh
if [ "$1" = "-m" ]; then
  case "$2" in {cases}) shift; exec {real} -S {me} module {shlex.quote(path)} "$@";; esac
fi
exec {real} "$@"
""")
    os.chmod(shim, 0o755)
    return shim


def _child(conn: socket.socket, request: dict, fds: list[int], shim: str) -> None:
    code = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the command's own subprocesses are waited for
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        import faulthandler  # a crash in native code (SIGSEGV, SIGABRT) shows its Python stack on the block's stderr

        faulthandler.enable()
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _reload_ray_settings()
        sys.executable = shim
        _send_json(conn, {"pid": os.getpid()})
        code = _run(request)
    except BaseException:  # noqa: BLE001 - as the interpreter would: the traceback on stderr, exit 1
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            import atexit

            atexit._run_exitfuncs()
        except BaseException:  # noqa: BLE001
            pass
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001
                pass
        try:
            _send_json(conn, {"exit": code})
        except OSError:
            pass
        os._exit(code)


def _reload_ray_settings() -> None:
    """`import ray` (in the server) read RAY_AUTH_MODE and the token into caches of its own; a fresh process
    would read them from the command's environment, so the child reloads them (as
    emulator.runtime.cluster._reload_ray_config does when it turns token authentication on)."""
    from ray._raylet import Config

    Config.initialize("")
    try:
        from ray._raylet import AuthenticationTokenLoader

        AuthenticationTokenLoader.instance().reset_cache()
    except (ImportError, AttributeError):  # another Ray: nothing cached there
        pass


def _run(request: dict) -> int:
    """The command, as its own process would run it; its exit status."""
    try:
        if request["mode"] == "cli":  # what the console script .venv/bin/emulator does (cli.entry)
            sys.argv = [os.path.join(os.path.dirname(PYTHON), "emulator"), *request["args"]]
            sys.path[0] = os.path.dirname(sys.argv[0])
            from emulator.cli import main

            return _status(main())
        import runpy

        if request["mode"] == "module":  # `python -m NAME ARGS...`: the module as __main__, the directory first
            sys.argv = list(request["args"])
            sys.path[0] = os.getcwd()
            sys.modules.pop(request["args"][0], None)  # imported by the server: run afresh, as __main__ only
            runpy.run_module(request["args"][0], run_name="__main__", alter_sys=True)
            return 0
        script = request["args"][0]  # `python FILE`: the file as __main__, its folder first on sys.path
        sys.argv = list(request["args"])
        sys.path[0] = os.path.dirname(os.path.abspath(script))  # in place of this file's folder
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as done:
        return _status(done.code)
    except KeyboardInterrupt:
        return 130


def _status(value) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)  # sys.exit("message"): printed, status 1
    return 1


# ------------------------------------------------------------------------------------------ the client

def client(mode: str, path: str, args: list[str]) -> int:
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.connect(path)
    _send_json(conn, {"mode": mode, "args": args, "cwd": os.getcwd(), "env": dict(os.environ)}, [0, 1, 2])
    child = {}

    def forward(signum, _frame):
        if "pid" in child:
            os.kill(child["pid"], signum)

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, forward)
    while True:
        try:
            reply, _ = _receive_json(conn)
        except EOFError:  # the child died without a word (killed): as a shell reports a signal
            print("doc-launcher: the forked command died without an exit status (killed, e.g. by the kernel's "
                  "out-of-memory killer, or crashed in native code: see any fault dump above)", file=sys.stderr)
            return 137
        if "pid" in reply:
            child["pid"] = reply["pid"]
        if "exit" in reply:
            return reply["exit"]


class DocLauncher:
    """The server of one test worker, started on first use; `prefix(mode)` is the argv to put before a
    command's own arguments."""

    def __init__(self, folder, python: str, env: dict):
        import subprocess

        self.socket = str(folder / "launcher.sock")
        self.python = python
        self.process = subprocess.Popen([python, __file__, "serve", self.socket], env=env, stdout=subprocess.PIPE,
                                        stdin=subprocess.DEVNULL, text=True)
        started = time.monotonic()
        while self.process.stdout.readline().strip() != "ready":
            if self.process.poll() is not None or time.monotonic() - started > 120:
                raise RuntimeError("the doc tests' launcher did not start")

    def prefix(self, mode: str) -> list[str]:
        return [self.python, "-S", __file__, mode, self.socket]

    @property
    def shim(self) -> str:
        """The python its children see as sys.executable (written by the server before it says ready)."""
        return os.path.join(os.path.dirname(self.socket), "python-shim")

    def close(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        sys.exit(client(sys.argv[1], sys.argv[2], sys.argv[3:]))

"""The in-process backend (`runtime.backend: inline`): the same runner and server code, called in the driver.

A Ray actor handle is driven as `handle.method.remote(*args)` -> reference -> `ray.get` / `ray.wait`.
`InlineActor` gives a plain object that shape, running each call at once in this process and returning a
`Done` reference that holds its result (or its exception, raised again, unwrapped, by `get`). The runner
pool and the server then run unchanged without Ray: no daemons, no worker processes, `breakpoint()` in a
plugin stops the run in the user's terminal, and a plugin's exception arrives as itself.

`get`, `wait` and `kill` accept both kinds of reference, so the code above them needs no branch.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import ray


class Done:
    """A call already made in this process: its result, or the exception it raised."""

    __slots__ = ("value", "error")

    def __init__(self, value: Any = None, error: BaseException | None = None):
        self.value, self.error = value, error

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class _Method:
    __slots__ = ("bound",)

    def __init__(self, bound):
        self.bound = bound

    def remote(self, *args, **kwargs) -> Done:
        from emulator.training.local import denormals_flushed  # torch: imported by the objects behind handles

        args = [arg.result() if isinstance(arg, Done) else arg for arg in args]  # as Ray resolves a task's refs
        try:
            with denormals_flushed():  # the arithmetic of a runner's process, for this call only
                return Done(self.bound(*args, **kwargs))
        except Exception as exc:  # held for `get`, as Ray holds a task's error (KeyboardInterrupt goes through)
            return Done(error=exc)


class InlineActor:
    """A plain object behind an actor-shaped handle: `handle.method.remote(...)` calls `obj.method(...)` now."""

    def __init__(self, obj: Any):
        self.obj = obj

    def __getattr__(self, name: str) -> _Method:
        return _Method(getattr(self.obj, name))


def is_inline(handle: Any) -> bool:
    return isinstance(handle, InlineActor)


def put(value: Any, inline: bool) -> Any:
    """ray.put, or (nothing leaving this process) the value as a `Done`: an array as a read-only copy, as
    Ray's object store hands it out, so a caller changing its own array later changes nothing put."""
    if not inline:
        return ray.put(value)
    if isinstance(value, np.ndarray):
        value = value.copy()
        value.flags.writeable = False
    return Done(value)


def get(ref: Any, timeout: float | None = None) -> Any:
    """ray.get for one reference of either kind."""
    if isinstance(ref, Done):
        return ref.result()
    return ray.get(ref, timeout=timeout)


def wait(refs: Sequence[Any], num_returns: int = 1, timeout: float | None = None) -> tuple[list, list]:
    """ray.wait for references of either kind; a `Done` is always ready."""
    ready = [ref for ref in refs if isinstance(ref, Done)]
    if ready:
        return ready[:num_returns], [ref for ref in refs if ref not in ready[:num_returns]]
    return ray.wait(list(refs), num_returns=num_returns, timeout=timeout)


def kill(handle: Any) -> None:
    """ray.kill; an in-process object is simply dropped."""
    if not is_inline(handle):
        ray.kill(handle)

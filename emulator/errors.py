"""The errors every layer may raise for bad input: on the ground floor, so that raising one never imports
the schema or anything above it. The CLI prints them as one line and exits with code 2."""
from __future__ import annotations

import inspect
import traceback
from pathlib import Path
from typing import Any, Callable


class ScenarioError(ValueError):
    """Bad input: every line names a field (its YAML path) and what would fix it."""


class PluginError(ScenarioError):
    """A plugin could not be used: it failed to import, registered a taken name, or one of its hooks failed."""

    def resumable(self, run_dir, rounds: int) -> "PluginError":
        """The same error, its generic advice about resuming replaced by what holds for this run."""
        true = (f"this run's {rounds} finished rounds are kept: continue with emulator run --resume {run_dir}"
                if run_dir is not None and rounds else "no round had finished, so there is nothing to resume")
        return PluginError(str(self).replace(RESUME_HINT, true))


RESUME_HINT = "every finished round is kept: continue with emulator run --resume RUN_DIR"


# ---------------------------------------------------------------------------- a plugin's code failing
# Here, on the ground floor, because every layer that calls a user's code guards it: the server (algorithm
# hooks), the runners (models), the simulated world (availability models).
_OURS = str(Path(__file__).resolve().parent)


def innermost(exc: BaseException) -> BaseException:
    """The exception under Ray's task-error wrappers (a runner's error reaches the driver through two)."""
    seen = 0
    while hasattr(exc, "cause") and getattr(exc, "cause") is not None and seen < 8:
        exc, seen = exc.cause, seen + 1
    return exc


def is_plugin(origin: str) -> bool:
    return not (origin == "emulator" or origin.startswith("emulator."))


def failure(exc: BaseException, code: Any = None) -> str:
    """`Type: message (file:line)` at the user's own line: the innermost frame outside the emulator and the
    import machinery; for a SyntaxError, the line the parser names; when the user's code never ran (called
    with the wrong arguments: the frame is ours), where `code` (the function called) is defined."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"SyntaxError: {exc.msg} ({exc.filename}:{exc.lineno})"
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith((_OURS, "<frozen"))]
    if frames:
        at = f" ({frames[-1].filename}:{frames[-1].lineno})"
    elif code is not None and _defined_at(code):
        at = f" (calling {_defined_at(code)}: are its parameters the ones the docs give?)" \
            if isinstance(exc, TypeError) else f" ({_defined_at(code)})"
    else:
        frames = traceback.extract_tb(exc.__traceback__)
        at = f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{at}"


def _defined_at(code: Any) -> str | None:
    function = inspect.unwrap(getattr(code, "__func__", code))
    try:
        return f"{inspect.getsourcefile(function)}:{function.__code__.co_firstlineno}"
    except (TypeError, AttributeError):
        return None


class guard:  # noqa: N801 - used as a function: `with guard(origin, part, hook):`
    """Turn an exception from a plugin's code into a PluginError naming the plugin, the hook, the user's own
    file and line and the fix (exit 2, no Ray traceback); our own parts' errors pass through untouched.
    `code`: the plugin's function being called, named when the failure is in calling it. A plain class, not a
    generator: a runner enters one around every device's training."""

    __slots__ = ("origin", "part", "hook", "code")

    def __init__(self, origin: str, part: str, hook: str, code: Any = None):
        self.origin, self.part, self.hook, self.code = origin, part, hook, code

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, traceback_) -> bool:
        if exc is None or not isinstance(exc, Exception):
            return False
        inner = innermost(exc)
        if isinstance(inner, ScenarioError):
            raise type(inner)(str(inner)) from None
        if not is_plugin(self.origin):
            return False
        # chained to the plugin's own exception: in process (runtime.backend: inline) its traceback, down to
        # the plugin's line, is there for a debugger (python -m pdb) or a notebook's %debug
        raise PluginError(f"plugin {self.origin}: {self.part}'s {self.hook} raised {failure(inner, self.code)}; fix "
                          f"the plugin, then run again ({RESUME_HINT})") from inner


def build_part(registered, part: str, base: type, wrap: Callable, *args: Any):
    """A registered part built by its builder: ours as it comes; a plugin's with the builder guarded, its
    result checked to be a `base` and wrapped by `wrap(built, origin, part)`, which guards and checks every
    later call (availability models, selection policies, server optimizers)."""
    with guard(registered.origin, part, "builder", code=registered.build):  # ours pass through as they are
        built = registered.build(*args)
    if not is_plugin(registered.origin):
        return built
    if not isinstance(built, base):
        raise PluginError(f"plugin {registered.origin}: {part}'s builder returned {type(built).__name__}; return an "
                          f"emulator.extend.{base.__name__} (docs/extending.md)")
    return wrap(built, registered.origin, part)


class MachineError(RuntimeError):
    """Not the input but the machine: Ray could not start, memory or disk ran out. The CLI prints it as one
    line and exits with code 1; nothing already written is lost."""


class ArgumentError(ScenarioError, TypeError):
    """A function of the Python API handed a value it does not take (scenario=42, seeds="3"): the message names
    the function, the parameter and what it takes. Both a ScenarioError and a TypeError."""


def expect(function: str, name: str, value: Any, ok: bool, takes: str) -> None:
    """Raise ArgumentError unless `ok`: `function(name=...)` got `value`, and takes `takes`."""
    if not ok:
        shown = repr(value) if isinstance(value, (str, int, float, bool)) or value is None else type(value).__name__
        raise ArgumentError(f"{function}({name}={shown[:60]}): {name} takes {takes}")

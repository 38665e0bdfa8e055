"""Finding a user's parts: plugin modules named in a scenario (`plugins:`), on the command line
(`--plugin`), or installed packages that declare the `fl_emulator.plugins` entry-point group.

A plugin is a plain importable module that calls `register_*` at import. The driver imports plugins before
it validates a scenario (so their names and configs validate like ours), and every Ray actor imports them
again before it builds anything (a registry filled in the driver is not visible in other processes). A
module that lives in the user's directory rather than in an installed package travels to the workers in
the actors' runtime_env (`py_modules`), so it runs on a cluster whose nodes never saw the file.
"""
from __future__ import annotations

import importlib
import re
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import numpy as np

from emulator.algorithms.base import RoundPlan
from emulator.errors import PluginError, ScenarioError, failure, guard, innermost, is_plugin
from emulator.registry import RegistryError
from emulator.training.local import LocalTraining

ENTRY_POINT_GROUP = "fl_emulator.plugins"
_ENTRY_POINTS_LOADED = False


def load_builtins() -> None:
    """The emulator's own parts, registered through the same calls a plugin makes (once: a module is
    imported once per process)."""
    # imported here, not with this module: importing emulator.parts.plugins (the actors' guards do) must
    # not fill the registries as a side effect; only an entry point's load_parts does
    from emulator.parts import builtins  # noqa: F401  (registers at import)


def load_entry_points() -> None:
    """Import every installed package's `fl_emulator.plugins` entry points, once per process."""
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED = True
    for point in metadata.entry_points(group=ENTRY_POINT_GROUP):
        where = f"entry point {point.name!r} ({point.value}) of {getattr(point.dist, 'name', '?')}"
        try:
            loaded = point.load()
            if callable(loaded) and not isinstance(loaded, type(sys)):
                loaded()
        except Exception as exc:  # a broken installed plugin names itself instead of breaking every run
            raise PluginError(f"{where}: failed to load: {failure(exc)}; fix or uninstall that package") from None


def load_plugins(modules: list[str] | tuple[str, ...], search: list[Path] | tuple[Path, ...] = ()) -> None:
    """Import plugin modules by name, looking also in `search` (the scenario's directory, the working
    directory); a failure names the module and what went wrong, without a traceback."""
    for name in modules:
        if not isinstance(name, str) or not all(part.isidentifier() for part in name.split(".")):
            raise PluginError(f"plugins: {name!r} is not a module name; give a dotted module name such as "
                              "my_lab.fedfoo (a file my_lab/fedfoo.py beside the scenario or on PYTHONPATH)")
        if name in sys.modules:
            continue
        _shipped_first()
        _search(search)
        try:
            importlib.import_module(name)
        except RegistryError as exc:
            raise PluginError(f"plugin {name}: {exc}") from None
        except ModuleNotFoundError as exc:
            if exc.name and name.startswith(exc.name):
                looked = ", ".join(str(p) for p in search) or "sys.path"
                raise PluginError(f"plugins: no module {name!r} (looked beside the scenario and in {looked}, then "
                                  "on sys.path); put it there, install its package, or fix the name") from None
            raise PluginError(f"plugin {name}: failed to import: {failure(exc)}") from None
        except Exception as exc:
            raise PluginError(f"plugin {name}: failed to import: {failure(exc)}") from None


def module_files(modules: list[str]) -> dict[str, str]:
    """Each plugin's file (or package directory), for modules that are not installed packages: what Ray
    must ship to the workers (runtime_env py_modules). Installed plugins are found on the workers' own path."""
    installed = {Path(sysconfig.get_paths()[key]).resolve() for key in ("purelib", "platlib")}
    files = {}
    for name in modules:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None)
        if file is None:
            continue
        top = name.split(".")[0]
        root = Path(sys.modules[top].__file__).resolve()
        root = root.parent if root.name == "__init__.py" else root
        if any(parent in installed for parent in root.parents) or top == "emulator":
            continue
        files[top] = str(root)
    return files


# Ray ships a plugin that is not installed to the workers as a copy (runtime_env py_modules); an error raised
# there names the copy. The driver imported the same module from the user's file: name that instead.
_SHIPPED = re.compile(r"(?:/[^\s():]+)?/runtime_resources/py_modules_files/_ray_pkg_[0-9a-f]+/(?P<rel>[^\s():]+)")


def users_paths(message: str) -> str:
    """`message` with each path into Ray's copy of a plugin replaced by the user's own file."""
    def original(match: re.Match) -> str:
        rel = Path(match["rel"])
        top = rel.parts[0].removesuffix(".py")
        module = sys.modules.get(top)
        file = getattr(module, "__file__", None)
        if file is None:
            return match[0]
        root = Path(file).parent if Path(file).name == "__init__.py" else Path(file)
        return str(root.parent / rel) if root.name == rel.parts[0] else match[0]

    return _SHIPPED.sub(original, message)


def _shipped_first() -> None:
    """In a Ray worker, the plugin copies the driver shipped (runtime_env py_modules) come before every other
    directory on the path: Ray also hands the driver's own path to workers, and a plugin in the driver's
    working directory would otherwise be imported from there, not from the copy the driver validated."""
    shipped = [p for p in sys.path if "/runtime_resources/py_modules_files/" in p]
    if shipped and sys.path[:len(shipped)] != shipped:
        sys.path[:] = shipped + [p for p in sys.path if p not in shipped]


def _search(paths) -> None:
    """Put the plugin's directories on the path (for good: a plugin may import its siblings later)."""
    for path in reversed([str(Path(p).resolve()) for p in paths]):
        if path not in sys.path:
            sys.path.insert(0, path)


class GuardedAlgorithm:
    """A plugin algorithm as the server sees it: every hook call is guarded, and what a hook returns is
    checked against what the server needs (parameters of the model's shape and dtype, a LocalTraining...)."""

    def __init__(self, algorithm, origin: str, name: str, num_params: int):
        self._inner, self._origin, self._num_params = algorithm, origin, num_params
        self._part = f"algorithm {name!r}"

    def __getattr__(self, name: str):
        value = getattr(self._inner, name)
        if not callable(value) or name.startswith("_"):
            return value

        def call(*args, **kwargs):
            with guard(self._origin, self._part, name, code=value):
                result = value(*args, **kwargs)
            self._check(name, result)
            return result
        return call

    def _check(self, hook: str, result) -> None:
        def bad(what: str, fix: str):
            raise PluginError(f"plugin {self._origin}: {self._part}'s {hook} returned {what}; {fix}")

        if hook in ("aggregate", "aggregate_partials", "server_round", "aggregate_edges", "edge_step"):
            params = result[0] if hook == "server_round" and isinstance(result, tuple) else result
            if not isinstance(params, np.ndarray):
                bad(type(params).__name__, "return the next global parameters as a numpy array")
            if params.shape != (self._num_params,):
                bad(f"an array of shape {params.shape}", f"return a flat vector of the model's {self._num_params} "
                    "parameters (the shape of the params it was given)")
            if params.dtype != np.float32:
                bad(f"dtype {params.dtype}", "return float32 parameters, as given (e.g. .astype(np.float32))")
            if not np.isfinite(params).all():
                bad("non-finite parameters (NaN or inf)", "check the update rule (a learning rate too large?)")
        elif hook == "plan_round" and not isinstance(result, RoundPlan):
            bad(type(result).__name__, "return an emulator.algorithms.RoundPlan")
        elif hook == "local_training" and not isinstance(result, LocalTraining):
            bad(type(result).__name__, "return an emulator.training.local.LocalTraining")
        elif hook == "job_payload" and result is not None and (
                not isinstance(result, np.ndarray) or result.shape != (self._num_params,)):
            bad(f"{type(result).__name__} {getattr(result, 'shape', '')}",
                f"return None or a flat float32 vector of {self._num_params} values")

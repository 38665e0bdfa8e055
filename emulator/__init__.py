"""A cross-device federated learning emulator: real training on Ray, simulated wall-clock time.

The Python API (emulator/api/, docs/api.md): `emulator.run`, `emulator.load`, `emulator.sweep`,
`emulator.resume`, `emulator.shutdown`, the results `Run` and `Sweep`, `ScenarioError` for bad input
(`ArgumentError` for an argument of the wrong kind, `PluginError` for a plugin's code failing) and
`MachineError` for the machine failing under a run.
They are imported on first use, so `import emulator` (and the command line) stays fast."""
import warnings

__version__ = "0.1.0"

# Arrays arrive read-only from Ray's object store; the emulator only ever copies out of them.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")

_API = ("run", "load", "sweep", "resume", "shutdown", "Run", "Sweep")
_ERRORS = ("ScenarioError", "PluginError", "MachineError", "ArgumentError")  # emulator/errors.py: light
__all__ = [*_API, *_ERRORS, "RunInterrupted", "__version__"]


def __getattr__(name: str):
    if name in _API:
        from emulator import api

        return getattr(api, name)
    if name in _ERRORS:
        from emulator import errors

        return getattr(errors, name)
    if name == "RunInterrupted":
        from emulator.runtime.interrupts import RunInterrupted

        return RunInterrupted
    raise AttributeError(f"module 'emulator' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])

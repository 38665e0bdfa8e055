"""A cross-device federated learning emulator: real training on Ray, simulated wall-clock time."""
import warnings

__version__ = "0.1.0"

# Arrays arrive read-only from Ray's object store; the emulator only ever copies out of them.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")

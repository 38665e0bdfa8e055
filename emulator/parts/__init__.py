"""Parts: the emulator's built-in algorithms, models, datasets, partitions, selection policies, availability
models and server optimizers, registered as plugins that ship with it (`builtins.py`); loading a user's
plugins (`plugins.py`); loading a scenario at an entry point (`loading.py`: parts first, then the
schema, then the system model's checks); and what is registered, for `emulator parts` (`listing.py`). The
CLI, the API, the driver and each actor's start-up call these; nothing below this layer loads parts.
"""
from emulator.parts.loading import load_parts, load_scenario, scenario_from, validate_scenario

__all__ = ["load_parts", "load_scenario", "scenario_from", "validate_scenario"]

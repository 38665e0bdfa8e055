"""Parts: the emulator's built-in algorithms, models, datasets, partitions, selection policies, availability
models and server optimizers registered as plugins that ship with it (`builtins.py`), and loading a user's
plugins (`plugins.py`) at the entry points: the CLI, the API, the driver and each actor's start-up.
"""

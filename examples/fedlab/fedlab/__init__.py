"""fedlab: an example plugin package for the emulator (an algorithm, a model and a dataset of our own)."""
from fedlab import feddyn, tabular_mlp, user_csv  # noqa: F401  (importing registers them)

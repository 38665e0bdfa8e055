"""fedlab: an example plugin package for the emulator (an algorithm, a model, a dataset and an availability
model of our own)."""
from fedlab import feddyn, nightly, tabular_mlp, user_csv  # noqa: F401  (importing registers them)

"""fedlab: an example plugin package for the emulator (an algorithm, a model, a dataset, an availability
model and a metrics column of our own)."""
from fedlab import fairness, feddyn, nightly, tabular_mlp, user_csv  # noqa: F401  (importing registers them)

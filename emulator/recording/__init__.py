"""A run's record: the run directory and its files (`rundir.py`), checkpoints (`checkpoint.py`), TensorBoard
(`tensorboard.py`), the progress bar (`progress.py`), bias measures of what reported (`bias.py`), and the
`Recorder` that the driver hands each round's row and events to (`recorder.py`).
"""

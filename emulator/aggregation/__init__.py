"""Aggregation: how reports become the next global model. Pure math: the weighted running mean
(`mean.py`), asynchronous staleness weights and FedBuff's buffer (`staleness.py`), server optimizers
(`optimizers.py`) and learning-rate schedules by round (`schedules.py`). No Ray, no clock, no files.
"""

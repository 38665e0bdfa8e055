"""Local training: one device's steps in plain PyTorch (`local.py`) with torch.optim's arithmetic at less cost
(`optimizer.py`), a cohort of devices at once with torch.func (`cohort.py`), and numeric precision
(`precision.py`: bf16 autocast, channels_last). No Ray.
"""

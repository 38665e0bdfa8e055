"""Random streams (emulator/seeding.py): a round's per-device training seeds computed for all its devices at
once must be the integers the one-at-a-time derivation gives, or every run's numbers would move."""
from __future__ import annotations

import numpy as np

from emulator.seeding import torch_seed, torch_seeds


def test_a_round_s_seeds_at_once_are_each_device_s_seed():
    rng = np.random.default_rng(0)
    for seed, use, key in [(0, "train", 0), (7, "train", 3), (2 ** 31 + 5, "finetune", 999),
                           (123456789, "attack", 2 ** 32 - 1), (2 ** 40, "train", 1), (5, "train", 2 ** 33)]:
        devices = np.concatenate([[0, 1, 2 ** 32 - 1], rng.integers(0, 2 ** 32, 300)])
        assert torch_seeds(seed, use, key, devices) == [torch_seed(seed, use, key, int(d)) for d in devices]
    wide = [2 ** 34, 5]  # a key past 32 bits: one by one
    assert torch_seeds(3, "train", 1, wide) == [torch_seed(3, "train", 1, d) for d in wide]
    assert torch_seeds(3, "train", 1, np.zeros(0, np.int64)) == []

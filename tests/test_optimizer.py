"""The device optimizer (emulator/training/optimizer.py) gives torch.optim's numbers bit for bit, step by step."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from emulator.training.local import LocalTraining
from emulator.training.optimizer import LeanOptimizer, make_optimizer

SETTINGS = [
    ("sgd", {"lr": 0.05}),
    ("sgd", {"lr": 0.1, "momentum": 0.9}),
    ("sgd", {"lr": 0.03, "momentum": 0.5, "weight_decay": 1e-3}),
    ("adam", {"lr": 1e-3}),
    ("adam", {"lr": 3e-2, "weight_decay": 5e-4}),
]


class TwoHeads(nn.Module):
    """A model whose second head only learns on some steps: its grad stays None on the others, so the
    optimizer must skip it and start its state late, as torch.optim does."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 16), nn.ReLU())
        self.head, self.other = nn.Linear(16, 5), nn.Linear(16, 5)

    def forward(self, x, use_other: bool):
        features = self.body(x)
        return self.head(features) + (self.other(features) if use_other else 0)


def _trajectory(make, steps: int = 12) -> list[list[torch.Tensor]]:
    torch.manual_seed(0)
    model = TwoHeads()
    optimizer = make(model.parameters())
    generator = torch.Generator().manual_seed(1)
    snapshots = []
    for step in range(steps):
        x = torch.randn(16, 1, 8, 8, generator=generator)
        y = torch.randint(0, 5, (16,), generator=generator)
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(model(x, use_other=step % 3 == 2), y).backward()
        optimizer.step()
        snapshots.append([p.detach().clone() for p in model.parameters()])
    return snapshots


@pytest.mark.parametrize("kind,options", SETTINGS, ids=[f"{k}-{sorted(o)}" for k, o in SETTINGS])
def test_the_lean_optimizer_matches_torch_optim_bit_for_bit(kind, options):
    reference = torch.optim.Adam if kind == "adam" else torch.optim.SGD
    theirs = _trajectory(lambda params: reference(params, **options))
    ours = _trajectory(lambda params: LeanOptimizer(params, kind, **options))
    for step, (a, b) in enumerate(zip(theirs, ours)):
        for index, (x, y) in enumerate(zip(a, b)):
            assert torch.equal(x, y), f"step {step}, parameter {index}: {(x - y).abs().max().item()}"
    assert not torch.equal(theirs[0][-1], theirs[-1][-1])  # the late head did learn, so it was compared


def test_the_device_optimizer_is_lean_on_a_cpu_and_torch_optim_elsewhere():
    parameters = [nn.Parameter(torch.zeros(3))]
    assert isinstance(make_optimizer(LocalTraining(lr=0.1, batch_size=4, local_steps=1), parameters),
                      LeanOptimizer)
    spec = LocalTraining(lr=0.1, batch_size=4, local_steps=1, optimizer="adam")
    assert isinstance(make_optimizer(spec, [nn.Parameter(torch.zeros(3, device="meta"))]), torch.optim.Adam)
    with pytest.raises(ValueError, match="sgd or adam"):
        LeanOptimizer(parameters, "rmsprop", 0.1)

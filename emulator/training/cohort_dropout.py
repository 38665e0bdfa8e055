"""Dropout in cohort training: each device's masks drawn as its own sequential run would draw them.

`nn.Dropout` layers are swapped for a module that takes supplied masks; the masks are drawn from each
device's generator seeded with its seed, call by call, in the memory order of the layer's input, as
torch's CPU dropout draws them after `torch.manual_seed(seed)` (emulator/training/cohort.py explains why).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call
from torch.nn import functional as F

@dataclass
class Masks:
    """How each dropout call of one forward looks per (input layout, batch length), and, inside the
    vmapped function, this forward's masks in call order."""

    layouts: dict | None = None
    queue: list | None = None
    position: int = 0
    recording: list | None = None
    plain: bool = False  # a dropout call whose first dimension is not the batch: use vmap's randomness


class SuppliedDropout(nn.Module):
    """nn.Dropout whose mask comes from the caller (the device's own generator), in call order."""

    def __init__(self, p: float, masks: Masks):
        super().__init__()
        self.p, self.masks = p, masks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        masks = self.masks
        if self.p == 0.0:
            return x  # torch draws nothing for p = 0 ...
        if self.p == 1.0:
            return x * torch.zeros((), dtype=x.dtype, device=x.device)  # ... nor for p = 1
        if masks.recording is not None:
            masks.recording.append((self.p, tuple(x.shape), x.stride(), x.dtype))
            return x
        if masks.plain or masks.queue is None:
            return F.dropout(x, self.p, True)
        mask = masks.queue[masks.position]
        masks.position += 1
        return x * mask


def with_supplied_dropout(model: nn.Module) -> tuple[nn.Module, Masks]:
    """A copy of `model` in training mode whose nn.Dropout layers take supplied masks (the caller's model
    keeps its mode and modules)."""
    masks = Masks()
    net = copy.deepcopy(model)
    for parent in net.modules():
        for name, child in list(parent.named_children()):
            if type(child) is nn.Dropout:
                setattr(parent, name, SuppliedDropout(child.p, masks))
    return net.train(), masks


def layout_key(x: torch.Tensor) -> tuple:
    """What decides the memory layout of a batch gathered from x: its per-sample shape and strides."""
    return tuple(x.shape[1:]), tuple(x.stride()[1:]), x.dtype


def dropout_layouts(net, masks: Masks, inputs, plans, params, device) -> dict:
    """Each dropout call's (p, size, strides, dtype) for every (input layout, batch length) the devices
    meet, from plain forwards on such batches.

    The strides matter: torch's CPU dropout fills its mask in the memory order of its input (empty_like
    keeps the layout), and that layout follows the data's, e.g. channels_last activations after a
    convolution of (N, 1, H, W) images whose channel stride numpy left at 0. Empty (and `masks.plain`) when
    some call's first dimension is not the batch: those models get vmap's randomness instead."""
    if not any(isinstance(m, SuppliedDropout) for m in net.modules()):
        return {}
    layouts = {}
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        for x, plan in zip(inputs, plans):
            for length in sorted({len(batch) for batch in plan}):
                key = (layout_key(x), length)
                if key not in layouts:
                    masks.recording = []
                    functional_call(net, params, (x.to(device)[torch.arange(length, device=device)],))
                    layouts[key] = masks.recording
    masks.recording = None
    calls = list(layouts.values())
    if any(len(c) != len(calls[0]) or any(size[0] != key[1] or size[1:] != first[1][1:]
                                          for (_, size, _, _), first in zip(c, calls[0]))
           for key, c in layouts.items()):
        masks.plain = True
        return {}
    return layouts


def dropout_generator(seed: int, device: torch.device) -> torch.Generator:
    """On CPU, the CPU generator's state after torch.manual_seed(seed), which the runner's sequential path
    sets; on a GPU a generator there seeded alike (the device's own stream, not the fused dropout's)."""
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


def draw_masks(layouts, keys, generators, active, lengths, width, device) -> list[torch.Tensor]:
    """Each active device's masks for this step, drawn from its generator in call order as torch's CPU
    dropout draws them (bernoulli_(1 - p) into a tensor laid out like the input, then / (1 - p)), padded
    to the step's batch width."""
    if not layouts:
        return []
    first = layouts[(keys[active[0]], int(lengths[active[0]]))]
    drawn = [torch.zeros((len(active), width) + size[1:], dtype=dtype, device=device) for _, size, _, dtype in first]
    for row, d in enumerate(active):
        length = int(lengths[d])
        for call, (p, size, stride, dtype) in enumerate(layouts[(keys[d], length)]):
            noise = torch.empty_strided(size, stride, dtype=dtype, device=device)
            noise.bernoulli_(1 - p, generator=generators[d])
            drawn[call][row, :length] = noise.div_(1 - p)
    return drawn

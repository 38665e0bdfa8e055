"""The optimizer steps of cohort training on stacked parameters: torch.optim's single-tensor SGD (momentum,
weight decay) and Adam arithmetic, with per-device rates and devices that sit a step out."""
from __future__ import annotations

import numpy as np
import torch

from emulator.training.optimizer import ADAM_BETAS, ADAM_EPS  # torch.optim.Adam's defaults

def per_device(values: list[float], active: np.ndarray, device) -> float | torch.Tensor:
    """A hyperparameter for the active devices: a Python float when they share it (then the update uses
    the very kernels torch.optim uses), else a (G,) tensor."""
    chosen = [values[d] for d in active]
    if all(v == chosen[0] for v in chosen):
        return chosen[0]
    return torch.tensor(chosen, dtype=torch.float64, device=device)


def column(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A (G,) float64 hyperparameter as a (G, 1, ...) column in `like`'s dtype (one rounding, as torch
    rounds a Python float)."""
    return value.to(like.dtype).view(-1, *[1] * (like.dim() - 1))


def scale(rate, factor: float, like: torch.Tensor):
    """factor * rate, as torch folds a Python float."""
    return factor * rate if isinstance(rate, float) else column(factor * rate, like)


def add_(x: torch.Tensor, a, y: torch.Tensor) -> torch.Tensor:
    """x += a * y in place, with torch's alpha when a is shared (torch.optim's own kernel)."""
    if isinstance(a, float):
        return x.add_(y, alpha=a)
    return x.add_(column(a, x) * y)


def sgd_(p, g, buffer, rates) -> None:
    """torch.optim.SGD's single-tensor step (no dampening, no Nesterov), in place on p, g and buffer."""
    wd, momentum, lr = rates["weight_decay"], rates["momentum"], rates["lr"]
    if not (isinstance(wd, float) and wd == 0):
        add_(g, wd, p)
    if buffer is not None:  # zeros at the start: 0 * m + g is the clone torch.optim takes on step 1
        buffer.mul_(momentum if isinstance(momentum, float) else column(momentum, buffer)).add_(g)
        g = buffer
    add_(p, -lr, g)


def adam_(p, g, m, v, rates, step: int) -> None:
    """torch.optim.Adam's single-tensor step (L2 weight decay, no amsgrad) at step `step`, in place
    (every active device is at the same step: devices only ever drop out)."""
    beta1, beta2 = ADAM_BETAS
    wd, lr = rates["weight_decay"], rates["lr"]
    if not (isinstance(wd, float) and wd == 0):
        add_(g, wd, p)
    m.lerp_(g, 1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    bias1, bias2 = 1 - beta1 ** step, 1 - beta2 ** step
    denom = (v.sqrt() / bias2 ** 0.5).add_(ADAM_EPS)
    if isinstance(lr, float):
        p.addcdiv_(m, denom, value=-(lr / bias1))
    else:
        p.sub_(column(lr / bias1, p) * (m / denom))


def restore_(keep: torch.Tensor, value: torch.Tensor, old: torch.Tensor) -> None:
    """Put back the old rows of the devices in `keep`."""
    value.copy_(torch.where(keep.view(-1, *[1] * (old.dim() - 1)), old, value))

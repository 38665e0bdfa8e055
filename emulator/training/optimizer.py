"""A device's optimizer: torch.optim.SGD's and Adam's arithmetic, bit for bit, at a fraction of their cost per step.

A device trains a few steps of a small model, so what torch.optim does around each update (profiler ranges,
hooks, grad-mode switches, a dynamo guard whose first call imports torch._dynamo: ~1 s a process) costs more
than the update itself: the quickstart's MLP spent 20% of its training in `step` and `zero_grad`. On a CPU,
`LeanOptimizer` runs the single-tensor steps torch.optim runs there (the same kernels, in the same order,
so the same bits: tests/test_optimizer.py compares them step by step); elsewhere (CUDA, where torch.optim
runs its multi-tensor kernels) the run keeps torch.optim itself.
"""
from __future__ import annotations

import torch

ADAM_BETAS = (0.9, 0.999)
ADAM_EPS = 1e-8


def make_optimizer(spec, parameters):
    """`spec` (a LocalTraining) says which: SGD with momentum and L2 weight decay, or Adam with L2 weight
    decay; lean where the parameters live on the CPU."""
    parameters = list(parameters)
    if any(p.device.type != "cpu" for p in parameters):
        if spec.optimizer == "adam":
            return torch.optim.Adam(parameters, lr=spec.lr, betas=ADAM_BETAS, eps=ADAM_EPS,
                                    weight_decay=spec.weight_decay)
        return torch.optim.SGD(parameters, lr=spec.lr, momentum=spec.momentum, weight_decay=spec.weight_decay)
    return LeanOptimizer(parameters, spec.optimizer, spec.lr, spec.momentum, spec.weight_decay)


class LeanOptimizer:
    """The `zero_grad(set_to_none=True)` / `step()` pair of torch.optim.SGD (no dampening, no Nesterov) or
    torch.optim.Adam (no amsgrad), without the machinery around them. As in torch.optim, a parameter
    without a gradient is skipped and its state (momentum buffer, Adam's moments and step) starts on the
    first step it has one."""

    def __init__(self, parameters, kind: str, lr: float, momentum: float = 0.0, weight_decay: float = 0.0):
        if kind not in ("sgd", "adam"):
            raise ValueError(f"optimizer {kind!r}: sgd or adam")
        self.parameters = list(parameters)
        self.kind, self.lr, self.momentum, self.weight_decay = kind, float(lr), float(momentum), float(weight_decay)
        self.state: dict[int, list] = {}  # parameter index -> [momentum buffer] or [step, exp_avg, exp_avg_sq]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for parameter in self.parameters:
            if set_to_none:
                parameter.grad = None
            elif parameter.grad is not None:
                parameter.grad.detach_().zero_()

    @torch.no_grad()
    def step(self) -> None:
        update = self._adam if self.kind == "adam" else self._sgd
        for index, parameter in enumerate(self.parameters):
            if parameter.grad is not None:
                update(index, parameter, parameter.grad)

    def _sgd(self, index: int, p: torch.Tensor, grad: torch.Tensor) -> None:
        if self.weight_decay != 0:
            grad = grad.add(p, alpha=self.weight_decay)
        if self.momentum != 0:
            state = self.state.get(index)
            if state is None:
                buffer = torch.clone(grad).detach()
                self.state[index] = [buffer]
            else:
                buffer = state[0]
                buffer.mul_(self.momentum).add_(grad, alpha=1)
            grad = buffer
        p.add_(grad, alpha=-self.lr)

    def _adam(self, index: int, p: torch.Tensor, grad: torch.Tensor) -> None:
        beta1, beta2 = ADAM_BETAS
        state = self.state.get(index)
        if state is None:
            state = self.state[index] = [0, torch.zeros_like(p, memory_format=torch.preserve_format),
                                         torch.zeros_like(p, memory_format=torch.preserve_format)]
        state[0] += 1
        step, exp_avg, exp_avg_sq = state
        if self.weight_decay != 0:
            grad = grad.add(p, alpha=self.weight_decay)
        exp_avg.lerp_(grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        bias_correction1 = 1 - beta1 ** float(step)  # torch.optim keeps the step as a float32 tensor
        bias_correction2 = 1 - beta2 ** float(step)
        step_size = self.lr / bias_correction1
        denom = (exp_avg_sq.sqrt() / bias_correction2 ** 0.5).add_(ADAM_EPS)
        p.addcdiv_(exp_avg, denom, value=-step_size)

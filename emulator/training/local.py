"""Local training of one device: plain PyTorch, no Ray, so the runner and the baselines share it."""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from emulator.training import precision as numerics
from emulator.training.optimizer import make_optimizer


@dataclass(frozen=True)
class LocalTraining:
    """What a device runs in a round; built by the algorithm, executed by a runner."""

    lr: float
    batch_size: int
    local_steps: int | None = None
    local_epochs: int | None = None
    optimizer: str = "sgd"
    momentum: float = 0.0
    weight_decay: float = 0.0
    prox_mu: float = 0.0  # FedProx: (mu / 2) ||w - w_global||^2
    with_server_data: bool = False  # DS: the device also trains on the server's data set

    def steps_for(self, num_samples: int) -> int:
        if num_samples == 0:
            return 0
        if self.local_steps is not None:
            return self.local_steps
        return self.local_epochs * math.ceil(num_samples / min(self.batch_size, num_samples))

    def samples_processed(self, num_samples):
        """How many samples pass through the model (for a count or an array of counts): what a device's
        compute time is charged for."""
        n = np.asarray(num_samples)
        if self.local_epochs is not None:
            return self.local_epochs * n
        return self.local_steps * np.minimum(self.batch_size, n)


@dataclass
class TrainStats:
    steps: int
    loss: float  # mean minibatch loss over the local steps
    accuracy: float  # fraction of training samples classified correctly while training


def train_locally(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, spec: LocalTraining,
                  generator: torch.Generator, correction: list[torch.Tensor] | None = None,
                  precision: str = "fp32", anchor: list[torch.Tensor] | None = None) -> TrainStats:
    """Run the device's local steps in place on `model`.

    Minibatches walk through a shuffled order and reshuffle when it is used up, so K steps and E epochs
    are the same loop. All randomness comes from `generator` (and the caller's torch seed for dropout).
    `correction` (one tensor per parameter) is added to every gradient: SCAFFOLD's c - c_i.
    `precision` (runtime.precision): "bf16" runs the forward pass and loss under bf16 autocast, the
    weights, gradients and optimizer staying float32 (emulator/training/precision.py).
    `anchor` (one tensor per parameter): where `spec.prox_mu` pulls towards, if not the starting weights
    (Ditto's personal model is pulled towards the global model, not towards where it starts).
    """
    n = len(labels)
    steps = spec.steps_for(n)
    if steps == 0:
        return TrainStats(0, float("nan"), float("nan"))
    batch = min(spec.batch_size, n)
    optimizer = make_optimizer(spec, model.parameters())
    if spec.prox_mu > 0 and anchor is None:
        anchor = [p.detach().clone() for p in model.parameters()]
    elif spec.prox_mu == 0:
        anchor = None
    inputs = numerics.prepare_inputs(inputs, model, precision)
    model.train()
    loss_sum = torch.zeros((), device=inputs.device)
    correct = torch.zeros((), device=inputs.device, dtype=torch.int64)
    seen = 0
    order = torch.randperm(n, generator=generator).to(inputs.device)
    position = 0
    for _ in range(steps):
        if position >= n:
            order = torch.randperm(n, generator=generator).to(inputs.device)
            position = 0
        index = order[position:position + batch]
        position += batch
        x, y = inputs[index], labels[index]
        with numerics.autocast(precision, inputs.device):
            logits = model(x)
            loss = F.cross_entropy(logits, y)
        objective = loss
        if anchor is not None:
            objective = loss + 0.5 * spec.prox_mu * sum(
                (p - a).pow(2).sum() for p, a in zip(model.parameters(), anchor))
        optimizer.zero_grad(set_to_none=True)
        objective.backward()
        if correction is not None:
            for parameter, term in zip(model.parameters(), correction):
                if parameter.grad is not None:
                    parameter.grad.add_(term)
        optimizer.step()
        loss_sum += loss.detach()
        correct += (logits.detach().argmax(1) == y).sum()
        seen += len(y)
    return TrainStats(steps, float(loss_sum) / steps, float(correct) / seen)


def evaluate(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, batch_size: int) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of `model` on a labelled set."""
    loss, accuracy, _, _ = evaluate_by_class(model, inputs, labels, batch_size)
    return loss, accuracy


@torch.no_grad()
def evaluate_by_class(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, batch_size: int,
                      num_classes: int | None = None, precision: str = "fp32"
                      ) -> tuple[float, float, np.ndarray, np.ndarray]:
    """`evaluate`, plus per class how many samples were classified correctly and how many there are (so
    that a skewed participation shows in the classes the model neglects). Their sums are the overall
    counts: the accuracy is correct.sum() / total.sum(). `precision` as in train_locally."""
    model.eval()
    classes = num_classes if num_classes is not None else int(labels.max()) + 1 if len(labels) else 0
    if len(labels) == 0:
        return float("nan"), float("nan"), np.zeros(classes, np.int64), np.zeros(classes, np.int64)
    loss_sum = torch.zeros((), dtype=torch.float64, device=inputs.device)
    correct = torch.zeros(classes, dtype=torch.int64, device=inputs.device)
    for start in range(0, len(labels), batch_size):
        x, y = inputs[start:start + batch_size], labels[start:start + batch_size]
        x = numerics.prepare_inputs(x, model, precision)
        with numerics.autocast(precision, inputs.device):
            logits = model(x)
        loss_sum += F.cross_entropy(logits.float(), y, reduction="sum").double()
        correct += torch.bincount(y[logits.argmax(1) == y], minlength=classes)[:classes]
    total = torch.bincount(labels, minlength=classes)[:classes]
    right = correct.cpu().numpy().astype(np.int64)
    return (float(loss_sum) / len(labels), float(right.sum()) / len(labels), right,
            total.cpu().numpy().astype(np.int64))


@torch.no_grad()
def evaluate_per_sample(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, batch_size: int,
                        precision: str = "fp32") -> tuple[np.ndarray, np.ndarray]:
    """Each sample's cross-entropy (float64) and whether the model classifies it right: what per-device
    scores are summed from, in one pass over many devices' small test sets at once."""
    model.eval()
    losses, rights = [], []
    for start in range(0, len(labels), batch_size):
        x, y = inputs[start:start + batch_size], labels[start:start + batch_size]
        x = numerics.prepare_inputs(x, model, precision)
        with numerics.autocast(precision, inputs.device):
            logits = model(x)
        losses.append(F.cross_entropy(logits.float(), y, reduction="none").double().cpu())
        rights.append((logits.argmax(1) == y).cpu())
    if not losses:
        return np.zeros(0, np.float64), np.zeros(0, bool)
    return torch.cat(losses).numpy(), torch.cat(rights).numpy()


def set_torch_arithmetic(torch_threads: int | None) -> int:
    """Fix how this process's torch computes: denormal floats flushed to zero, and the intra-op thread count
    `runtime.torch_threads`, else 1. Returns the count. Called by every process that trains or evaluates:
    runners and the server. In a run in process (runtime.backend: inline) the driver's own arithmetic is
    left as it was: `denormals_flushed` sets the flush around each of the run's calls only.

    Denormals (magnitudes below 1.2e-38) are flushed to zero, as TensorFlow does on CPUs by default and GPUs
    do in most kernels: an LSTM's saturated gates and Adam's small moments produce them, and a CPU computes
    with them tens of times slower, so an LSTM's local training went 4-5x slower as it learned
    (benchmarks/denormals.py). A run's numbers differ from PyTorch's default only where such values arose.
    Set before the thread pool starts, whose threads inherit it.

    The thread count is part of the arithmetic, not only of the speed: with more than one thread, oneDNN's
    convolution backward and MKL's matrix products for small outputs split their sums over the minibatch
    between threads, so the same step gives weights that differ in the last bits with 1 and 2 threads
    (and the difference grows over training). One thread unless asked otherwise keeps a run's numbers
    independent of its CPU shares (runtime.num_cpus, server_num_cpus), of OMP_NUM_THREADS and of the
    machine's core count.
    """
    torch.set_flush_denormal(True)  # False where the CPU cannot (no SSE3): the default arithmetic then
    threads = torch_threads or 1
    torch.set_num_threads(threads)
    return threads


def flushes_denormals() -> bool:
    """Whether this thread's arithmetic flushes denormal floats to zero (1e-39 reads as 0). Asked of a numpy
    scalar, which shares the thread's floating-point state with torch: a microsecond, where a torch tensor
    takes ten (an in-process run asks at every call, `denormals_flushed`)."""
    return bool(np.float32(1e-39) * np.float32(1.0) == 0)


@contextmanager
def denormals_flushed():
    """This thread's arithmetic as a runner's for the duration (denormals flushed to zero), then as it was:
    for the runner and server calls of a run in the user's own process, whose numpy and torch must compute
    afterwards as they did before (a flag left on would flush their denormals too)."""
    before = flushes_denormals()
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(before)


def seed_dropout(seed: int, device: torch.device | str = "cpu") -> None:
    """What torch.manual_seed(seed) does for the generators local training draws dropout masks from: the
    CPU's, and the GPU's when it trains on one. torch.manual_seed also queues a seed for every other
    accelerator kind, each recording the caller's stack for its error messages: 0.1-0.3 ms a device."""
    torch.default_generator.manual_seed(seed)
    if torch.device(device).type == "cuda":
        torch.cuda.manual_seed(seed)


def seeded_generator(seed: int) -> torch.Generator:
    """A CPU generator: minibatch orders then match across CPU and GPU runners."""
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    return generator


def as_device_tensors(x: torch.Tensor, y: torch.Tensor, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    if device.type == "cpu":
        return x, y
    return x.to(device, non_blocking=True), y.to(device, non_blocking=True)

"""Cohort-vectorised local training: G devices' local steps at once with torch.func.

A runner training one device at a time pays per-step overhead (autograd, the optimizer, Python) that a
small model's arithmetic does not cover; here each parameter is stacked G times and one
`vmap(grad(...))` over (stacked parameters, per-device minibatch) computes every device's gradient in
one batched pass, then the optimizer update runs on the stacked tensors. Each device still follows
`emulator.training.local.train_locally`:

- **Data order.** A device's minibatches are drawn from `seeded_generator(seed)` by the same walk through
  shuffled orders (`batch_plan`): same indices, same partial last batch of an epoch, same reshuffles.
- **Step counts.** Devices with fewer steps (fewer samples under `local_epochs`, none at all, other
  `local_steps`) drop out of the later steps: each step trains only the devices still active (their
  rows are gathered, updated and written back), so a finished device's parameters and optimizer state
  stay as they were and cost nothing. Batches of different sizes in one step (a partial last batch,
  another `batch_size`) are padded to the step's largest; padded samples weigh 0 in the loss.
- **Dropout.** `nn.Dropout` layers take masks drawn from the device's own generator seeded with its seed,
  call by call, as torch's CPU dropout draws them after `torch.manual_seed(seed)` (what the runner does),
  in the memory order of the layer's input: on CPU they are the sequential path's own masks, and a
  device's result never depends on the other devices in its group. Other random modules (Dropout2d,
  AlphaDropout, F.dropout inside a forward) draw from the global torch generator under
  `vmap(randomness="different")`: valid training, but their draws depend on the group.
- **Client-side terms.** FedProx's proximal gradient mu (w - w_global), SCAFFOLD's correction added to
  every gradient, SGD with momentum and (L2) weight decay, and Adam, as torch.optim.SGD's and
  torch.optim.Adam's single-tensor steps compute them (Adam with betas (0.9, 0.999), eps 1e-8); every
  LocalTraining field but the optimizer kind may differ per device.

Agreement with the sequential path (fp32, CPU, tests/test_cohort.py): the same arithmetic but for the
summation order inside batched matrix products and grouped convolutions, so parameters agree to ~1e-7
after 10 steps (tested <= 1e-5), losses to ~1e-7, accuracies exactly. Two honest exceptions: Adam divides
by sqrt(v) + eps, so where a gradient entry nearly cancels its last-bit difference becomes a step of up
to ~lr (measured up to 5e-3 x lr; in fp64 both paths agree to float32's last bit); and a rounding
difference can flip a ReLU or max-pool decision at a near-tie, which moves that device by about
lr x one sample's gradient / batch (on real Fashion-MNIST: 2 of 1000 MLP devices by up to 7e-5 over 10
steps). On a GPU the sequential path draws dropout in its fused kernel, so dropout models agree there
only in distribution.

Speed (benchmarks/cohort.py, one thread, 2-core AMD EPYC, fp32): the MLP round takes ~0.6x the
one-at-a-time time in groups of 50-100 (the batched matrix products then run near the core's peak, which
is the floor); the FAST CNN gains nothing on a CPU (its convolutions already fill the core one device at a
time, and vmap's grouped convolutions are no faster). Large groups need `keep_freed_memory()`.

`supports(model)` says when a model cannot take this path (BatchNorm, buffers, recurrent layers): the
caller then trains those devices one at a time. The dropout masks are drawn in cohort_dropout.py, the
optimizer steps on stacked tensors are cohort_steps.py.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad, vmap
from torch.nn import functional as F
from torch.nn.modules.batchnorm import _BatchNorm

from emulator.training import precision as numerics
from emulator.training.local import LocalTraining, TrainStats, seeded_generator
from emulator.training.cohort_dropout import (Masks, draw_masks, dropout_generator, dropout_layouts, layout_key,
                                              with_supplied_dropout)
from emulator.training.cohort_steps import adam_, per_device, restore_, scale, sgd_


def supports(model: nn.Module) -> str | None:
    """None when `train_cohort` can train `model`, else why not (the caller falls back to one device at a
    time)."""
    for name, module in model.named_modules():
        label = f"{name or 'the model'} ({type(module).__name__})"
        if isinstance(module, _BatchNorm):
            return (f"{label} is a BatchNorm layer: its statistics mix the samples of a minibatch (padding a "
                    "device's short batch would change them) and its running statistics are buffers that "
                    "training updates in place, which vmap cannot do per device")
        if isinstance(module, nn.RNNBase):
            return (f"{label} is a recurrent layer: torch has no vmap batching rule for its fused kernel "
                    "(aten::mkldnn_rnn_layer on CPU, cuDNN on GPU), so torch.func would loop over the devices "
                    "one by one: right results, no gain")
        if isinstance(module, (nn.Embedding, nn.EmbeddingBag)) and module.sparse:
            return f"{label} has sparse gradients, which torch.func.grad does not produce"
    buffers = [name for name, _ in model.named_buffers()]
    if buffers:
        return (f"the model has buffers ({', '.join(buffers[:4])}{', ...' if len(buffers) > 4 else ''}): state "
                "that training may change and that travels in the parameter vector; the vectorised path "
                "trains parameters only")
    return None


def keep_freed_memory() -> bool:
    """Make glibc serve large blocks from its heap and keep freed memory (mallopt M_MMAP_MAX = 0,
    M_TRIM_THRESHOLD = 2 GiB). Returns whether it could (False without glibc).

    A vectorised step allocates G times one device's activations and gradients; blocks above glibc's mmap
    ceiling (32 MiB at most) are otherwise mapped and unmapped on every step and page-faulted in anew,
    which made the FAST CNN group of 10 two to three times slower on a loaded 2-core machine. Process-wide
    and for the process's lifetime (its memory stays at its peak): call it once in a process that trains
    cohorts, such as a runner. The environment variables MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=... do
    the same from a process's start.
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_max = -1, -4  # glibc's malloc.h
    return bool(mallopt(m_mmap_max, 0)) and bool(mallopt(m_trim_threshold, 2 ** 31 - 1))


def batch_plan(num_samples: int, spec: LocalTraining, generator: torch.Generator) -> list[torch.Tensor]:
    """The sample indices of each local step, drawn from `generator` exactly as `train_locally` draws them
    (a shuffled order walked batch by batch, reshuffled when used up; the last batch of a pass may be
    short)."""
    steps = spec.steps_for(num_samples)
    if steps == 0:
        return []
    batch = min(spec.batch_size, num_samples)
    order = torch.randperm(num_samples, generator=generator)
    position, plan = 0, []
    for _ in range(steps):
        if position >= num_samples:
            order = torch.randperm(num_samples, generator=generator)
            position = 0
        plan.append(order[position:position + batch])
        position += batch
    return plan


def train_cohort(model: nn.Module, inputs: Sequence[torch.Tensor], labels: Sequence[torch.Tensor],
                 specs: Sequence[LocalTraining], seeds: Sequence[int],
                 corrections: Sequence[np.ndarray | torch.Tensor | None] | None = None,
                 check: bool = True, precision: str = "fp32") -> list[tuple[np.ndarray, TrainStats]]:
    """Train G devices from `model`'s current parameters, each as `train_locally` would, all at once.

    inputs[d], labels[d]: device d's samples (float features or int64 token ids; labels int64), any
    number including 0 (for `with_server_data` the caller appends the server's samples, as the runner
    does). specs[d]: its LocalTraining (one optimizer kind for the group; every other field may differ).
    seeds[d]: its training seed (DeviceJob.seed): data order from `seeded_generator(seed)`, dropout masks
    from a generator on the model's device seeded with it. corrections[d]: SCAFFOLD's c - c_i as a flat
    vector in the `emulator.params.flatten` layout, or None.

    Returns per device its trained parameters as a flat float32 vector in the `params.flatten` layout
    (subtract the global vector for the delta) and its TrainStats. `model` itself is left unchanged.
    With `check`, a model that `supports` refuses raises ValueError. `precision` (runtime.precision):
    "bf16" runs each device's forward pass under bf16 autocast, as train_locally does (weights, gradients
    and optimizer state stay float32).
    """
    reason = supports(model)
    if check and reason is not None:
        raise ValueError(f"cohort training cannot train this model: {reason}")
    count = len(specs)
    if not (len(inputs) == len(labels) == len(seeds) == count):
        raise ValueError("train_cohort: inputs, labels, specs and seeds need one entry per device")
    device = next(model.parameters()).device
    sizes = [len(y) for y in labels]
    plans = [batch_plan(n, spec, seeded_generator(seed)) for n, spec, seed in zip(sizes, specs, seeds)]
    steps = np.array([len(plan) for plan in plans], dtype=np.int64)
    kinds = {spec.optimizer == "adam" for spec, s in zip(specs, steps) if s > 0}
    if len(kinds) > 1:
        raise ValueError("train_cohort: one optimizer kind per group (adam and sgd devices are trained apart)")
    adam = kinds == {True}

    net, masks = with_supplied_dropout(model)
    dtype = next(model.parameters()).dtype  # the loss weights' (fp32 normally; fp64 in the exactness tests)
    names = [name for name, _ in model.named_parameters()]
    start = dict(model.named_parameters())
    trainable = [name for name in names if start[name].requires_grad]
    frozen = {name: start[name].detach() for name in names if name not in trainable}
    layout = _flat_layout(model)
    initial = torch.cat([start[name].detach().reshape(-1) for name in layout]).to("cpu", torch.float32)
    results_flat = initial.unsqueeze(0).repeat(count, 1)
    stats = [TrainStats(0, float("nan"), float("nan")) for _ in range(count)]
    if steps.max(initial=0) == 0:
        return [(row.numpy(), stat) for row, stat in zip(results_flat, stats)]

    x_all = torch.cat([x.to(device) for x in inputs])
    y_all = torch.cat([y.to(device) for y in labels])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    index, length = _stack_plans(plans, offsets, int(steps.max()))
    first = int(np.flatnonzero(steps)[0])
    masks.layouts = dropout_layouts(net, masks, inputs, plans, ({k: start[k] for k in trainable}, frozen), device)
    keys = [layout_key(x) for x in inputs]
    unused = _unused(net, trainable, start, frozen, x_all[offsets[first]:offsets[first] + 1],
                     y_all[offsets[first]:offsets[first] + 1])

    params = {k: start[k].detach().unsqueeze(0).repeat(count, *[1] * start[k].dim()) for k in trainable}
    hyper = {field: [float(getattr(spec, field)) for spec in specs]
             for field in ("lr", "momentum", "weight_decay", "prox_mu")}
    anchor = {k: start[k].detach().clone() for k in trainable} if any(hyper["prox_mu"]) else None
    correction = _stack_corrections(model, corrections, count, device) if corrections is not None else None
    state = {}
    if adam:
        state = {f"{slot}:{k}": torch.zeros_like(params[k]) for k in trainable for slot in ("m", "v")}
    elif any(hyper["momentum"]):
        state = {f"buf:{k}": torch.zeros_like(params[k]) for k in trainable}
    generators = [dropout_generator(seed, device) for seed in seeds] if masks.layouts else None

    loss_sum = torch.zeros(count, device=device)
    correct = torch.zeros(count, dtype=torch.int64, device=device)
    step_grad = vmap(grad(_objective(net, masks, frozen, precision, device), has_aux=True), randomness="different")
    for s in range(int(steps.max())):
        active = np.flatnonzero(steps > s)
        full = len(active) == count
        rows = torch.as_tensor(active, device=device)
        width = int(length[s, active].max())
        take = torch.as_tensor(index[s, active, :width], device=device)
        weight = (torch.arange(width) < torch.as_tensor(length[s, active, None])).to(device, dtype)
        drawn = draw_masks(masks.layouts, keys, generators, active, length[s], width, device)
        local = params if full else {k: v[rows] for k, v in params.items()}
        grads, (losses, hits) = step_grad(local, x_all[take], y_all[take], weight, drawn)
        loss_sum[rows] += losses
        correct[rows] += hits
        rates = {field: per_device(values, active, device) for field, values in hyper.items()}
        keep = None
        if unused:  # torch.optim leaves a parameter without a gradient alone; the proximal term gives one
            keep = torch.as_tensor([hyper["prox_mu"][d] == 0 for d in active], device=device)
        for k in trainable:
            # in place on the stacks when every device is active, else on the active rows' copies
            p = local[k]
            slots = {slot: state[f"{slot}:{k}"] if full else state[f"{slot}:{k}"][rows]
                     for slot in ("m", "v", "buf") if f"{slot}:{k}" in state}
            held = (p.clone(), {n: t.clone() for n, t in slots.items()}) if keep is not None and k in unused else None
            g = grads[k]
            if anchor is not None:
                g.add_(scale(rates["prox_mu"], 0.5, g) * (2 * (p - anchor[k])))
            if correction is not None:
                g.add_(correction[k] if full else correction[k][rows])
            if adam:
                adam_(p, g, slots["m"], slots["v"], rates, s + 1)
            else:
                sgd_(p, g, slots.get("buf"), rates)
            if held is not None:
                restore_(keep, p, held[0])
                for slot, value in slots.items():
                    restore_(keep, value, held[1][slot])
            if not full:
                params[k][rows] = p
                for slot, value in slots.items():
                    state[f"{slot}:{k}"][rows] = value

    seen = length.sum(axis=0)
    losses, hits = loss_sum.cpu(), correct.cpu()
    columns = [params[name] if name in params else frozen[name].unsqueeze(0).expand(count, *frozen[name].shape)
               for name in layout]
    results_flat = torch.cat([c.detach().reshape(count, -1) for c in columns], dim=1).to("cpu", torch.float32)
    for d in np.flatnonzero(steps):
        stats[d] = TrainStats(int(steps[d]), float(losses[d]) / int(steps[d]), float(hits[d]) / int(seen[d]))
    return [(row.numpy(), stat) for row, stat in zip(results_flat, stats)]


def _objective(net: nn.Module, masks: Masks, frozen: dict, precision: str = "fp32", device="cpu"):
    """One device's weighted mean cross-entropy (padded samples weigh 0), its value and correct count."""
    def objective(params, x, y, weight, drawn):
        masks.queue, masks.position = drawn, 0
        try:
            with numerics.autocast(precision, device):
                logits = functional_call(net, (params, frozen), (x,))
        finally:
            masks.queue = None
        if precision != "fp32":
            logits = logits.float()  # bf16 autocast's logits: the loss in float32, as autocast computes it
        loss = (F.cross_entropy(logits, y, reduction="none") * weight).sum() / weight.sum().clamp(min=1)
        hits = ((logits.argmax(1) == y) & (weight > 0)).sum()
        return loss, (loss.detach(), hits)
    return objective


def _unused(net, trainable, start, frozen, x, y) -> set[str]:
    """Trainable parameters the loss does not reach (torch.optim skips them: their grad stays None)."""
    params = {k: start[k].detach().requires_grad_(True) for k in trainable}
    with torch.random.fork_rng(devices=[]):
        loss = F.cross_entropy(functional_call(net, (params, frozen), (x,)), y)
    grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    return {k for k, g in zip(trainable, grads) if g is None}


def _flat_layout(model: nn.Module) -> list[str]:
    """The parameter name behind each entry of `params.flatten` (state-dict order, tied weights repeated)."""
    by_id = {}
    for name, p in model.named_parameters():
        by_id.setdefault(id(p), name)
    return [by_id[id(t)] for t in model.state_dict(keep_vars=True).values() if torch.is_floating_point(t)]


def _stack_corrections(model, corrections, count, device) -> dict[str, torch.Tensor] | None:
    """Per trainable parameter, a (G, *shape) stack of the devices' corrections (zeros for None), sliced
    from the flat vectors as `params.per_parameter` slices them."""
    if all(c is None for c in corrections):
        return None
    offsets, offset = {}, 0
    for t in model.state_dict(keep_vars=True).values():
        if torch.is_floating_point(t):
            offsets[id(t)] = offset
            offset += t.numel()
    flat = torch.zeros(count, offset, dtype=torch.float32)
    for d, c in enumerate(corrections):
        if c is not None:
            flat[d] = torch.as_tensor(np.asarray(c, dtype=np.float32))
    return {name: flat[:, offsets[id(p)]:offsets[id(p)] + p.numel()].reshape(count, *p.shape).to(device)
            for name, p in model.named_parameters() if p.requires_grad}


def _stack_plans(plans, offsets, steps) -> tuple[np.ndarray, np.ndarray]:
    """index[s, d, :length[s, d]]: device d's step-s samples as rows of the concatenated data (0 pads)."""
    width = max((len(b) for plan in plans for b in plan), default=0)
    index = np.zeros((steps, len(plans), width), dtype=np.int64)
    length = np.zeros((steps, len(plans)), dtype=np.int64)
    for d, plan in enumerate(plans):
        for s, batch in enumerate(plan):
            index[s, d, :len(batch)] = batch.numpy() + offsets[d]
            index[s, d, len(batch):] = offsets[d]
            length[s, d] = len(batch)
    return index, length

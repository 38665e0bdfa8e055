"""A model's communicated state as one flat float32 vector.

Every floating-point entry of the state dict travels (weights and float buffers such as BatchNorm's
running statistics); integer buffers such as num_batches_tracked stay on the device. One flat vector
makes broadcast, deltas and aggregation simple array arithmetic.
"""
from __future__ import annotations

import warnings

import numpy as np
import torch
from torch import nn


def _named(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """The state dict's floating-point entries, by name: what travels."""
    return [(n, t) for n, t in model.state_dict(keep_vars=True).items() if torch.is_floating_point(t)]


def communicated(model: nn.Module) -> list[torch.Tensor]:
    return [t for _, t in _named(model)]


def flatten(model: nn.Module) -> np.ndarray:
    with torch.no_grad():
        return torch.cat([t.detach().reshape(-1).to("cpu", torch.float32) for t in communicated(model)]).numpy()


def _host_views(tensors: list[torch.Tensor]) -> list[np.ndarray] | None:
    """Flat numpy views of the tensors' own memory where all of them are contiguous float32 on the CPU (a
    CPU runner's model): then loading and reading them are plain array copies, without torch's per-call
    overheads or a concatenated copy; None otherwise."""
    if not all(t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous() for t in tensors):
        return None
    return [t.detach().view(-1).numpy() for t in tensors]


def delta(model: nn.Module, start: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """flatten(model) - start as a float32 vector (the same bits), in one pass over the model's tensors;
    written into `out` when given (a float32 vector of the model's size)."""
    tensors = communicated(model)
    views = _host_views(tensors)
    if views is None:
        update = flatten(model)
        update -= start
        if out is not None:
            out[:] = update
            return out
        return update
    update = np.empty(sum(len(v) for v in views), dtype=np.float32) if out is None else out
    offset = 0
    for view in views:
        np.subtract(view, start[offset:offset + len(view)], out=update[offset:offset + len(view)])
        offset += len(view)
    return update


def load(model: nn.Module, vector: np.ndarray) -> None:
    """Copy a flat vector into the model's communicated tensors, in place."""
    vector = np.asarray(vector, dtype=np.float32)
    tensors = communicated(model)
    views = _host_views(tensors)
    if views is not None:
        if sum(len(v) for v in views) != len(vector):
            raise ValueError(f"parameter vector has {len(vector)} values, the model needs {sum(len(v) for v in views)}")
        offset = 0
        for view in views:
            view[:] = vector[offset:offset + len(view)]
            offset += len(view)
        return
    with warnings.catch_warnings():  # a read-only vector (as Ray's object store hands it out) is only read here
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        flat = torch.from_numpy(vector)
    offset = 0
    with torch.no_grad():
        for tensor in tensors:
            n = tensor.numel()
            tensor.data.copy_(flat[offset:offset + n].view_as(tensor), non_blocking=True)
            offset += n
    if offset != flat.numel():
        raise ValueError(f"parameter vector has {flat.numel()} values, the model needs {offset}")


def size(model: nn.Module) -> int:
    return sum(t.numel() for t in communicated(model))


def layout(model: nn.Module) -> tuple[tuple[str, int, int], ...]:
    """(state-dict name, start, stop) of each communicated tensor in the flat vector, in order."""
    spans, offset = [], 0
    for name, tensor in _named(model):
        spans.append((name, offset, offset + tensor.numel()))
        offset += tensor.numel()
    return tuple(spans)


def nbytes(model: nn.Module) -> int:
    """Bytes on the wire for one copy of the model, by each tensor's own dtype."""
    return sum(t.numel() * t.element_size() for t in communicated(model))


def parameter_mask(model: nn.Module) -> np.ndarray:
    """True where the flat vector holds a trainable parameter (False for buffers such as BatchNorm stats)."""
    trainable = {id(p) for p in model.parameters()}
    tensors = communicated(model)
    if not tensors:
        return np.zeros(0, dtype=bool)
    return np.concatenate([np.full(t.numel(), id(t) in trainable) for t in tensors])


def per_parameter(model: nn.Module, vector: np.ndarray, device: torch.device | str = "cpu") -> list[torch.Tensor]:
    """Slices of a flat vector shaped like model.parameters(), in that order."""
    flat = torch.from_numpy(np.asarray(vector, dtype=np.float32))
    offsets, offset = {}, 0
    for tensor in communicated(model):
        offsets[id(tensor)] = offset
        offset += tensor.numel()
    return [flat[offsets[id(p)]:offsets[id(p)] + p.numel()].view_as(p).to(device) for p in model.parameters()]

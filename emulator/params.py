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
    views = _host_views(communicated(model))
    if views is not None:
        return _difference(views, start, out)
    update = flatten(model)
    update -= start
    if out is None:
        return update
    out[:] = update
    return out


def _difference(views: list[np.ndarray], start: np.ndarray, out: np.ndarray | None) -> np.ndarray:
    update = np.empty(sum(len(v) for v in views), dtype=np.float32) if out is None else out
    offset = 0
    for view in views:
        np.subtract(view, start[offset:offset + len(view)], out=update[offset:offset + len(view)])
        offset += len(view)
    return update


def _copy_into(views: list[np.ndarray], vector: np.ndarray) -> None:
    offset = 0
    for view in views:
        view[:] = vector[offset:offset + len(view)]
        offset += len(view)


def _read_only_tensor(vector: np.ndarray) -> torch.Tensor:
    """A float32 vector as a tensor sharing its memory, for reading only: a read-only vector (as Ray's object
    store hands out the global model) is never written through it, so torch's warning about one is moot."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(vector)


def load(model: nn.Module, vector: np.ndarray) -> None:
    """Copy a flat vector into the model's communicated tensors, in place."""
    vector = np.asarray(vector, dtype=np.float32)
    tensors = communicated(model)
    views = _host_views(tensors)
    if views is not None:
        if sum(len(v) for v in views) != len(vector):
            raise ValueError(f"parameter vector has {len(vector)} values, the model needs {sum(len(v) for v in views)}")
        _copy_into(views, vector)
        return
    flat = _read_only_tensor(vector)
    offset = 0
    with torch.no_grad():
        for tensor in tensors:
            n = tensor.numel()
            tensor.data.copy_(flat[offset:offset + n].view_as(tensor), non_blocking=True)
            offset += n
    if offset != flat.numel():
        raise ValueError(f"parameter vector has {flat.numel()} values, the model needs {offset}")


class ModelVector:
    """A model's communicated tensors listed once, for a runner that loads the global vector into the same
    model and reads an update back from it a thousand times a round: the list and its numpy views cost
    three times the copies themselves to build, so they are kept. They are listed again whenever they may
    have changed: any module of this process registered a parameter, buffer or submodule since (assigning
    a new tensor to a model's attribute does), or a tensor's memory moved (`tensor.data = ...`)."""

    def __init__(self, model: nn.Module):
        self.model = model
        _watch_registrations()
        self._list()

    def _list(self) -> None:
        self.generation = _registrations[0]
        self.tensors = communicated(self.model)
        self.addresses = [t.data_ptr() for t in self.tensors]
        self.views = _host_views(self.tensors)

    def _current(self) -> list[np.ndarray] | None:
        if self.generation != _registrations[0] or any(
                t.data_ptr() != a for t, a in zip(self.tensors, self.addresses)):
            self._list()
        return self.views

    def load(self, vector: np.ndarray) -> None:
        """params.load(model, vector)."""
        views = self._current()
        if views is None or len(vector) != sum(len(v) for v in views) or np.asarray(vector).dtype != np.float32:
            load(self.model, vector)  # converts, or refuses a vector of the wrong size
            return
        _copy_into(views, vector)

    def delta(self, start: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """params.delta(model, start, out)."""
        views = self._current()
        return delta(self.model, start, out) if views is None else _difference(views, start, out)


_registrations = [0]  # parameters, buffers and submodules registered by any module of this process (once watched)


def _watch_registrations() -> None:
    """Count every registration from now on (torch's global registration hooks; once per process)."""
    if getattr(_watch_registrations, "installed", False):
        return
    from torch.nn.modules import module as torch_module

    def count(*_):
        _registrations[0] += 1

    torch_module.register_module_parameter_registration_hook(count)
    torch_module.register_module_buffer_registration_hook(count)
    torch_module.register_module_module_registration_hook(count)
    _watch_registrations.installed = True


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
    """Slices of a flat vector shaped like model.parameters(), in that order, to be read (not written)."""
    flat = _read_only_tensor(np.asarray(vector, dtype=np.float32))
    offsets, offset = {}, 0
    for tensor in communicated(model):
        offsets[id(tensor)] = offset
        offset += tensor.numel()
    return [flat[offsets[id(p)]:offsets[id(p)] + p.numel()].view_as(p).to(device) for p in model.parameters()]

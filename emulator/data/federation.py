"""The federation: the training pool split into per-device index lists, the server set and the test set.

Arrays stay compact (uint8 images, float32 features) and are turned into normalised float tensors only
when a device's or a batch's samples are taken, so a whole dataset can sit once in Ray's object store.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from emulator.data.ragged import RaggedRows, offsets_of
from emulator.data.stored_rows import read_ahead, rows


def canonical_strides(array: np.ndarray) -> np.ndarray:
    """A C-contiguous array (a view when it already is one) with the strides a fresh array of its shape has.

    numpy lets a length-1 axis carry any stride. torch reads an image batch whose single channel has stride 1
    as channels_last and picks other convolution kernels for it (other last bits) than for the same values
    with the default strides, which is what pickling (Ray's object store) gives: so a run in process
    (runtime.backend: inline) trains bit for bit as the Ray runners do only on canonical strides."""
    array = np.ascontiguousarray(array)
    strides, step = [], array.itemsize
    for length in reversed(array.shape):  # plain integers: a device's samples are read a thousand times a round
        strides.append(step)
        step *= length
    strides = tuple(reversed(strides))
    if array.strides == strides:
        return array
    return np.lib.stride_tricks.as_strided(array, array.shape, strides, writeable=array.flags.writeable)


@dataclass
class ArrayDataset:
    """Samples as arrays. x: (N, C, H, W) uint8 images, (N, D) float32 features or (N, T) token ids (any
    integer dtype but uint8, e.g. int16: LEAF's Shakespeare), or RaggedRows, token sequences of different
    lengths read as (N, T) padded rows; y: (N,) int64 labels."""

    x: np.ndarray | RaggedRows
    y: np.ndarray
    num_classes: int
    mean: tuple[float, ...] | None = None  # per channel, applied after scaling uint8 to [0, 1]
    std: tuple[float, ...] | None = None
    owner: np.ndarray | None = None  # a test set split by user (LEAF): the device each sample belongs to, -1: none

    def __len__(self) -> int:
        return len(self.y)

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x.shape[1:])

    def tensors(self, indices: np.ndarray | slice | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalised float32 inputs (int64 token ids for integer x other than uint8) and int64 labels for the
        given sample indices (all when None)."""
        x = np.asarray(self.x) if indices is None else rows(self.x, indices)  # a RaggedRows x pads the rows taken
        y = self.y if indices is None else rows(self.y, indices)
        if not x.flags.writeable:  # a view of a stored (memory-mapped, read-only) column: the rows asked for, copied
            x = np.array(x)
        if not y.flags.writeable:
            y = np.array(y)
        inputs = torch.from_numpy(canonical_strides(x))
        if inputs.dtype == torch.uint8:
            inputs = inputs.to(torch.float32).div_(255.0)
        elif inputs.is_floating_point() or inputs.dtype == torch.bool:
            inputs = inputs.to(torch.float32)
        else:  # token ids (text): int64 for an embedding, never scaled or normalised
            inputs = inputs.to(torch.int64)
        if self.mean is not None and inputs.is_floating_point():
            shape = (1, -1) + (1,) * (inputs.dim() - 2)
            mean = torch.tensor(self.mean, dtype=torch.float32).view(shape)
            std = torch.tensor(self.std, dtype=torch.float32).view(shape)
            inputs = inputs.sub_(mean).div_(std)
        return inputs, torch.from_numpy(np.ascontiguousarray(y)).to(torch.int64)

    def subset(self, indices: np.ndarray) -> "ArrayDataset":
        owner = None if self.owner is None else self.owner[indices]
        x = self.x.take(indices) if isinstance(self.x, RaggedRows) else self.x[indices]
        return ArrayDataset(x, self.y[indices], self.num_classes, self.mean, self.std, owner)


@dataclass
class Federation:
    """Device d owns train samples device_indices[device_offsets[d]:device_offsets[d + 1]]; without
    device_indices (a stored federation, data/store.py) the training rows are sorted by device and device d
    owns rows device_offsets[d] to device_offsets[d + 1] themselves."""

    train: ArrayDataset
    test: ArrayDataset
    device_offsets: np.ndarray  # int64, shape (devices + 1,)
    device_indices: np.ndarray | None  # int64 indices into train; None: sorted by device
    server_indices: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    # data.local_test: device d's own test samples are local_test[local_offsets[d]:local_offsets[d + 1]]
    local_test: ArrayDataset | None = None
    local_offsets: np.ndarray | None = None  # int64, shape (devices + 1,)
    counts: np.ndarray | None = None  # label_counts(), where it was stored with the data
    stored: str | None = None  # the directory a stored federation was opened from: it travels as that path
    reopen: Callable[[str], "Federation"] | None = None  # how a process opens `stored` (data/store.py's reopen)

    def __reduce_ex__(self, protocol):
        """A stored federation pickles as its directory (Ray's object store carries a path, not the data):
        the receiving process maps the same files, which the data's key and digests were checked for."""
        if self.stored is None:
            return super().__reduce_ex__(protocol)
        return self.reopen, (self.stored,)

    @classmethod
    def from_lists(cls, train: ArrayDataset, test: ArrayDataset, per_device: list[np.ndarray],
                   server_indices: np.ndarray | None = None) -> "Federation":
        offsets = offsets_of(np.array([len(p) for p in per_device], dtype=np.int64))
        flat = np.concatenate(per_device).astype(np.int64) if per_device else np.zeros(0, np.int64)
        server = np.zeros(0, np.int64) if server_indices is None else np.asarray(server_indices, np.int64)
        return cls(train, test, offsets, flat, server)

    @property
    def num_devices(self) -> int:
        return len(self.device_offsets) - 1

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.device_offsets)

    def device_samples(self, device: int) -> np.ndarray:
        start, stop = int(self.device_offsets[device]), int(self.device_offsets[device + 1])
        if self.device_indices is None:
            return np.arange(start, stop, dtype=np.int64)
        return self.device_indices[start:stop]

    def device_rows(self, device: int) -> np.ndarray | slice:
        """device_samples, as a slice where the device's rows are contiguous (a stored federation): reading
        them is then one copy of a block instead of a gather row by row."""
        if self.device_indices is None:
            return slice(int(self.device_offsets[device]), int(self.device_offsets[device + 1]))
        return self.device_samples(device)

    def read_ahead(self, devices: list[int]) -> None:
        """Where the training rows are memory-mapped and sorted by device (a stored federation), have the
        kernel read these devices' rows ahead, in this order (data/stored_rows.py); nothing otherwise."""
        if self.device_indices is not None or not devices:
            return
        index = np.asarray(devices, dtype=np.int64)
        starts, stops = self.device_offsets[index], self.device_offsets[index + 1]
        for column in (self.train.x, self.train.y):
            read_ahead(column, starts, stops)

    def per_device(self) -> list[np.ndarray]:
        return [self.device_samples(d) for d in range(self.num_devices)]

    def label_counts(self) -> np.ndarray:
        """(devices, classes) matrix of how many samples of each class every device holds."""
        if self.counts is not None:
            return np.asarray(self.counts, dtype=np.int64)
        owner = np.repeat(np.arange(self.num_devices), self.sizes)
        counts = np.zeros((self.num_devices, self.train.num_classes), dtype=np.int64)
        labels = self.train.y[:len(owner)] if self.device_indices is None else self.train.y[self.device_indices]
        np.add.at(counts, (owner, labels), 1)
        return counts

    @property
    def local_sizes(self) -> np.ndarray:
        """Each device's local test samples (zeros without data.local_test)."""
        if self.local_offsets is None:
            return np.zeros(self.num_devices, dtype=np.int64)
        return np.diff(self.local_offsets)

    def local_owner(self) -> np.ndarray:
        """The device each local test sample belongs to, in local_test's order."""
        return np.repeat(np.arange(self.num_devices, dtype=np.int64), self.local_sizes)

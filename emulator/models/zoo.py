"""The model zoo. Input shape and class count come from the dataset, so one name fits many; names map to
builders in emulator.registry.MODELS (emulator/parts/builtins.py registers these; plugins add theirs)."""
from __future__ import annotations

import math

import torch
from torch import nn

from emulator.registry import MODELS, RegistryError


def _flat_size(shape: tuple[int, ...]) -> int:
    return int(math.prod(shape))


def logreg(shape: tuple[int, ...], classes: int) -> nn.Module:
    """Multinomial logistic regression."""
    return nn.Sequential(nn.Flatten(), nn.Linear(_flat_size(shape), classes))


def mlp(shape: tuple[int, ...], classes: int) -> nn.Module:
    """The 2NN of McMahan et al.: in-200-200-classes with ReLU (784-200-200-10 on MNIST)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(_flat_size(shape), 200), nn.ReLU(),
                         nn.Linear(200, 200), nn.ReLU(), nn.Linear(200, classes))


def cnn_fmnist(shape: tuple[int, ...], classes: int) -> nn.Module:
    """FAST's Fashion-MNIST CNN: conv3x3(32)-conv3x3(64)-maxpool-dropout.25-FC128-dropout.5-FC."""
    channels = shape[0]
    return nn.Sequential(
        nn.Conv2d(channels, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Dropout(0.25), nn.Flatten(), nn.Linear(64 * ((shape[1] - 4) // 2) * ((shape[2] - 4) // 2), 128),
        nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, classes))


def cnn_mnist(shape: tuple[int, ...], classes: int) -> nn.Module:
    """Yang et al.'s MNIST CNN: conv5x5(32)-pool-conv5x5(64)-pool-FC512-FC, valid padding (1024 -> 512)."""
    side_h, side_w = ((shape[1] - 4) // 2 - 4) // 2, ((shape[2] - 4) // 2 - 4) // 2
    return nn.Sequential(
        nn.Conv2d(shape[0], 32, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 5), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * side_h * side_w, 512), nn.ReLU(), nn.Linear(512, classes))


def cnn_cifar(shape: tuple[int, ...], classes: int) -> nn.Module:
    """The Keras-style CIFAR-10 CNN of FSL/FAST: conv3x3(32)-pool-conv3x3(64)-pool-dropout-FC128-dropout-FC.

    The papers name the layers but not every size; valid padding and dropout 0.25 / 0.5 are our choices
    (see docs/models.md)."""
    side_h, side_w = ((shape[1] - 2) // 2 - 2) // 2, ((shape[2] - 2) // 2 - 2) // 2
    return nn.Sequential(
        nn.Conv2d(shape[0], 32, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(32, 64, 3), nn.ReLU(),
        nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(), nn.Linear(64 * side_h * side_w, 128), nn.ReLU(),
        nn.Dropout(0.5), nn.Linear(128, classes))


def resnet18(shape: tuple[int, ...], classes: int) -> nn.Module:
    """torchvision's ResNet-18 with the CIFAR stem: a 3x3 stride-1 first convolution and no max-pool."""
    from torchvision.models import resnet18 as tv_resnet18

    model = tv_resnet18(weights=None, num_classes=classes)
    model.conv1 = nn.Conv2d(shape[0], 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


def build_model(name: str, shape: tuple[int, ...], classes: int, seed: int | None = None,
                options: dict | None = None) -> nn.Module:
    """A freshly initialised model by its registered name, with the model's own options (the scenario's
    `model:` fields beside `name`); with a seed, the initial weights are the same in every process."""
    options = options or {}
    try:
        entry = MODELS.get(name)
    except RegistryError as exc:
        raise ValueError(f"model.name: {exc}") from None
    with torch.random.fork_rng(devices=[]):
        if seed is not None:
            torch.manual_seed(seed)
        built = entry.build(tuple(shape), classes, **options)
    if not isinstance(built, nn.Module):
        raise TypeError(f"model {name!r} (registered by {entry.origin}): its builder returned "
                        f"{type(built).__name__}, not a torch.nn.Module")
    return built

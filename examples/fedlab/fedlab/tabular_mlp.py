"""A model plugin: an MLP for tabular features whose widths and dropout the scenario sets."""
from __future__ import annotations

from typing import Literal

from pydantic import Field
from torch import nn

from emulator.extend import ModelConfig, register_model


class TabularMlpConfig(ModelConfig):
    name: Literal["tabular_mlp"] = "tabular_mlp"
    hidden: list[int] = Field(default_factory=lambda: [64, 32], min_length=1)
    dropout: float = Field(0.0, ge=0, lt=1)


def tabular_mlp(shape, classes, hidden=(64, 32), dropout=0.0):
    """in -> hidden[0] -> ... -> classes, ReLU and dropout between layers."""
    layers, width = [nn.Flatten()], shape[0]
    for size in hidden:
        layers += [nn.Linear(width, size), nn.ReLU(), nn.Dropout(dropout)]
        width = size
    return nn.Sequential(*layers, nn.Linear(width, classes))


register_model("tabular_mlp", tabular_mlp, config=TabularMlpConfig,
               accepts=lambda shape: None if len(shape) == 1 else "needs flat feature vectors")

"""Models for text: sequences of integer token ids (N, T) in, one class per sequence out.

Same signature style as emulator/models/zoo.py: `f(shape, classes, ...)`, with the input shape and the class
count taken from the dataset (for LEAF's Shakespeare: shape (80,), 80 classes).
"""
from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import nn

from emulator.scenario import ModelConfig


class CharLstmConfig(ModelConfig):
    """LEAF's Shakespeare model: embedding, stacked LSTM, a linear layer to the vocabulary."""

    name: Literal["char_lstm"] = "char_lstm"
    embedding: int = Field(8, gt=0)
    hidden: int = Field(256, gt=0)
    layers: int = Field(2, gt=0)


class CharLSTM(nn.Module):
    """Embedding -> stacked LSTM -> linear on the last step's output: next-character logits."""

    def __init__(self, vocab: int, classes: int, embedding: int, hidden: int, layers: int):
        super().__init__()
        self.vocab = vocab
        self.embed = nn.Embedding(vocab, embedding)
        self.lstm = nn.LSTM(embedding, hidden, num_layers=layers, batch_first=True)
        self.out = nn.Linear(hidden, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.is_floating_point() or tokens.dim() != 2:
            raise TypeError(f"char_lstm takes integer token ids of shape (batch, length), got {tokens.dtype} "
                            f"inputs of shape {tuple(tokens.shape)}: pair it with a text data set such as "
                            "shakespeare")
        outputs, _ = self.lstm(self.embed(tokens))
        return self.out(outputs[:, -1, :])


def char_lstm(shape: tuple[int, ...], classes: int, embedding: int = 8, hidden: int = 256, layers: int = 2,
              vocab: int | None = None) -> nn.Module:
    """LEAF's and FedAvg's Shakespeare model: embedding 8, a 2-layer LSTM of 256 units, a linear layer to
    the classes, read from the last position of the sequence.

    `shape` is (sequence length,); `vocab` (the embedding's size) defaults to `classes`, as in LEAF, where
    inputs and labels share the 80-character vocabulary. 819,920 parameters with the defaults on
    Shakespeare: LEAF's TensorFlow model has 817,872 (its LSTM cell has one bias vector per layer where
    PyTorch's has two, 2 x 1,024 more here; TensorFlow's cell also adds 1 to the forget gate, PyTorch's does
    not). FAST's paper names only "LSTM" for Shakespeare; this is the LEAF model its setup comes from.
    """
    if len(shape) != 1:
        raise ValueError(f"model char_lstm: needs sequences of token ids (input shape (length,)), but the data "
                         f"set's input shape is {tuple(shape)}; use it with a text data set such as shakespeare")
    return CharLSTM(vocab if vocab is not None else classes, classes, embedding, hidden, layers)

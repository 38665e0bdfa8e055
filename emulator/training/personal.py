"""A device's round when it keeps state of its own: personal layers (FedPer) or a personal model (Ditto).

The algorithm says which entries of the flat parameter vector are the device's own (`mask`) and how they
train; a runner runs it here with the device's stored entries (None the first time) and hands back the
shared update and the device's new entries. What a device evaluates with is `personal_params`: the global
vector with its own entries in place.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch
from torch import nn

from emulator import params as param_vector
from emulator.training.local import LocalTraining, TrainStats, seed_dropout, seeded_generator, train_locally


@dataclass(frozen=True)
class Personalization:
    """How a device's own state enters its round.

    kind "layers" (FedPer, Arivazhagan et al. 2019): the device trains the global model with its own
    entries in place of the masked ones, sends back only the shared entries' change and keeps the masked
    ones. kind "ditto" (Li et al., ICML 2021): the device runs the global update as FedAvg does, then
    trains its own model (every masked entry; starting from the global one the first time) for
    `personal` steps with the pull lam/2 ||v - w||^2 towards the global model w it downloaded."""

    kind: str  # "layers" | "ditto"
    mask: np.ndarray  # True where an entry of the flat vector is the device's own
    personal: LocalTraining | None = None  # Ditto's personal steps (its prox_mu is lam)

    @property
    def width(self) -> int:
        return int(self.mask.sum())


def personal_params(global_params: np.ndarray, own: np.ndarray | None, mask: np.ndarray) -> np.ndarray:
    """The model a device holds: the global vector with its own entries (if any yet) in place."""
    if own is None:
        return global_params
    held = np.array(global_params, dtype=np.float32, copy=True)
    held[mask] = own
    return held


def train_personal_round(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, spec: LocalTraining,
                         seed: int, global_params: np.ndarray, own: np.ndarray | None, how: Personalization,
                         precision: str = "fp32", device: torch.device | str = "cpu"
                         ) -> tuple[np.ndarray, TrainStats, np.ndarray]:
    """(shared delta, the global update's stats, the device's new own entries). The shared delta is zero on
    the masked entries for "layers" (they never leave the device); Ditto's is FedAvg's delta."""
    if how.kind == "layers":
        start = personal_params(global_params, own, how.mask)
        param_vector.load(model, start)
        seed_dropout(seed, device)
        stats = train_locally(model, inputs, labels, spec, seeded_generator(seed), None, precision)
        trained = param_vector.flatten(model)
        delta = trained - global_params
        delta[how.mask] = 0.0
        return delta, stats, trained[how.mask]
    if how.kind != "ditto":
        raise ValueError(f"personalization kind {how.kind!r}: expected 'layers' or 'ditto'")
    param_vector.load(model, global_params)
    seed_dropout(seed, device)
    stats = train_locally(model, inputs, labels, spec, seeded_generator(seed), None, precision)
    delta = param_vector.flatten(model) - global_params
    anchor = [t.detach().clone() for t in param_vector.per_parameter(model, global_params, device)]
    param_vector.load(model, personal_params(global_params, own, how.mask))
    personal_seed = seed ^ 0x5DEECE66D  # its own batches and dropout masks, fixed by the round's seed
    seed_dropout(personal_seed, device)
    train_locally(model, inputs, labels, how.personal, seeded_generator(personal_seed), None, precision, anchor)
    return delta, stats, param_vector.flatten(model)[how.mask]


def ditto_steps(spec: LocalTraining, lam: float, steps: int | None, lr: float | None) -> LocalTraining:
    """Ditto's personal training: the round's local training with its own step count and rate, pulled
    towards the global model with strength lam."""
    if steps is None:  # the round's own steps or epochs
        return replace(spec, prox_mu=lam, lr=lr if lr is not None else spec.lr)
    return replace(spec, prox_mu=lam, local_steps=steps, local_epochs=None, lr=lr if lr is not None else spec.lr)

"""What an attacker's device does instead of honest local training: poisoned data, or a crafted update.

An attack belongs to a device type (population.types[].attack): the type's devices are the attackers, and
how often they take part is the world's business (their type's availability, compute and link, or those
drawn like everyone's at population.correlation 0). Each attack is a registered part with its config here;
a runner applies it around the device's real local training, seeded by the job, so it is reproducible.

- label_flip: every label l becomes C - 1 - l (data poisoning; Fang et al., USENIX Security 2020);
- random_labels: every label drawn uniformly at random;
- sign_flip: the update sent is -scale times the honest one;
- gaussian: the update sent is Gaussian noise with the honest update's scale (its root mean square per
  entry) times `scale`; colluding attackers draw the same noise in a round;
- scaling: the honest update times `boost` (model replacement, Bagdasaryan et al., AISTATS 2020, boost
  about n / eta: the cohort size over the server rate);
- backdoor: a share of the device's samples get a trigger (a bright square in an image's corner, or the
  last features of a vector set high) and the target label; the update may be boosted as in scaling. Its
  success is the share of triggered test samples of other classes classified as the target.

Any attack may `collude`: the type's attackers that report in one round (or one FedBuff buffer) send one
update, the mean of those they crafted: one direction, pushed by all of them (the server-side step is in
emulator/server/adversaries.py, since no device sees another's update).

An attack's config may say what its parameters mean against the data (`against_data(input_shape,
classes)`: the field and the problem, or None); the schema asks it at validation (scenario/root.py), so a
backdoor's target the dataset lacks, or a trigger as large as the image, never starts a run.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from pydantic import Field

from emulator.scenario.population import AttackSettings


class LabelFlip(AttackSettings):
    """Label flipping: every label l becomes C - 1 - l."""

    kind: Literal["label_flip"] = "label_flip"


class RandomLabels(AttackSettings):
    """Every label drawn uniformly at random."""

    kind: Literal["random_labels"] = "random_labels"


class SignFlip(AttackSettings):
    """The update sent is -scale times the honest one."""

    kind: Literal["sign_flip"] = "sign_flip"
    scale: float = Field(1.0, gt=0)


class GaussianUpdate(AttackSettings):
    """Gaussian noise with the honest update's per-entry scale, times `scale`."""

    kind: Literal["gaussian"] = "gaussian"
    scale: float = Field(1.0, gt=0)


class Scaling(AttackSettings):
    """The honest update times `boost` (model replacement)."""

    kind: Literal["scaling"] = "scaling"
    boost: float = Field(10.0, gt=0)


class Backdoor(AttackSettings):
    """A trigger mapped to `target` on a share of the device's samples; the update boosted by `boost`."""

    kind: Literal["backdoor"] = "backdoor"
    target: int = Field(0, ge=0)
    fraction: float = Field(0.5, gt=0, le=1)  # of the device's samples that carry the trigger
    size: int = Field(4, gt=0)  # the trigger's side in pixels (images) or its length in features (vectors)
    value: float = 3.0  # what the trigger's entries are set to (inputs are standardised: 3 is bright)
    boost: float = Field(1.0, gt=0)

    def against_data(self, input_shape: tuple[int, ...], classes: int) -> tuple[str, str] | None:
        """The parameter the data makes meaningless and why (None: none): a target the dataset lacks, a
        trigger that covers a whole image (its last two axes) or every feature of a vector."""
        if self.target >= classes:
            return "target", f"{self.target}, but the dataset has {classes} classes; give a label in 0..{classes - 1}"
        if len(input_shape) >= 2:
            height, width = input_shape[-2:]
            if self.size >= min(height, width):
                return "size", (f"{self.size}, but the dataset's images are {height} x {width}: a {self.size} x "
                                f"{self.size} trigger covers a whole side, so every triggered image looks the same; "
                                f"give a size below {min(height, width)} (4 is usual)")
        elif input_shape and self.size >= input_shape[0]:
            return "size", (f"{self.size}, but the dataset's inputs have {input_shape[0]} features: the trigger "
                            f"would set every one, so every triggered input is the same; give a size below "
                            f"{input_shape[0]}")
        return None


@dataclass(frozen=True)
class Attack:
    """An attack as a runner applies it: its config and the run's class count. Every registered attack's
    builder returns one (ours: this class); a plugin's subclasses it and overrides poison and craft."""

    config: AttackSettings
    num_classes: int

    @property
    def kind(self) -> str:
        return self.config.kind

    def poison(self, inputs: torch.Tensor, labels: torch.Tensor, generator: torch.Generator
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """The device's training data as the attacker trains on it."""
        return poison(inputs, labels, self, generator)

    def craft(self, delta: np.ndarray, device_seed: int, round_seed: int) -> np.ndarray:
        """The update the attacker sends, from the one its training produced."""
        return craft_update(delta, self, device_seed, round_seed)


def add_trigger(inputs: torch.Tensor, size: int, value: float) -> torch.Tensor:
    """The inputs with the trigger in place: the bottom-right size x size pixels of every channel of an
    image (N, C, H, W), or the last `size` features of a vector (N, F)."""
    marked = inputs.clone()
    if marked.dim() >= 3:
        marked[..., -size:, -size:] = value
    else:
        marked[:, -size:] = value
    return marked


def poison(inputs: torch.Tensor, labels: torch.Tensor, attack: Attack, generator: torch.Generator
           ) -> tuple[torch.Tensor, torch.Tensor]:
    """The device's training data as the attacker trains on it (unchanged for update attacks)."""
    kind, classes = attack.kind, attack.num_classes
    if kind == "label_flip":
        return inputs, (classes - 1 - labels)
    if kind == "random_labels":
        return inputs, torch.randint(0, classes, labels.shape, generator=generator).to(labels.device)
    if kind == "backdoor":
        config = attack.config
        chosen = torch.randperm(len(labels), generator=generator)[:int(round(config.fraction * len(labels)))]
        chosen = chosen.to(labels.device)
        inputs, labels = inputs.clone(), labels.clone()
        inputs[chosen] = add_trigger(inputs[chosen], config.size, config.value)
        labels[chosen] = config.target
        return inputs, labels
    return inputs, labels


def craft_update(delta: np.ndarray, attack: Attack, device_seed: int, round_seed: int) -> np.ndarray:
    """The update the attacker sends, from the one its (possibly poisoned) training produced."""
    kind, config = attack.kind, attack.config
    if kind == "sign_flip":
        return (-config.scale * delta).astype(np.float32)
    if kind == "gaussian":
        rms = float(np.sqrt(np.mean(np.square(delta, dtype=np.float64)))) if len(delta) else 0.0
        draw = np.random.default_rng(round_seed if config.collude else device_seed).standard_normal(len(delta))
        return (config.scale * rms * draw).astype(np.float32)
    if kind in ("scaling", "backdoor"):
        boost = config.boost
        return delta if boost == 1.0 else (boost * delta).astype(np.float32)
    return delta

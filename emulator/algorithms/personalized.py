"""Personalized federated learning: each device keeps state of its own across rounds.

FedPer (Arivazhagan et al., 2019): the layers the scenario names (`personal_layers`, e.g. the classifier
head) never leave the device; the rest is FedAvg. Ditto (Li et al., ICML 2021): every device keeps a
whole model of its own, trained on its data with a pull lam/2 ||v - w||^2 towards the global model w,
beside the global update FedAvg runs. What each device is scored with (evaluation.devices) is its own
model: the global vector with its own entries in place (a device that never trained holds the global one).

The state lives in a DeviceStateStore (emulator/device_state.py): only devices that trained hold
any, on disk under the run directory, and checkpoints hold its index. A user's personalized algorithm
(APFL, FedRep...) subclasses `Personalized` in a plugin and sets `personal` to its Personalization.
"""
from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import Field, field_validator

from emulator.algorithms.fedavg import FedAvg, local_training_from
from emulator.errors import ScenarioError
from emulator.device_state import DeviceStateStore
from emulator.scenario.training import ClientTraining
from emulator.training.personal import Personalization, ditto_steps


class FedPerConfig(ClientTraining):
    """FedPer (Arivazhagan et al., 2019): the named layers stay on each device; the rest is averaged."""

    name: Literal["fedper"] = "fedper"
    server_lr: float = Field(1.0, gt=0)
    personal_layers: list[str] = Field(min_length=1, description="parameter names, or their module prefixes "
                                       "(e.g. 'fc3' for fc3.weight and fc3.bias), that never leave the device")

    @field_validator("personal_layers", mode="before")
    @classmethod
    def _indices_are_names(cls, value):
        """A Sequential's layers are named by index: `[5]` in YAML means the module '5'."""
        return [str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value] \
            if isinstance(value, list) else value


class DittoConfig(ClientTraining):
    """Ditto (Li et al., ICML 2021): a personal model per device, pulled towards the global one by lam."""

    name: Literal["ditto"] = "ditto"
    server_lr: float = Field(1.0, gt=0)
    lam: float = Field(0.1, ge=0, description="Ditto's lambda: 0 trains the personal model alone, large values "
                       "keep it at the global model")
    personal_steps: int | None = Field(None, gt=0, description="personal steps a round (default: local_steps)")
    personal_lr: float | None = Field(None, gt=0, description="the personal steps' rate (default: client_lr)")


def layer_mask(layout: tuple[tuple[str, int, int], ...], names: list[str], model: str) -> np.ndarray:
    """True on the flat vector's entries of the named parameters (a name, or a prefix ending at a dot)."""
    total = layout[-1][2] if layout else 0
    mask = np.zeros(total, dtype=bool)
    known = [name for name, _, _ in layout]
    for wanted in names:
        hits = [(start, stop) for name, start, stop in layout if name == wanted or name.startswith(wanted + ".")]
        if not hits:
            raise ScenarioError(f"algorithm.personal_layers: {wanted!r} names no parameter of model "
                                f"{model!r}; its parameters are {', '.join(known)} (a name, or a module prefix "
                                "such as the part before '.weight')")
        for start, stop in hits:
            mask[start:stop] = True
    if mask.all():
        raise ScenarioError(f"algorithm.personal_layers: {names} covers every parameter of model {model!r}, "
                            "so nothing would be shared: leave at least one layer out (usually the body)")
    return mask


class Personalized(FedAvg):
    """FedAvg whose devices keep their own entries (`personal.mask`) between rounds in a DeviceStateStore."""

    personal: Personalization

    def __init__(self, config, context, personal: Personalization):
        super().__init__(config, context)
        self.personal = personal
        self.shared_share = float(1.0 - personal.mask.mean()) if personal.kind == "layers" else 1.0
        # the run directory's device_state/ (a temporary directory where a run has none)
        self.store = DeviceStateStore(context.state_dir, context.num_devices, personal.width)

    def own_state(self, device: int) -> np.ndarray | None:
        """The device's own entries as they stand (None: it has not trained yet)."""
        return self.store.get(device)

    def devices_with_state(self) -> np.ndarray:
        return self.store.devices()

    def observe(self, update) -> None:
        super().observe(update)
        if update.own is not None and update.stats.steps > 0:
            self.store.put(update.device, update.own)

    def state(self) -> dict:
        return {**super().state(), "device_state": self.store.state()}

    def load_state(self, state: dict) -> None:
        super().load_state(state)
        self.store.load_state(state["device_state"])


class FedPer(Personalized):
    name = "fedper"

    def __init__(self, config, context):
        mask = layer_mask(context.parameter_layout, config.personal_layers, context.model_name)
        super().__init__(config, context, Personalization("layers", mask))


class Ditto(Personalized):
    name = "ditto"

    def __init__(self, config, context):
        mask = np.ones(context.num_params, dtype=bool)
        personal = ditto_steps(local_training_from(config), config.lam, config.personal_steps, config.personal_lr)
        super().__init__(config, context, Personalization("ditto", mask, personal))

    def samples_processed(self, devices, sizes):
        """The global update and the personal steps: both are charged to the device's compute time."""
        if len(devices) == 0:
            return np.zeros(0)
        n = sizes[devices]
        return self.local_training(int(devices[0])).samples_processed(n) + self.personal.personal.samples_processed(n)

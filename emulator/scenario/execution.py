"""The `runtime:`, `evaluation:` and `output:` sections: where and how a run executes and what it keeps."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import Field, model_validator

from emulator.scenario.base import Strict


# ---------------------------------------------------------------------------------------- execution
class RuntimeConfig(Strict):
    # ray: runner and server actors on a local Ray instance or a cluster. inline: the same code in this
    # process, no Ray (debugging a plugin with breakpoint(), tiny runs); the same metrics (emulator/runtime/inline.py)
    backend: Literal["ray", "inline"] = "ray"
    address: Optional[str] = None
    runners: Optional[int] = Field(None, gt=0)
    num_cpus: float = Field(1.0, gt=0)
    num_gpus: float = Field(0.0, ge=0)
    server_num_cpus: float = Field(0.0, ge=0)
    # actor: the server in a Ray actor of its own (restarted from the last checkpoint if its process dies);
    # driver: in the driver's process, beside the Ray runners: one process fewer (~330 MB, torch imported),
    # a stop request honoured after the round, a server crash the driver's (docs/scenarios.md, `runtime`)
    server: Literal["actor", "driver"] = "actor"
    torch_threads: Optional[int] = Field(None, gt=0)
    precision: Literal["fp32", "bf16"] = "fp32"  # bf16: autocast where the hardware has it (emulator/training/precision.py)
    vectorise: bool = False  # train each group's devices at once (emulator/training/cohort.py) where the model allows
    group_size: Optional[int] = Field(None, gt=0)  # devices per runner task; None: from the round's reports

    @model_validator(mode="after")
    def _inline_runs_here(self):
        if self.backend == "inline" and self.address not in (None, "local"):
            raise ValueError(f"backend 'inline' runs in this process, but address is {self.address!r}; "
                             "use backend: ray to run on a cluster, or leave address unset")
        if self.server == "driver" and self.server_num_cpus > 0:
            raise ValueError(f"server: driver runs the server in the driver's process, which takes no Ray CPUs, but "
                             f"server_num_cpus is {self.server_num_cpus}; drop server_num_cpus, or use server: actor")
        return self

    def numerics(self) -> dict:
        """The runtime fields that change a run's numbers (in the last bits, or more), where they differ from
        the defaults: they join the checkpoint fingerprint and cannot change on resume."""
        fields = {}
        if self.precision != "fp32":
            fields["precision"] = self.precision
        if self.vectorise:  # vectorised groups: their composition reaches the last bits
            fields.update(vectorise=True, group_size=self.group_size)
        return fields


class FinetuneConfig(Strict):
    """Fine-tune, then evaluate: each evaluated device first adapts the global model on its own training
    data (plain local SGD or Adam), then evaluates the adapted model on its own test split."""

    steps: int = Field(5, gt=0)
    lr: float = Field(0.01, gt=0)
    batch_size: int = Field(32, gt=0)
    optimizer: Literal["sgd", "adam"] = "sgd"


class DeviceEvaluationConfig(Strict):
    """Evaluation on the devices' own test splits (data.local_test), every `evaluation.every` rounds: the
    oracle (every device, free, outside the simulated clock: the ground truth of what the fleet gets from
    the global model) and/or a sample of the devices online, asked on the clock (what a real server sees)."""

    oracle: bool = True
    sample: Optional[int] = Field(None, gt=0)  # devices asked each evaluation, drawn from those online
    deadline_s: Optional[float] = Field(None, gt=0)  # answers after this are late (default: system.deadline_s)
    finetune: Optional[FinetuneConfig] = None  # also score each device after adapting the model to its data
    csv: bool = True  # one row per device and evaluation in device_eval.csv (metrics.csv has the statistics)


class EvaluationConfig(Strict):
    every: int = Field(1, gt=0)
    batch_size: int = Field(1024, gt=0)
    devices: Optional[DeviceEvaluationConfig] = None  # on the devices' own data; needs data.local_test


class ObserverSettings(Strict):
    """A scenario's own observer (registered by a plugin with register_observer): `kind` names it, its
    config class adds its options. It fills the metrics columns it declares, every round."""

    kind: str


class StopConfig(Strict):
    """When a run ends before its last round because going on would only waste time; it then ends with its
    own status and exit code (docs/scenarios.md, "How a run ends")."""
    diverged: bool = True  # a training or test loss that is not finite: the model is lost
    no_progress_rounds: int = Field(20, ge=0)  # device rounds in a row that aggregate no report (0: never stop)


class OutputConfig(Strict):
    dir: str = "runs"
    checkpoint_every: int = Field(10, ge=0)  # rounds between checkpoints (0: only at the end)
    tensorboard: bool = True  # TensorBoard event files in RUN_DIR/tensorboard/, one step per round



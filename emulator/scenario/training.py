"""What every algorithm's section shares: client training, selection policies, server optimizers, rate
schedules, server-side training and asynchronous aggregation. Each algorithm's own config subclasses
`ClientTraining` beside its code (emulator/algorithms/)."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, model_validator

from emulator.registry import AGGREGATORS, ALGORITHMS, SELECTIONS, SERVER_OPTIMIZERS, Plugged
from emulator.scenario.base import ScenarioFieldError, Strict


# ----------------------------------------------------------------------------------------- algorithm
class SelectionSettings(Strict):
    """The base of every selection policy's config (algorithm.selection); `kind` names a registered one.
    `exclude: s` makes s seeded devices never take part, whatever the policy."""

    kind: str
    exclude: int = Field(0, ge=0)


Selection = Plugged(SELECTIONS, SelectionSettings)


# ---------------------------------------------------------------- server optimizers and rate schedules
class ServerOptimizerSettings(Strict):
    """The base of every server optimizer's config (algorithm.server_optimizer); `kind` names it.
    The math is emulator/aggregation/optimizers.py (Reddi et al. 2021, Algorithm 2)."""

    kind: str


ServerOptimizer = Plugged(SERVER_OPTIMIZERS, ServerOptimizerSettings)


class AggregatorSettings(Strict):
    """The base of every robust aggregation rule's config (algorithm.aggregator); `kind` names it. The math
    is emulator/aggregation/robust.py. `f`, where a rule has it, is the attackers it assumes per round."""

    kind: str


Aggregator = Plugged(AGGREGATORS, AggregatorSettings)


class ScheduleSettings(Strict):
    """The base of every rate schedule (client_lr_schedule, server_lr_schedule, ...): `kind` names it.
    Rounds count from 1; the arithmetic and its edges are in emulator/aggregation/schedules.py. Optional linear
    warm-up: rounds 1..W are scaled by s + (1 - s) r / W (s = warmup_start_factor), on top of the kind."""

    kind: str
    warmup_rounds: int = Field(0, ge=0)
    warmup_start_factor: float = Field(0.0, ge=0, lt=1)

    @model_validator(mode="after")
    def _warmup(self):
        if self.warmup_start_factor != 0 and self.warmup_rounds == 0:
            raise ScenarioFieldError("warmup_start_factor", "only applies with warmup_rounds > 0")
        return self


class ConstantSchedule(ScheduleSettings):
    """The rate itself every round (with warmup_rounds: a plain warm-up)."""

    kind: Literal["constant"] = "constant"


class StepSchedule(ScheduleSettings):
    """The rate times gamma for each milestone reached; milestone m takes effect at round m. `every: N`
    means milestones N, 2N, ... FAST's CIFAR-10 setup: {kind: step, milestones: [5000], gamma: 0.5}."""

    kind: Literal["step"] = "step"
    gamma: float = Field(gt=0)
    every: Optional[int] = Field(None, gt=0)
    milestones: Optional[list[int]] = Field(None, min_length=1)

    @model_validator(mode="after")
    def _steps(self):
        if self.every is None and self.milestones is None:
            raise ValueError("a step schedule needs every (decay every N rounds) or milestones (the rounds "
                             "at which the rate is multiplied by gamma), or both")
        marks = self.milestones or []
        if marks and (marks[0] < 1 or any(b <= a for a, b in zip(marks, marks[1:]))):
            raise ScenarioFieldError("milestones", f"rounds (from 1) in strictly increasing order, got {marks}")
        return self


class ExponentialSchedule(ScheduleSettings):
    """The rate times gamma ** (r - 1) in round r (round 1 runs at the rate)."""

    kind: Literal["exponential"] = "exponential"
    gamma: float = Field(gt=0)


class CosineSchedule(ScheduleSettings):
    """Half a cosine from the rate (round 1) to min_lr (round `rounds`, default the scenario's rounds)."""

    kind: Literal["cosine"] = "cosine"
    min_lr: float = Field(0.0, ge=0)
    rounds: Optional[int] = Field(None, gt=0)


LrSchedule = Annotated[Union[ConstantSchedule, StepSchedule, ExponentialSchedule, CosineSchedule],
                       Field(discriminator="kind")]


def single_server_momentum(config, owner: str) -> None:
    """FedAvgM's momentum is its server optimizer: a second one on top is refused rather than guessed at."""
    if config.server_optimizer is not None and config.server_optimizer.kind != "sgd":
        raise ScenarioFieldError(
            "server_optimizer", f"{owner} keeps its own server momentum (momentum); an adaptive server optimizer "
            "would be a second one on top: use name: fedavg (or host: fedavg) with server_optimizer, or leave "
            "server_optimizer out")


class ClientTraining(Strict):
    """How devices are chosen and how they train locally; shared by every algorithm.

    `selection.exclude: s` makes s randomly chosen devices never take part (SAFARI's incomplete
    participation); the other selection kinds are FAST's fixed participation regimes.

    Every algorithm's config subclasses this; `name` names a registered algorithm."""

    name: str
    clients_per_round: int = Field(10, gt=0)
    client_lr: float = Field(0.01, gt=0)
    local_steps: Optional[int] = Field(None, gt=0)
    local_epochs: Optional[int] = Field(None, gt=0)
    batch_size: int = Field(32, gt=0)
    client_optimizer: Literal["sgd", "adam"] = "sgd"
    client_momentum: float = Field(0.0, ge=0, lt=1)
    weight_decay: float = Field(0.0, ge=0)
    sampling: Literal["without_replacement", "with_replacement"] = "without_replacement"
    weighting: Literal["uniform", "samples"] = "uniform"
    selection: Selection = Field(default_factory=lambda: SELECTIONS.get("uniform").config())
    client_lr_schedule: Optional[LrSchedule] = None  # client_lr round by round (emulator/aggregation/schedules.py)
    server_lr_schedule: Optional[LrSchedule] = None  # server_lr round by round
    server_optimizer: Optional[ServerOptimizer] = None  # the server step (None: sgd, x + server_lr mean(delta))
    aggregator: Optional[Aggregator] = None  # a robust rule instead of the weighted mean (None: the mean)

    @model_validator(mode="before")
    @classmethod
    def _selection_kind(cls, data: Any):
        if isinstance(data, dict) and isinstance(data.get("selection"), dict) and "kind" not in data["selection"]:
            data = {**data, "selection": {"kind": "uniform", **data["selection"]}}
        return data

    @model_validator(mode="after")
    def _work(self):
        if self.local_steps is not None and self.local_epochs is not None:
            raise ValueError("give local_steps or local_epochs, not both")
        if self.local_steps is None and self.local_epochs is None:
            self.local_steps = 10
        if self.sampling == "with_replacement" and self.selection.kind != "uniform":
            raise ValueError("sampling with_replacement only applies to selection kind uniform")
        if self.aggregator is not None:
            _fits_the_rule(self.aggregator, *self.robust_batch())
        return self

    def robust_batch(self) -> tuple[int, str]:
        """How many updates a robust aggregator sees at once, and the field that sets it."""
        return self.clients_per_round, "clients_per_round"


def _fits_the_rule(rule, batch: int, field: str) -> None:
    """A robust rule sees `batch` updates at once (set by `field`): refused when that is fewer than it needs
    to be itself (its config's least_updates; a plugin's rule without one takes any number)."""
    least = getattr(rule, "least_updates", None)
    if least is None:
        return
    need, name, why = least()
    if need <= batch:
        return
    path = "aggregator" + (f".{name}" if name else "")
    if need >= 2 ** 31:  # no cohort is enough (a trimmed mean that trims nothing)
        raise ScenarioFieldError(path, f"{why}; give a value that changes the rule, or leave algorithm.aggregator out")
    where = f"algorithm.{field}" if field.isidentifier() else field
    fix = (f"raise {where} to {need}" if field.isidentifier() else "use an algorithm that aggregates more at once") \
        + (f" or change {name}" if name else "")
    raise ScenarioFieldError(path, f"{rule.kind} needs at least {need} updates at once ({why}), but it sees {batch} "
                             f"({where}); {fix}")


class ServerTraining(Strict):
    """SGD on the server's own data set (data.server_set)."""

    server_batch_size: int = Field(64, gt=0)
    server_momentum: float = Field(0.0, ge=0, lt=1)


class StalenessSettings(Strict):
    """s(d), how much an update d server versions old counts (emulator/aggregation/staleness.py)."""

    kind: Literal["constant", "polynomial", "hinge"] = "polynomial"
    a: float = Field(0.5, gt=0)  # polynomial: (1 + d)^-a; hinge: 1 / (a (d - b) + 1) past b
    b: float = Field(4.0, ge=0)  # hinge: updates up to b versions old count fully


class AsynchronousTraining(ClientTraining):
    """Asynchronous aggregation: `concurrency` devices train at once; each metrics row is a server update
    (`rounds` counts server updates). clients_per_round does not apply."""

    concurrency: int = Field(100, gt=0)  # devices holding a task at once
    max_staleness: Optional[int] = Field(None, ge=0)  # staler reports are discarded (wasted work)
    staleness: StalenessSettings = StalenessSettings()


AlgorithmConfig = Plugged(ALGORITHMS, ClientTraining)



"""The scenario: one YAML file that fixes a whole experiment.

The schema is pydantic v2 with unknown keys rejected everywhere, so a typo never silently falls back to a
default. `load_scenario` turns every validation problem into a `ScenarioError` whose lines name the YAML
path of the field, what was given and what is allowed.
"""
from __future__ import annotations

import math
import re
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, Optional, Union

import yaml
from pydantic import BaseModel, ConfigDict, SerializeAsAny, Field, ValidationError, ValidationInfo, field_validator, model_validator

from emulator.registry import (ALGORITHMS, AVAILABILITY, DATASETS, MODELS, PARTITIONS, SELECTIONS,
                               SERVER_OPTIMIZERS, Plugged, Registry)


class ScenarioError(ValueError):
    """Bad input: every line names a field (its YAML path) and what would fix it."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


# ----------------------------------------------------------------------------------------------- data
class SyntheticConfig(Strict):
    """LEAF/FedProx synthetic(alpha, beta): alpha sets how much device models differ, beta how much inputs do."""

    alpha: float = Field(1.0, ge=0)
    beta: float = Field(1.0, ge=0)
    iid: bool = False
    dimension: int = Field(60, gt=0)
    classes: int = Field(10, ge=2)
    size_log_mean: float = 4.0
    size_log_sigma: float = Field(1.0, ge=0)
    min_samples: int = Field(10, ge=1)
    max_samples: int = Field(1000, ge=1)
    test_fraction: float = Field(0.2, gt=0, lt=1)

    @model_validator(mode="after")
    def _sizes(self):
        if self.max_samples < self.min_samples:
            raise ValueError("max_samples must be >= min_samples")
        return self


class PartitionSettings(Strict):
    """The base of every partition scheme's config (data.partition); `scheme` names a registered one."""

    scheme: str


class NaturalPartition(PartitionSettings):
    """Each device keeps the data it was generated with (synthetic only)."""

    scheme: Literal["natural"] = "natural"


class IidPartition(PartitionSettings):
    scheme: Literal["iid"] = "iid"


class DirichletPartition(PartitionSettings):
    """Label proportions per device ~ Dirichlet(alpha); smaller alpha, stronger label skew."""

    scheme: Literal["dirichlet"] = "dirichlet"
    alpha: float = Field(gt=0)
    balanced: bool = False
    min_samples: int = Field(1, ge=0)


class ClassesPartition(PartitionSettings):
    """Each device holds `classes_per_client` classes, sampled evenly within them (SAFARI / FSL)."""

    scheme: Literal["classes"] = "classes"
    classes_per_client: int = Field(gt=0)


class ShardsPartition(PartitionSettings):
    """McMahan et al.: sort by label, cut into shards, give each device `shards_per_client` of them."""

    scheme: Literal["shards"] = "shards"
    shards_per_client: int = Field(2, gt=0)


class TypesPartition(PartitionSettings):
    """Each device's data drawn from its latent type (population.types): a label mix ~ Dirichlet around the
    type's labels or prototype, and an amount weighted by the type's `samples` (times a lognormal factor
    with sigma size_sigma). A class's samples are shared among the types that hold it, so a device never
    holds another type's classes; classes no type holds are left out."""

    scheme: Literal["types"] = "types"
    size_sigma: float = Field(0.0, ge=0)
    min_samples: int = Field(1, ge=1)


Partition = Plugged(PARTITIONS, PartitionSettings)


class ServerSetConfig(Strict):
    """The server's (auxiliary) data set, held out from the devices' data."""

    size: int = Field(0, ge=0)
    source: Literal["iid", "balanced", "clients"] = "iid"
    clients: Optional[int] = Field(None, gt=0)

    @model_validator(mode="after")
    def _clients(self):
        if self.source == "clients" and self.clients is None:
            raise ValueError("source 'clients' needs 'clients': the number of devices the server set is drawn from")
        if self.source != "clients" and self.clients is not None:
            raise ValueError("'clients' only applies to source 'clients'")
        return self


class DatasetOptions(Strict):
    """The base of a dataset's own options (data.options), for datasets that register a config class."""


class LeafOptions(DatasetOptions):
    """LEAF's FEMNIST and Shakespeare (data.root holds LEAF's preprocessed train/ and test/ JSON files):
    one device per user; `users` keeps that many (picked at random from the seed, or the first by id)."""

    users: Optional[int] = Field(None, gt=0)
    min_samples: int = Field(1, ge=1)
    pick: Literal["random", "first"] = "random"


class MemoryOptions(DatasetOptions):
    """Samples handed over from Python (emulator.run(data=...)): what the scenario can know of them."""

    shape: list[int] = Field(min_length=1)  # one sample's shape
    classes: int = Field(gt=0)
    fingerprint: str  # SHA-256 of the arrays and their split: a resume must get the same data
    form: str = "arrays"  # arrays, torch or huggingface
    split: Optional[str] = None  # devices or users (the data's own split), None: data.partition dealt it


class DataConfig(Strict):
    dataset: str = "synthetic"
    root: Optional[str] = None
    download: bool = False
    emnist_split: Literal["balanced", "byclass", "bymerge", "digits", "letters", "mnist"] = "balanced"
    synthetic: SyntheticConfig = SyntheticConfig()
    partition: Optional[Partition] = None
    server_set: ServerSetConfig = ServerSetConfig()
    test_samples: Optional[int] = Field(None, gt=0)
    options: Optional[SerializeAsAny[DatasetOptions]] = Field(None, validate_default=True)

    @field_validator("dataset")
    @classmethod
    def _registered(cls, name: str) -> str:
        if name not in DATASETS.names():
            raise ValueError(DATASETS.unknown(name))
        return name

    @field_validator("options", mode="before")
    @classmethod
    def _options(cls, value: Any, info: ValidationInfo):
        """Validated by the config class the dataset registered (none: the dataset takes no options)."""
        name = info.data.get("dataset")
        if name is None:
            return value
        config = DATASETS.get(name).config
        if config is None:
            if value:
                raise ValueError(f"dataset {name} takes no options; remove data.options")
            return None
        if isinstance(value, config):
            return value
        return config.model_validate(value.model_dump() if isinstance(value, BaseModel) else value or {})

    @model_validator(mode="before")
    @classmethod
    def _default_scheme(cls, data: Any):
        if isinstance(data, dict) and data.get("partition") == {}:
            data = {**data, "partition": None}
        return data

    @model_validator(mode="after")
    def _partition(self):
        natural = DATASETS.get(self.dataset).fact("natural", False)
        if self.partition is None:
            self.partition = NaturalPartition() if natural else IidPartition()
        if self.partition.scheme == "natural" and not natural:
            others = [n for n in PARTITIONS.names() if n != "natural"]
            raise ScenarioFieldError(
                "data.partition.scheme", f"'natural' only exists for datasets that come split by user (such as "
                f"synthetic); for {self.dataset} choose {', '.join(others)}")
        return self


class ModelConfig(Strict):
    """The base of every model's config (`model:`, or just its name); `name` names a registered model.
    A model that registers a config class of its own takes its options here (e.g. hidden sizes)."""

    name: str = "logreg"

    def options(self) -> dict:
        """The model's own options: what its builder receives as keyword arguments."""
        return self.model_dump(exclude={"name"})


class CharLstmConfig(ModelConfig):
    """LEAF's Shakespeare model: embedding, stacked LSTM, a linear layer to the vocabulary."""

    name: Literal["char_lstm"] = "char_lstm"
    embedding: int = Field(8, gt=0)
    hidden: int = Field(256, gt=0)
    layers: int = Field(2, gt=0)


# ----------------------------------------------------------------------------------------- algorithm
class SelectionSettings(Strict):
    """The base of every selection policy's config (algorithm.selection); `kind` names a registered one.
    `exclude: s` makes s seeded devices never take part, whatever the policy."""

    kind: str
    exclude: int = Field(0, ge=0)


class UniformSelection(SelectionSettings):
    """A uniform draw among the devices that checked in."""

    kind: Literal["uniform"] = "uniform"
    exclude: int = Field(0, ge=0)


class BetaSelection(SelectionSettings):
    """FAST's arbitrary participation: draw x ~ Beta(a, b), take device int(x * M), until the cohort is full."""

    kind: Literal["beta"] = "beta"
    a: float = Field(1.0, gt=0)
    b: float = Field(10.0, gt=0)
    exclude: int = Field(0, ge=0)


class GammaSelection(SelectionSettings):
    """FAST: x ~ Gamma(shape, scale), device int(x * M), draws at or past M rejected."""

    kind: Literal["gamma"] = "gamma"
    shape: float = Field(10.0, gt=0)
    scale: float = Field(0.01, gt=0)
    exclude: int = Field(0, ge=0)


class WeibullSelection(SelectionSettings):
    """FAST: x ~ scale * Weibull(shape), device int(x / divisor * M), draws at or past M rejected."""

    kind: Literal["weibull"] = "weibull"
    shape: float = Field(10.0, gt=0)
    scale: float = Field(1.0, gt=0)
    divisor: float = Field(1.2, gt=0)
    exclude: int = Field(0, ge=0)


Selection = Plugged(SELECTIONS, SelectionSettings)


# ---------------------------------------------------------------- server optimizers and rate schedules
class ServerOptimizerSettings(Strict):
    """The base of every server optimizer's config (algorithm.server_optimizer); `kind` names it.
    The math is emulator/aggregation/optimizers.py (Reddi et al. 2021, Algorithm 2)."""

    kind: str


class SgdServerOptimizer(ServerOptimizerSettings):
    """x <- x + server_lr mean(delta): the plain step, as with no server_optimizer at all."""

    kind: Literal["sgd"] = "sgd"


class AdagradServerOptimizer(ServerOptimizerSettings):
    """FedAdagrad: m <- b1 m + (1 - b1) d; v <- v + d^2; x <- x + server_lr m / (sqrt(v) + tau)."""

    kind: Literal["adagrad"] = "adagrad"
    beta1: float = Field(0.9, ge=0, lt=1)
    tau: float = Field(1e-3, gt=0)


class AdamServerOptimizer(ServerOptimizerSettings):
    """FedAdam: as FedAdagrad with v <- b2 v + (1 - b2) d^2 (no bias correction, as in the paper)."""

    kind: Literal["adam"] = "adam"
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.99, ge=0, lt=1)
    tau: float = Field(1e-3, gt=0)


class YogiServerOptimizer(ServerOptimizerSettings):
    """FedYogi: as FedAdam with v <- v - (1 - b2) d^2 sign(v - d^2), which grows v no faster than additively."""

    kind: Literal["yogi"] = "yogi"
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.99, ge=0, lt=1)
    tau: float = Field(1e-3, gt=0)


ServerOptimizer = Plugged(SERVER_OPTIMIZERS, ServerOptimizerSettings)


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


def _single_server_momentum(config, owner: str) -> None:
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
    selection: Selection = UniformSelection()
    client_lr_schedule: Optional[LrSchedule] = None  # client_lr round by round (emulator/aggregation/schedules.py)
    server_lr_schedule: Optional[LrSchedule] = None  # server_lr round by round
    server_optimizer: Optional[ServerOptimizer] = None  # the server step (None: sgd, x + server_lr mean(delta))

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
        return self


class FedAvgConfig(ClientTraining):
    """FedAvg with two-sided learning rates (Yang et al., ICLR 2021): x <- x + server_lr * mean(delta)."""

    name: Literal["fedavg"] = "fedavg"
    server_lr: float = Field(1.0, gt=0)


class FedProxConfig(ClientTraining):
    """FedProx (Li et al.): devices add (mu / 2) ||w - x||^2 to their loss."""

    name: Literal["fedprox"] = "fedprox"
    server_lr: float = Field(1.0, gt=0)
    mu: float = Field(0.01, ge=0)


class FedAvgMConfig(ClientTraining):
    """FedAvgM (Hsu et al.): server momentum, v <- beta v + mean(delta); x <- x + server_lr v."""

    name: Literal["fedavgm"] = "fedavgm"
    server_lr: float = Field(1.0, gt=0)
    momentum: float = Field(0.9, ge=0, lt=1)

    @model_validator(mode="after")
    def _one_momentum(self):
        _single_server_momentum(self, "fedavgm")
        return self


class ScaffoldConfig(ClientTraining):
    """SCAFFOLD (Karimireddy et al.), option II control variates; devices send twice the bytes."""

    name: Literal["scaffold"] = "scaffold"
    server_lr: float = Field(1.0, gt=0)

    @model_validator(mode="after")
    def _plain_sgd(self):
        if self.client_optimizer != "sgd" or self.client_momentum != 0:
            raise ValueError("SCAFFOLD's control variates assume plain SGD on the devices: set client_optimizer: "
                             "sgd and client_momentum: 0")
        schedule = self.client_lr_schedule
        if schedule is not None and schedule.kind == "cosine" and schedule.min_lr == 0:
            raise ScenarioFieldError("client_lr_schedule.min_lr", "SCAFFOLD divides by the round's client_lr to "
                                     "derive each device's control variate; give a min_lr above 0")
        return self


class ServerTraining(Strict):
    """SGD on the server's own data set (data.server_set)."""

    server_batch_size: int = Field(64, gt=0)
    server_momentum: float = Field(0.0, ge=0, lt=1)


class SafariConfig(ClientTraining, ServerTraining):
    """SAFARI (server-assisted FedAvg): a client round with probability q (unweighted model average,
    global lr 1), otherwise a server round of `server_steps` SGD steps on the server set with lr server_lr."""

    name: Literal["safari"] = "safari"
    q: float = Field(0.8, ge=0, le=1)
    server_lr: float = Field(0.1, gt=0)
    server_steps: int = Field(1, gt=0)
    global_lr: float = Field(1.0, gt=0)
    global_lr_schedule: Optional[LrSchedule] = None  # global_lr (the client rounds' server step) round by round


class FslConfig(ClientTraining, ServerTraining):
    """FSL (federated learning with server learning): after aggregating (x + eta_g mean(delta)), the server
    runs K_0 SGD steps with lr gamma * eta_0 on its set. variant parallel is FSL-p: the server trains from
    x_t as one more participant, weighted gamma against a device's 1."""

    name: Literal["fsl"] = "fsl"
    variant: Literal["incremental", "parallel"] = "incremental"
    server_lr: float = Field(1.0, gt=0)  # eta_g
    gamma: float = Field(1.0, ge=0)
    server_steps: Optional[int] = Field(None, gt=0)  # K_0
    server_epochs: Optional[int] = Field(None, gt=0)  # E_s passes over the server set instead
    server_step_lr: Optional[float] = Field(None, gt=0)  # eta_0
    couple: bool = True  # eta_0 = K eta_l eta_g / K_0 when server_step_lr is not given
    server_step_lr_schedule: Optional[LrSchedule] = None  # eta_0 round by round (a coupled eta_0 follows eta_l, eta_g)

    @model_validator(mode="after")
    def _server_work(self):
        if self.server_steps is not None and self.server_epochs is not None:
            raise ValueError("give server_steps or server_epochs, not both")
        if self.server_steps is None and self.server_epochs is None:
            self.server_steps = self.local_steps or 10
        if self.server_step_lr is None and not self.couple:
            raise ValueError("give server_step_lr (eta_0), or set couple: true to derive it from K eta_l eta_g / K_0")
        if self.server_step_lr_schedule is not None and self.server_step_lr is None:
            raise ScenarioFieldError("server_step_lr_schedule", "schedules server_step_lr, which is not given: a "
                                     "coupled eta_0 = K eta_l eta_g / K_0 already follows client_lr_schedule and "
                                     "server_lr_schedule; give server_step_lr, or leave this out")
        return self


class DataSharingConfig(FedAvgConfig):
    """DS (Zhao et al.): FedAvg where every device also trains on the server's set, appended to its data."""

    name: Literal["ds"] = "ds"


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


class FedAsyncConfig(AsynchronousTraining):
    """FedAsync (Xie et al. 2019): each report mixed in at once with weight alpha s(d)."""

    name: Literal["fedasync"] = "fedasync"
    alpha: float = Field(0.6, gt=0, le=1)  # the mixing weight

    @model_validator(mode="after")
    def _no_server_step(self):
        if self.server_optimizer is not None and self.server_optimizer.kind != "sgd":
            raise ScenarioFieldError("algorithm.server_optimizer", "fedasync mixes each report into the model "
                                     "(alpha s(d)) and takes no server optimizer step; leave it out, or use "
                                     "fedbuff, whose buffered step takes one")
        if self.server_lr_schedule is not None:
            raise ScenarioFieldError("algorithm.server_lr_schedule", "fedasync has no server learning rate "
                                     "(alpha is its mixing weight); leave it out")
        return self


class FedBuffConfig(AsynchronousTraining):
    """FedBuff (Nguyen et al. 2022): a server step per `buffer` reports, staleness-weighted."""

    name: Literal["fedbuff"] = "fedbuff"
    buffer: int = Field(10, gt=0)  # K, reports per server update
    server_lr: float = Field(1.0, gt=0)
    normalisation: Literal["count", "weights", "none"] = "count"  # the buffer's sum / K, / sum of s(d), or as is

    @model_validator(mode="after")
    def _buffer_fits(self):
        if self.buffer > self.concurrency:
            raise ScenarioFieldError("algorithm.buffer", f"{self.buffer} reports per server update, but only "
                                     f"{self.concurrency} devices train at once (algorithm.concurrency); lower "
                                     "the buffer or raise the concurrency")
        return self


class FastConfig(ClientTraining):
    """FAST: snapshot rounds (a uniform cohort from the whole population, waited for) with probability q,
    or every `every` rounds, or adaptively (q_{r+1} = clip(q_r + lam (acc_{r-1} - acc_r), 0, 1)), on top of
    a host algorithm; between snapshots the cohort follows `selection` and the devices' availability."""

    name: Literal["fast"] = "fast"
    host: Literal["fedavg", "fedprox", "fedavgm"] = "fedavg"
    server_lr: float = Field(1.0, gt=0)
    mu: float = Field(0.01, ge=0)  # host fedprox
    momentum: float = Field(0.9, ge=0, lt=1)  # host fedavgm
    q: Optional[float] = Field(None, ge=0, le=1)
    every: Optional[int] = Field(None, gt=0)
    adaptive: bool = False
    lam: float = Field(1.0, ge=0)

    @model_validator(mode="after")
    def _schedule(self):
        given = [x for x in (self.q is not None, self.every is not None, self.adaptive) if x]
        if len(given) != 1:
            raise ValueError("choose one snapshot schedule: q (a probability), every (every I-th round) or "
                             "adaptive: true")
        if self.host == "fedavgm":
            _single_server_momentum(self, "host fedavgm")
        return self


AlgorithmConfig = Plugged(ALGORITHMS, ClientTraining)


# --------------------------------------------------------------------------------- population, system
def _check_shares(entries, where: str) -> None:
    total = sum(entry.share for entry in entries)
    if abs(total - 1.0) > 1e-6:
        raise ScenarioFieldError(where, f"shares add up to {total:g}; they must add up to 1")


class ComputeTier(Strict):
    share: float = Field(gt=0, le=1)
    s_per_sample: float = Field(gt=0)
    name: Optional[str] = None


class LognormalCompute(Strict):
    """Seconds per training sample ~ lognormal around a median (phones differ by an order of magnitude)."""

    kind: Literal["lognormal"] = "lognormal"
    median_s_per_sample: float = Field(0.005, gt=0)
    sigma: float = Field(0.5, ge=0)


class TieredCompute(Strict):
    """A table of device tiers, each with a share of the population and its seconds per sample."""

    kind: Literal["tiers"] = "tiers"
    tiers: list[ComputeTier] = Field(min_length=1)

    @model_validator(mode="after")
    def _shares(self):
        _check_shares(self.tiers, "population.compute.tiers")
        return self


class TraceCompute(Strict):
    """Seconds per sample from a device-capacity trace (FedScale's client_device_capacity pickle, or a CSV
    with columns device_id,s_per_sample,down_mbps,up_mbps); device k plays trace row k mod T unless
    `assign: random` (or a tie in population.ties) says otherwise."""

    kind: Literal["trace"] = "trace"
    file: str
    format: Literal["fedscale", "csv"] = "fedscale"
    assign: Literal["cycle", "random"] = "cycle"


class NetworkTier(Strict):
    share: float = Field(gt=0, le=1)
    down_mbps: float = Field(gt=0)
    up_mbps: float = Field(gt=0)
    latency_s: float = Field(0.05, ge=0)
    name: Optional[str] = None


class LognormalNetwork(Strict):
    """Down/up bandwidth (Mbit/s) ~ lognormal around medians; a fixed latency per transfer."""

    kind: Literal["lognormal"] = "lognormal"
    down_mbps: float = Field(20.0, gt=0)
    up_mbps: float = Field(5.0, gt=0)
    sigma: float = Field(0.5, ge=0)
    latency_s: float = Field(0.05, ge=0)


class TraceNetwork(TraceCompute):
    """Bandwidth from a device-capacity trace (FedScale: 'communication' kbit/s, both directions)."""

    latency_s: float = Field(0.05, ge=0)


class TieredNetwork(Strict):
    kind: Literal["tiers"] = "tiers"
    tiers: list[NetworkTier] = Field(min_length=1)

    @model_validator(mode="after")
    def _shares(self):
        _check_shares(self.tiers, "population.network.tiers")
        return self


class AvailabilitySettings(Strict):
    """The base of every availability model's config (population.availability entries); `kind` names a
    registered model, `share` the fraction of devices that follow it, `name` labels it in reports."""

    kind: str
    share: float = Field(1.0, gt=0, le=1)
    name: Optional[str] = None


class AlwaysAvailable(AvailabilitySettings):
    kind: Literal["always"] = "always"
    share: float = Field(1.0, gt=0, le=1)
    name: Optional[str] = None


class NeverAvailable(AvailabilitySettings):
    """Devices that never take part (they never check in)."""

    kind: Literal["never"] = "never"
    share: float = Field(gt=0, le=1)
    name: Optional[str] = None


class MarkovAvailability(AvailabilitySettings):
    """On/off periods with exponential durations; the long-run online share is mean_on / (mean_on + mean_off)."""

    kind: Literal["markov"] = "markov"
    share: float = Field(1.0, gt=0, le=1)
    name: Optional[str] = None
    mean_on_s: float = Field(gt=0)
    mean_off_s: float = Field(gt=0)


class TimeZones(Strict):
    offsets_h: list[float] = Field(default_factory=lambda: [0.0], min_length=1)
    shares: Optional[list[float]] = None

    @model_validator(mode="after")
    def _shares(self):
        if self.shares is not None:
            if len(self.shares) != len(self.offsets_h):
                raise ValueError(f"shares has {len(self.shares)} entries, offsets_h has {len(self.offsets_h)}")
            if any(x < 0 for x in self.shares) or abs(sum(self.shares) - 1) > 1e-6:
                raise ValueError("shares must be non-negative and add up to 1")
        if any(not -14 <= x <= 14 for x in self.offsets_h):
            raise ValueError("offsets_h are hours from UTC, between -14 and 14")
        return self


class DiurnalAvailability(AvailabilitySettings):
    """Online in a daily window of local time (e.g. 22:00 for 8 h, charging on Wi-Fi at night).

    Each device's window starts at start_hour + a fixed offset in [-start_spread_h/2, start_spread_h/2]
    plus a fresh N(0, jitter_h) shift every day, in the device's own time zone."""

    kind: Literal["diurnal"] = "diurnal"
    share: float = Field(1.0, gt=0, le=1)
    name: Optional[str] = None
    start_hour: float = Field(22.0, ge=0, lt=24)
    hours: float = Field(8.0, gt=0, le=24)
    start_spread_h: float = Field(0.0, ge=0, le=24)
    jitter_h: float = Field(0.0, ge=0)
    timezones: TimeZones = TimeZones()


class TraceAvailability(AvailabilitySettings):
    """Online intervals from a trace file: a CSV (device_id, start_s, end_s) or FedScale's
    client_behave_trace pickle (format: fedscale; each device's own finish_time is its period).

    Population devices are mapped onto the trace's devices: device i plays trace device i mod T
    (`assign: cycle`), a seeded random one (`assign: random`), or the one a tie in population.ties picks.
    With repeat_s the trace repeats with that period. With fewer trace devices than population devices,
    trace devices are reused, unless `reuse: false`, which makes that an error."""

    kind: Literal["trace"] = "trace"
    share: float = Field(1.0, gt=0, le=1)
    name: Optional[str] = None
    file: str
    format: Literal["csv", "fedscale"] = "csv"
    repeat_s: Optional[float] = Field(None, gt=0)
    assign: Literal["cycle", "random"] = "cycle"
    reuse: bool = True


Availability = Plugged(AVAILABILITY, AvailabilitySettings)


# ------------------------------------------------------------------------------- ties to the data
STATISTICS = ("samples", "label_entropy", "label_count", "min_label", "max_label", "class_share",
              "dominant_label", "label_group", "cluster")
GROUP_STATISTICS = ("dominant_label", "label_group", "cluster")  # say which group a device is in
BEHAVIOURS = ("compute", "network", "availability", "timezone", "dropout_per_hour", "online_share", "trace")
RANKED_BEHAVIOURS = ("compute", "network", "timezone", "trace")  # drawn per device, so they can be re-ordered
SCALED_BEHAVIOURS = ("dropout_per_hour", "online_share")  # numbers a tie may compute from a statistic


class Tie(Strict):
    """A rule that ties one behaviour of every device to a statistic of the data it holds.

    Three forms, chosen by the fields given:
    - rank (neither `values` nor `scale`): devices are ranked by the statistic and the behaviour the
      population draws anyway is handed out in that order (`direction: same`: the highest statistic gets
      the highest value: the slowest compute, the fastest network, the latest time zone, the trace with the
      most online hours). The fleet's make-up is unchanged; only who gets what follows the data.
    - group (`values`): a group statistic puts each device in a group; group k gets values[k] (a tier or
      availability entry by name or index, a time-zone offset in hours, a dropout rate, an online share).
    - scale (`scale: [a, b]`): a number per device, a at the lowest statistic and b at the highest
      (`shape`: linear in the statistic, linear in its rank, or (s / max s) ** exponent), for
      dropout_per_hour or online_share: FLGo's data-dependent availability modes are of this form.
    population.correlation loosens every tie alike (see there)."""

    by: Literal[STATISTICS]
    classes: Optional[list[int]] = Field(None, min_length=1)  # class_share: the classes whose share counts
    groups: Optional[list[list[int]]] = Field(None, min_length=1)  # label_group, dominant_label: class groups
    k: Optional[int] = Field(None, ge=2)  # cluster: how many label clusters
    sets: Literal[BEHAVIOURS]
    direction: Literal["same", "opposite"] = "same"
    values: Optional[list[Union[float, str]]] = Field(None, min_length=1)
    scale: Optional[list[float]] = Field(None, min_length=2, max_length=2)
    shape: Literal["linear", "rank", "power"] = "linear"
    exponent: float = 1.0
    range: Optional[list[float]] = Field(None, min_length=2, max_length=2)  # linear: the statistic's span

    @model_validator(mode="after")
    def _form(self):
        needs = {"class_share": "classes", "label_group": "groups", "cluster": "k"}
        for statistic, field in needs.items():
            given = getattr(self, field) is not None
            if self.by == statistic and not given:
                raise ScenarioFieldError(field, f"by: {statistic} needs {field}")
            if given and self.by != statistic and not (field == "groups" and self.by == "dominant_label"):
                raise ScenarioFieldError(field, f"{field} only applies with by: {statistic}")
        if self.values is not None and self.scale is not None:
            raise ScenarioFieldError("scale", "give values (one per group) or scale ([a, b]), not both")
        grouped = self.by in GROUP_STATISTICS
        if grouped and self.values is None:
            raise ScenarioFieldError("values", f"by: {self.by} puts devices in groups; give values: one "
                                     f"{self.sets} per group")
        if not grouped and self.values is not None:
            raise ScenarioFieldError("values", f"by: {self.by} is a number per device, not a group; leave values "
                                     f"out to rank devices by it, or group them with by: label_group or cluster")
        if self.scale is not None and self.sets not in SCALED_BEHAVIOURS:
            raise ScenarioFieldError("scale", f"scale computes a number per device; {self.sets} is not a number "
                                     f"(scale applies to {', '.join(SCALED_BEHAVIOURS)})")
        if self.values is None and self.scale is None and self.sets not in RANKED_BEHAVIOURS:
            raise ScenarioFieldError("sets", f"{self.sets} is the same for every device until a tie sets it: give "
                                     f"scale: [a, b] (or group the devices and give values)")
        if self.sets == "trace" and self.values is not None:
            raise ScenarioFieldError("values", "a trace is tied by rank (devices ranked by the statistic get the "
                                     "trace devices ranked by their online hours); leave values out")
        if self.values is not None:
            for i, value in enumerate(self.values):
                _check_tie_value(self.sets, value, f"values.{i}")
        if self.scale is not None:
            for i, value in enumerate(self.scale):
                _check_tie_value(self.sets, value, f"scale.{i}")
        if self.range is not None and self.range[0] >= self.range[1]:
            raise ScenarioFieldError("range", f"needs low < high, got {self.range}")
        return self


def _check_tie_value(behaviour: str, value, where: str) -> None:
    numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
    if behaviour in ("timezone", "dropout_per_hour", "online_share") and not numeric:
        raise ScenarioFieldError(where, f"{behaviour} values are numbers, got {value!r}")
    if behaviour == "timezone" and not -14 <= value <= 14:
        raise ScenarioFieldError(where, f"a time zone is hours from UTC, between -14 and 14, got {value}")
    if behaviour == "dropout_per_hour" and value < 0:
        raise ScenarioFieldError(where, f"a dropout rate is >= 0 per hour, got {value}")
    if behaviour == "online_share" and not 0 < value <= 1:
        raise ScenarioFieldError(where, f"an online share is in (0, 1], got {value}")
    if behaviour in ("compute", "network", "availability") and numeric and (value < 0 or value != int(value)):
        raise ScenarioFieldError(where, f"a {behaviour} value is a name or an index (0, 1, ...), got {value!r}")


class UserType(Strict):
    """A latent user type: its share of the population, the labels its devices hold (with
    data.partition.scheme: types) and the behaviour its devices share. A behaviour left out is drawn for
    the type's devices as for everyone else."""

    name: str
    share: float = Field(gt=0, le=1)
    labels: Optional[list[int]] = Field(None, min_length=1)  # the classes its data comes from, evenly
    prototype: Optional[list[float]] = Field(None, min_length=2)  # or weights over all classes
    concentration: float = Field(1.0, gt=0)  # per-device label mix ~ Dirichlet(concentration x prototype)
    samples: float = Field(1.0, gt=0)  # how much data its devices hold, relative to the other types
    availability: Optional[Union[int, str]] = None  # an entry of population.availability, by name or index
    timezone: Optional[float] = Field(None, ge=-14, le=14)  # hours from UTC, for diurnal availability
    compute: Optional[Union[int, str]] = None  # a tier of population.compute, by name or index
    network: Optional[Union[int, str]] = None  # a tier of population.network
    dropout_per_hour: Optional[float] = Field(None, ge=0)
    online_share: Optional[float] = Field(None, gt=0, le=1)  # for markov availability

    @model_validator(mode="after")
    def _labels(self):
        if self.labels is not None and self.prototype is not None:
            raise ScenarioFieldError("prototype", "give labels (a class set) or prototype (class weights), not both")
        if self.prototype is not None and (min(self.prototype) < 0 or sum(self.prototype) <= 0):
            raise ScenarioFieldError("prototype", "class weights must be >= 0 with a positive sum")
        return self

    def behaviour(self, name: str):
        return getattr(self, name)


TYPE_BEHAVIOURS = ("availability", "timezone", "compute", "network", "dropout_per_hour", "online_share")


class PopulationConfig(Strict):
    """The devices: how many, how fast they compute and communicate, when they are online, how often they drop."""

    devices: int = Field(100, gt=0)
    compute: Annotated[Union[LognormalCompute, TieredCompute, TraceCompute],
                       Field(discriminator="kind")] = LognormalCompute()
    compute_jitter: float = Field(0.1, ge=0)
    network: Annotated[Union[LognormalNetwork, TieredNetwork, TraceNetwork],
                       Field(discriminator="kind")] = LognormalNetwork()
    availability: list[Availability] = Field(default_factory=lambda: [AlwaysAvailable()], min_length=1)
    dropout_per_hour: float = Field(0.0, ge=0)
    types: Optional[list[UserType]] = Field(None, min_length=1)  # latent user types (see UserType)
    ties: list[Tie] = Field(default_factory=list)  # behaviour tied to data (see Tie)
    # How strongly behaviour follows data in every tie and type: 1 as written; at c < 1 a seeded share
    # 1 - c of the devices swap their tied behaviour at random among themselves (so the fleet's make-up
    # never changes); 0 is independence.
    correlation: float = Field(1.0, ge=0, le=1)

    @model_validator(mode="before")
    @classmethod
    def _default_kinds(cls, data: Any):
        if isinstance(data, dict):
            data = dict(data)
            for key in ("compute", "network"):
                if isinstance(data.get(key), dict) and "kind" not in data[key]:
                    kind = "tiers" if "tiers" in data[key] else "trace" if "file" in data[key] else "lognormal"
                    data[key] = {"kind": kind, **data[key]}
        return data

    @model_validator(mode="after")
    def _shares(self):
        _check_shares(self.availability, "population.availability")
        if self.types is not None:
            _check_shares(self.types, "population.types")
            names = [t.name for t in self.types]
            if len(set(names)) != len(names):
                raise ScenarioFieldError("population.types", f"type names must differ, got {names}")
        names = [a.name for a in self.availability if a.name is not None]
        if len(set(names)) != len(names):
            raise ScenarioFieldError("population.availability", f"entry names must differ, got {names}")
        if self.ties or self.types:
            from emulator.system.ties import check_ties  # the rules live beside the code that applies them

            check_ties(self)
        return self


class ServerProfile(Strict):
    """The server's compute, charged on the simulated clock for server-side training (SAFARI, FSL)."""

    s_per_sample: float = Field(1e-4, ge=0)


class SystemConfig(Strict):
    """The simulated world.

    `simulated`: devices check in when online, the cohort is over-selected, each selected device downloads,
    trains and uploads at its own speed, and the round closes when `clients_per_round` reports arrived or
    the deadline passed. `ideal`: everyone always available, every round lasts round_duration_s."""

    model: Literal["simulated", "ideal"] = "simulated"
    over_selection: float = Field(1.3, ge=1)
    deadline_s: Optional[float] = Field(None, gt=0)
    min_report_fraction: float = Field(0.8, gt=0, le=1)
    selection_timeout_s: float = Field(3600.0, ge=0)
    checkin_poll_s: float = Field(60.0, gt=0)
    snapshot_deadline_s: Optional[float] = Field(None, gt=0)
    round_duration_s: float = Field(60.0, gt=0)
    server: ServerProfile = ServerProfile()
    events: bool = False


# ---------------------------------------------------------------------------------------- execution
class RuntimeConfig(Strict):
    address: Optional[str] = None
    runners: Optional[int] = Field(None, gt=0)
    num_cpus: float = Field(1.0, gt=0)
    num_gpus: float = Field(0.0, ge=0)
    server_num_cpus: float = Field(0.0, ge=0)
    torch_threads: Optional[int] = Field(None, gt=0)
    precision: Literal["fp32", "bf16"] = "fp32"  # bf16: autocast where the hardware has it (emulator/training/precision.py)
    vectorise: bool = False  # train each group's devices at once (emulator/training/cohort.py) where the model allows
    group_size: Optional[int] = Field(None, gt=0)  # devices per runner task; None: from the round's reports

    def numerics(self) -> dict:
        """The runtime fields that change a run's numbers (in the last bits, or more), where they differ from
        the defaults: they join the checkpoint fingerprint and cannot change on resume."""
        fields = {}
        if self.precision != "fp32":
            fields["precision"] = self.precision
        if self.vectorise:  # vectorised groups: their composition reaches the last bits
            fields.update(vectorise=True, group_size=self.group_size)
        return fields


class EvaluationConfig(Strict):
    every: int = Field(1, gt=0)
    batch_size: int = Field(1024, gt=0)


class OutputConfig(Strict):
    dir: str = "runs"
    checkpoint_every: int = Field(10, ge=0)  # rounds between checkpoints (0: only at the end)
    tensorboard: bool = True  # TensorBoard event files in RUN_DIR/tensorboard/, one step per round


# ------------------------------------------------------------------------------ privacy, compression, secure aggregation
class FixedClipping(Strict):
    """Every update is clipped to privacy.clip."""

    kind: Literal["fixed"] = "fixed"


class AdaptiveClipping(Strict):
    """The clip follows the `quantile` of update norms (Andrew et al. 2021): privacy.clip is its start C_0, and
    each round C <- C exp(-lr (b - quantile)), b the noised share of updates that were not clipped."""

    kind: Literal["adaptive"] = "adaptive"
    quantile: float = Field(0.5, gt=0, lt=1)
    lr: float = Field(0.2, gt=0)
    count_stddev: Optional[float] = Field(None, gt=0)  # noise on the unclipped count; None: cohort / 20


class PrivacyConfig(Strict):
    """Client-level differential privacy, DP-FedAvg (McMahan et al. 2018): each device's delta is clipped to
    `clip` in L2, the cohort's sum gets Gaussian noise of std noise_multiplier x clip, and the sum is divided by
    the expected cohort (algorithm.clients_per_round), not by the reports: dropouts cut signal, not noise.
    Epsilon for `delta` is reported after every round (dp-accounting); see docs/privacy.md for what its
    sampling assumption means when participation emerges from the system model."""

    kind: Literal["dp_fedavg"] = "dp_fedavg"
    noise_multiplier: float
    clip: float
    clipping: Annotated[Union[FixedClipping, AdaptiveClipping], Field(discriminator="kind")] = FixedClipping()
    delta: float = 1e-5
    accountant: Literal["rdp", "pld"] = "rdp"
    noise_cohort: Optional[int] = Field(None, gt=0)  # size the noise for this cohort (pfl-research's noise_cohort_size)

    @field_validator("noise_multiplier")
    @classmethod
    def _noise(cls, value):
        if value < 0:
            raise ValueError(f"{value:g} is below 0; give the noise std as a multiple of the clip, >= 0 (0: clipping "
                             "only, no privacy), e.g. 1.0")
        return value

    @field_validator("clip")
    @classmethod
    def _clip(cls, value):
        if value <= 0:
            raise ValueError(f"{value:g}, but the L2 bound on an update must be above 0; e.g. 1.0 (with clipping: "
                             "{kind: adaptive} it is only the start, 0.1 is the usual)")
        return value

    @field_validator("delta")
    @classmethod
    def _delta(cls, value):
        if not 0 < value < 1:
            raise ValueError(f"{value:g} is outside (0, 1); give a small probability, below 1 / population.devices "
                             "(e.g. 1e-5)")
        return value


class NoCompression(Strict):
    kind: Literal["none"] = "none"


class QsgdCompression(Strict):
    """QSGD (Alistarh et al. 2017), dense and bucketed: per bucket one float norm, per value a signed level."""

    kind: Literal["qsgd"] = "qsgd"
    levels: int
    bucket: int = Field(512, gt=0)
    error_feedback: bool = False  # unbiased already: residuals are optional

    @field_validator("levels")
    @classmethod
    def _levels(cls, value):
        if value < 1:
            raise ValueError(f"{value}: quantisation needs at least 1 level; e.g. 4 (4 bits a value) or 8 (5 bits)")
        return value


class TopKCompression(Strict):
    """Top-k sparsification with error feedback (Stich et al. 2018): the k largest entries of update plus the
    device's residual are sent; the rest becomes its residual, kept as device state across rounds."""

    kind: Literal["top_k"] = "top_k"
    k: Optional[int] = None  # values sent
    fraction: Optional[float] = Field(None, gt=0, le=1)  # or this share of the model's values
    error_feedback: bool = True

    @model_validator(mode="after")
    def _one_size(self):
        if (self.k is None) == (self.fraction is None):
            raise ScenarioFieldError("k", "give either k (values sent) or fraction (a share of the model), not both "
                                     "or neither", relative=True)
        if self.k is not None and self.k < 1:
            raise ScenarioFieldError("k", f"{self.k}: send at least 1 value", relative=True)
        return self


class SignCompression(Strict):
    """Scaled sign (EF-signSGD, Karimireddy et al. 2019): one bit a value plus one float scale."""

    kind: Literal["sign"] = "sign"
    error_feedback: bool = True


Compression = Annotated[Union[NoCompression, QsgdCompression, TopKCompression, SignCompression],
                        Field(discriminator="kind")]


class SecureAggregationConfig(Strict):
    """SecAgg (Bonawitz et al. 2017) or SecAgg+ (Bell et al. 2020) as a cost: its round trips, masked upload and
    unmasking are charged to the clock and the byte counters; the aggregate is unchanged (emulator/uplink/secagg.py)."""

    kind: Literal["secagg", "secagg_plus"] = "secagg"
    threshold: Optional[Union[int, float]] = None  # t: an int, or a fraction of a device's share group; None: default
    neighbours: Optional[int] = Field(None, gt=0)  # k, SecAgg+ only; None: from the cohort (O(log n))
    input_bits: int = Field(32, ge=1, le=62)  # a value's fixed-point width before the field grows by log2(cohort)
    malicious: bool = False  # add the consistency round (the malicious-server protocol)
    device_slowdown: float = Field(10.0, gt=0)  # a phone's crypto against the reference core, at median speed

    @field_validator("threshold")
    @classmethod
    def _threshold(cls, value):
        if value is not None and (value <= 0 or (isinstance(value, float) and value > 1)):
            raise ValueError(f"{value}: give a number of devices (>= 2) or a fraction in (0, 1] of a device's group")
        return value


class Scenario(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    plugins: list[str] = Field(default_factory=list)  # modules that register parts (see emulator/parts/plugins.py)
    seed: int = Field(0, ge=0)
    rounds: int = Field(gt=0)
    data: DataConfig = Field(default_factory=DataConfig)
    model: Plugged(MODELS, ModelConfig) = ModelConfig()
    algorithm: AlgorithmConfig = FedAvgConfig()
    population: PopulationConfig = PopulationConfig()
    system: SystemConfig = SystemConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    output: OutputConfig = OutputConfig()
    privacy: Optional[PrivacyConfig] = None  # client-level DP (None: off)
    compression: Compression = NoCompression()  # what a device's upload is encoded as
    secure_aggregation: Optional[SecureAggregationConfig] = None  # SecAgg's cost (None: plain uploads)

    @model_validator(mode="before")
    @classmethod
    def _default_algorithm(cls, data: Any):
        if isinstance(data, dict) and isinstance(data.get("algorithm"), dict) and "name" not in data["algorithm"]:
            data = {**data, "algorithm": {"name": "fedavg", **data["algorithm"]}}
        return data

    @model_validator(mode="after")
    def _consistent(self):
        algo, devices = self.algorithm, self.population.devices
        if algo.sampling == "without_replacement" and algo.clients_per_round > devices - algo.selection.exclude:
            raise ScenarioFieldError(
                "algorithm.clients_per_round",
                f"{algo.clients_per_round} devices a round without replacement, but population.devices is "
                f"{devices}; lower clients_per_round, raise population.devices or use sampling: with_replacement")
        if isinstance(algo, AsynchronousTraining):
            if self.system.model != "simulated":
                raise ScenarioFieldError("system.model", f"{algo.name} is asynchronous: devices come and go on the "
                                         "simulated clock, which system.model: ideal does not have; use system.model: "
                                         "simulated (population.availability: [{kind: always}] for everyone online)")
            if algo.concurrency > devices - algo.selection.exclude:
                raise ScenarioFieldError("algorithm.concurrency", f"{algo.concurrency} devices training at once, but "
                                         f"the population has {devices - algo.selection.exclude} that may take part; "
                                         "lower algorithm.concurrency or raise population.devices")
        if algo.selection.exclude >= devices:
            raise ScenarioFieldError("algorithm.selection.exclude", f"{algo.selection.exclude} excluded devices "
                                     f"leave none of the {devices} to select; lower it")
        if ALGORITHMS.get(algo.name).fact("needs_server_data") and self.data.server_set.size == 0:
            raise ScenarioFieldError("data.server_set.size", f"{algo.name} trains on the server's own data: set "
                                     "data.server_set.size (and source) to give the server a data set")
        accepts = MODELS.get(self.model.name).fact("accepts")
        problem = accepts(dataset_input_shape(self.data)) if accepts is not None else None
        if problem:
            raise ScenarioFieldError("model.name", f"{self.model.name} {problem}, but dataset {self.data.dataset} "
                                     f"gives inputs of shape {dataset_input_shape(self.data)}; choose a model that "
                                     "fits the data (logreg and mlp fit any), or a matching dataset")
        population = self.population
        if self.system.model == "ideal":
            if any(a.kind != "always" for a in population.availability):
                raise ScenarioFieldError("population.availability", "availability only applies with "
                                                                     "system.model: simulated (the ideal model keeps everyone online)")
            if population.dropout_per_hour > 0:
                raise ScenarioFieldError("population.dropout_per_hour", "dropout only applies with "
                                                                        "system.model: simulated")
            if self.system.deadline_s is not None:
                raise ScenarioFieldError("system.deadline_s", "deadlines only apply with system.model: simulated")
            if population.ties:
                raise ScenarioFieldError("population.ties", "ties set behaviour, which only exists with system.model: "
                                         "simulated (the ideal model keeps everyone online at one speed)")
            behaving = [t.name for t in population.types or [] if any(t.behaviour(b) is not None for b in TYPE_BEHAVIOURS)]
            if behaving:
                raise ScenarioFieldError("population.types", f"type(s) {behaving} set behaviour, which only exists "
                                         "with system.model: simulated")
        _check_classes(self)
        _check_upload(self)
        if self.runtime.num_gpus > 0 and self.runtime.num_gpus > 1 and self.runtime.num_gpus != int(self.runtime.num_gpus):
            raise ScenarioFieldError("runtime.num_gpus", "a share above 1 GPU must be a whole number")
        return self


def _check_upload(scenario) -> None:
    """privacy, compression and secure_aggregation fit the algorithm and the system model."""
    algo, privacy, secure = scenario.algorithm, scenario.privacy, scenario.secure_aggregation
    asynchronous = isinstance(algo, AsynchronousTraining)
    if privacy is not None:
        if asynchronous or not ALGORITHMS.get(algo.name).fact("client_dp"):
            raise ScenarioFieldError("privacy", f"algorithm {algo.name!r} does not release its cohort's mean through "
                                     "FedAvg's aggregation, which DP-FedAvg noises; use fedavg, fedprox, fedavgm, fast, "
                                     "safari, fsl or ds (a plugin built on FedAvg.mean_delta registers client_dp=True)")
        if algo.weighting != "uniform":
            raise ScenarioFieldError("algorithm.weighting", "samples weighting gives a device unbounded weight, so no "
                                     "clip bounds its influence; use weighting: uniform with privacy")
        if algo.sampling != "without_replacement":
            raise ScenarioFieldError("algorithm.sampling", "a device drawn twice would count twice, doubling the "
                                     "sensitivity; use sampling: without_replacement with privacy")
        clipping = privacy.clipping
        if clipping.kind == "adaptive" and privacy.noise_multiplier > 0:
            count_stddev = clipping.count_stddev or algo.clients_per_round / 20
            if privacy.noise_multiplier >= 2 * count_stddev:
                raise ScenarioFieldError("privacy.clipping.count_stddev", f"{count_stddev:g}"
                                         + (" (the default, clients_per_round / 20)" if clipping.count_stddev is None
                                            else "") + f", but the unclipped count's noise takes part of the noise "
                                         f"budget and needs noise_multiplier ({privacy.noise_multiplier:g}) < 2 x "
                                         f"count_stddev; set count_stddev above {privacy.noise_multiplier / 2:g}, "
                                         "or lower the noise multiplier")
        if privacy.noise_cohort is not None and privacy.noise_cohort < algo.clients_per_round:
            raise ScenarioFieldError("privacy.noise_cohort", f"{privacy.noise_cohort} is below "
                                     f"algorithm.clients_per_round ({algo.clients_per_round}); it sizes the noise for a "
                                     "larger cohort than the one trained: raise it or leave it out")
    if secure is None:
        return
    if scenario.system.model != "simulated":
        raise ScenarioFieldError("secure_aggregation", "its cost is round trips and crypto on the simulated clock, "
                                 "which system.model: ideal does not have; use system.model: simulated")
    if asynchronous:
        raise ScenarioFieldError("secure_aggregation", f"{algo.name} applies reports one at a time or in small "
                                 "buffers, not as one masked sum; use a synchronous algorithm with secure aggregation")
    if scenario.compression.kind != "none":
        raise ScenarioFieldError("compression", f"{scenario.compression.kind}: secure aggregation sums one linear "
                                 "integer encoding shared by every device; per-device scales or top-k indices do not "
                                 "pass through its masks. Use compression: {kind: none} (set "
                                 "secure_aggregation.input_bits for a narrower fixed-point width)")
    selected = math.ceil(algo.clients_per_round * scenario.system.over_selection)
    group = selected if secure.kind == "secagg" else (secure.neighbours or 0) + 1
    if secure.kind == "secagg" and secure.neighbours is not None:
        raise ScenarioFieldError("secure_aggregation.neighbours", "SecAgg shares with everyone in the cohort; "
                                 "neighbours applies to kind: secagg_plus")
    if secure.neighbours is not None and secure.neighbours % 2:
        raise ScenarioFieldError("secure_aggregation.neighbours", f"{secure.neighbours}: SecAgg+ places k/2 "
                                 "neighbours on each side of a device on its ring; give an even number (e.g. "
                                 f"{secure.neighbours + 1})")
    if secure.neighbours is not None and secure.neighbours >= selected:
        raise ScenarioFieldError("secure_aggregation.neighbours", f"{secure.neighbours}, but a round selects "
                                 f"{selected} devices, so each has at most {selected - 1} neighbours; lower it")
    if isinstance(secure.threshold, int) and secure.threshold > (group if group > 1 else selected):
        raise ScenarioFieldError("secure_aggregation.threshold", f"{secure.threshold}, but a round selects only "
                                 f"{selected} devices (algorithm.clients_per_round x system.over_selection)"
                                 + (f" and each shares with {group} (neighbours + itself)" if group != selected else "")
                                 + ": every round would abort; lower the threshold or raise clients_per_round")


class ScenarioFieldError(ValueError):
    """Raised inside validators to point at a field other than the one being validated."""

    def __init__(self, path: str, message: str, relative: bool | None = None):
        super().__init__(f"{path}: {message}")
        self.path, self.message = path, message
        # a path without a top-level section is relative to the model being validated (e.g. a Tie's `values`)
        self.relative = relative if relative is not None else path.split(".")[0] not in Scenario.model_fields


def dataset_classes(data: DataConfig) -> int:
    """How many classes a dataset has, known without loading it (the dataset's `classes` fact)."""
    return int(DATASETS.get(data.dataset).fact("classes")(data))


def _check_classes(scenario) -> None:
    """Classes named in population.ties and .types exist in the dataset; types and scheme types agree."""
    population, data = scenario.population, scenario.data
    classes = dataset_classes(data)
    label_types = [t for t in population.types or [] if t.labels is not None or t.prototype is not None]

    def check(where, named):
        bad = sorted({c for c in named if not 0 <= c < classes})
        if bad:
            raise ScenarioFieldError(where, f"class(es) {bad} do not exist: {data.dataset} has classes 0..{classes - 1}")

    for i, tie in enumerate(population.ties):
        if tie.classes is not None:
            check(f"population.ties.{i}.classes", tie.classes)
        for j, group in enumerate(tie.groups or []):
            check(f"population.ties.{i}.groups.{j}", group)
        if tie.by == "dominant_label" and tie.groups is None and tie.values is not None and len(tie.values) != classes:
            raise ScenarioFieldError(f"population.ties.{i}.values", f"by: dominant_label puts devices in "
                                     f"{classes} groups (one per class of {data.dataset}); give {classes} values, "
                                     f"or group the classes with groups: [[...], ...]")
        if tie.by == "label_group" and len(tie.values or []) != len(tie.groups):
            raise ScenarioFieldError(f"population.ties.{i}.values", f"{len(tie.values or [])} values for "
                                     f"{len(tie.groups)} groups; give one value per group")
        if tie.by == "dominant_label" and tie.groups is not None and len(tie.values or []) != len(tie.groups):
            raise ScenarioFieldError(f"population.ties.{i}.values", f"{len(tie.values or [])} values for "
                                     f"{len(tie.groups)} groups; give one value per group")
        if tie.by == "cluster" and len(tie.values or []) != tie.k:
            raise ScenarioFieldError(f"population.ties.{i}.values", f"{len(tie.values or [])} values for k = "
                                     f"{tie.k} clusters; give one value per cluster")
    for k, user_type in enumerate(population.types or []):
        if user_type.labels is not None:
            check(f"population.types.{k}.labels", user_type.labels)
        if user_type.prototype is not None and len(user_type.prototype) != classes:
            raise ScenarioFieldError(f"population.types.{k}.prototype", f"{len(user_type.prototype)} weights, but "
                                     f"{data.dataset} has {classes} classes; give one weight per class")
    scheme = data.partition.scheme
    if scheme == "types":
        if not population.types:
            raise ScenarioFieldError("data.partition.scheme", "'types' draws each device's data from its latent "
                                     "type: define population.types (with labels or prototype)")
        missing = [t.name for t in population.types if t.labels is None and t.prototype is None]
        if missing:
            raise ScenarioFieldError("population.types", f"type(s) {missing} say nothing about their data: give "
                                     "each type labels (a class set) or prototype (class weights)")
    elif label_types:
        raise ScenarioFieldError(f"population.types.{population.types.index(label_types[0])}.labels",
                                 f"a type's labels only shape the data with data.partition.scheme: types (the "
                                 f"partition is {scheme}); set that scheme, or drop labels/prototype to tie only "
                                 "behaviour to the types")


def dataset_input_shape(data: DataConfig) -> tuple[int, ...]:
    """The shape of one input sample, known without loading the data (the dataset's `input_shape` fact)."""
    return tuple(DATASETS.get(data.dataset).fact("input_shape")(data))


# ------------------------------------------------------------------------------------ loading, errors
APPEND = "+"  # a path element of parse_override: append an item to the list (spelled `[+]`)
_PATH_TOKEN = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\.(-?[0-9]+)|\[\s*(-?[0-9]+|\+)\s*\]")
_PATH_EXAMPLES = "e.g. algorithm.client_lr, population.availability[0].mean_on_s or population.availability[+]"


def parse_override(text: str) -> tuple[list[str | int], Any]:
    """`a.b=value` -> (['a', 'b'], value parsed as YAML, so 50 is an int, true a bool and [1, 2] a list).

    A path element is a key (str), a list index (int; negative counts from the end), spelled `a[0]` or `a.0`,
    or APPEND, spelled `a[+]`, which adds the value as a new last item of the list."""
    if "=" not in text:
        raise ScenarioError(f"--set {text!r}: expected KEY=VALUE, e.g. --set rounds=50 or --set algorithm.client_lr=0.1")
    key, _, raw = text.partition("=")
    key = key.strip()
    first = re.match(r"[A-Za-z_][A-Za-z0-9_]*", key)
    if first is None:
        raise ScenarioError(f"--set {text!r}: {key!r} is not a field path: it must start with a field name, "
                            f"{_PATH_EXAMPLES}")
    path: list[str | int] = [first.group()]
    at = first.end()
    while at < len(key):
        token = _PATH_TOKEN.match(key, at)
        if token is None:
            raise ScenarioError(f"--set {text!r}: {key!r} is not a field path: after {key[:at]!r} expected "
                                f".FIELD, [INDEX] or [+] (to append), not {key[at:]!r}; {_PATH_EXAMPLES}")
        name, dotted, bracket = token.groups()
        index = dotted if dotted is not None else bracket
        path.append(name if name is not None else APPEND if index == "+" else int(index))
        at = token.end()
    try:
        value = yaml.safe_load(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"--set {text!r}: the value is not valid YAML ({exc})") from None
    return path, value


def _format_path(path: list[str | int]) -> str:
    """The YAML path as written on the command line: population.availability[0].mean_on_s."""
    out = ""
    for part in path:
        if part == APPEND:
            out += "[+]"
        elif isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def apply_overrides(raw: dict, overrides: list[str]) -> dict:
    """Set each `a.b=value` in a copy of the raw YAML mapping, creating missing sections; list items are
    reached by index (`a[0].b=value`, `a[-1]`) and added with `a[+]=value` (see parse_override).

    Indexing or appending to a list the file does not set is an error that shows the default and asks for
    the whole list (see _absent_list)."""
    import copy

    data = copy.deepcopy(raw)
    for text in overrides:
        path, value = parse_override(text)
        node: Any = data
        for i, part in enumerate(path):
            here, last = _format_path(path[:i]), i == len(path) - 1
            if isinstance(part, str) and part != APPEND:
                if isinstance(node, list):
                    raise ScenarioError(f"--set {text!r}: {here} is a list of {_items(node)}, not a section; pick "
                                        f"an item, e.g. {here}[0].{part}, or append one with {here}[+]=VALUE")
                if last:
                    node[part] = value
                    break
                child = node.get(part)
                if isinstance(path[i + 1], int) or path[i + 1] == APPEND:
                    if child is None:
                        raise _absent_list(text, path[:i + 1], path[i + 1])
                elif child is None or isinstance(child, str) and part == "model":
                    child = {} if child is None else {"name": child}
                    node[part] = child
                if not isinstance(child, (dict, list)):
                    raise _not_a_container(text, path[:i + 1], child)
                node = child
                continue
            if not isinstance(node, list):  # a section: values are stopped above
                raise ScenarioError(f"--set {text!r}: {here} is a section, not a list, so it has no item "
                                    f"{_format_path([part])}; use {here}.FIELD")
            if part == APPEND:
                if last:
                    node.append(value)
                    break
                node.append({} if isinstance(path[i + 1], str) else [])
                node = node[-1]
                continue
            if not -len(node) <= part < len(node):
                n = len(node)
                valid = ("no index is valid" if n == 0 else "valid indices are 0 and -1" if n == 1 else
                         f"valid indices are 0 to {n - 1}, or -{n} to -1 counting from the end")
                raise ScenarioError(f"--set {text!r}: {_format_path(path[:i + 1])}: index out of range; {here} "
                                    f"has {_items(node)}, so {valid}; add an item with {here}[+]=VALUE")
            if last:
                node[part] = value
                break
            if not isinstance(node[part], (dict, list)):
                raise _not_a_container(text, path[:i + 1], node[part])
            node = node[part]
    return data


def _items(items: list) -> str:
    return f"{len(items)} item{'' if len(items) == 1 else 's'}"


def _not_a_container(text: str, path: list[str | int], value: Any) -> ScenarioError:
    where = _format_path(path)
    return ScenarioError(f"--set {text!r}: {where} is a value ({value!r}), not a section or a list; set it "
                         f"whole with --set {where}=VALUE")


def _absent_list(text: str, path: list[str | int], item: int | str) -> ScenarioError:
    """An index or [+] under a field the file does not set. Filling in the schema's default list there would
    change it unseen (appending to [{kind: always}] keeps an item the user never wrote), so ask for the list."""
    where = _format_path(path)
    model = _walk(list(path))[0] if all(isinstance(p, str) for p in path) else None
    field = model.model_fields.get(path[-1]) if model is not None else None
    if model is not None and field is None:
        return ScenarioError(f"--set {text!r}: {where}: unknown key; allowed here: {', '.join(model.model_fields)}")
    if field is not None and typing.get_origin(_strip_annotated(field.annotation)) is not list:
        return ScenarioError(f"--set {text!r}: {where} is not a list, so it has no item {_format_path([item])}; "
                             f"use {where}.FIELD or {where}=VALUE")
    default = ""
    if field is not None and not field.is_required():
        items = [d.model_dump(mode="json", exclude_none=True) if isinstance(d, BaseModel) else d
                 for d in field.get_default(call_default_factory=True) or []]
        default = f" (its default is {yaml.safe_dump(items, default_flow_style=True, width=10 ** 6).strip()})"
    return ScenarioError(f"--set {text!r}: {where} is not set in the scenario file, so it has no items to change "
                         f"or append to; set the whole list instead: --set '{where}=[...]'{default}")


def read_yaml(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise ScenarioError(f"{path}: no such scenario file")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ScenarioError(f"{path}: not valid YAML{at}: {problem}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ScenarioError(f"{path}: a scenario is a mapping of keys (name, rounds, data, ...), "
                            f"not a {type(data).__name__}")
    return data


def load_scenario(path: str | Path, overrides: list[str] | None = None, plugins: list[str] | None = None,
                  search: list[Path] | None = None) -> Scenario:
    """The scenario in a YAML file, with --set overrides and --plugin modules (added to its `plugins`);
    plugin modules are looked for beside the file, then in the working directory, then on sys.path."""
    raw = apply_overrides(read_yaml(path), overrides or [])
    return scenario_from(with_plugins(raw, plugins), str(path), Path(path).resolve().parent, search)


def with_plugins(raw: dict, plugins) -> dict:
    """The raw scenario with these plugin modules added to its own (as --plugin adds them), in order, once."""
    if not plugins:
        return raw
    added = [plugins] if isinstance(plugins, str) else list(plugins)
    return {**raw, "plugins": list(dict.fromkeys([*(raw.get("plugins") or []), *added]))}


def scenario_from(raw: dict, source: str, base: Path, search: list[Path] | None = None) -> Scenario:
    """Validate a raw scenario whose relative files and plugin modules live in `base` (else in the working
    directory, then `search`, then on sys.path), and resolve its files."""
    scenario = validate_scenario(raw, source=source, search=[base, Path.cwd(), *(search or [])])
    resolve_files(scenario, base, source=source)
    return scenario


def resolve_files(scenario: Scenario, base: Path, source: str = "scenario") -> None:
    """Make the files a scenario names (trace files) absolute: relative to the scenario file's directory,
    else to the working directory. A missing file is an error naming the field; so is a file that does not
    read as its format says (emulator/system/traces.py reads it here, before anything runs)."""
    population = scenario.population

    def resolved(name: str, field: str) -> str:
        file = Path(name).expanduser()
        candidates = [file] if file.is_absolute() else [base / file, Path.cwd() / file]
        found = next((c for c in candidates if c.is_file()), None)
        if found is None:
            raise ScenarioError(f"{source}: {field}: no trace file {' or '.join(str(c) for c in candidates)}; "
                                "give a path relative to the scenario file or an absolute one")
        return str(found.resolve())

    def read(reader, field: str, *args):
        try:
            return reader(*args)
        except ScenarioError as exc:
            raise ScenarioError(f"{source}: {field}: {exc}") from None

    def entry_size(index: int) -> int | None:
        """Devices in availability entry `index` by its share, as AvailabilityMix deals them (None when ties
        or types may move devices between entries: the world checks reuse then)."""
        entries = population.availability
        if len(entries) == 1:
            return population.devices
        if population.types or any(t.sets == "availability" for t in population.ties):
            return None
        import numpy as np

        from emulator.system.profiles import assign_by_share

        groups = assign_by_share([e.share for e in entries], population.devices, np.random.default_rng(0))
        return int(np.count_nonzero(groups == index))  # the sizes do not depend on the stream

    for i, entry in enumerate(population.availability):
        if entry.kind != "trace":
            continue
        from emulator.system import traces

        field = f"population.availability.{i}"
        entry.file = resolved(entry.file, f"{field}.file")
        windows = read(traces.read_availability, f"{field}.file", entry.file, entry.format, entry.repeat_s)
        members = entry_size(i)
        if not entry.reuse and members is not None and windows.count < members:
            raise ScenarioError(f"{source}: {field}.reuse: the trace {entry.file} has {windows.count} devices for "
                                f"the entry's {members} devices; with reuse: false each device needs its own trace "
                                "device: use a larger trace, fewer devices, or reuse: true")
    for name in ("compute", "network"):
        config = getattr(population, name)
        if config.kind == "trace":
            from emulator.system import traces

            config.file = resolved(config.file, f"population.{name}.file")
            read(traces.read_capacity, f"population.{name}.file", config.file, config.format)
    compute, network = population.compute, population.network
    if compute.kind == network.kind == "trace" and (compute.file, compute.format) == (network.file, network.format) \
            and compute.assign != network.assign:
        raise ScenarioError(f"{source}: population.network.assign: {network.assign!r}, but population.compute "
                            f"reads the same file with assign {compute.assign!r}; a device plays one row of a "
                            "capacity file for both, so give both the same assign")


def validate_scenario(raw: dict, source: str = "scenario", search: list[Path] | None = None) -> Scenario:
    """A Scenario from plain data; the plugins it names are imported first (looked for in `search`, then
    on sys.path), so the parts they register validate like the built-ins."""
    from emulator.parts.plugins import load_plugins

    plugins = raw.get("plugins") if isinstance(raw, dict) else None
    if isinstance(plugins, list):
        load_plugins(plugins, search or [Path.cwd()])
    try:
        return Scenario.model_validate(raw)
    except ValidationError as exc:
        lines = [_describe(err, raw) for err in exc.errors()]
        raise ScenarioError(f"{source}: {len(lines)} problem{'s' if len(lines) > 1 else ''}:\n  "
                            + "\n  ".join(dict.fromkeys(lines))) from None


def dump_scenario(scenario: Scenario) -> str:
    return yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False)


def _describe(err: dict, raw: Any = None) -> str:
    """One line per problem: the YAML path, what was given, and what is allowed."""
    loc, kind, ctx = list(err["loc"]), err["type"], err.get("ctx") or {}
    original = ctx.get("error")
    model, path = _walk(loc, raw)
    if isinstance(original, ScenarioFieldError):
        if original.relative and path:
            return f"{'.'.join(str(p) for p in path)}.{original.path}: {original.message}"
        return f"{original.path}: {original.message}"
    if isinstance(original, ScenarioError):  # raised by a part's own check (a dataset's facts): names its field
        return str(original)
    where = ".".join(str(p) for p in path) or "(top level)"
    given = err.get("input", _MISSING)
    if kind == "plugged_unknown":
        return f"{where}.{err['msg']}"
    if kind == "plugged_tag_missing":
        return f"{where}: {err['msg']}"
    if kind == "extra_forbidden":
        allowed = ", ".join(model.model_fields) if model else "?"
        return f"{where}: unknown key; allowed here: {allowed}"
    if kind == "missing":
        return f"{where}: required field is missing"
    if kind == "union_tag_invalid":
        return f"{where}.{ctx['discriminator'].strip(chr(39))}: {ctx['tag']!r} is not known; choose one of {ctx['expected_tags']}"
    if kind == "union_tag_not_found":
        field = model.model_fields.get(path[-1]) if model is not None else None
        kinds = ", ".join(repr(_tag(m)) for m in _union_models(field.annotation)) if field else "?"
        return f"{where}: needs a {ctx['discriminator']} key; one of {kinds}"
    if kind == "literal_error":
        return f"{where}: {given!r} is not allowed; choose one of {ctx.get('expected')}"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    if kind in ("value_error", "assertion_error"):
        return f"{where}: {msg}"
    return f"{where}: {msg} (got {given!r})" if given is not _MISSING else f"{where}: {msg}"


_MISSING = object()


def _walk(loc: list, raw: Any = None) -> tuple[type[BaseModel] | None, list]:
    """Follow a pydantic error location through the schema, dropping discriminator tags; return the model
    that holds the last key (for listing the allowed keys) and the cleaned YAML path. A registered part's
    config class is found from its tag in the raw scenario."""
    path: list = []
    parent: Any = None
    annotation: Any = Scenario
    value = raw
    i = 0
    while i < len(loc):
        part = loc[i]
        path.append(part)
        i += 1
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            value = None
        if isinstance(part, int):  # a list index: step into the item type
            items = typing.get_args(_strip_annotated(annotation))
            annotation = items[0] if items else None
        else:
            model = annotation if _is_model(annotation) else None
            parent = model
            field = model.model_fields.get(part) if model is not None else None
            annotation = field.annotation if field is not None else None
            registry = next((m for m in field.metadata if isinstance(m, Registry)), None) if field else None
            if registry is not None:  # pydantic keeps a field's Annotated metadata apart
                annotation = Annotated[annotation, registry]
        if typing.get_origin(_strip_annotated(annotation)) is list:
            continue
        registry = _registry_of(annotation)
        if registry is not None:
            annotation = registry.config_of(value if not isinstance(value, str) else {registry.tag: value}) \
                or registry.base
            continue
        members = _union_models(annotation)
        tags = {_tag(m): m for m in members}
        if members and i < len(loc) and loc[i] in tags:
            annotation = tags[loc[i]]
            i += 1
        elif len(members) == 1:
            annotation = members[0]
    return parent, path


def _registry_of(annotation: Any) -> Registry | None:
    """The registry of a `Plugged` field (possibly inside Optional)."""
    if typing.get_origin(annotation) is Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return _registry_of(args[0]) if len(args) == 1 else None
    if typing.get_origin(annotation) is Annotated:
        return next((m for m in annotation.__metadata__ if isinstance(m, Registry)), None)
    return None


def _strip_annotated(annotation: Any) -> Any:
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) is Union:  # Optional[list[...]]
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _strip_annotated(args[0])
    return annotation


def _is_model(obj: Any) -> bool:
    return isinstance(obj, type) and issubclass(obj, BaseModel)


def _union_models(annotation: Any) -> list:
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is Annotated:
        return _union_models(args[0])
    if typing.get_origin(annotation) in (Union, getattr(__import__("types"), "UnionType", Union)):
        out = []
        for arg in args:
            out.extend(_union_models(arg))
        return out
    return [annotation] if _is_model(annotation) else []


def _tag(model: type[BaseModel]) -> str | None:
    for key in ("scheme", "name", "kind", "model"):
        field = model.model_fields.get(key)
        if field is not None and typing.get_origin(field.annotation) is Literal:
            return typing.get_args(field.annotation)[0]
    return None

"""The `data:` and `model:` sections: what the devices hold and what they train."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, Field, SerializeAsAny, ValidationInfo, field_validator, model_validator

from emulator.registry import DATASETS, PARTITIONS, Plugged
from emulator.scenario.base import ScenarioFieldError, Strict


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


class LocalTestConfig(Strict):
    """A test set on every device: a share of each device's own samples, held out and never trained on, on
    which on-device evaluation (evaluation.devices) measures what that device gets from the model."""

    # carve: a share of each device's training samples; dataset: the data's own per-user test split (LEAF)
    split: Literal["carve", "dataset"] = "carve"
    fraction: Optional[float] = Field(None, gt=0, le=0.5)  # carve: of each device's samples (rounded)
    min_samples: int = Field(1, ge=1)  # a device whose split would be smaller has none (and is counted)

    @model_validator(mode="after")
    def _fraction(self):
        if self.split == "carve" and self.fraction is None:
            raise ScenarioFieldError("data.local_test.fraction", "give the share of each device's samples held "
                                     "out, e.g. fraction: 0.2 (or split: dataset for the data's own per-user split)")
        if self.split == "dataset" and self.fraction is not None:
            raise ScenarioFieldError("data.local_test.fraction", "split: dataset takes each user's own test samples "
                                     "as they come; remove fraction (or use split: carve)")
        return self


class PartitionSettings(Strict):
    """The base of every partition scheme's config (data.partition); `scheme` names a registered one."""

    scheme: str


Partition = Plugged(PARTITIONS, PartitionSettings)


class ServerSetConfig(Strict):
    """The server's (auxiliary) data set, held out from the devices' data."""

    size: int = Field(0, ge=0)
    fraction: Optional[float] = Field(None, gt=0, lt=1)  # instead of size: this share of the devices' samples
    source: Literal["iid", "balanced", "clients"] = "iid"
    clients: Optional[int] = Field(None, gt=0)

    @property
    def wanted(self) -> bool:
        """Whether the server holds a set at all (a size or a fraction)."""
        return self.size > 0 or self.fraction is not None

    def size_of(self, pool: int) -> int:
        """Samples to carve from `pool` training samples: `size`, or `fraction` of them rounded (at least 1)."""
        return self.size if self.fraction is None else max(1, round(self.fraction * pool))

    @model_validator(mode="after")
    def _clients(self):
        if self.fraction is not None and self.size:
            raise ValueError(f"size {self.size} and fraction {self.fraction}: give one of them (size: a count "
                             "of samples; fraction: a share of the devices' samples, e.g. 0.01 for SAFARI's 1%)")
        if self.source == "clients" and self.clients is None:
            raise ValueError("source 'clients' needs 'clients': the number of devices the server set is drawn from")
        if self.source != "clients" and self.clients is not None:
            raise ValueError("'clients' only applies to source 'clients'")
        return self


class StoreConfig(Strict):
    """data.store: where the devices' samples live during a run. memory: in the driver and every runner (the
    object store carries them); disk: written once per content key under `cache`, then memory-mapped by
    every process (emulator/data/store.py); auto: disk from DISK_FROM_DEVICES devices. Results are the same
    bit for bit either way."""

    mode: Literal["auto", "memory", "disk"] = "auto"
    cache: Optional[str] = None  # the cache directory; None: $EMULATOR_DATA_CACHE, else ~/.cache/emulator/federations

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any):
        return {"mode": value} if isinstance(value, str) else value

    def on_disk(self, devices: int) -> bool:
        return self.mode == "disk" or (self.mode == "auto" and devices >= DISK_FROM_DEVICES)


DISK_FROM_DEVICES = 10_000  # data.store: auto keeps smaller populations' data in memory (nothing to write)


class DatasetOptions(Strict):
    """The base of a dataset's own options (data.options), for datasets that register a config class."""


class DataConfig(Strict):
    dataset: str = "synthetic"
    root: Optional[str] = None
    download: bool = False
    emnist_split: Literal["balanced", "byclass", "bymerge", "digits", "letters", "mnist"] = "balanced"
    synthetic: SyntheticConfig = SyntheticConfig()
    partition: Optional[Partition] = None
    server_set: ServerSetConfig = ServerSetConfig()
    test_samples: Optional[int] = Field(None, gt=0)
    local_test: Optional[LocalTestConfig] = None  # a held-out test split on every device (none by default)
    store: StoreConfig = StoreConfig()
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
            self.partition = PARTITIONS.get("natural" if natural else "iid").config()
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



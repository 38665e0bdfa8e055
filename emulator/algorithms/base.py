"""The algorithm interface: small hooks the server's round engines call every round.

An algorithm never touches Ray or the clock. It says what kind of round comes next and whom to select
(`plan_round`), what each device runs (`local_training`, plus any per-device inputs in `job_payload`),
how streamed updates become the next global model (`aggregate`; an asynchronous algorithm's `apply`),
what a server round does (`server_round`), and what to record afterwards (`after_round`). Server-side
training goes through `context.server_train`, which the runtime provides and charges to the simulated
clock. `Algorithm` declares every hook and attribute the engines use, with the default a plain
synchronous algorithm wants; `HOOKS` names them, so a wrapper (`algorithms/hosted.py`) forwards them all.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Callable, Iterable, Mapping

import numpy as np

from emulator.aggregation.mean import WeightedMean
from emulator.aggregation.partial import Folding
from emulator.algorithms.selection import SelectionPolicy
from emulator.training.local import LocalTraining, TrainStats


class RoundKind(str, Enum):
    """What a round is. CLIENT: the selected devices train; SNAPSHOT: a uniform cohort from the whole
    population, waited for (FAST); SERVER: the server trains on its own data (SAFARI); ASYNC: one server
    update of an asynchronous algorithm; CLOUD: rounds at every edge server, then the cloud's average of
    theirs (HierFAVG). Written to metrics.csv's `kind` as its value."""

    CLIENT = "client"
    SNAPSHOT = "snapshot"
    SERVER = "server"
    ASYNC = "async"
    CLOUD = "cloud"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


@dataclass(frozen=True)
class RoundPlan:
    """The next round as the algorithm wants it. `kind` may be given as its value ("client")."""

    kind: RoundKind
    cohort: int = 0  # how many reports the round aims for
    selection: SelectionPolicy | None = None
    wait_for_all: bool = False  # draw exactly `cohort` (no over-selection) and wait for every one of them

    def __post_init__(self):
        try:
            object.__setattr__(self, "kind", RoundKind(self.kind))
        except ValueError:
            raise ValueError(f"RoundPlan.kind: {self.kind!r} is no round kind; use one of "
                             f"{', '.join(repr(k.value) for k in RoundKind)}") from None


@dataclass
class ClientUpdate:
    """What one device sends back: its model delta and how its local training went."""

    device: int
    num_samples: int
    delta: np.ndarray
    stats: TrainStats
    multiplicity: int = 1  # how many times the device was drawn this round (sampling with replacement)
    own: np.ndarray | None = None  # a personalized algorithm's: the device's own entries after the round


@dataclass
class Arrival:
    """A report as an asynchronous algorithm applies it: the update, its staleness (server updates since
    its device downloaded the model), and the model its device started from."""

    update: ClientUpdate
    staleness: int
    downloaded: np.ndarray


ServerTrainer = Callable[[np.ndarray, LocalTraining, str], "tuple[np.ndarray, TrainStats]"]


@dataclass
class AlgorithmContext:
    """What an algorithm may know and use: the federation's shape and the server's own trainer."""

    num_devices: int
    device_sizes: np.ndarray
    num_params: int
    seed: int
    server_samples: int = 0  # size of the server's data set
    server_train: ServerTrainer | None = None  # (params, spec, purpose) -> (new params, stats)
    parameter_mask: np.ndarray | None = None  # True where the flat vector holds trainable weights
    total_rounds: int | None = None  # the scenario's rounds: the default span of a cosine rate schedule
    # The server's release of a round's mean (client-level DP adds noise over the expected cohort): FedAvg's
    # mean_delta passes its WeightedMean through it. None: the mean as summed.
    release: Callable[["WeightedMean", int], "WeightedMean"] | None = None
    model_name: str = ""
    parameter_layout: tuple[tuple[str, int, int], ...] = ()  # (name, start, stop) of each tensor in the vector
    state_dir: Callable[[], str | None] | None = None  # where per-device state lives, asked at its first write


class Algorithm:
    """The hooks below are all the engines call; override those the algorithm changes.

    A minimal synchronous algorithm overrides `plan_round`, `local_training` and `aggregate`; an
    asynchronous one sets `asynchronous = True` and `concurrency`, and overrides `apply` instead of
    `aggregate`."""

    name = "base"
    columns: tuple[str, ...] = ()  # extra per-round metric columns this algorithm fills in (after_round)
    payload = (1, 1)  # model-sized vectors each device downloads and uploads (SCAFFOLD: 2, 2)
    honours_rates = False  # applies algorithm.server_optimizer and the *_lr_schedule fields (FedAvg's family does)
    personal = None  # a Personalization where devices keep state of their own (algorithms/personalized.py)
    shared_share = 1.0  # the share of the model that travels (FedPer's personal layers never do)
    asynchronous = False  # True: no rounds; every plan is an ASYNC server update fed through `apply`
    concurrency: int | None = None  # an asynchronous algorithm's devices training at once
    hierarchical = False  # True: CLOUD rounds over edge servers (algorithms/hierarchical.py), with `cloud_every`

    def __init__(self, config, context: AlgorithmContext):
        self.config = config
        self.context = context
        if not self.honours_rates:
            self._refuse_what_it_ignores(config)

    def _refuse_what_it_ignores(self, config) -> None:
        """A server optimizer or a schedule that the algorithm would silently ignore is an error instead."""
        optimizer = getattr(config, "server_optimizer", None)
        given = ["server_optimizer"] if optimizer is not None and optimizer.kind != "sgd" else []
        fields = getattr(type(config), "model_fields", {})
        given += [key for key in fields if key.endswith("_lr_schedule") and getattr(config, key) is not None]
        if given:
            raise ValueError(f"algorithm {self.name!r} does not apply algorithm.{given[0]} (it keeps its own server "
                             "step and rates): leave it out, or build the algorithm on "
                             "emulator.algorithms.fedavg.FedAvg, which applies it")

    def plan_round(self, round_index: int) -> RoundPlan:
        """Called first in every round (1-based): its kind, how many reports it aims for, and whom to select."""
        raise NotImplementedError

    def local_training(self, device: int) -> LocalTraining:
        """What `device` runs this round (rates, steps, optimizer); called once per reporting device."""
        raise NotImplementedError

    def job_payload(self, device: int) -> np.ndarray | None:
        """An extra per-device vector for the runner (SCAFFOLD's gradient correction c - c_i)."""
        return None

    def own_state(self, device: int) -> np.ndarray | None:
        """A personalized algorithm's: the device's own entries as they stand (None: none yet)."""
        return None

    def accepted_updates(self) -> tuple[np.ndarray, np.ndarray] | None:
        """With a robust aggregator: the last round's (devices, accepted) as it left them; None: every update
        was taken as it came."""
        return None

    def server_operations(self) -> float:
        """With a robust aggregator: the element operations its rule took this round beyond the mean, which
        the server's clock charges (system.server.s_per_operation); 0 without one."""
        return 0.0

    def devices_with_state(self) -> np.ndarray:
        """A personalized algorithm's: the devices that hold state of their own, in device order."""
        return np.zeros(0, np.int64)

    def samples_processed(self, devices: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """Samples each device puts through the model this round (its compute time is charged for these)."""
        if len(devices) == 0:
            return np.zeros(0)
        return self.local_training(int(devices[0])).samples_processed(sizes[devices])

    def aggregate(self, params: np.ndarray, updates: Iterable[ClientUpdate], round_index: int) -> np.ndarray:
        """Consume updates as they stream in (arrival order) and return the next global parameters."""
        raise NotImplementedError

    def partial_fold(self) -> Folding | None:
        """How the runners may fold this round's updates before they travel (aggregation/partial.py): given
        when the round is a weighted mean of the updates and nothing reads them one at a time; the server
        then calls `aggregate_partials` instead of `aggregate`. None (the default): every update travels."""
        return None

    def aggregate_partials(self, params: np.ndarray, partials: Iterable[WeightedMean], round_index: int) -> np.ndarray:
        """`aggregate` for updates the runners folded by `partial_fold`'s rule: each partial is the weighted
        sum of some of the round's updates (merge them: the result does not depend on how they were cut)."""
        raise NotImplementedError(f"{self.name} gives no partial_fold: its updates reach aggregate()")

    def apply(self, params: np.ndarray, arrivals: list[Arrival], update_index: int) -> np.ndarray:
        """An asynchronous algorithm's server update: the next global parameters from `arrivals` (in
        simulated arrival order, each with its staleness)."""
        raise NotImplementedError(f"{self.name} is not asynchronous: its reports arrive through aggregate()")

    def server_round(self, params: np.ndarray, round_index: int) -> tuple[np.ndarray, TrainStats]:
        """A SERVER round's training on the server's own data: (next parameters, its statistics)."""
        raise NotImplementedError(f"{self.name} has no server rounds")

    def after_round(self, record: Mapping) -> dict:
        """Values for `columns`, given the round's record so far (read it as a mapping: record["train_acc"])."""
        return {}

    def state(self) -> dict:
        """Everything the algorithm carries between rounds (for checkpoints)."""
        return {}

    def load_state(self, state: dict) -> None:
        pass


# Every hook the engines call: what a wrapping algorithm must forward (algorithms/hosted.py).
HOOKS = tuple(name for name, value in vars(Algorithm).items()
              if callable(value) and not name.startswith("_") and name not in ("state", "load_state"))
ATTRIBUTES = ("payload", "personal", "shared_share", "asynchronous", "concurrency", "hierarchical")

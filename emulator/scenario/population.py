"""The `population:` and `system:` sections: how many devices, how fast, when online, how their behaviour
follows their data, and the server's deadlines."""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, model_validator

from emulator.registry import ATTACKS, AVAILABILITY, Plugged
from emulator.scenario.base import ScenarioFieldError, Strict
from emulator.scenario.energy import EnergyConfig
from emulator.scenario.network import NetworkConfig


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

    def long_run_online_share(self) -> float | None:
        """The share of time a device of this entry is online in the long run (None: not known from the
        config alone, e.g. a trace); it ranks the entries for a type that behaves at its best."""
        return None


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


class AttackSettings(Strict):
    """The base of every attack's config (population.types[].attack); `kind` names it. The attacks are in
    emulator/training/attacks.py. `collude`: the type's attackers in one round (or FedBuff buffer) agree
    on one update, the mean of those they crafted, and all send it (emulator/server/adversaries.py)."""

    kind: str
    collude: bool = False


Attack = Plugged(ATTACKS, AttackSettings)


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
    attack: Optional[Attack] = None  # the type's devices are attackers (emulator/training/attacks.py)
    # What a behaviour left out becomes: drawn as for everyone, or the best the world offers (the availability
    # entry online longest, the fastest compute and network, no dropout). None: best for attackers, who
    # control their own phones, drawn for everyone else.
    behaves: Optional[Literal["best", "drawn"]] = None

    @model_validator(mode="after")
    def _labels(self):
        if self.labels is not None and self.prototype is not None:
            raise ScenarioFieldError("prototype", "give labels (a class set) or prototype (class weights), not both")
        if self.prototype is not None and (min(self.prototype) < 0 or sum(self.prototype) <= 0):
            raise ScenarioFieldError("prototype", "class weights must be >= 0 with a positive sum")
        return self

    def behaviour(self, name: str):
        return getattr(self, name)

    def at_best(self) -> bool:
        """Whether the behaviours this type leaves out are the world's best (see `behaves`)."""
        return self.behaves == "best" or self.behaves is None and self.attack is not None


TYPE_BEHAVIOURS = ("availability", "timezone", "compute", "network", "dropout_per_hour", "online_share")


class PopulationConfig(Strict):
    """The devices: how many, how fast they compute and communicate, when they are online, how often they drop."""

    devices: int = Field(100, gt=0)
    compute: Annotated[Union[LognormalCompute, TieredCompute, TraceCompute],
                       Field(discriminator="kind")] = LognormalCompute()
    compute_jitter: float = Field(0.1, ge=0)
    network: Annotated[Union[LognormalNetwork, TieredNetwork, TraceNetwork],
                       Field(discriminator="kind")] = LognormalNetwork()
    availability: list[Availability] = Field(default_factory=lambda: [AVAILABILITY.get("always").config()], min_length=1)
    dropout_per_hour: float = Field(0.0, ge=0)
    types: Optional[list[UserType]] = Field(None, min_length=1)  # latent user types (see UserType)
    ties: list[Tie] = Field(default_factory=list)  # behaviour tied to data (see Tie)
    # How strongly behaviour follows data in every tie and type: 1 as written; at c < 1 a seeded share
    # 1 - c of the devices swap their tied behaviour at random among themselves (so the fleet's make-up
    # never changes); 0 is independence.
    correlation: float = Field(1.0, ge=0, le=1)
    energy: Optional[EnergyConfig] = None  # batteries and the power of each device's work (scenario/energy.py)

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
        # the cross-field rules of ties and types live beside the code that applies them: emulator/system/checks.py
        return self


class ServerProfile(Strict):
    """The server's compute, charged on the simulated clock: server-side training (SAFARI, FSL) per sample,
    and a robust aggregator's work beyond the plain mean (emulator/aggregation/robust.py) per element
    operation (1 ns: about one core's rate for numpy sorts and distances)."""

    s_per_sample: float = Field(1e-4, ge=0)
    s_per_operation: float = Field(1e-9, ge=0)


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
    network: Optional[NetworkConfig] = None  # shared links (None: each transfer alone at its device's speed)
    events: bool = False



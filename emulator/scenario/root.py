"""The scenario: one YAML file that fixes a whole experiment, assembled from its sections; the checks
that span sections."""
from __future__ import annotations

import math
from typing import Any, Optional

from pydantic import Field, model_validator

from emulator.registry import ALGORITHMS, DATASETS, MODELS, OBSERVERS, Plugged
from emulator.scenario.base import ScenarioFieldError, Strict
from emulator.scenario.data import DataConfig, ModelConfig
from emulator.scenario.execution import EvaluationConfig, ObserverSettings, OutputConfig, RuntimeConfig, StopConfig
from emulator.scenario.population import TYPE_BEHAVIOURS, PopulationConfig, SystemConfig
from emulator.scenario.training import AlgorithmConfig, AsynchronousTraining
from emulator.scenario.uplink import Compression, NoCompression, PrivacyConfig, SecureAggregationConfig


class Scenario(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    plugins: list[str] = Field(default_factory=list)  # modules that register parts (see emulator/parts/plugins.py)
    seed: int = Field(0, ge=0)
    rounds: int = Field(gt=0, le=10 ** 7)  # a run of more rounds could never finish (nor its metrics.csv fit)
    data: DataConfig = Field(default_factory=DataConfig)
    model: Plugged(MODELS, ModelConfig) = ModelConfig()
    algorithm: AlgorithmConfig = Field(default_factory=lambda: ALGORITHMS.get("fedavg").config())
    population: PopulationConfig = Field(default_factory=PopulationConfig)
    system: SystemConfig = SystemConfig()
    runtime: RuntimeConfig = RuntimeConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    output: OutputConfig = OutputConfig()
    stop: StopConfig = StopConfig()
    privacy: Optional[PrivacyConfig] = None  # client-level DP (None: off)
    compression: Compression = NoCompression()  # what a device's upload is encoded as
    secure_aggregation: Optional[SecureAggregationConfig] = None  # SecAgg's cost (None: plain uploads)
    observers: list[Plugged(OBSERVERS, ObserverSettings)] = Field(default_factory=list)  # a plugin's own columns

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
        if ALGORITHMS.get(algo.name).fact("needs_server_data") and not self.data.server_set.wanted:
            raise ScenarioFieldError("data.server_set.size", f"{algo.name} trains on the server's own data: set "
                                     "data.server_set.size or .fraction (and source) to give the server a data set")
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
            if population.energy is not None:
                raise ScenarioFieldError("population.energy", "energy is spent by devices working on the simulated "
                                         "clock, which system.model: ideal does not have; use system.model: simulated")
            behaving = [t.name for t in population.types or [] if any(t.behaviour(b) is not None for b in TYPE_BEHAVIOURS)]
            if behaving:
                raise ScenarioFieldError("population.types", f"type(s) {behaving} set behaviour, which only exists "
                                         "with system.model: simulated")
        if self.system.network is not None and (self.system.model != "simulated"
                                                or isinstance(self.algorithm, AsynchronousTraining)):
            raise ScenarioFieldError("system.network", "shared links time the transfers of synchronous rounds on the "
                                     "simulated clock: use system.model: simulated and a synchronous algorithm, or "
                                     "leave system.network out")
        if self.system.network is not None:
            self.system.network.check_population(population.devices, _time_zones(population))
        _check_edges(self)
        if population.energy is not None and isinstance(self.algorithm, AsynchronousTraining):
            raise ScenarioFieldError("population.energy", f"{self.algorithm.name} is asynchronous; the energy of a "
                                     "device's work is charged in synchronous rounds: use a synchronous algorithm, or "
                                     "leave population.energy out")
        selection = getattr(self.algorithm, "selection", None)
        if getattr(selection, "kind", None) == "battery" and (
                population.energy is None or not any(a.kind == "eligible" for a in population.availability)):
            raise ScenarioFieldError("algorithm.selection.kind", "battery-first selection reads the devices' battery "
                                     "levels, which exist with population.energy and an eligible availability entry "
                                     "(whose habits say when phones charge); add both, or choose another kind")
        if population.energy is None:
            for i, entry in enumerate(population.availability):
                if getattr(entry, "min_soc", None) is not None:
                    raise ScenarioFieldError(f"population.availability[{i}].min_soc", "a battery floor needs batteries: "
                                             "add population.energy, or leave min_soc out")
        _check_classes(self)
        _check_attacks(self)
        _check_local_test(self.data)
        _check_upload(self)
        if self.evaluation.devices is not None:
            _check_device_evaluation(self)
        if self.runtime.num_gpus > 0 and self.runtime.num_gpus > 1 and self.runtime.num_gpus != int(self.runtime.num_gpus):
            raise ScenarioFieldError("runtime.num_gpus", "a share above 1 GPU must be a whole number")
        return self


def _check_attacks(scenario) -> None:
    """Each attack's parameters against the data they act on (its config's against_data, where it has one)."""
    shape, classes = None, None
    for k, user_type in enumerate(scenario.population.types or []):
        judge = getattr(user_type.attack, "against_data", None)
        if judge is None:
            continue
        if shape is None:
            shape, classes = dataset_input_shape(scenario.data), dataset_classes(scenario.data)
        problem = judge(shape, classes)
        if problem:
            raise ScenarioFieldError(f"population.types[{k}].attack.{problem[0]}", problem[1])


def _check_edges(scenario) -> None:
    """Edge servers (system.network.edges) and an algorithm that aggregates at them come together."""
    network, algo = scenario.system.network, scenario.algorithm
    edges = network is not None and network.edges is not None
    hierarchical = bool(ALGORITHMS.get(algo.name).fact("hierarchical"))
    if hierarchical and not edges:
        raise ScenarioFieldError("system.network.edges", f"{algo.name} averages at edge servers, one a region: give "
                                 "system.network its regions and edges: {} (or choose a flat algorithm)")
    if edges and not hierarchical:
        raise ScenarioFieldError("algorithm.name", f"{algo.name} takes every report at one server, but "
                                 "system.network.edges puts edge servers between the devices and it: use hierfavg "
                                 "(edges average their devices' models, the cloud the edges'), or leave edges out")
    if edges and scenario.secure_aggregation is not None:
        raise ScenarioFieldError("secure_aggregation", "its cost model prices one masked sum at one server; with "
                                 "system.network.edges each edge would run its own protocol, which is not modelled: "
                                 "leave secure_aggregation or edges out")


def _check_local_test(data: DataConfig) -> None:
    """The data's own per-user test split exists only where devices are the data's users."""
    local = data.local_test
    if local is not None and local.split == "dataset" and data.partition.scheme != "natural":
        raise ScenarioFieldError("data.local_test.split", f"dataset, but data.partition.scheme is "
                                 f"{data.partition.scheme}, so devices are not the data's users; use split: carve "
                                 "with a fraction")


def _check_device_evaluation(scenario) -> None:
    devices = scenario.evaluation.devices
    if scenario.data.local_test is None:
        raise ScenarioFieldError("evaluation.devices", "evaluates each device on its own test split, which needs "
                                 "one: add data.local_test: {fraction: 0.2} (the share of each device's samples "
                                 "held out), or remove evaluation.devices")
    if not devices.oracle and devices.sample is None:
        raise ScenarioFieldError("evaluation.devices", "oracle: false and no sample leaves nothing to evaluate: set "
                                 "sample: N (devices asked on the clock) or keep oracle: true")
    if devices.sample is not None and devices.sample > scenario.population.devices:
        raise ScenarioFieldError("evaluation.devices.sample", f"{devices.sample} devices asked, but the population "
                                 f"has {scenario.population.devices}; ask at most that many")
    if devices.sample is not None and scenario.system.model != "simulated":
        raise ScenarioFieldError("evaluation.devices.sample", "asking devices on the clock needs the simulated world "
                                 "(who is online, how fast, who drops): set system.model: simulated, or use the "
                                 "oracle alone (remove sample)")


def _check_upload(scenario) -> None:
    """privacy, compression and secure_aggregation fit the algorithm and the system model."""
    algo, privacy, secure = scenario.algorithm, scenario.privacy, scenario.secure_aggregation
    asynchronous = isinstance(algo, AsynchronousTraining)
    rule = algo.aggregator
    if rule is not None and privacy is not None and (rule.kind != "norm_bound" or rule.bound is None):
        raise ScenarioFieldError("algorithm.aggregator", "DP-FedAvg's noise is calibrated to a sum of clipped updates: "
                                 "norm bounding with a fixed bound keeps it one (Sun et al.'s norm bound plus weak "
                                 "DP), but a median, trimmed mean, Krum or an adaptive bound (set by the other "
                                 "devices' updates) changes what one device can move; use {kind: norm_bound, "
                                 "bound: M}, or leave privacy out")
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


def _time_zones(population) -> int | None:
    """How many time zones the population's devices live in (None: some device has none)."""
    offsets = set()
    for entry in population.availability:
        zones = getattr(entry, "timezones", None)
        if zones is None:
            return None
        offsets.update(zones.offsets_h)
    offsets.update(t.timezone for t in population.types or [] if isinstance(getattr(t, "timezone", None), (int, float)))
    return len(offsets)

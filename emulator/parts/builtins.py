"""The emulator's own parts, registered exactly as a user's plugin registers its parts.

The entry points import it through `emulator.parts.load_parts` before they validate a scenario, so a
scenario validates against the same tables whether the part is ours or a plugin's. Each registration
names the builder, the config class the scenario's section is validated with, and the facts the schema
needs to check a scenario before anything runs.
"""
from __future__ import annotations

from emulator.aggregation import optimizers as server_optimizers
from emulator.aggregation import robust
from emulator.aggregation.optimizers import ServerOptimizer, adaptive
from emulator.algorithms import asynchronous, fast, fedavg, fsl, hierarchical, personalized, safari, scaffold, selection
from emulator.data import custom, leaf
from emulator.data.leaf import LEAF_DATASETS, leaf_classes, leaf_input_shape, load_leaf
from emulator.data.partition import (
    ClassesPartition,
    DirichletPartition,
    IidPartition,
    NaturalPartition,
    ShardsPartition,
    TypesPartition,
    partition_classes,
    partition_dirichlet,
    partition_iid,
    partition_shards,
)
from emulator.data.synthetic import generate_synthetic
from emulator.data.vision import load_vision
from emulator.errors import ScenarioError
from emulator.models import text as text_models
from emulator.models import zoo as models
from emulator.models.text import char_lstm
from emulator.registry import (
    register_aggregator,
    register_attack,
    register_algorithm,
    register_availability,
    register_dataset,
    register_model,
    register_partition,
    register_selection,
    register_server_optimizer,
)
from emulator.seeding import rng
from emulator.system import availability, diurnal, eligibility
from emulator.training import attacks

# ----------------------------------------------------------------------------------------- algorithms
register_algorithm("fedavg", fedavg.FedAvg, config=fedavg.FedAvgConfig, client_dp=True)
register_algorithm("fedprox", fedavg.FedProx, config=fedavg.FedProxConfig, client_dp=True)
register_algorithm("fedavgm", fedavg.FedAvgM, config=fedavg.FedAvgMConfig, client_dp=True)
register_algorithm("scaffold", scaffold.Scaffold, config=scaffold.ScaffoldConfig)
register_algorithm("fedper", personalized.FedPer, config=personalized.FedPerConfig)
register_algorithm("ditto", personalized.Ditto, config=personalized.DittoConfig)
register_algorithm("safari", safari.Safari, config=safari.SafariConfig, needs_server_data=True, client_dp=True)
register_algorithm("fsl", fsl.Fsl, config=fsl.FslConfig, needs_server_data=True, client_dp=True)
register_algorithm("ds", fsl.DataSharing, config=fsl.DataSharingConfig, needs_server_data=True, client_dp=True)
register_algorithm("fast", fast.Fast, config=fast.FastConfig, client_dp=True)
register_algorithm("fedasync", asynchronous.FedAsync, config=asynchronous.FedAsyncConfig)
register_algorithm("fedbuff", asynchronous.FedBuff, config=asynchronous.FedBuffConfig)
register_algorithm("hierfavg", hierarchical.HierFAVG, config=hierarchical.HierFAVGConfig, hierarchical=True)


# --------------------------------------------------------------------------------------------- models
def _shape(need: tuple[int, ...]):
    return lambda shape: None if tuple(shape) == need else f"expects inputs of shape {need}"


register_model("logreg", models.logreg)
register_model("mlp", models.mlp)
register_model("cnn_fmnist", models.cnn_fmnist, accepts=_shape((1, 28, 28)))
register_model("cnn_mnist", models.cnn_mnist, accepts=_shape((1, 28, 28)))
register_model("cnn_cifar", models.cnn_cifar, accepts=_shape((3, 32, 32)))
register_model("resnet18", models.resnet18,
               accepts=lambda shape: None if len(shape) == 3 else "needs image data (channels, height, width)")
register_model("char_lstm", char_lstm, config=text_models.CharLstmConfig,
               accepts=lambda shape: None if len(shape) == 1 else "reads sequences of token ids (length,)")


# ------------------------------------------------------------------------------------------- datasets
def _synthetic(data, devices: int, seed: int):
    return generate_synthetic(data.synthetic, devices, rng(seed, "synthetic"))


def _vision(name: str):
    def load(data, devices: int, seed: int):
        train, test = load_vision(name, data.root, data.download, data.emnist_split)
        return train, test, None
    return load


EMNIST_CLASSES = {"balanced": 47, "byclass": 62, "bymerge": 47, "digits": 10, "letters": 26, "mnist": 10}

register_dataset("synthetic", _synthetic, natural=True, classes=lambda data: data.synthetic.classes,
                 input_shape=lambda data: (data.synthetic.dimension,),
                 description="LEAF's synthetic(alpha, beta) or FedProx's synthetic_iid data, generated per device from "
                             "the seed (data.synthetic).")
for _name, _title in (("fashion_mnist", "Fashion-MNIST"), ("mnist", "MNIST")):
    register_dataset(_name, _vision(_name), classes=lambda data: 10, input_shape=lambda data: (1, 28, 28),
                     description=f"{_title}: 28x28 grey images, 10 classes, pooled and split by data.partition.")
register_dataset("emnist", _vision("emnist"), classes=lambda data: EMNIST_CLASSES[data.emnist_split],
                 input_shape=lambda data: (1, 28, 28),
                 description="EMNIST: 28x28 handwritten characters, the split data.emnist_split names (balanced: 47 "
                             "classes).")
register_dataset("cifar10", _vision("cifar10"), classes=lambda data: 10, input_shape=lambda data: (3, 32, 32),
                 description="CIFAR-10: 32x32 colour images, 10 classes, pooled and split by data.partition.")


def _memory(data, devices: int, seed: int):
    raise ScenarioError(f"data.dataset: memory: this run's samples ({data.options.form}, "
                        f"{data.options.fingerprint}) were handed over from Python and cannot be read back from "
                        "the scenario; run or resume it with emulator.run / emulator.resume(run_dir, data=...)")


register_dataset("memory", _memory, config=custom.MemoryOptions, natural=True,
                 classes=lambda data: data.options.classes, input_shape=lambda data: tuple(data.options.shape))


def _leaf(name: str):
    def load(data, devices: int, seed: int):
        options = data.options
        return load_leaf(name, data.root, options.users, options.min_samples, seed, pick=options.pick)
    return load


for _name in LEAF_DATASETS:  # one device per LEAF user: a natural split
    register_dataset(_name, _leaf(_name), config=leaf.LeafOptions, natural=True,
                     classes=lambda data, name=_name: leaf_classes(name),
                     input_shape=lambda data, name=_name: leaf_input_shape(name))


# ----------------------------------------------------------------------------------------- partitions
def _natural(labels, num_classes, devices, spec, stream):
    raise ValueError("data.partition.scheme: 'natural' keeps the dataset's own split by user; it is not a "
                     "split of pooled data")


def _types(labels, num_classes, devices, spec, stream):
    raise ValueError("data.partition.scheme: 'types' needs population.types; it is built with them")


register_partition("natural", _natural, config=NaturalPartition)
register_partition("iid", lambda labels, num_classes, devices, spec, stream:
                   partition_iid(len(labels), devices, stream), config=IidPartition,
                   description="The pooled samples shuffled and dealt out evenly: every device sees the same mix.")
register_partition("dirichlet", lambda labels, num_classes, devices, spec, stream: partition_dirichlet(
    labels, num_classes, devices, spec.alpha, spec.balanced, spec.min_samples, stream), config=DirichletPartition)
register_partition("classes", lambda labels, num_classes, devices, spec, stream: partition_classes(
    labels, num_classes, devices, spec.classes_per_client, stream), config=ClassesPartition)
register_partition("shards", lambda labels, num_classes, devices, spec, stream: partition_shards(
    labels, devices, spec.shards_per_client, stream), config=ShardsPartition)
register_partition("types", _types, config=TypesPartition)


# ---------------------------------------------------------------------------------- selection policies
register_selection("uniform", lambda spec, devices, replace: selection.Uniform(replace=replace),
                   config=selection.UniformSelection)
register_selection("beta", lambda spec, devices, replace: selection.BetaRegime(devices, a=spec.a, b=spec.b),
                   config=selection.BetaSelection)
register_selection("gamma", lambda spec, devices, replace: selection.GammaRegime(
    devices, shape=spec.shape, scale=spec.scale), config=selection.GammaSelection)
register_selection("battery", lambda spec, devices, replace: selection.BatteryFirst(spec.greed),
                   config=selection.BatterySelection)
register_selection("weibull", lambda spec, devices, replace: selection.WeibullRegime(
    devices, shape=spec.shape, scale=spec.scale, divisor=spec.divisor), config=selection.WeibullSelection)


# -------------------------------------------------------------------------------- availability models
register_availability("always", lambda entry, members, stream, key, world: availability.Always(members),
                      config=availability.AlwaysAvailable, description="Devices that are online all the time.")
register_availability("never", lambda entry, members, stream, key, world: availability.Never(members),
                      config=availability.NeverAvailable)
register_availability("markov", lambda entry, members, stream, key, world: availability.Markov(
    members, entry, stream, None if world is None else world.values("online_share", members)),
    config=availability.MarkovAvailability)
register_availability("diurnal", lambda entry, members, stream, key, world: diurnal.Diurnal(
    members, entry, stream, key, world), config=availability.DiurnalAvailability)
register_availability("eligible", lambda entry, members, stream, key, world: eligibility.Eligible(
    members, entry, stream, key, world), config=eligibility.EligibleAvailability,
    description="Online while charging, idle and on an unmetered network, by daily habits in local time.")
register_availability("trace", lambda entry, members, stream, key, world: availability.Trace(
    members, entry, stream, world), config=availability.TraceAvailability)


# ---------------------------------------------------------------------------------- server optimizers
register_server_optimizer("sgd", lambda config, size, mask: ServerOptimizer(),
                          config=server_optimizers.SgdServerOptimizer)
for _attack in (attacks.LabelFlip, attacks.RandomLabels, attacks.SignFlip, attacks.GaussianUpdate, attacks.Scaling,
                attacks.Backdoor):
    register_attack(_attack.model_fields["kind"].default, attacks.Attack, config=_attack)
register_aggregator("median", robust.median_rule, config=robust.MedianAggregator)
register_aggregator("trimmed_mean", robust.trimmed_mean_rule, config=robust.TrimmedMeanAggregator)
register_aggregator("krum", robust.krum_rule, config=robust.KrumAggregator)
register_aggregator("norm_bound", robust.norm_bound_rule, config=robust.NormBoundAggregator)
register_server_optimizer("adagrad", adaptive, config=server_optimizers.AdagradServerOptimizer)
register_server_optimizer("adam", adaptive, config=server_optimizers.AdamServerOptimizer)
register_server_optimizer("yogi", adaptive, config=server_optimizers.YogiServerOptimizer)

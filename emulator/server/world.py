"""What the server holds for a run: the global model, the algorithm, the simulated world and the runners.

The round engines and the observers share one `ServerWorld`: the engines move `params` and the clock,
the observers read them. Building it is the run's set-up on the server's side (the model from the run's
context, the algorithm and the system model from the scenario, the uplink's pipeline and SecAgg's cost).
"""
from __future__ import annotations

import numpy as np

from emulator import params as param_vector
from emulator.algorithms import AlgorithmContext, build_algorithm
from emulator.models.zoo import build_model
from emulator.parts.plugins import GuardedAlgorithm, guard, is_plugin
from emulator.registry import ALGORITHMS
from emulator.runtime.grouping import DeviceCost
from emulator.runtime.pool import RunnerPool
from emulator.runtime.runner import RunContext, RunHandle, unbox
from emulator.scenario import Scenario
from emulator.seeding import rng, torch_seed
from emulator.server.adversaries import Adversaries
from emulator.system import build_system
from emulator.system.base import SecureAggregation
from emulator.training import precision as numerics
from emulator.training.local import seed_dropout, seeded_generator, train_locally
from emulator.uplink.pipeline import UploadPipeline
from emulator.uplink.secagg import SecAggCost


class ServerWorld:
    """One run's server-side objects; `params` is the global model as a flat float32 vector."""

    def __init__(self, scenario: Scenario, run: RunContext | RunHandle, runners: list, state_dir: str | None):
        self.scenario, self.run, self.state_dir = scenario, run, state_dir
        self.pool = RunnerPool(runners)
        self.device_cost = DeviceCost()  # what a device's training takes: the tasks' size
        context = unbox(run)
        federation = context.federation
        self.model = build_model(context.model_name, federation.train.input_shape, federation.train.num_classes,
                                 context.model_seed, context.model_options)
        self.precision = context.precision  # runtime.precision: server training and evaluation too
        numerics.prepare_model(self.model, self.precision)
        self.params = param_vector.flatten(self.model)
        self.model_bytes = param_vector.nbytes(self.model)
        self.sizes = federation.sizes
        self.local_sizes = federation.local_sizes
        self.num_classes = federation.train.num_classes
        self.label_counts = federation.label_counts()  # (devices, classes): what each device's data is
        self.server_x, self.server_y = federation.train.tensors(federation.server_indices)
        self.server_samples_this_round = 0
        self.upload = UploadPipeline(scenario, len(self.params), lambda: self.state_dir)  # DP, compression
        self.secagg = None  # secure aggregation's cost model (emulator/uplink/secagg.py)
        if scenario.secure_aggregation is not None:
            config = scenario.secure_aggregation
            self.secagg = SecAggCost(config.kind, len(self.params), config.input_bits, config.threshold,
                                     config.neighbours, config.malicious)
        self.algorithm = self._algorithm(context, len(federation.server_indices))
        self.transfer_bytes = int(round(self.model_bytes * self.algorithm.shared_share))  # what travels
        self.adversaries = Adversaries.of(scenario.population, self.num_classes, scenario.seed)
        self.system = build_system(scenario, self.label_counts)
        self._params_ref = None  # (params, its object reference): put once per model version

    def _algorithm(self, context: RunContext, server_samples: int):
        scenario = self.scenario
        entry = ALGORITHMS.get(scenario.algorithm.name)
        with guard(entry.origin, f"algorithm {entry.name!r}", "__init__"):
            algorithm = build_algorithm(scenario.algorithm, AlgorithmContext(
                num_devices=len(self.sizes), device_sizes=self.sizes, num_params=len(self.params),
                seed=scenario.seed, server_samples=server_samples, server_train=self.server_train,
                parameter_mask=param_vector.parameter_mask(self.model), total_rounds=scenario.rounds,
                release=self.upload.release if self.upload.dp is not None else None, model_name=context.model_name,
                parameter_layout=param_vector.layout(self.model), state_dir=lambda: self.state_dir))
        if is_plugin(entry.origin):  # a user's hooks are guarded and what they return is checked
            algorithm = GuardedAlgorithm(algorithm, entry.origin, entry.name, len(self.params))
        return algorithm

    # ------------------------------------------------------------------------------------ round helpers
    def params_ref(self):
        """The global model where the runners read it, put once per model version."""
        if self._params_ref is None or self._params_ref[0] is not self.params:
            self._params_ref = (self.params, self.pool.put(self.params))
        return self._params_ref[1]

    def upload_bytes(self, vectors: int) -> int:
        """What a reporting device uploads: `vectors` model-sized vectors, the update encoded when compressed
        (the encoder counts its payload: values, indices, scales)."""
        encoded = self.upload.encoded_bytes()
        return vectors * self.transfer_bytes if encoded is None else encoded + (vectors - 1) * self.transfer_bytes

    def secure(self, r: int) -> SecureAggregation | None:
        """Round `r`'s secure aggregation (its cost model and random stream), or None without it."""
        if self.secagg is None:
            return None
        return SecureAggregation(self.secagg, self.scenario.secure_aggregation.device_slowdown,
                                 rng(self.scenario.seed, "secagg", r))

    def samples_processed(self, devices: np.ndarray) -> np.ndarray:
        return self.algorithm.samples_processed(devices, self.sizes)

    def server_train(self, params: np.ndarray, spec, purpose: str):
        """SGD on the server's own data set from `params` (SAFARI's server rounds, FSL's server learning).

        Its samples are charged to the simulated clock at the server's speed."""
        param_vector.load(self.model, params)
        seed = torch_seed(self.scenario.seed, "server-train", purpose)
        seed_dropout(seed)  # the server trains on the CPU
        stats = train_locally(self.model, self.server_x, self.server_y, spec, seeded_generator(seed),
                              precision=self.precision)
        self.server_samples_this_round += int(spec.samples_processed(len(self.server_y)))
        return param_vector.flatten(self.model), stats

    def spread(self, items: list, cap: int | None = None) -> list[list]:
        """`items` cut into about four chunks a runner (at most `cap` items each), for pool.map_ordered."""
        size = max(1, -(-len(items) // (4 * len(self.pool.runners))))
        size = max(1, min(size, cap)) if cap is not None else size
        return [items[i:i + size] for i in range(0, len(items), size)]

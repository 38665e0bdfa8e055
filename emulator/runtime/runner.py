"""A runner: a Ray actor that trains whichever device it is handed.

Runners are few (sized by resources) and devices are many. A runner caches each run's federation (read
zero-copy from the object store) and one model instance per run, so a job costs only loading the global
vector, the device's local steps and returning a delta.
"""
from __future__ import annotations

import collections
import functools
import itertools
import os
from collections import OrderedDict

import numpy as np
import ray
import torch

from emulator import params as param_vector
from emulator.aggregation import exact
from emulator.aggregation.partial import FoldReceipt, FoldTask, HeldSum, HeldSums
from emulator.algorithms.base import ClientUpdate
from emulator.models.zoo import build_model
from emulator.parts.loading import load_parts
from emulator.runtime import gpu_share
from emulator.runtime.gpu_share import GpuNeed, GpuTrial
from emulator.runtime.grouping import GROUP_BYTES, largest_group
from emulator.runtime.run_context import DeviceJob, RunContext, RunHandle, model_guard, unbox  # noqa: F401
from emulator.runtime.runner_evaluation import RunnerEvaluation
from emulator.training import cohort
from emulator.training import precision as numerics
from emulator.training.local import (LocalTraining, as_device_tensors, evaluate_by_class, flushes_denormals,
                                     seed_dropout, seeded_generator, set_torch_arithmetic, train_locally)
from emulator.training.personal import train_personal_round

ATTACK_SALT = 0x0A77AC4  # an attacker's poisoning draws, apart from its training's
READ_BATCH, READ_BATCH_BYTES = 16, 16 * 2 ** 20  # a task's devices' samples read together (read_in_batches)


class DeviceRunner(RunnerEvaluation):
    """Plain class (usable without Ray in tests); `RunnerActor` is its Ray actor form."""

    max_cached_runs = 4

    def __init__(self, torch_threads: int | None = None, gpu: bool | None = None):
        """`gpu`: train on CUDA; None (a Ray actor): when Ray gave this runner a GPU share."""
        set_torch_arithmetic(torch_threads)  # 1 unless runtime.torch_threads says otherwise: see training.py
        self._runs: OrderedDict[str, tuple[RunContext, torch.nn.Module]] = OrderedDict()
        self._on_device: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # a GPU runner's copy of a training set
        self._test: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # the test set it evaluates on
        self._local_test: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}  # the devices' own test splits
        self._sums = HeldSums()  # the round's folded updates, held between its tasks
        self._rows: np.ndarray | None = None  # a folded task's updates (see _fold_rows)
        self._vectors: dict[str, param_vector.ModelVector] = {}  # each run's model, as a flat vector
        if gpu is None:
            gpu = bool(ray.is_initialized() and ray.get_gpu_ids())
        gpu = gpu and torch.cuda.is_available()
        # an indexed device: torch's memory calls (set_per_process_memory_fraction) refuse a bare "cuda"
        self.device = torch.device("cuda", torch.cuda.current_device()) if gpu else torch.device("cpu")
        _warm_up(self.device)

    def _run(self, run: RunContext | RunHandle) -> tuple[RunContext, torch.nn.Module]:
        key = run.key
        if key not in self._runs:
            context = unbox(run)
            numerics.require(context.precision, self.device, f"a runner on {_host()} ({self.device.type})")
            load_parts(context.plugins)
            train = context.federation.train
            model = build_model(context.model_name, train.input_shape, train.num_classes, context.model_seed,
                                context.model_options)
            self._runs[key] = (context, numerics.prepare_model(model.to(self.device), context.precision))
            if context.updates_per_runner * param_vector.size(model) >= exact.COMPILE_FROM:
                exact.compile_adds()  # a large run: its folds' adds compiled before its first round (0.5 s)
            while len(self._runs) > self.max_cached_runs:
                self._vectors.pop(self._runs.popitem(last=False)[0], None)
        self._runs.move_to_end(key)
        return self._runs[key]

    def prepare(self, run: RunContext | RunHandle, gpu_trial: GpuTrial | None = None) -> GpuNeed | None:
        """Load a run's data and model ahead of its first round. A GPU runner given `gpu_trial` also
        measures what the run needs of its GPU, refuses a share that cannot hold it (ScenarioError, see
        runtime/gpu_share.py) and caps its memory at its share; returns the measured need (None on CPU)."""
        context, model = self._run(run)
        if self.device.type != "cuda" or gpu_trial is None:
            return None
        need = self._measure_gpu_need(context, model, gpu_trial)
        card = torch.cuda.get_device_properties(self.device)
        gpu_share.check_share(need, gpu_trial.share, card.total_memory, card.name)
        torch.cuda.set_per_process_memory_fraction(min(1.0, gpu_trial.share * gpu_trial.runners_here), self.device)
        return need

    def _measure_gpu_need(self, context: RunContext, model: torch.nn.Module, trial: GpuTrial) -> GpuNeed:
        """The run's data sets on the device, then one step of the largest group of devices it will train
        (a full batch each) and one evaluation batch: the caching allocator's reserved peak over them is
        what the largest task of the run will take."""
        torch.cuda.synchronize(self.device)
        before = torch.cuda.memory_reserved(self.device)
        (x, y), (test_x, test_y) = self._device_set(context), self._test_set(context)
        data = sum(t.numel() * t.element_size() for t in (x, y, test_x, test_y))
        torch.cuda.reset_peak_memory_stats(self.device)
        base = torch.cuda.memory_reserved(self.device)
        spec = trial.spec
        count = min(spec.batch_size, len(y))
        xs, ys = x[:count], y[:count]
        saved = param_vector.flatten(model)
        group = largest_group(trial.selected, trial.group_size, trial.vectorise, param_vector.nbytes(model))
        with model_guard(context, "local training"):
            if group > 1 and cohort.supports(model) is None:
                cohort.train_cohort(model, [xs] * group, [ys] * group, [spec] * group, list(range(group)),
                                    [None] * group, check=False, precision=context.precision)
            else:
                train_locally(model, xs, ys, spec, seeded_generator(0), None, context.precision)
            if trial.eval_batch and len(test_y):
                evaluate_by_class(model, test_x[:trial.eval_batch], test_y[:trial.eval_batch], trial.eval_batch,
                                  context.federation.train.num_classes, context.precision)
        param_vector.load(model, saved)
        torch.cuda.synchronize(self.device)
        training = torch.cuda.max_memory_reserved(self.device) - base
        return GpuNeed(data=max(data, base - before), training=training)

    def memory(self) -> dict:
        """This runner's GPU memory now (bytes): allocated, reserved and their peaks since it started; {} on CPU."""
        if self.device.type != "cuda":
            return {}
        return {"allocated": torch.cuda.memory_allocated(self.device),
                "reserved": torch.cuda.memory_reserved(self.device),
                "peak_allocated": torch.cuda.max_memory_allocated(self.device),
                "peak_reserved": torch.cuda.max_memory_reserved(self.device)}

    def device_name(self) -> str:
        """Where this runner trains: 'cpu', or 'cuda:<index> <card name>'."""
        if self.device.type != "cuda":
            return "cpu"
        return f"cuda:{torch.cuda.current_device()} {torch.cuda.get_device_name(self.device)}"

    def release(self, run_key: str) -> None:
        """Forget a run that ended (its data, model and GPU copy): a runner kept for later runs holds nothing
        of it, on the card included."""
        self._runs.pop(run_key, None)
        self._vectors.pop(run_key, None)
        self._test.pop(run_key, None)
        self._local_test.pop(run_key, None)
        self._sums.forget(run_key)
        if self._on_device.pop(run_key, None) is not None:
            torch.cuda.empty_cache()

    def held_runs(self) -> list[str]:
        """The runs whose data and model this runner holds now (what `release` forgets)."""
        held = set(self._runs) | set(self._on_device) | set(self._test) | set(self._local_test)
        return sorted(held | self._sums.runs())

    def train(self, run: RunContext | RunHandle, global_params: np.ndarray, job: DeviceJob,
              out: np.ndarray | None = None, samples: tuple[torch.Tensor, torch.Tensor] | None = None) -> ClientUpdate:
        """One device's local training from the global vector; its update (written into `out` when given:
        a float32 vector of the model's size that the caller reuses). `samples`: the device's, already read."""
        context, model = self._run(run)
        x, y = self._samples(context, job) if samples is None else samples
        if job.attack is not None:  # its own generator: the training's batches are those of an honest device
            x, y = job.attack.poison(x, y, seeded_generator(job.seed ^ ATTACK_SALT))
        if job.personalization is not None:
            with model_guard(context, "local training"):
                delta, stats, own = train_personal_round(model, x, y, job.spec, job.seed, global_params, job.own,
                                                         job.personalization, context.precision, self.device)
            return ClientUpdate(job.device, len(y), self._crafted(delta, job), stats, job.multiplicity, own)
        vector = self._vector(context.key, model)
        vector.load(global_params)
        correction = None if job.correction is None else param_vector.per_parameter(model, job.correction, self.device)
        seed_dropout(job.seed, self.device)  # dropout masks
        with model_guard(context, "local training"):
            stats = train_locally(model, x, y, job.spec, seeded_generator(job.seed), correction, context.precision)
        delta = vector.delta(global_params, out)
        return ClientUpdate(job.device, len(y), self._crafted(delta, job), stats, job.multiplicity)

    def _vector(self, key: str, model: torch.nn.Module) -> param_vector.ModelVector:
        vector = self._vectors.get(key)
        if vector is None or vector.model is not model:
            vector = self._vectors[key] = param_vector.ModelVector(model)
        return vector

    @staticmethod
    def _crafted(delta: np.ndarray, job: DeviceJob) -> np.ndarray:
        """What the device sends: its update, or the one its attack makes of it."""
        return delta if job.attack is None else job.attack.craft(delta, job.seed, job.attack_seed)

    def train_group(self, run: RunContext | RunHandle, global_params: np.ndarray, jobs: list[DeviceJob],
                    vectorise: bool = False, fold: FoldTask | None = None) -> list[ClientUpdate] | FoldReceipt:
        """A group of devices' updates, in job order, from one call (one Ray task per group, not per device);
        given `fold`, those updates are added to the round's sum this runner holds (aggregation/partial.py)
        and only their devices and stats travel back: the server takes the sum once the round is trained.

        With `vectorise`, devices sharing an optimizer kind train at once (emulator/training/cohort.py), when the
        model allows it (cohort.supports); otherwise, and for the rest, one at a time. Either way each
        device's result is its own: the group only decides how the work is batched."""
        if fold is None:
            return self._train_group(run, global_params, jobs, vectorise)
        rows = self._fold_rows(len(jobs), len(global_params)) if _one_by_one(jobs, vectorise) else None
        return self._sums.fold(run.key, fold, self._train_group(run, global_params, jobs, vectorise, rows),
                               len(global_params))

    def _fold_rows(self, count: int, size: int) -> np.ndarray | None:
        """Rows for a folded task's updates, reused task after task: they are added to the held sum before the
        task returns, so no update needs memory of its own (a thousand fresh vectors a round otherwise).
        None past GROUP_BYTES: a runner keeps no more than an automatic group's updates between tasks."""
        if count * size * 4 > GROUP_BYTES:
            return None
        if self._rows is None or self._rows.shape[0] < count or self._rows.shape[1] != size:
            self._rows = np.empty((count, size), dtype=np.float32)
        return self._rows

    def take_sum(self, run_key: str, ticket: str) -> HeldSum | None:
        """The round's folded updates this runner holds (see train_group), then forgotten."""
        return self._sums.take(run_key, ticket)

    def _train_group(self, run: RunContext | RunHandle, global_params: np.ndarray, jobs: list[DeviceJob],
                     vectorise: bool, rows: np.ndarray | None = None) -> list[ClientUpdate]:
        """`rows`: where devices trained one by one write their updates (see _fold_rows)."""
        if _one_by_one(jobs, vectorise):
            context = self._run(run)[0]
            if self.device.type == "cpu":  # a stored federation's rows read from disk while the first devices train
                context.federation.read_ahead([job.device for job in jobs])
            samples = read_in_batches(jobs, functools.partial(self._samples, context))
            return [self.train(run, global_params, job, None if rows is None else rows[i], next(samples))
                    for i, job in enumerate(jobs)]
        context, model = self._run(run)
        if cohort.supports(model) is not None:
            return [self.train(run, global_params, job) for job in jobs]
        _keep_freed_memory_once()
        updates: list[ClientUpdate | None] = [None] * len(jobs)
        for kind in dict.fromkeys(job.spec.optimizer for job in jobs):  # one optimizer kind per cohort
            chosen = [i for i, job in enumerate(jobs) if job.spec.optimizer == kind]
            for i, update in zip(chosen, self._train_cohort(context, model, global_params, [jobs[i] for i in chosen])):
                updates[i] = update
        return updates

    def _train_cohort(self, context: RunContext, model: torch.nn.Module, global_params: np.ndarray,
                      jobs: list[DeviceJob]) -> list[ClientUpdate]:
        samples = [self._samples(context, job) for job in jobs]
        param_vector.load(model, global_params)
        with model_guard(context, "local training"):
            trained = cohort.train_cohort(model, [x for x, _ in samples], [y for _, y in samples],
                                          [job.spec for job in jobs], [job.seed for job in jobs],
                                          [job.correction for job in jobs], check=False, precision=context.precision)
        updates = []
        for job, (x, y), (params, stats) in zip(jobs, samples, trained):
            params -= global_params
            updates.append(ClientUpdate(job.device, len(y), params, stats, job.multiplicity))
        return updates

    def _samples(self, context: RunContext, job: DeviceJob) -> tuple[torch.Tensor, torch.Tensor]:
        """The device's inputs and labels, on the runner's device (a GPU runner gathers them from the run's
        training set, held on the GPU once per runner: no copy per task)."""
        federation = context.federation
        if self.device.type == "cpu" and not job.spec.with_server_data:
            return federation.train.tensors(federation.device_rows(job.device))
        samples = federation.device_samples(job.device)
        if job.spec.with_server_data:
            samples = np.concatenate([samples, federation.server_indices])
        if self.device.type == "cpu":
            return federation.train.tensors(samples)
        x, y = self._device_set(context)
        index = torch.as_tensor(samples, dtype=torch.int64, device=self.device)
        return x[index], y[index]

    def _device_set(self, context: RunContext) -> tuple[torch.Tensor, torch.Tensor]:
        """The run's training set on this runner's GPU, copied there once (one run's at a time)."""
        if context.key not in self._on_device:
            self._on_device.clear()
            torch.cuda.empty_cache()  # the previous run's set goes back to the card, not only to torch's cache
            self._on_device[context.key] = as_device_tensors(*context.federation.train.tensors(), self.device)
        return self._on_device[context.key]

    def node_id(self) -> str:
        if not ray.is_initialized():  # in the driver's process (runtime.backend: inline)
            return _host()
        return ray.get_runtime_context().get_node_id()

    def ping(self) -> bool:
        return True

    def threads(self) -> int:
        """The torch intra-op threads this runner trains with."""
        return torch.get_num_threads()

    def flushes_denormals(self) -> bool:
        """Whether this runner's arithmetic flushes denormal floats to zero (training.set_torch_arithmetic)."""
        return flushes_denormals()

    def pid(self) -> int:
        return os.getpid()


def read_in_batches(jobs: list[DeviceJob], read, count: int = READ_BATCH, budget: int = READ_BATCH_BYTES):
    """read(job) for each job in order, read `count` jobs at a time (fewer where their tensors pass `budget`
    bytes) ahead of their use. Between two devices' reads a runner trains for a few milliseconds, after which
    its caches are cold (huge pages made no difference: not the TLB): a device's samples read then took 78 µs
    on the reference 2-core VM, read with the next 15 in a row 26 (a device's rows from the page cache, 60
    features)."""
    pending: collections.deque = collections.deque()
    ahead = iter(jobs)
    for _ in jobs:
        if not pending:
            size = 0
            for job in itertools.islice(ahead, count):
                x, y = read(job)
                pending.append((x, y))
                size += x.nbytes + y.nbytes
                if size >= budget:
                    break
        yield pending.popleft()


def _one_by_one(jobs: list[DeviceJob], vectorise: bool) -> bool:
    """Whether a group's devices train one at a time (not as one vectorised cohort)."""
    return not vectorise or len(jobs) < 2 or any(j.personalization is not None or j.attack is not None for j in jobs)


def _host() -> str:
    import platform

    return platform.node() or "this node"


def _warm_up(device: torch.device) -> None:
    """One tiny training step where the runner trains, so its first real job does not pay the one-off costs
    (on a GPU, torch.optim's import of torch._dynamo: ~1 s; a CPU runner's optimizer does without it)."""
    model = torch.nn.Linear(2, 2).to(device)
    train_locally(model, torch.zeros(4, 2, device=device), torch.zeros(4, dtype=torch.int64, device=device),
                  LocalTraining(lr=0.1, batch_size=4, local_steps=1), seeded_generator(0))


_keep_freed_memory_once = functools.cache(cohort.keep_freed_memory)  # process-wide: once per runner process

RunnerActor = ray.remote(DeviceRunner)

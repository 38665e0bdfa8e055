"""The runner pool: hands device jobs to runners and yields their results in job (device) order.

Results are consumed as they arrive, but handed on in job order, so aggregation sums in a fixed order and
a run gives the same numbers with 1 runner or 8. A sliding window bounds how many results can be held
at once (a few per runner), so memory does not grow with the cohort.
"""
from __future__ import annotations

import logging
import math
import threading
from typing import Callable, Iterator, Sequence, TypeVar

import ray

from emulator.runtime import inline
from emulator.runtime.idle_servers import shipped_modules
from emulator.runtime.grouping import GROUP_BYTES, MAX_GROUP, group_jobs  # noqa: F401  (re-exported)
from emulator.runtime.runner import DeviceRunner, RunnerActor
from emulator.training.local import denormals_flushed

Job = TypeVar("Job")
logger = logging.getLogger(__name__)

class RunnerPool:
    window_per_runner = 4

    def __init__(self, runners: Sequence):
        if not runners:
            raise ValueError("a runner pool needs at least one runner")
        self.runners = list(runners)
        self.inline = all(inline.is_inline(r) for r in self.runners)

    @classmethod
    def in_process(cls, count: int, torch_threads: int | None, gpu: bool = False) -> "RunnerPool":
        """`count` runners in this process (runtime.backend: inline): each job runs when it is handed out,
        in job order, so the results are those of Ray runners."""
        with denormals_flushed():  # a runner sets its process's arithmetic: here only while it starts
            return cls([inline.InlineActor(DeviceRunner(torch_threads, gpu=gpu)) for _ in range(count)])

    def put(self, value):
        """Put a value where the runners read it: Ray's object store, or nowhere (in-process runners)."""
        return inline.put(value, self.inline)

    @classmethod
    def start(cls, count: int, num_cpus: float, num_gpus: float, torch_threads: int | None,
              runtime_env: dict | None = None, wait: bool = True) -> "RunnerPool":
        """Start `count` runner actors with fractional resource shares, spread over the cluster's nodes.

        Runners restart when they die and their unfinished calls are retried elsewhere, so a lost worker
        costs time, not results. Each trains with `torch_threads` torch threads, 1 when None, whatever its
        CPU share: the thread count changes float rounding (see training.set_torch_arithmetic), the share
        must not. With `wait` False it returns while the runners' processes still start (each needs seconds
        to import torch), so the caller can start the server beside them; their first call waits for them."""
        if torch_threads is None and num_cpus >= 2 and not num_gpus:
            logger.warning(f"runtime.num_cpus is {num_cpus:g}, but each runner trains with 1 torch thread, so "
                           "that results do not depend on the CPU share; set runtime.torch_threads (e.g. "
                           f"{math.floor(num_cpus)}) to use more, at the price of last-bit differences, or give "
                           "each runner 1 CPU so more runners train devices side by side")
        options = dict(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=-1, max_task_retries=-1,
                       scheduling_strategy="SPREAD")
        if runtime_env:  # plugin modules from the user's directory, shipped to the workers
            options["runtime_env"] = runtime_env
        runners = [RunnerActor.options(**options).remote(torch_threads) for _ in range(count)]
        if wait:
            ray.get([r.ping.remote() for r in runners])
        return cls(runners)

    def map_ordered(self, jobs: Sequence[Job], call: Callable[[object, Job], "ray.ObjectRef"],
                    after_last: Callable[[], None] | None = None) -> Iterator:
        """Run call(runner, job) for every job, least-loaded runner first; yield results in job order.
        `after_last` is called once the last job is submitted: what it submits to a runner then runs after
        that runner's jobs (an actor runs one caller's calls in order)."""
        window = self.window_per_runner * len(self.runners)
        load = [0] * len(self.runners)
        in_flight: dict = {}  # ref -> (job index, runner index)
        done: dict[int, object] = {}
        submitted = next_out = 0
        while next_out < len(jobs):
            while submitted < len(jobs) and submitted < next_out + window:
                runner = min(range(len(self.runners)), key=load.__getitem__)
                in_flight[call(self.runners[runner], jobs[submitted])] = (submitted, runner)
                load[runner] += 1
                submitted += 1
                if submitted == len(jobs) and after_last is not None:
                    after_last()
            ready, _ = inline.wait(list(in_flight), num_returns=1)
            for ref in ready:
                index, runner = in_flight.pop(ref)
                load[runner] -= 1
                done[index] = inline.get(ref)
            while next_out in done:
                yield done.pop(next_out)
                next_out += 1

    @classmethod
    def shared(cls, count: int, num_cpus: float, num_gpus: float, torch_threads: int | None,
               runtime_env: dict | None = None, wait: bool = True) -> "RunnerPool":
        """Runners kept alive across runs in this Ray session (tests, notebooks, sweeps): a run takes the
        first `count` runners of its shape, starting more if needed. Runners of another shape are
        stopped first, so their resources are free for the new ones."""
        shipped = shipped_modules(runtime_env)
        # the session too: after ray.shutdown() and ray.init() the job id repeats, the old handles are dead
        context = ray.get_runtime_context()
        key = (context.get_session_name(), context.get_job_id(), num_cpus, num_gpus, torch_threads, shipped)
        with _SHARED_LOCK:  # concurrent runs of a sweep ask at the same time
            _stop_idle_shared(keep=key)
            runners = _SHARED.setdefault(key, [])
            if len(runners) < count:
                runners.extend(cls.start(count - len(runners), num_cpus, num_gpus, torch_threads, runtime_env,
                                         wait).runners)
            pool = cls(runners[:count])
            _IN_USE[key] = _IN_USE.get(key, 0) + 1
        pool.shared_key = key
        return pool

    shared_key = None

    def prepare(self, run, gpu_trial=None) -> list:
        """Every runner loads the run; GPU runners also check their share's memory (runner.GpuTrial).
        Returns each runner's measured GPU need (None for a CPU runner)."""
        return [inline.get(ref) for ref in [r.prepare.remote(run, gpu_trial) for r in self.runners]]

    def node_ids(self) -> list[str]:
        return [inline.get(ref) for ref in [r.node_id.remote() for r in self.runners]]

    def device_names(self) -> list[str]:
        """Where each runner trains ('cpu' or 'cuda:0 <card>')."""
        return [inline.get(ref) for ref in [r.device_name.remote() for r in self.runners]]

    def memory(self) -> list[dict]:
        """Each runner's GPU memory figures (DeviceRunner.memory; {} for a CPU runner)."""
        return [inline.get(ref) for ref in [r.memory.remote() for r in self.runners]]

    leased = False  # runners of a warm instance (runtime/warm.py): kept for later runs

    def shutdown(self, run_key: str | None = None) -> None:
        """Stop the runners, unless they are kept for later runs (shared in this session, or a warm
        instance's), which then forget run `run_key`."""
        if self.shared_key is None and not self.leased:
            for runner in self.runners:
                inline.kill(runner)
            return
        if run_key is not None:
            try:
                for ref in [r.release.remote(run_key) for r in self.runners]:
                    inline.get(ref)
            except ray.exceptions.RayError:  # a runner lost meanwhile restarts empty
                pass
        if self.shared_key is not None:
            with _SHARED_LOCK:
                _IN_USE[self.shared_key] -= 1


_SHARED: dict[tuple, list] = {}
_IN_USE: dict[tuple, int] = {}
_SHARED_LOCK = threading.Lock()


def _stop_idle_shared(keep=None) -> None:
    """Stop the shared runners that no run is using (but those of shape `keep`); call under the lock.
    Runners of an earlier Ray session in this process ended with it: only forgotten."""
    session = ray.get_runtime_context().get_session_name() if ray.is_initialized() else None
    for other in [k for k in _SHARED if k != keep and (not _IN_USE.get(k) or k[0] != session)]:
        _IN_USE.pop(other, None)
        for runner in _SHARED.pop(other):
            if other[0] == session:
                ray.kill(runner)


def release_shared_runners() -> None:
    """Stop every shared runner no run is using, freeing its resources (e.g. before starting runners of
    a shape that would not fit beside them)."""
    with _SHARED_LOCK:
        _stop_idle_shared()


def shared_runners() -> list:
    """Every runner kept alive for this Ray session (see RunnerPool.shared)."""
    with _SHARED_LOCK:
        return [runner for runners in _SHARED.values() for runner in runners]

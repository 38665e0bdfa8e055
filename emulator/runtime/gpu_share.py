"""A runner's GPU share as memory: what a run needs on the GPU per runner, and the share that holds it.

Ray's fractional GPUs (`runtime.num_gpus`) are a scheduling count, not a memory limit: eight runners at
0.125 share one card's memory however much each takes, and the one that asks last crashes mid-run with
CUDA out of memory (the peers' most reported failure). So each GPU runner measures its need once per run
(CUDA context, the run's data sets held on the device, the peak of one trial step of the largest
group it will train and of one evaluation batch), refuses at start a share whose memory cannot hold it,
naming the share that can, and caps its caching allocator at its share, so that a runner that outgrows
it fails alone and says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from emulator.algorithms.fedavg import local_training_from
from emulator.errors import ScenarioError
from emulator.training.local import LocalTraining

# What one process's CUDA context, cuBLAS and cuDNN handles take beside the tensors torch allocates (the
# caching allocator does not see them). Measured on an H100 80GB HBM3 with torch 2.11 / CUDA 13.0 (each
# runner process's footprint in NVML minus torch's peak reserved bytes, benchmarks/gpu.py): 742-760 MiB.
CUDA_CONTEXT_BYTES = 768 * 2 ** 20
MARGIN = 1.15  # the trial's peak, plus room for fragmentation between groups of other sizes
GiB = 2 ** 30


@dataclass(frozen=True)
class GpuNeed:
    """A runner's GPU memory for one run, in bytes."""

    data: int  # the run's training and test sets, held on the device once per runner
    training: int  # the reserved peak of one trial step of the largest group, model and optimizer state included
    context: int = CUDA_CONTEXT_BYTES

    @property
    def total(self) -> int:
        return self.context + self.data + math.ceil(self.training * MARGIN)

    def breakdown(self) -> str:
        return (f"CUDA context {self.context / GiB:.2f}, data sets {self.data / GiB:.2f}, model and largest "
                f"group's step {self.training * MARGIN / GiB:.2f}")


@dataclass(frozen=True)
class GpuTrial:
    """What a GPU runner measures its memory need with at start (runtime/gpu_share.py): one local step of
    `spec` for the largest group a round of `selected` jobs is cut into, against `share` of a card (per
    runner; `runners_here` runners share one process under runtime.backend: inline)."""

    spec: LocalTraining
    selected: int
    share: float
    vectorise: bool = False
    group_size: int | None = None
    runners_here: int = 1
    eval_batch: int = 0  # evaluation.batch_size: runners evaluate the global model too


def trial_for(scenario, runners: int) -> GpuTrial | None:
    """What GPU runners measure their memory need with: one local step of a full batch for the largest
    group a round is cut into, and one evaluation batch. None without GPU shares."""
    runtime = scenario.runtime
    if runtime.num_gpus <= 0:
        return None
    algorithm = scenario.algorithm
    batch = max(algorithm.batch_size, getattr(algorithm, "server_batch_size", 0))
    selected = getattr(algorithm, "concurrency", None) or math.ceil(
        algorithm.clients_per_round * getattr(scenario.system, "over_selection", 1.0))
    return GpuTrial(local_training_from(algorithm, batch_size=batch, local_steps=1, local_epochs=None),
                    selected, runtime.num_gpus, runtime.vectorise, runtime.group_size,
                    runners if runtime.backend == "inline" else 1, scenario.evaluation.batch_size)


def memory_summary(figures: list[dict]) -> dict:
    """GPU runners' memory at the end of a run, for summary.json: the most any one reserved at its peak
    and holds now, in MiB. Nothing for CPU runners (their figures are empty)."""
    figures = [m for m in figures if m]
    if not figures:
        return {}
    return {"runner_gpu_peak_reserved_mib": round(max(m["peak_reserved"] for m in figures) / 2 ** 20, 1),
            "runner_gpu_reserved_mib": round(max(m["reserved"] for m in figures) / 2 ** 20, 1)}


def smallest_share(need_bytes: int, card_bytes: int) -> float | None:
    """The smallest share 1/k (k runners per GPU) whose memory holds `need_bytes`, at Ray's resource
    precision (1e-4) and rounded down, so that k runners still fit on one card; None when not even a whole
    GPU holds it."""
    for runners in range(card_bytes // max(1, need_bytes), 0, -1):
        share = math.floor(10_000 / runners) / 10_000
        if share * card_bytes >= need_bytes:
            return share
    return None


def check_share(need: GpuNeed, share: float, card_bytes: int, card_name: str) -> None:
    """Refuse a share whose memory cannot hold `need` (exit 2 at start, not an out-of-memory crash later)."""
    have = share * card_bytes
    if need.total <= have:
        return
    fits = smallest_share(need.total, card_bytes)
    fix = (f"set runtime.num_gpus to at least {fits:g} ({int(1 / fits + 1e-9)} runners per GPU), or lower "
           "runtime.group_size or the batch size" if fits is not None else
           "not even a whole GPU holds it: lower runtime.group_size or the batch size, or use a smaller model")
    raise ScenarioError(
        f"runtime.num_gpus: {share:g} gives each runner {have / GiB:.2f} GiB of the {card_name}'s "
        f"{card_bytes / GiB:.1f} GiB, but a runner of this run needs about {need.total / GiB:.2f} GiB "
        f"({need.breakdown()}): {fix}")


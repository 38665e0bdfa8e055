"""What the driver checks before anything costly starts, and what it ships to the cluster.

Everything that can refuse a run from the scenario and this machine alone (a bad output path, a run
directory in use, a population that cannot fit in memory, a precision the hardware lacks) is checked
before the data is built and before Ray starts: a refusal costs nothing."""
from __future__ import annotations

import ray

from emulator.parts.plugins import module_files
from emulator.recording.rundir import RunDirectory, check_writable
from emulator.scenario import ScenarioError
from emulator.system.checks import machine_memory, population_fits
from emulator.training import precision


def before_start(request) -> None:
    """Refuse, before data and Ray, what the scenario and this machine already rule out."""
    scenario = request.scenario
    if request.directory is None:
        check_writable(request.out, scenario.output.dir)  # before Ray starts: a bad path costs nothing
        RunDirectory.check_free(scenario, request.out)     # an existing run is never touched
        too_big = population_fits(scenario.population.devices, machine_memory())
        if too_big:
            raise ScenarioError(too_big)
    _check_local_precision(scenario.runtime)  # bf16 on a machine without it: refused before data and Ray


def _check_local_precision(runtime) -> None:
    """A local run trains and evaluates on this machine: refuse a precision its hardware lacks before Ray
    starts. (On a cluster every runner and the server check their own machine when they first see the run.)"""
    if runtime.precision == "fp32" or runtime.address not in (None, "local"):
        return
    import torch


    precision.require(runtime.precision, "cpu", "this machine")  # the server's CPU, and CPU runners'
    if runtime.num_gpus > 0 and torch.cuda.is_available():
        precision.require(runtime.precision, "cuda", "this machine's GPU")


def check_gpus(runtime) -> None:
    """A GPU share per runner on a Ray cluster without GPUs would wait forever for resources: refuse it."""
    if runtime.num_gpus <= 0:
        return
    if runtime.backend == "inline":
        import torch

        if not torch.cuda.is_available():
            raise ScenarioError(f"runtime.num_gpus: {runtime.num_gpus:g}, but this process has no GPU (torch sees no "
                                "CUDA device), so the in-process runners could not train on one. Set "
                                "runtime.num_gpus: 0 to train on CPUs, or run where a GPU is visible (nvidia-smi, "
                                "CUDA_VISIBLE_DEVICES)")
        return
    gpus = ray.cluster_resources().get("GPU", 0)
    where = f"the Ray cluster at {runtime.address}" if runtime.address not in (None, "local") else "this machine"
    if gpus < runtime.num_gpus:  # one runner needs its whole share
        raise ScenarioError(
            f"runtime.num_gpus: {runtime.num_gpus:g}, but {where} has {'no GPU' if not gpus else f'{gpus:g} GPU(s)'} "
            "that Ray can see, so no runner could start. Set runtime.num_gpus: 0 to train on CPUs, or run where a "
            "GPU is visible (check nvidia-smi and CUDA_VISIBLE_DEVICES; on a cluster, `ray status` lists the GPUs)")


def plugin_environment(plugins: list[str]) -> dict | None:
    """The runtime_env that ships plugin modules living in the user's directory to every Ray worker (an
    installed plugin package is already on the workers' path). Actors accept only uploaded packages, so
    the modules are uploaded to the cluster here, as ray.init does for a job's own py_modules."""
    files = module_files(plugins)
    if not files:
        return None
    import inspect
    import tempfile

    from ray._private.runtime_env.py_modules import upload_py_modules_if_needed

    options = {}
    if "include_gitignore" in inspect.signature(upload_py_modules_if_needed).parameters:
        options["include_gitignore"] = True
    with tempfile.TemporaryDirectory() as scratch:
        return upload_py_modules_if_needed({"py_modules": sorted(files.values())}, scratch_dir=scratch, **options)

"""Numeric precision of training and evaluation: `runtime.precision: fp32` (the default) or `bf16`.

With bf16, local training (runners), the server's own training and evaluation run their forward passes
under `torch.autocast(dtype=torch.bfloat16)`: matrix products and convolutions (forward and backward)
compute in bfloat16, losses and reductions stay in float32. The master weights stay float32 (autocast casts
them on the fly), so the flat parameter vectors, deltas, aggregation and checkpoints keep their dtype. A model
with convolutions, and its 4-D image inputs, are kept in channels_last memory format (what oneDNN's and
cuDNN's bf16 kernels want); the flat vector reads and writes tensors in their logical order, so it is the
same vector whatever the memory format. fp32 runs exactly the code it ran before this option existed.

bf16 only pays where the hardware computes in it: a CPU with AVX512-BF16 or AMX (or Arm's BF16 extension),
a GPU that supports it natively (compute capability 8.0 and later). Elsewhere autocast still works but
emulates bfloat16 more slowly than float32, so a run asking for it there is refused (ScenarioError, exit 2)
before anything trains: the driver checks its own machine before Ray starts (a local run), and every runner
and the server check theirs when they first see the run (a cluster).

Testing hook: EMULATOR_FAKE_NO_BF16=1 in a process's environment makes this module report that the
process's hardware has no bf16 (CPU and GPU), so the refusal can be tested on a machine that has it.
"""
from __future__ import annotations

import contextlib
import os
import platform
from functools import lru_cache

import torch
from torch import nn

from emulator.scenario import ScenarioError

PRECISIONS = ("fp32", "bf16")
FAKE_NO_BF16 = "EMULATOR_FAKE_NO_BF16"  # testing hook (see the module docstring)
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # /proc/cpuinfo: x86 AVX512-BF16, AMX, Arm's BF16


def _faked_away() -> bool:
    return os.environ.get(FAKE_NO_BF16, "").strip().lower() not in ("", "0", "false", "no")


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset[str]:
    """This machine's CPU feature flags (Linux's /proc/cpuinfo `flags`, or `Features` on Arm); empty
    where they cannot be read."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip().lower() in ("flags", "features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


@lru_cache(maxsize=1)
def _cpu_bf16_hardware() -> bool:
    flags = cpu_flags()
    if flags:
        return any(flag in flags for flag in CPU_BF16_FLAGS)
    # no /proc/cpuinfo (macOS, Windows): ask torch's own CPU probe, where this torch has it
    for probe in ("_is_avx512_bf16_supported", "_is_amx_tile_supported"):
        check = getattr(torch.cpu, probe, None)
        try:
            if check is not None and check():
                return True
        except Exception:
            pass
    return False


def cpu_bf16() -> bool:
    """Whether this machine's CPU computes in bfloat16 natively (AVX512-BF16, AMX or Arm BF16)."""
    return not _faked_away() and _cpu_bf16_hardware()


def gpu_bf16() -> bool:
    """Whether this process's current GPU computes in bfloat16 natively (not emulated)."""
    if _faked_away() or not torch.cuda.is_available():
        return False
    try:
        return bool(torch.cuda.is_bf16_supported(including_emulation=False))
    except TypeError:  # an older torch without the argument
        return bool(torch.cuda.is_bf16_supported())


def cpu_name() -> str:
    """The CPU's model name, for messages and benchmarks."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def missing(precision: str, device: torch.device | str = "cpu") -> str | None:
    """Why `precision` cannot run on `device` in this process (None when it can)."""
    if precision == "fp32":
        return None
    if precision != "bf16":
        return f"unknown precision {precision!r} (choose one of {', '.join(PRECISIONS)})"
    kind = torch.device(device).type
    if kind == "cuda":
        if gpu_bf16():
            return None
        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
        return f"this GPU ({name}) has no native bfloat16 (it needs compute capability 8.0 or later)"
    if cpu_bf16():
        return None
    return f"this CPU ({cpu_name()}) has no bfloat16 instructions (neither AVX512-BF16 nor AMX)"


def require(precision: str, device: torch.device | str = "cpu", where: str = "this machine") -> None:
    """Raise a ScenarioError naming runtime.precision and the fix when `precision` cannot run here."""
    reason = missing(precision, device)
    if reason is None:
        return
    fake = " (EMULATOR_FAKE_NO_BF16 is set: a testing hook)" if _faked_away() else ""
    raise ScenarioError(
        f"runtime.precision: {precision}, but {where} cannot train in it: {reason}{fake}. Use runtime.precision: "
        "fp32 (the default) here, or run on a CPU with AVX512-BF16 or AMX (e.g. AMD Zen 4, Intel Sapphire "
        "Rapids and later) or on a GPU with bfloat16 (NVIDIA Ampere and later)")


def autocast(precision: str, device: torch.device | str = "cpu"):
    """The context that training and evaluation run their forward passes in: nothing for fp32, bf16
    autocast on the device's type otherwise."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


def has_convolutions(model: nn.Module) -> bool:
    return any(isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)) for m in model.modules())


def prepare_model(model: nn.Module, precision: str) -> nn.Module:
    """The model as `precision` trains it: under bf16, a model with 2-D convolutions in channels_last
    memory format (in place; its weights keep their values, dtype and logical layout), and the gradient
    reaching a Flatten from the dense layers turned channels_last too, so that the pooling and convolution
    backward passes under it stay on their channels_last kernels instead of converting layouts (a layout
    change only: the same values; 1.1x on cnn_fmnist's step, see benchmarks/precision.py)."""
    if precision != "fp32" and has_convolutions(model) and not getattr(model, "_emulator_channels_last", False):
        model.to(memory_format=torch.channels_last)
        for module in model.modules():
            if isinstance(module, nn.Flatten):
                module.register_forward_pre_hook(_channels_last_gradient)
        model._emulator_channels_last = True
    return model


def _channels_last_gradient(module: nn.Module, args: tuple):
    inputs = args[0] if args else None
    if isinstance(inputs, torch.Tensor) and inputs.dim() == 4 and inputs.requires_grad \
            and inputs.is_contiguous(memory_format=torch.channels_last):
        inputs.register_hook(_to_channels_last)
    return None


def _to_channels_last(gradient: torch.Tensor) -> torch.Tensor:
    return gradient.contiguous(memory_format=torch.channels_last)


def prepare_inputs(inputs: torch.Tensor, model: nn.Module, precision: str) -> torch.Tensor:
    """Inputs as `precision` trains `model` on them: 4-D image batches in channels_last under bf16 when the
    model has convolutions (a flattening model reads them as they are). Row indexing keeps the format."""
    if precision != "fp32" and inputs.dim() == 4 and has_convolutions(model):
        return inputs.contiguous(memory_format=torch.channels_last)
    return inputs

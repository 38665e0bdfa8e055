"""What a runner evaluates: the global model on the test set (and a backdoor's success), on the devices'
own test splits, a personal model on its device's split, and fine-tuning before a device's score. On the
runner's device: the server hands evaluation to a runner, so that it runs on the GPU where runners have one.
"""
from __future__ import annotations

import numpy as np
import torch

from emulator import params as param_vector
from emulator.runtime.run_context import DeviceJob, RunContext, RunHandle, model_guard
from emulator.training.attacks import Attack, add_trigger
from emulator.training.local import (as_device_tensors, evaluate_by_class, evaluate_per_sample, seed_dropout,
                                     seeded_generator, train_locally)
from emulator.training.personal import personal_params


class RunnerEvaluation:
    """A DeviceRunner's evaluations (it provides `_run`, `_samples`, `device` and the `_test`, `_local_test`
    caches)."""

    def evaluate(self, run: RunContext | RunHandle, global_params: np.ndarray,
                 batch_size: int) -> tuple[float, float, np.ndarray, np.ndarray]:
        """The global model's test loss, accuracy and per-class counts (training.local.evaluate_by_class), on
        this runner's device: the server hands evaluation to a runner, so that it runs on the GPU where
        the runners have one (a GPU runner holds the test set there once, beside the training set)."""
        context, model = self._run(run)
        x, y = self._test_set(context)
        param_vector.load(model, global_params)
        with model_guard(context, "evaluation"):
            return evaluate_by_class(model, x, y, batch_size, context.federation.train.num_classes,
                                     context.precision)

    def evaluate_backdoor(self, run: RunContext | RunHandle, global_params: np.ndarray, batch_size: int,
                          attack: Attack) -> float:
        """A backdoor's success: the share of test samples not of its target class that the global model
        classifies as the target once they carry the trigger."""
        context, model = self._run(run)
        x, y = self._test_set(context)
        keep = y != attack.config.target
        if not bool(keep.any()):
            return float("nan")
        triggered = add_trigger(x[keep], attack.config.size, attack.config.value)
        param_vector.load(model, global_params)
        target = torch.full((int(keep.sum()),), attack.config.target, dtype=y.dtype, device=y.device)
        with model_guard(context, "evaluation"):
            _, correct = evaluate_per_sample(model, triggered, target, batch_size, context.precision)
        return float(correct.mean())

    def evaluate_devices(self, run: RunContext | RunHandle, global_params: np.ndarray, batch_size: int,
                         devices: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The global model on the local test splits (data.local_test) of `devices` (None: every device), in
        one pass over them all: each sample's loss and correctness, device after device."""
        context, model = self._run(run)
        x, y = self._local_split(context)
        if devices is not None:
            offsets = context.federation.local_offsets
            rows = np.concatenate([np.arange(offsets[d], offsets[d + 1]) for d in devices] or [np.zeros(0, np.int64)])
            index = torch.from_numpy(rows).to(x.device)
            x, y = x[index], y[index]
        param_vector.load(model, global_params)
        with model_guard(context, "evaluation"):
            return evaluate_per_sample(model, x, y, batch_size, context.precision)

    def evaluate_personal(self, run: RunContext | RunHandle, global_params: np.ndarray, batch_size: int,
                          devices: np.ndarray, owns: list[np.ndarray], mask: np.ndarray
                          ) -> tuple[np.ndarray, np.ndarray]:
        """Each device's own model (the global vector with its own entries in place) on its local test split:
        each sample's loss and correctness, device after device, as evaluate_devices gives them."""
        context, model = self._run(run)
        x, y = self._local_split(context)
        offsets = context.federation.local_offsets
        losses, corrects = [np.zeros(0, np.float64)], [np.zeros(0, bool)]
        with model_guard(context, "evaluation"):
            for device, own in zip(devices, owns):
                start, stop = int(offsets[device]), int(offsets[device + 1])
                if stop == start:
                    continue
                param_vector.load(model, personal_params(global_params, own, mask))
                loss, correct = evaluate_per_sample(model, x[start:stop], y[start:stop], batch_size,
                                                    context.precision)
                losses.append(loss)
                corrects.append(correct)
        return np.concatenate(losses), np.concatenate(corrects)

    def finetune_evaluate(self, run: RunContext | RunHandle, global_params: np.ndarray, jobs: list[DeviceJob],
                          batch_size: int) -> list[tuple[int, int, float]]:
        """Fine-tune, then evaluate: for each job's device, the global model trained on the device's own data
        as the job says (its seed fixes batches and dropout), then scored on its own test split. Per device:
        (local test samples, correct, loss sum)."""
        if not jobs:
            return []
        context, model = self._run(run)
        x_all, y_all = self._local_split(context)
        offsets = context.federation.local_offsets
        scores = []
        for job in jobs:
            x, y = self._samples(context, job)
            param_vector.load(model, global_params)
            seed_dropout(job.seed, self.device)
            with model_guard(context, "fine-tuning"):
                train_locally(model, x, y, job.spec, seeded_generator(job.seed), None, context.precision)
                start, stop = int(offsets[job.device]), int(offsets[job.device + 1])
                loss, correct = evaluate_per_sample(model, x_all[start:stop], y_all[start:stop], batch_size,
                                                    context.precision)
            scores.append((stop - start, int(correct.sum()), float(loss.sum())))
        return scores

    def _local_split(self, context: RunContext) -> tuple[torch.Tensor, torch.Tensor]:
        """The devices' local test splits as tensors on this runner's device, made once (one run's at a time)."""
        if context.key not in self._local_test:
            self._local_test.clear()
            self._local_test[context.key] = as_device_tensors(*context.federation.local_test.tensors(), self.device)
        return self._local_test[context.key]

    def _test_set(self, context: RunContext) -> tuple[torch.Tensor, torch.Tensor]:
        """The run's test set as tensors on this runner's device, made once (one run's at a time)."""
        if context.key not in self._test:
            self._test.clear()
            self._test[context.key] = as_device_tensors(*context.federation.test.tensors(), self.device)
        return self._test[context.key]

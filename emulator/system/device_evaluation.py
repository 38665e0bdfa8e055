"""Evaluation on sampled devices, on the simulated clock: who can be asked, who answers, and what it costs.

At the end of an evaluated round (time t) the server asks `count` devices drawn uniformly from those online
at t. Each downloads the model, runs a forward pass over its own test split (a third of a training step's
cost per sample: no backward pass) at its own speed, and uploads three numbers (samples, correct, loss
sum). It is lost if it goes offline or its dropout hazard strikes before it finishes, and it is late if it
finishes after the evaluation's deadline. So who is measured is biased exactly as who trains is.

The rule (docs/scenarios.md, evaluation): an evaluation runs on its own budget. It does not occupy the
devices it asks (it takes seconds where training takes minutes) and the server does not wait for it
before the next round, so the training rounds' clock, cohorts and random draws are the same with it on
or off; its span, bytes and answers are recorded apart. All its randomness comes from its own stream.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from emulator.system.accounting import compute_seconds, transfer_seconds

FORWARD_SHARE = 1.0 / 3.0  # a forward pass's share of a training step's per-sample cost (forward + backward)
REPORT_BYTES = 24  # samples, correct and loss sum: three 8-byte numbers


@dataclass
class EvaluationOutcome:
    """One sampled evaluation: who was asked, who answered in time, and what it cost."""

    asked: np.ndarray  # device ids, in draw order
    answered: np.ndarray  # the asked devices that reported before the deadline
    dropped: int  # went offline or dropped out before finishing
    late: int  # finished after the deadline
    span_s: float  # from the ask to the last answer (or the deadline, if anyone was still out)
    bytes_down: int  # model downloads completed
    bytes_up: int  # answers received
    without_local_test: int  # online at the ask but without a test split, so never asked


def evaluate_sample(system, t: float, count: int, local_sizes: np.ndarray, model_bytes: int,
                    deadline_s: float | None, stream: np.random.Generator,
                    finetune_samples: np.ndarray | None = None) -> EvaluationOutcome:
    """Ask `count` devices online at `t` (fewer if fewer are online) to evaluate the model on their own
    test split; `system` is the SimulatedSystem (profiles, availability, dropout). `finetune_samples`: the
    samples each device trains on first (fine-tune, then evaluate), charged at its full training cost."""
    online = system.availability.online_devices(t)
    has_split = local_sizes[online] > 0
    without = int(np.sum(~has_split))  # counted, so the estimate says how much of who was online it covers
    online = online[has_split]  # a device without a test split has nothing to report
    asked = stream.choice(online, size=min(count, len(online)), replace=False) if len(online) else online
    if not len(asked):
        return EvaluationOutcome(asked, asked, 0, 0, 0.0, 0, 0, without)
    profiles = system.profiles
    down = transfer_seconds(model_bytes, profiles.down_mbps[asked], profiles.latency_s[asked])
    jitter = np.exp(system.compute_jitter * stream.standard_normal(len(asked))) if system.compute_jitter else 1.0
    processed = local_sizes[asked] * FORWARD_SHARE
    if finetune_samples is not None:
        processed = processed + finetune_samples[asked]
    work = compute_seconds(processed, profiles.s_per_sample[asked], jitter)
    up = transfer_seconds(REPORT_BYTES, profiles.up_mbps[asked], profiles.latency_s[asked])
    finish = t + down + work + up
    lost_at = np.minimum(system.availability.next_offline(asked, t), t + system.dropout_after(asked, stream))
    dropped = lost_at < finish
    closes = np.inf if deadline_s is None else t + deadline_s
    late = ~dropped & (finish > closes)
    answered = ~dropped & ~late
    ends = np.where(dropped, lost_at, finish)
    span = float(min(ends.max(), closes) - t)
    downloaded = (t + down < np.minimum(lost_at, closes))
    return EvaluationOutcome(asked, asked[answered], int(dropped.sum()), int(late.sum()), span,
                             int(downloaded.sum()) * int(model_bytes), int(answered.sum()) * REPORT_BYTES, without)

"""Fleet statistics of per-device accuracy, named as the papers name them.

The papers differ in what "fairness" reports: LEAF gives the 10th / 50th / 90th percentile of device
accuracy; q-FFL (Li et al., ICLR 2020) the mean of the worst 10% of devices and the spread (standard
deviation) across devices; FedAvg-style papers the sample-weighted accuracy, which is the accuracy on all
the devices' test samples pooled. Each column below is one of them, over the devices that have a local test
set; devices without one are left out of every statistic and of device_eval.csv's rows, never scored as 0,
and counted (device_eval.csv's devices_without_local_test, metrics.csv's sampled_without_local_test), so
that a reader sees how much of the fleet the statistics cover."""
from __future__ import annotations

import math

import numpy as np

FLEET_COLUMNS = ("device_acc_mean", "device_acc_weighted", "device_acc_p10", "device_acc_p50", "device_acc_p90",
                 "device_acc_worst10", "device_acc_std", "device_acc_reported", "device_acc_never_reported",
                 "devices_never_reported")
GROUPING = ("compute_tier", "network_tier", "timezone_h", "type")  # participation.csv columns devices group by
MAX_GROUPS = 12  # a column with more distinct values (a continuous one) is not a grouping
MISSING = "none"  # the group of the devices without a value in a grouping column (e.g. no time zone)


def device_scores(owner: np.ndarray, loss: np.ndarray, correct: np.ndarray, devices: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per device: its local test samples, accuracy and mean loss (NaN for a device without samples), from
    per-sample loss and correctness and each sample's owner."""
    samples = np.bincount(owner, minlength=devices).astype(np.int64)
    with np.errstate(invalid="ignore", divide="ignore"):
        accuracy = np.bincount(owner, weights=correct.astype(np.float64), minlength=devices) / samples
        mean_loss = np.bincount(owner, weights=loss.astype(np.float64), minlength=devices) / samples
    return samples, accuracy, mean_loss


def without_local_test(local_sizes: np.ndarray) -> int:
    """How many devices have no local test split: left out of the statistics, and counted so that a reader
    sees how much of the fleet they cover."""
    return int(np.sum(np.asarray(local_sizes) == 0))


def worst_share_mean(accuracy: np.ndarray, share: float = 0.1) -> float:
    """The mean accuracy of the worst `share` of devices (at least one device): q-FFL's "worst 10%"."""
    count = max(1, int(math.ceil(share * len(accuracy))))
    return float(np.mean(np.sort(accuracy)[:count]))


def fleet_statistics(samples: np.ndarray, accuracy: np.ndarray, reported: np.ndarray) -> dict:
    """metrics.csv's fleet columns from per-device `samples` and `accuracy` (NaN where no local test) and
    how many times each device has reported so far. None where a statistic has no devices."""
    scored = samples > 0
    acc = accuracy[scored]
    row = dict.fromkeys(FLEET_COLUMNS)
    never = reported[scored] == 0
    row["devices_never_reported"] = int(np.sum(reported == 0))
    if not len(acc):
        return row
    p10, p50, p90 = np.percentile(acc, [10, 50, 90])
    row.update({
        "device_acc_mean": float(np.mean(acc)),
        "device_acc_weighted": float(np.sum(acc * samples[scored]) / np.sum(samples[scored])),
        "device_acc_p10": float(p10), "device_acc_p50": float(p50), "device_acc_p90": float(p90),
        "device_acc_worst10": worst_share_mean(acc),
        "device_acc_std": float(np.std(acc)),
        "device_acc_reported": float(np.mean(acc[~never])) if np.any(~never) else None,
        "device_acc_never_reported": float(np.mean(acc[never])) if np.any(never) else None,
    })
    return row


def groupings(describe: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The per-device columns (of participation.csv's) that split the fleet into a few groups (the devices
    without a value, if any, counting as one group: MISSING)."""
    found = {}
    for name in GROUPING:
        values = describe.get(name)
        if values is not None and 1 < len(group_values(np.asarray(values))) <= MAX_GROUPS:
            found[name] = np.asarray(values)
    return found


def missing(values: np.ndarray) -> np.ndarray:
    """Per device, whether it has no value in a grouping column: NaN among numbers, None among objects, an
    empty name among strings (a device outside every diurnal entry has no time zone)."""
    values = np.asarray(values)
    if values.dtype.kind == "f":
        return np.isnan(values)
    if values.dtype.kind in "US":
        return np.char.strip(values) == ("" if values.dtype.kind == "U" else b"")
    if values.dtype.kind == "O":
        return np.fromiter((v is None or (isinstance(v, (float, np.floating)) and math.isnan(v))
                            or (isinstance(v, str) and not v.strip()) for v in values), bool, len(values))
    return np.zeros(len(values), bool)


def group_values(values: np.ndarray) -> list:
    """The groups of a grouping column, in order: its distinct values, then None (the group MISSING) when
    some devices have none."""
    gone = missing(values)
    present = np.unique(np.asarray(values)[~gone]).tolist() if (~gone).any() else []
    return present + ([None] if gone.any() else [])


def members(values: np.ndarray, value) -> np.ndarray:
    """Per device, whether it is in the group `value` (None: the devices without a value)."""
    gone = missing(values)
    return gone if value is None else ~gone & (np.asarray(values) == value)


def groups_holding(groups: dict[str, np.ndarray], within: np.ndarray | None = None) -> list[tuple[str, object]]:
    """(column, value) of every group that holds a device of `within` (per device; None: every group). A group
    without one could never have a statistic: its column would be empty in every row."""
    return [(name, value) for name, values in groups.items() for value in group_values(values)
            if within is None or (members(values, value) & within).any()]


def group_columns(groups: dict[str, np.ndarray], prefix: str = "device_acc",
                  within: np.ndarray | None = None) -> tuple[str, ...]:
    """metrics.csv's names for a statistic of each group: <prefix>_<column>_<value> (the mean device
    accuracy's by default; <value> is MISSING for the devices without one); only groups holding a device of
    `within` (None: all)."""
    return tuple(group_column(prefix, name, value) for name, value in groups_holding(groups, within))


def group_column(prefix: str, name: str, value) -> str:
    return f"{prefix}_{name}_{_label(value)}"


def group_means(samples: np.ndarray, accuracy: np.ndarray, groups: dict[str, np.ndarray],
                within: np.ndarray | None = None) -> dict:
    """The mean device accuracy of each group holding a device of `within` (None: every group); None for a
    group none of whose devices was scored."""
    row = {}
    scored = samples > 0
    for name, value in groups_holding(groups, within):
        inside = scored & members(groups[name], value)
        row[group_column("device_acc", name, value)] = float(np.mean(accuracy[inside])) if inside.any() else None
    return row


def _label(value) -> str:
    if value is None:
        return MISSING
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        value = int(value)
    return str(value).replace(" ", "_")


SAMPLED_COLUMNS = ("sampled_acc_mean", "sampled_acc_weighted", "sampled_acc_p10", "sampled_asked",
                   "sampled_answered", "sampled_dropped", "sampled_late", "sampled_without_local_test",
                   "eval_span_s", "eval_bytes_down", "eval_bytes_up")


def sampled_statistics(samples: np.ndarray, accuracy: np.ndarray, answered: np.ndarray, outcome) -> dict:
    """metrics.csv's columns of a sampled evaluation: the estimates a server gets from the devices that
    answered (the device mean, sample-weighted and 10th percentile), who was asked, who was online but could
    not be (no local test split), and what it cost."""
    row = dict.fromkeys(SAMPLED_COLUMNS)
    row.update({"sampled_asked": len(outcome.asked), "sampled_answered": len(answered),
                "sampled_dropped": outcome.dropped, "sampled_late": outcome.late,
                "sampled_without_local_test": outcome.without_local_test, "eval_span_s": outcome.span_s,
                "eval_bytes_down": outcome.bytes_down, "eval_bytes_up": outcome.bytes_up})
    if len(answered):
        acc, n = accuracy[answered], samples[answered]
        row.update({"sampled_acc_mean": float(np.mean(acc)),
                    "sampled_acc_weighted": float(np.sum(acc * n) / np.sum(n)),
                    "sampled_acc_p10": float(np.percentile(acc, 10))})
    return row


FINETUNED_COLUMNS = ("device_acc_ft_mean", "device_acc_ft_p10", "device_acc_ft_worst10",
                     "device_acc_ft_never_reported")


def finetuned_statistics(accuracy: np.ndarray, tuned: np.ndarray, reported: np.ndarray) -> dict:
    """metrics.csv's columns of fine-tune-then-evaluate over the `tuned` devices (ids): the device mean, 10th
    percentile, worst 10% and the mean over those that never reported."""
    row = dict.fromkeys(FINETUNED_COLUMNS)
    if not len(tuned):
        return row
    acc, never = accuracy[tuned], np.asarray(reported)[tuned] == 0
    row.update({"device_acc_ft_mean": float(np.mean(acc)), "device_acc_ft_p10": float(np.percentile(acc, 10)),
                "device_acc_ft_worst10": worst_share_mean(acc),
                "device_acc_ft_never_reported": float(np.mean(acc[never])) if never.any() else None})
    return row


class FleetEvaluation:
    """Scores one evaluation of the global model on the devices' local test splits: metrics.csv's columns
    (the oracle's fleet and group statistics over every device, the sampled estimate over the devices that
    answered) and device_eval.csv's rows (the devices scored; none without a local test, but each row counts
    those of the evaluated population that have none)."""

    def __init__(self, local_sizes: np.ndarray, describe: dict[str, np.ndarray], oracle: bool = True,
                 sample: bool = False, finetune: bool = False):
        self.local_sizes, self.devices = local_sizes, len(local_sizes)
        self.without_local_test = without_local_test(local_sizes)  # the oracle's: fixed by the split
        self.groups = groupings(describe)
        self.oracle, self.sample, self.finetune = oracle, sample, finetune

    @property
    def columns(self) -> tuple[str, ...]:
        oracle = FLEET_COLUMNS + group_columns(self.groups, within=self.local_sizes > 0) if self.oracle else ()
        tuned = (FINETUNED_COLUMNS if self.oracle else ()) + (("sampled_acc_ft_mean",) if self.sample else ())
        return oracle + (SAMPLED_COLUMNS if self.sample else ()) + (tuned if self.finetune else ())

    def scored_devices(self, outcome=None) -> np.ndarray | None:
        """Whose splits to evaluate: every device's (None) with the oracle, else those that answered."""
        return None if self.oracle else outcome.answered

    def owner(self, devices: np.ndarray | None) -> np.ndarray:
        """The device of each sample the runner evaluates for `devices` (None: all, in device order)."""
        devices = np.arange(self.devices) if devices is None else np.asarray(devices, np.int64)
        return np.repeat(devices, self.local_sizes[devices])

    def score(self, devices: np.ndarray | None, loss: np.ndarray, correct: np.ndarray, reported: np.ndarray,
              outcome=None) -> tuple[dict, dict]:
        """(metrics columns, device_eval.csv's columns) from each evaluated sample's loss and correctness (for
        `devices`, None: all), each device's report count so far and the sampled evaluation's outcome. The
        rows' devices_without_local_test is their population's: the fleet's with the oracle, else the devices
        online at the ask (the sample's pool) that had no split."""
        samples, accuracy, mean_loss = device_scores(self.owner(devices), loss, correct, self.devices)
        row = {}
        if self.oracle:
            row.update(fleet_statistics(samples, accuracy, reported))
            row.update(group_means(samples, accuracy, self.groups, self.local_sizes > 0))
        scored = np.flatnonzero(samples > 0)
        table = {"device": scored, "samples": samples[scored], "accuracy": accuracy[scored],
                 "loss": mean_loss[scored], "reported": np.asarray(reported)[scored]}
        if self.sample:
            answered = np.sort(outcome.answered)
            row.update(sampled_statistics(samples, accuracy, answered, outcome))
            table["answered"] = np.isin(scored, answered).astype(np.int64)
        left_out = self.without_local_test if self.oracle else outcome.without_local_test
        table["devices_without_local_test"] = np.full(len(scored), left_out, np.int64)
        table.update({name: values[scored] for name, values in self.groups.items()})
        return row, table

    def score_finetuned(self, tuned: np.ndarray, scores: list[tuple[int, int, float]], reported: np.ndarray,
                        row: dict, table: dict, outcome=None) -> None:
        """Add fine-tune-then-evaluate's columns to `row` and `table` (from score): per tuned device (ids, in
        order) its (local test samples, correct, loss sum) after adapting the model to its own data."""
        accuracy = np.full(self.devices, np.nan)
        mean_loss = np.full(self.devices, np.nan)
        if len(tuned):
            samples, correct, loss = (np.array(column, dtype=np.float64) for column in zip(*scores))
            accuracy[tuned], mean_loss[tuned] = correct / samples, loss / samples
        if self.oracle:
            row.update(finetuned_statistics(accuracy, tuned, reported))
        if self.sample:
            answered = np.asarray(outcome.answered, np.int64)
            row["sampled_acc_ft_mean"] = float(np.mean(accuracy[answered])) if len(answered) else None
        table["accuracy_ft"], table["loss_ft"] = accuracy[table["device"]], mean_loss[table["device"]]

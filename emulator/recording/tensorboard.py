"""TensorBoard event files beside metrics.csv, so that a long run can be watched live.

`TensorBoardLog` turns each metrics row into scalars in `RUN_DIR/tensorboard/`, with the round as the step,
and flushes them at once, so `tensorboard --logdir runs/` shows a round as soon as it ends:

    test/acc, test/loss, train/acc, train/loss
    cohort/selected, cohort/participants, cohort/dropped, cohort/stragglers, cohort/cancelled, cohort/failed
    bytes/down, bytes/up, and the totals so far: bytes/down_total, bytes/up_total, bytes/total
    time/sim_time_s, time/round_duration_s, time/server_compute_s, time/wall_time_s
    bias/label_tv, bias/label_tv_floor, bias/unseen_share, test/worst_class, test/worst_class_acc
    with batteries: cohort/aborted, energy/round_j, energy/wasted_j, energy/cancelled_j, energy/radio_j,
    energy/aborted_j and the
    fleet's energy so far, energy/total_j
    algorithm/<column> for every other numeric column (FAST's `algorithm/q`)

TensorBoard's step must be an integer, so accuracy and loss against simulated time are a second group,
`by_sim_time/test_acc`, `by_sim_time/test_loss`, `by_sim_time/train_acc` and `by_sim_time/train_loss`, whose
step is the simulated clock at the end of the round in whole seconds (rounded down). Every event's wall time
is real time. Cells that are None, empty or not numbers (`kind`) are left out: a round that was not evaluated
has no `test/*` point, a round without reports no `bias/label_tv*`. Keys starting with `_` are private to the
server and driver (the per-class accuracies, which go to class_accuracy.csv) and are never logged.

Resuming re-runs the rounds after the checkpoint (round k), which would otherwise show twice. SummaryWriter's
`purge_step=k+1` alone would not do: the restart marker it writes drops every step from k+1 on in every tag,
and in `by_sim_time` the steps are seconds, so it would drop nearly all of that group. Instead a resumed log
is rebuilt: a new event file starts with a restart marker at step 0 (as every file does), then holds the
kept rows (`history`) again and the rounds that follow. TensorBoard reads a folder's files in name order
(creation time), so both a fresh TensorBoard and one that was already watching drop what the earlier files
held and show each round once; the earlier files stay (a watcher still reading one would stall if it were
removed).

The writer (`torch.utils.tensorboard`, from the `tensorboard` package) is imported when the first log is
opened, not with `emulator`.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Iterable

# metrics.csv column -> tag; columns named here but absent from a row are simply not written
TAGS = {
    "test_acc": "test/acc", "test_loss": "test/loss", "train_acc": "train/acc", "train_loss": "train/loss",
    "selected": "cohort/selected", "participants": "cohort/participants", "dropped": "cohort/dropped",
    "stragglers": "cohort/stragglers", "cancelled": "cohort/cancelled", "failed": "cohort/failed",
    "bytes_down": "bytes/down", "bytes_up": "bytes/up",
    "sim_time_s": "time/sim_time_s", "round_duration_s": "time/round_duration_s",
    "server_compute_s": "time/server_compute_s", "wall_time_s": "time/wall_time_s",
    "label_tv": "bias/label_tv", "label_tv_floor": "bias/label_tv_floor", "unseen_share": "bias/unseen_share",
    "worst_class": "test/worst_class", "worst_class_acc": "test/worst_class_acc",
    "aborted": "cohort/aborted", "energy_j": "energy/round_j", "energy_wasted_j": "energy/wasted_j",
    "energy_radio_j": "energy/radio_j", "energy_aborted_j": "energy/aborted_j",
    "energy_cancelled_j": "energy/cancelled_j",
}
BY_SIM_TIME = ("test_acc", "test_loss", "train_acc", "train_loss")  # also written as by_sim_time/<column>
NOT_SCALARS = ("round", "kind", "sim_start_s")  # the step, a label, the previous round's sim_time_s
OTHER_GROUP = "algorithm"  # numeric columns not named above: algorithm/<column>
SUBDIR = "tensorboard"


class TensorBoardLog:
    """Scalars of one run's metrics rows, in `run_dir/tensorboard/`.

    Parameters
    ----------
    run_dir:
        The run directory; the event files go into its `tensorboard/` folder, created if missing.
    history:
        The rows already in metrics.csv that are to stay, oldest first: empty for a new run, the rows kept
        by `RunDirectory.rewind` when resuming (values may be strings, as read back from the CSV). Where the
        folder already holds event files, the new file supersedes them (see the module docstring) and these
        rows are written again; the byte totals continue from them either way.
    """

    def __init__(self, run_dir: str | Path, history: Iterable[dict] = ()):
        from torch.utils.tensorboard import SummaryWriter

        self.path = Path(run_dir) / SUBDIR
        self.path.mkdir(parents=True, exist_ok=True)
        earlier = list(self.path.glob("events.out.tfevents.*"))
        if earlier:
            _wait_past(earlier)
        # purge_step=0: every file starts with a restart marker at step 0, after which readers drop every
        # point of the earlier files (TensorBoard's own loader ignores a run's first marker, so a new run
        # writes one too)
        self._writer = SummaryWriter(str(self.path), purge_step=0, max_queue=1000, flush_secs=10)
        self._totals = {"bytes_down": 0.0, "bytes_up": 0.0}
        self._energy_j = 0.0  # the fleet's energy so far, in a world with batteries
        history = list(history)
        if history:
            # place the kept rounds back in time by their wall_time_s, so TensorBoard's time axes stay in order
            last_wall = _number(history[-1].get("wall_time_s"))
            now = time.time()
            for row in history:
                wall = _number(row.get("wall_time_s"))
                self._write(row, now - (last_wall - wall) if wall is not None and last_wall is not None else now)
            self._writer.flush()

    def append(self, row: dict) -> None:
        """Write one round's metrics row (column -> number, None, or string) and flush it to disk."""
        self._write(row, time.time())
        self._writer.flush()

    def close(self) -> None:
        """Flush and close the event file; safe to call twice."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> "TensorBoardLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _write(self, row: dict, walltime: float) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        step = _number(row.get("round"))
        if step is None:
            raise ValueError(f"a metrics row needs its round number, got round={row.get('round')!r}")
        step = int(step)
        values, moved = {}, False
        for column, value in row.items():
            number = _number(value)
            if column in NOT_SCALARS or column.startswith("_") or number is None:
                continue
            values[TAGS.get(column, f"{OTHER_GROUP}/{column}")] = number
            if column == "energy_j" and math.isfinite(number):
                self._energy_j += number
                values["energy/total_j"] = self._energy_j
            if column in self._totals and math.isfinite(number):
                self._totals[column] += number
                moved = True
        if moved:
            values["bytes/down_total"] = self._totals["bytes_down"]
            values["bytes/up_total"] = self._totals["bytes_up"]
            values["bytes/total"] = self._totals["bytes_down"] + self._totals["bytes_up"]
        # one event per step and group (several values per event): ten times faster than one per scalar
        writer = self._writer.file_writer
        if values:
            writer.add_summary(Summary(value=[Summary.Value(tag=t, simple_value=v) for t, v in values.items()]),
                               step, walltime)
        sim_time = _number(row.get("sim_time_s"))
        if sim_time is not None and math.isfinite(sim_time):
            by_time = [Summary.Value(tag=f"by_sim_time/{c}", simple_value=_number(row[c]))
                       for c in BY_SIM_TIME if _number(row.get(c)) is not None]
            if by_time:
                writer.add_summary(Summary(value=by_time), int(sim_time), walltime)


def _wait_past(files: list[Path]) -> None:
    """Wait until the clock's second is past the newest file's: event files are named by the second they
    were created in, and TensorBoard reads them in name order, so the new file has to come last."""
    stamps = []
    for path in files:
        try:
            stamps.append(int(path.name.split(".")[3]))
        except (IndexError, ValueError):
            pass
    wait = max(stamps, default=0) + 1 - time.time()
    if 0 < wait <= 2:  # a file from a clock far ahead (another host) is not worth waiting for
        time.sleep(wait)


def _number(value) -> float | None:
    """A cell as a float, or None where it is empty or not a number (bools count as 0/1)."""
    if value is None or isinstance(value, (bytes, bytearray)):
        return None
    if isinstance(value, str):
        value = value.strip()
        if not value:
            return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None

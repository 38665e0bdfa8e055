"""Memory and speed of a large population with its data: the population_100k world at N devices.

Why: data.store: disk exists so that no process holds the samples as memory of its own and a run's memory grows
with N only by its per-device vectors (offsets, label counts, the system model's state); this shows whether it
does (anonymous bytes a device between the smallest and largest N) and what it costs in time, against data in
memory (today's object-store path) at the baseline N, measured in the same command.

Each configuration runs as a whole process (`emulator run`) while this script samples, every 0.3 s, the PSS of
the run's every process (the driver and its descendants) from /proc/PID/smaps_rollup: anonymous (a process's
own), file-backed (the mapped data: shared, evictable page cache) and shmem (Ray's object store). Kinds go by
the title Ray gives a worker (/proc/PID/cmdline): `ray::DeviceRunner...` runners, `ray::FederatedServer...` the
server, the other descendants (gcs_server, raylet, dashboard, monitors, agents, idle workers) Ray. Also: seconds
a round, writing and opening the data, and one device's rows (p50 / p99, warm and cold, see `reads`).

    python benchmarks/scale.py                                   # 10^4 and 10^5 devices, memory at 10^5
    python benchmarks/scale.py --devices 10000 100000 1000000    # 10^6: ~2 minutes to write the data once
    python benchmarks/scale.py --devices 10000 --baseline-memory 10000 --rounds 2    # a quick check
"""
from __future__ import annotations

import argparse
import csv
import mmap
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

SCENARIO = Path(__file__).resolve().parents[1] / "scenarios" / "cluster" / "population_100k.yaml"
KINDS = ("driver", "runners", "server", "ray")


def descendants(pid: int) -> list[int]:
    """`pid` and every process below it (/proc/PID/task/TID/children): Ray's daemons and workers are children
    of the driver, or of the raylet."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                todo += [int(child) for child in (task / "children").read_text().split()]
            except OSError:
                pass
    return found


def kind_of(pid: int, root: int) -> str:
    """driver, runners, server or ray, by the process title Ray sets on a worker (ray::ActorClass.method)."""
    if pid == root:
        return "driver"
    try:
        title = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return "ray"
    if title.startswith("ray::") and "Runner" in title:
        return "runners"
    if title.startswith("ray::") and "Server" in title:
        return "server"
    return "ray"


def pss(pid: int) -> dict[str, int] | None:
    """kB of anonymous, file-backed and shared-memory PSS of one process (None once it is gone)."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    fields = dict(re.findall(r"^(Pss_\w+):\s+(\d+) kB", text, flags=re.M))
    return {"anon": int(fields.get("Pss_Anon", 0)), "file": int(fields.get("Pss_File", 0)),
            "shmem": int(fields.get("Pss_Shmem", 0))}


class Sampler(threading.Thread):
    """The run's memory every `every` seconds; keeps the sample with the largest total."""

    def __init__(self, root: int, every: float = 0.3):
        super().__init__(daemon=True)
        self.root, self.every, self.stop = root, every, threading.Event()
        self.peak_total, self.peak, self.peak_anon = 0, {}, 0

    def run(self) -> None:
        while not self.stop.is_set():
            sample = {kind: {"anon": 0, "file": 0, "shmem": 0} for kind in KINDS}
            for pid in descendants(self.root):
                found = pss(pid)
                if found:
                    for part, kb in found.items():
                        sample[kind_of(pid, self.root)][part] += kb
            total = sum(sum(parts.values()) for parts in sample.values())
            self.peak_anon = max(self.peak_anon, sum(parts["anon"] for parts in sample.values()))
            if total > self.peak_total:
                self.peak_total, self.peak = total, sample
            self.stop.wait(self.every)


BUILD = """
import sys
from emulator.parts import load_scenario
from emulator.data import federation_for
scenario = load_scenario(sys.argv[1], [f"population.devices={sys.argv[2]}", "data.store=disk", *sys.argv[3:]])
federation = federation_for(scenario.data, scenario.population.devices, scenario.seed, scenario.population.types,
                            notify=print)
print("stored", federation.stored)
"""


def sampled(args: list[str], cache: Path) -> tuple[subprocess.Popen, str, str, Sampler]:
    """Run `args` to the end with the data cache at `cache`, its process tree's memory sampled throughout."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "EMULATOR_DATA_CACHE": str(cache)})
    sampler = Sampler(proc.pid)
    sampler.start()
    stdout, stderr = proc.communicate()
    sampler.stop.set()
    sampler.join()
    return proc, stdout, stderr, sampler


def build_once(devices: int, cache: Path, extra: list[str]) -> dict:
    """Write the data to the cache in a process of its own, so the run measured after it is a run from the
    cache, as every later run and sweep member is: its directory, the seconds the store's own "data written
    to DIR in X s" line gives (None: it was in the cache already) and the process's peak anonymous PSS (kB)."""
    proc, stdout, stderr, sampler = sampled([sys.executable, "-c", BUILD, str(SCENARIO), str(devices), *extra],
                                            cache)
    if proc.returncode != 0:
        return {"code": proc.returncode, "error": "writing the data: " + last_line(stderr)}
    written = re.search(r"^data written to .* in ([\d.]+) s", stdout, flags=re.M)
    stored = next(line for line in stdout.splitlines() if line.startswith("stored "))
    return {"code": 0, "directory": Path(stored.split(" ", 1)[1]), "build_anon": sampler.peak_anon,
            "write_s": float(written[1]) if written else None}


def last_line(stderr: str) -> str:
    return (stderr.strip().splitlines() or ["(no output)"])[-1].strip()[:100]


def run_once(devices: int, mode: str, rounds: int, clients: int | None, cache: Path, out: Path,
             extra: list[str]) -> dict:
    """`emulator run` at N devices from `mode`, sampled: its exit code, peak PSS and median seconds a round
    after the first (metrics.csv's wall_time_s counts from the first round's start; the first round also
    warms the runners up). Evaluation and checkpoints are off: they would be rounds of another cost."""
    args = [sys.executable, "-m", "emulator", "run", str(SCENARIO), "--quiet", "--out", str(out),
            "--set", f"rounds={rounds}", "--set", f"population.devices={devices}", "--set", f"data.store={mode}",
            "--set", "evaluation.every=1000", "--set", "output.checkpoint_every=0"]
    for override in extra:
        args += ["--set", override]
    if clients:
        args += ["--set", f"algorithm.clients_per_round={clients}"]
    started = time.perf_counter()
    proc, stdout, stderr, sampler = sampled(args, cache)
    row = {"code": proc.returncode, "whole_s": time.perf_counter() - started, "peak": sampler.peak,
           "peak_total": sampler.peak_total, "anon_max": sampler.peak_anon}
    if proc.returncode != 0:
        row["error"] = last_line(stderr)
        return row
    with open(out / "metrics.csv", newline="") as handle:
        walls = [float(r["wall_time_s"]) for r in csv.DictReader(handle)]
    row["round_s"] = statistics.median(np.diff(walls)) if len(walls) >= 2 else walls[-1]
    return row


def evict(descriptors: list[int], *mapped: np.ndarray) -> None:
    """Drop the store's pages from the page cache (no root needed), this process's mappings of them first (a
    page some process maps is not evicted): the next read of a device's rows comes from the disk."""
    for array in mapped:
        array._mmap.madvise(mmap.MADV_DONTNEED)  # a read-only file mapping: only the page-table entries go
    for fd in descriptors:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)


def reads(directory: Path, samples: int = 2000) -> dict:
    """Opening the stored data (checked: sizes and digests, as a run's driver does) in this process, and p50 /
    p99 ms of one device's rows as tensors for `samples` random devices: cold, the store evicted before every
    read (evicting once would not do: the kernel reads read_ahead_kb around a fault, so later reads would find
    their pages read), then warm, the same devices with their pages in the page cache but not yet mapped by
    this process (read by a pass before, then unmapped), as a runner finds pages another process read."""
    from emulator.data.store import open_federation

    started = time.perf_counter()
    federation = open_federation(directory)
    result = {"open_s": time.perf_counter() - started}
    x, y = federation.train.x, federation.train.y
    chosen = np.random.default_rng(0).choice(federation.num_devices, min(samples, federation.num_devices), False)
    descriptors = [os.open(path, os.O_RDONLY) for path in directory.glob("*.npy")]
    try:
        result["cold"] = timed(federation, chosen, lambda: evict(descriptors, x, y))
    finally:
        for fd in descriptors:
            os.close(fd)
    timed(federation, chosen)
    evict([], x, y)
    result["warm"] = timed(federation, chosen)
    return result


def timed(federation, devices: np.ndarray, before=lambda: None) -> tuple[float, float]:
    """p50 and p99 ms of taking each device's rows as tensors, `before` (untimed) before each."""
    times = []
    for device in devices:
        before()
        started = time.perf_counter()
        federation.train.tensors(federation.device_samples(int(device)))
        times.append(time.perf_counter() - started)
    return 1e3 * np.percentile(times, 50), 1e3 * np.percentile(times, 99)


def read_ahead_kb(path: Path) -> str:
    """What one cold page fault reads from the disk under `path` (/sys/dev/block/M:m/queue), or '?'."""
    device = os.stat(path).st_dev
    block = Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}")
    found = [q / "read_ahead_kb" for q in (block / "queue", block / ".." / "queue") if (q / "read_ahead_kb").is_file()]
    return found[0].read_text().strip() if found else "?"


def megabytes(kb: int) -> str:
    return f"{kb / 1024:,.0f}"


def gigabytes(kb: int) -> str:
    return f"{kb / 1024 ** 2:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--baseline-memory", type=int, default=100000, help="N also run with data.store: memory")
    parser.add_argument("--baseline-set", action="append", default=["runtime.server=actor"], metavar="KEY=VALUE",
                        help="overrides for the memory row only (default: the server in an actor of its own, as "
                             "before runtime.server: driver): the path the disk rows are compared with")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--clients-per-round", type=int, default=None, help="default: the scenario's 1000")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a scenario override for every run, e.g. data.partition={scheme: natural}")
    parser.add_argument("--cache", type=Path, default=None, help="a data cache to reuse (default: a fresh one); "
                        "data found there is not written again: its write s reads `cached`")
    parser.add_argument("--keep-cache", action="store_true", help="keep the fresh data cache (its path is printed)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="scale-"))
    cache = args.cache or (Path(tempfile.mkdtemp(prefix="scale-cache-")) if args.keep_cache else work / "cache")
    try:
        measure(args, work, cache)
    finally:  # the runs and a fresh cache (10 GB at 10^6 devices) go; a --cache given or --keep-cache is kept
        shutil.rmtree(work, ignore_errors=True)
        if args.keep_cache and not args.cache:
            print(f"\ndata cache kept at {cache}")


def plan_of(devices: list[int], baseline: int | None) -> list[tuple[int, str]]:
    """(N, store) in order: disk at every N, memory at the baseline N just after disk at the same N."""
    plan = [(n, "disk") for n in devices]
    if baseline:
        at = plan.index((baseline, "disk")) + 1 if (baseline, "disk") in plan else len(plan)
        plan.insert(at, (baseline, "memory"))
    return plan


HEADER = (f"{'N':>9} {'store':>6} | {'total':>5} {'anon':>5} {'max':>5} {'file':>5} {'shmem':>5} | {'driver':>6} "
          f"{'runners':>7} {'server':>6} {'ray':>5} | {'s/round':>7} {'write s':>7} {'w. anon':>7} "
          f"{'open s':>6} | {'warm p50/p99 ms':>15} {'cold p50/p99 ms':>15}")


def line_of(devices: int, mode: str, row: dict) -> str:
    """One row of the table: GB for the totals, MB for each kind's anonymous memory."""
    start = f"{devices:>9} {mode:>6} | "
    if row["code"] != 0:
        return start + f"failed (exit {row['code']}): {row['error']}"
    peak = row["peak"]
    write = row.get("write_s")
    line = (start + " ".join(f"{gigabytes(row[p]):>5}" for p in ("peak_total", "anon", "anon_max", "file", "shmem"))
            + " | "
            + " ".join(f"{megabytes(peak[k]['anon']):>{w}}" for k, w in zip(KINDS, (6, 7, 6, 5)))
            + f" | {row['round_s']:>7.2f} ")
    if mode == "memory":
        return line + f"{'':>7} {'':>7} {'':>6} |"
    read = row["read"]
    return (line + (f"{write:>7.1f}" if write is not None else f"{'cached':>7}")
            + f" {megabytes(row['build_anon']):>7} {read['open_s']:>6.2f} | "
            + " ".join(f"{read[s][0]:>6.2f}/{read[s][1]:<8.2f}" for s in ("warm", "cold")))


def measure(args, work: Path, cache: Path) -> None:
    """Every configuration in turn, each row printed as soon as it is measured, then the slope and the ratio."""
    print(f"{SCENARIO.name}, {args.rounds} rounds, {os.cpu_count()} CPUs. PSS of all the run's processes at the "
          "sampled peak of their total (GB), and by process kind the anonymous memory at that same sample (MB); max: "
          "the largest anonymous total of any sample (GB). On "
          "disk the data is written first, by a process of its own (write s; w. anon: its peak anonymous MB), then "
          "the run reads it from the cache; open s and a device's rows are timed in this process afterwards (cold: "
          f"from a disk reading {read_ahead_kb(cache if cache.exists() else cache.parent)} kB around a fault)",
          flush=True)
    print(HEADER)
    print("-" * len(HEADER))
    rows = []
    for devices, mode in plan_of(args.devices, args.baseline_memory):
        row = {"N": devices, "store": mode, "code": 0}
        if mode == "disk":
            row.update(build_once(devices, cache, args.set))
        if row["code"] == 0:
            extra = args.set + (args.baseline_set if mode == "memory" else [])
            row.update(run_once(devices, mode, args.rounds, args.clients_per_round, cache,
                                work / f"{mode}-{devices}", extra))
        if row["code"] == 0:
            row.update({p: sum(row["peak"][k][p] for k in KINDS) for p in ("anon", "file", "shmem")})
            if mode == "disk":
                row["read"] = reads(row["directory"])
        rows.append(row)
        print(line_of(devices, mode, row), flush=True)
    summarize([r for r in rows if r["code"] == 0])


def summarize(rows: list[dict]) -> None:
    """Anonymous bytes a device on disk (smallest to largest N), and memory against disk at the baseline N."""
    on_disk = [r for r in rows if r["store"] == "disk"]
    if len({r["N"] for r in on_disk}) >= 2:
        small, large = min(on_disk, key=lambda r: r["N"]), max(on_disk, key=lambda r: r["N"])
        slope = (large["anon"] - small["anon"]) * 1024 / (large["N"] - small["N"])
        print(f"\nanonymous memory on disk grows by {slope:,.0f} bytes a device between N = {small['N']:,} and "
              f"{large['N']:,} (the per-device arrays: offsets, label counts, the system model's state)")
    for m in (r for r in rows if r["store"] == "memory"):
        d = next((r for r in on_disk if r["N"] == m["N"]), None)
        if d is None:
            continue
        print(f"at N = {m['N']:,}: from memory {gigabytes(m['peak_total'])} GB PSS ({gigabytes(m['anon'])} "
              f"anonymous, {gigabytes(m['shmem'])} shared), from disk {gigabytes(d['peak_total'])} GB "
              f"({gigabytes(d['anon'])} anonymous, {gigabytes(d['file'])} file-backed): memory / disk "
              f"{m['peak_total'] / d['peak_total']:.2f}x in all, {m['anon'] / d['anon']:.2f}x anonymous; a round "
              f"{m['round_s']:.2f} s from memory against {d['round_s']:.2f} s ({m['round_s'] / d['round_s']:.2f}x)")


if __name__ == "__main__":
    main()

"""Memory and speed of a large population with its data: the population_100k world at N devices.

Each configuration runs as a whole process (`emulator run`, as a user runs it) while this script samples,
every 0.3 s, the proportional set size of the run's every process (the driver and its descendants: Ray's
daemons, the runner and server actors) from /proc/PID/smaps_rollup, split into anonymous memory (a
process's own), file-backed pages (the memory-mapped data: shared, evictable page cache) and shared memory
(Ray's object store). It prints the peak, by kind of process, the seconds a round, how long writing and
opening the data took, and how long taking one device's rows takes (p50 / p99, with the pages in the page
cache and after evicting them), for data.store: disk at each N and for data in memory (today's object-store
path) at the baseline N, in the same command.

    python benchmarks/scale.py                                   # 10^4 and 10^5 devices, memory at 10^5
    python benchmarks/scale.py --devices 10000 100000 1000000    # 10^6: ~2 minutes to write the data once
"""
from __future__ import annotations

import argparse
import csv
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

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "cluster" / "population_100k.yaml"
KINDS = ("driver", "runners", "server", "ray")


def descendants(pid: int) -> list[int]:
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
    if pid == root:
        return "driver"
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "ray"
    if "RunnerActor" in command or "Runner" in command and command.startswith("ray::"):
        return "runners"
    if "Server" in command and command.startswith("ray::"):
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
import sys, time
from emulator.parts import load_scenario
from emulator.data import federation_for
scenario = load_scenario(sys.argv[1], [f"population.devices={sys.argv[2]}", "data.store=disk", *sys.argv[3:]])
started = time.perf_counter()
federation_for(scenario.data, scenario.population.devices, scenario.seed, scenario.population.types)
print(time.perf_counter() - started)
"""


def build_once(devices: int, cache: Path, extra: list[str]) -> tuple[float, int]:
    """Write the data to the cache in a process of its own: (seconds, its peak anonymous PSS in kB), so
    the run measured after it is a run from the cache, as every later run and sweep member is."""
    proc = subprocess.Popen([sys.executable, "-c", BUILD, str(SCENARIO), str(devices), *extra],
                            stdout=subprocess.PIPE, text=True, env={**os.environ, "EMULATOR_DATA_CACHE": str(cache)})
    sampler = Sampler(proc.pid)
    sampler.start()
    stdout, _ = proc.communicate()
    sampler.stop.set()
    sampler.join()
    if proc.returncode != 0:
        raise SystemExit(f"writing the data of {devices} devices failed (exit {proc.returncode})")
    return float(stdout.strip().splitlines()[-1]), sampler.peak_anon


def run_once(devices: int, mode: str, rounds: int, clients: int | None, cache: Path, out: Path,
             extra: list[str]) -> dict:
    args = [sys.executable, "-m", "emulator", "run", str(SCENARIO), "--quiet", "--out", str(out),
            "--set", f"rounds={rounds}", "--set", f"population.devices={devices}", "--set", f"data.store={mode}",
            "--set", "evaluation.every=1000", "--set", "output.checkpoint_every=0"]
    for override in extra:
        args += ["--set", override]
    if clients:
        args += ["--set", f"algorithm.clients_per_round={clients}"]
    started = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "EMULATOR_DATA_CACHE": str(cache)})
    sampler = Sampler(proc.pid)
    sampler.start()
    stdout, stderr = proc.communicate()
    sampler.stop.set()
    sampler.join()
    row = {"N": devices, "store": mode, "code": proc.returncode, "whole_s": time.perf_counter() - started,
           "peak": sampler.peak, "peak_total": sampler.peak_total}
    if proc.returncode != 0:
        row["error"] = (stderr.strip().splitlines() or ["(no output)"])[-1][:100]
        return row
    with open(out / "metrics.csv", newline="") as handle:
        walls = [float(r["wall_time_s"]) for r in csv.DictReader(handle)]
    row["round_s"] = statistics.median(np.diff(walls)) if len(walls) > 2 else walls[-1] / len(walls)
    return row


def evict(directory: Path) -> None:
    """Drop the store's pages from the page cache (no root needed): the next read comes from the disk."""
    for path in directory.glob("*.npy"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def reads(cache: Path, devices: int, samples: int = 2000) -> dict:
    """Opening the stored data (checked) and taking one device's rows as tensors, warm and cold, in ms."""
    from emulator.data.store import open_federation

    directory = next(d for d in cache.iterdir() if d.name.startswith(f"synthetic-{devices}-"))
    started = time.perf_counter()
    federation = open_federation(directory)
    opened = time.perf_counter() - started
    chosen = np.random.default_rng(0).choice(federation.num_devices, min(samples, federation.num_devices), False)
    result = {"open_s": opened}
    for state in ("cold", "warm"):  # cold first: evicted, then the same devices again from the cache
        if state == "cold":
            evict(directory)
        times = []
        for device in chosen:
            started = time.perf_counter()
            federation.train.tensors(federation.device_samples(int(device)))
            times.append(time.perf_counter() - started)
        result[state] = (1e3 * np.percentile(times, 50), 1e3 * np.percentile(times, 99))
    return result


def megabytes(kb: int) -> str:
    return f"{kb / 1024:,.0f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, nargs="+", default=[10000, 100000])
    parser.add_argument("--baseline-memory", type=int, default=100000, help="N also run with data.store: memory")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--clients-per-round", type=int, default=None, help="default: the scenario's 1000")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a scenario override for every run, e.g. data.partition={scheme: natural}")
    parser.add_argument("--cache", type=Path, default=None, help="a data cache to reuse (default: a fresh one)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="scale-"))
    try:
        measure(args, work, args.cache or work / "cache")
    finally:  # the runs and a fresh cache (10 GB at 10^6 devices) go; a --cache given is kept
        shutil.rmtree(work, ignore_errors=True)


def measure(args, work: Path, cache: Path) -> None:
    plan = [(n, "disk") for n in args.devices]
    if args.baseline_memory:
        plan.insert(plan.index((args.baseline_memory, "disk")) + 1 if (args.baseline_memory, "disk") in plan
                    else len(plan), (args.baseline_memory, "memory"))
    print(f"{SCENARIO.name}, {args.rounds} rounds, {os.cpu_count()} CPUs; PSS peak of all the run's processes "
          "(MB); anonymous memory by process at that peak. On disk the data is written first, by a process of its "
          "own (write s; w. anon: its peak anonymous MB), then the run reads it from the cache", flush=True)
    header = (f"{'N':>9} {'store':>6} | {'total':>7} {'anon':>6} {'file':>6} {'shmem':>6} | {'driver':>6} "
              f"{'runners':>7} {'server':>6} {'ray':>5} | {'s/round':>7} {'write s':>7} {'w. anon':>7} "
              f"{'open s':>6} | {'warm p50/p99 ms':>15} {'cold p50/p99 ms':>15}")
    print(header)
    print("-" * len(header))
    rows = []
    for devices, mode in plan:
        write_s, build_anon = build_once(devices, cache, args.set) if mode == "disk" else (None, None)
        row = run_once(devices, mode, args.rounds, args.clients_per_round, cache, work / f"{mode}-{devices}",
                       args.set)
        row.update(write_s=write_s, build_anon=build_anon)
        rows.append(row)
        if row["code"] != 0:
            print(f"{devices:>9} {mode:>6} | failed (exit {row['code']}): {row['error']}", flush=True)
            continue
        peak = row["peak"]
        parts = {part: sum(peak[k][part] for k in KINDS) for part in ("anon", "file", "shmem")}
        read = reads(cache, devices) if mode == "disk" else None
        print(f"{devices:>9} {mode:>6} | {megabytes(row['peak_total']):>7} {megabytes(parts['anon']):>6} "
              f"{megabytes(parts['file']):>6} {megabytes(parts['shmem']):>6} | "
              + " ".join(f"{megabytes(peak[k]['anon']):>{w}}" for k, w in zip(KINDS, (6, 7, 6, 5)))
              + f" | {row['round_s']:>7.2f} "
              + (f"{write_s:>7.1f} {megabytes(build_anon):>7} " if write_s is not None else f"{'':>15} ")
              + (f"{read['open_s']:>6.2f} | {read['warm'][0]:>6.2f}/{read['warm'][1]:<8.2f} "
                 f"{read['cold'][0]:>6.2f}/{read['cold'][1]:<8.2f}" if read else f"{'':>6} |"), flush=True)
        row["anon"] = parts["anon"]
    on_disk = [r for r in rows if r["store"] == "disk" and r["code"] == 0]
    if len(on_disk) >= 2:
        small, large = on_disk[0], on_disk[-1]
        slope = (large["anon"] - small["anon"]) * 1024 / (large["N"] - small["N"])
        print(f"\nanonymous memory on disk grows by {slope:,.0f} bytes a device between N = {small['N']:,} and "
              f"{large['N']:,} (the per-device arrays: offsets, label counts, the system model's state)")
    memory = [r for r in rows if r["store"] == "memory" and r["code"] == 0]
    same = [r for r in on_disk if memory and r["N"] == memory[0]["N"]]
    if memory and same:
        m, d = memory[0], same[0]
        print(f"at N = {m['N']:,}: from memory {megabytes(m['peak_total'])} MB PSS ({megabytes(m['anon'])} anonymous), "
              f"from disk {megabytes(d['peak_total'])} MB ({megabytes(d['anon'])} anonymous): "
              f"{d['peak_total'] / m['peak_total']:.2f}x and {d['anon'] / m['anon']:.2f}x; a round "
              f"{d['round_s']:.2f} s against {m['round_s']:.2f} s ({d['round_s'] / m['round_s']:.2f}x)")


if __name__ == "__main__":
    main()

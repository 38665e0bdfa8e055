"""Memory for per-device state at 10^5 devices: the on-disk store against a model-per-device dict.

Personalized algorithms (FedPer, Ditto: emulator/algorithms/personalized.py) keep state per device. Two ways
to hold it, each in its own child process (so one's memory does not count in the other's), measured by
the child's peak resident memory above its start:

- dict: a numpy vector per device in a Python dict (how SCAFFOLD's control variates are held);
- store: emulator/device_state.py, fixed-width float32 slots in an append-only file, an int64
  index per device in memory.

Each writes every device's vector once and then reads back a sample of them; the store also takes a
checkpoint (its index, after an fsync). Widths: FedPer's personal head of the 784-200-200-10 MLP (2,010
values) by default; `--width 199210` is the whole MLP (Ditto), 80 GB at 10^5 devices, so that row is for a
disk that holds it. Target (issue 29): at 10^5 devices the store's memory does not grow with the devices'
state (bytes in memory per device ~ the index's 8).

    .venv/bin/python benchmarks/device_state.py [--devices 100000] [--width 2010]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def child(kind: str, devices: int, width: int) -> dict:
    from emulator.device_state import DeviceStateStore

    base = _peak_mib()
    vector = np.arange(width, dtype=np.float32)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as directory:
        if kind == "dict":
            held = {}
            for device in range(devices):
                held[device] = vector + device
            read = [held[d] for d in range(0, devices, 97)]
        else:
            store = DeviceStateStore(directory, devices, width)
            for device in range(devices):
                store.put(device, vector + device)
            store.state()
            read = [store.get(d) for d in range(0, devices, 97)]
            disk = store.file_bytes()
        assert all(r[0] == d for r, d in zip(read, range(0, devices, 97)))
        took = time.perf_counter() - started
        peak = _peak_mib() - base
    return {"kind": kind, "seconds": took, "peak_mib": peak, "disk_mib": (disk / 2**20) if kind == "store" else 0.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--devices", type=int, default=100_000)
    parser.add_argument("--width", type=int, default=2010)
    parser.add_argument("--child", choices=["dict", "store"])
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.devices, args.width)))
        return
    rows = []
    for kind in ("dict", "store"):
        done = subprocess.run([sys.executable, __file__, "--child", kind, "--devices", str(args.devices),
                               "--width", str(args.width)], capture_output=True, text=True, check=True)
        rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
    state_mib = args.devices * args.width * 4 / 2**20
    print(f"{args.devices} devices x {args.width} float32 values ({state_mib:,.0f} MiB of state), each written "
          "once, every 97th read back\n")
    print("| held as | peak memory above start (MiB) | memory per device (bytes) | on disk (MiB) | seconds |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        per_device = row["peak_mib"] * 2**20 / args.devices
        print(f"| {row['kind']} | {row['peak_mib']:,.1f} | {per_device:,.0f} | {row['disk_mib']:,.0f} | "
              f"{row['seconds']:.1f} |")
    ratio = rows[1]["peak_mib"] / rows[0]["peak_mib"] if rows[0]["peak_mib"] else float("nan")
    print(f"\nstore / dict memory: {ratio:.3f}x")


if __name__ == "__main__":
    main()

"""Reference completion times of flows sharing links, from SimGrid's fluid network model, for the shared-network
model's tests (tests/test_fair_share.py compares emulator/system/fair_share.py's `finish_times` with them).

Runs under the system Python with Debian's SimGrid bindings (`apt-get install python3-simgrid`, 3.32), not the
project's venv:

    /usr/bin/python3 benchmarks/simgrid_flows.py          # writes benchmarks/reference/simgrid_flows.json

SimGrid's settings make its model the plain max-min fluid one the emulator implements: the CM02 network
model (max-min sharing, no slow-start or TCP corrections), bandwidth and latency factors 1, no TCP window
(TCP-gamma 0), no cross-traffic (SimGrid adds 5% of reverse acknowledgement traffic by default), links with
no latency. Each flow goes from its device to the server through its device's own
link (its cap), then the shared links of its route. The test compares times to 1e-9 relative.
"""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

OUT = Path(__file__).resolve().parent / "reference" / "simgrid_flows.json"
SETTINGS = ["--cfg=network/model:CM02", "--cfg=network/bandwidth-factor:1", "--cfg=network/latency-factor:1",
            "--cfg=network/TCP-gamma:0", "--cfg=network/crosstraffic:0", "--log=root.thres:critical"]

# name -> shared links (capacity, bytes a second), flows (start s, bytes, own cap bytes/s, shared links crossed)
TOPOLOGIES = {
    "four_equal_flows_one_link": {
        "links": [100.0],
        "flows": [[0.0, 1000.0, 1e9, [0]]] * 4,
    },
    "staggered_starts_one_link": {
        "links": [100.0],
        "flows": [[0.0, 1000.0, 1e9, [0]], [2.0, 500.0, 1e9, [0]], [3.5, 800.0, 1e9, [0]], [20.0, 100.0, 1e9, [0]]],
    },
    "caps_below_the_fair_share": {
        "links": [90.0],
        "flows": [[0.0, 300.0, 10.0, [0]], [0.0, 900.0, 1e9, [0]], [1.0, 600.0, 25.0, [0]], [2.0, 400.0, 1e9, [0]]],
    },
    "two_cells_behind_a_backhaul": {
        "links": [50.0, 80.0, 100.0],  # cell A, cell B, the backhaul both share
        "flows": [[0.0, 400.0, 1e9, [0, 2]], [0.0, 400.0, 1e9, [0, 2]], [0.5, 900.0, 1e9, [1, 2]],
                  [1.0, 200.0, 30.0, [1, 2]], [4.0, 300.0, 1e9, [1, 2]], [6.0, 500.0, 1e9, [0, 2]]],
    },
    "cells_regions_and_the_server": {
        "links": [40.0, 60.0, 30.0, 70.0, 90.0, 120.0],  # 4 cells, 1 region (cells 0-1), the server's link
        "flows": [[0.0, 500.0, 1e9, [0, 4, 5]], [0.2, 300.0, 20.0, [0, 4, 5]], [0.4, 700.0, 1e9, [1, 4, 5]],
                  [0.6, 250.0, 1e9, [1, 4, 5]], [0.8, 600.0, 1e9, [2, 5]], [1.0, 450.0, 15.0, [2, 5]],
                  [1.2, 800.0, 1e9, [3, 5]], [3.0, 350.0, 1e9, [3, 5]], [5.0, 200.0, 1e9, [0, 4, 5]],
                  [7.5, 650.0, 1e9, [1, 4, 5]]],
    },
}


def simulate(topology: dict) -> list[float]:
    """Each flow's completion time, SimGrid's."""
    from simgrid import Actor, Comm, Engine, LinkInRoute, NetZone, this_actor

    engine = Engine(["simgrid_flows"] + SETTINGS)
    zone = NetZone.create_full_zone("world")
    server = zone.create_host("server", 1e9)
    shared = [zone.create_link(f"link{i}", capacity).set_latency(0).seal()
              for i, capacity in enumerate(topology["links"])]
    devices = []
    for i, (_, _, cap, route) in enumerate(topology["flows"]):
        device = zone.create_host(f"device{i}", 1e9)
        own = zone.create_link(f"own{i}", cap).set_latency(0).seal()
        zone.add_route(device.netpoint, server.netpoint, None, None,
                       [LinkInRoute(own)] + [LinkInRoute(shared[k]) for k in route], True)
        devices.append(device)
    zone.seal()
    finished = [None] * len(devices)

    def flow(i: int, start: float, size: float) -> None:
        this_actor.sleep_until(start)
        Comm.sendto(devices[i], server, int(size))
        finished[i] = Engine.clock

    for i, (start, size, _, _) in enumerate(topology["flows"]):
        Actor.create(f"flow{i}", server, flow, i, start, size)
    engine.run()
    return finished


def main() -> None:
    if sys.argv[1:2] == ["--one"]:  # one engine a process: SimGrid keeps its state (the clock) across engines
        print(json.dumps(simulate(TOPOLOGIES[sys.argv[2]])))
        return
    from simgrid import simgrid_version

    results = {}
    for name in TOPOLOGIES:
        done = subprocess.run([sys.executable, __file__, "--one", name], capture_output=True, text=True, check=True)
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps({"simgrid": str(simgrid_version), "settings": SETTINGS, "topologies": TOPOLOGIES,
                               "finish_s": results}, indent=1) + "\n")
    print(f"wrote {OUT}")
    for name, times in results.items():
        print(name, [round(t, 6) for t in times])


if __name__ == "__main__":
    sys.exit(main())

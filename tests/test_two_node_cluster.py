"""A real two-node Ray cluster on this machine, started once for every claim that needs a second node.

- A plugin package the nodes never installed runs on it: every actor imports the package the driver shipped
  (runtime_env), never a copy on its own path, even with the package in the driver's working directory (which
  Ray hands on to workers), and the plugin's observer column is computed on the cluster.
- A run's two runners spread over both nodes (one on each) and give the metrics of the same run in one process.
- A node that cannot see the driver's disk gets a copy of the run's stored data, once, checked, in its own data
  cache (emulator/runtime/data_nodes.py), and trains from it with the metrics of a run from memory. The node is
  started in a mount namespace of its own where the driver's data cache is an empty file system: what a machine
  without the driver's disk sees. Creating the namespace needs `unshare -m` (root or user namespaces); where the
  machine refuses it, the second node is an ordinary one and only this claim is skipped, saying so.
- With data.store: disk the runners read the data from files, so Ray's memory summary finds the object store
  holding an eighth or less of what the same run from memory puts there (the data: over 200 MiB at 10,000
  devices, against 5-13 MiB from disk).

One cluster for all of them: starting one costs tens of seconds on two cores.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import ROOT, comparable
from emulator.driver import run_scenario
from emulator.parts import load_scenario
from test_plugins import fairness_is_the_ledgers

POPULATION = ROOT / "scenarios" / "cluster" / "population_100k.yaml"
# population_100k's world at 10,000 devices: data enough for the object store's share to show, 2 rounds
SMALLER = ["rounds=2", "population.devices=10000", "algorithm.clients_per_round=40", "runtime.runners=2"]


def can_hide_a_directory() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "--propagation", "private", "mount", "-t", "tmpfs", "tmpfs", "/mnt"],
                              capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_a_two_node_cluster_ships_plugins_spreads_runners_and_copies_data_to_a_node_without_the_disk(
        lab, tmp_path):
    hidden_disk = can_hide_a_directory()
    imports = tmp_path / "imports.log"  # each import of the package: the process and the file it came from
    with open(lab / "fedlab" / "__init__.py", "a") as init:
        init.write(f"import os as _os\nopen({str(imports)!r}, 'a').write(f'{{_os.getpid()}} {{__file__}}\\n')\n")
    cache, node_cache, plugin_out = tmp_path / "cache", tmp_path / "node-cache", tmp_path / "plugin-run"
    cache.mkdir()
    script = textwrap.dedent(f"""
        import json, os, re, signal, subprocess, sys, time
        import ray
        from ray.cluster_utils import Cluster
        from ray._private.internal_api import memory_summary
        import emulator
        from emulator.cli import main
        from emulator.runtime.cluster import configure_token_auth
        configure_token_auth()  # as docs/cluster.md starts a cluster: RAY_AUTH_MODE=token, the user's token
        from emulator.runtime.cluster import LOCAL_SYSTEM_CONFIG  # no idle workers started ahead of need, on any node
        cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 2, "include_dashboard": False,
                                                               "_system_config": LOCAL_SYSTEM_CONFIG}})
        node = None
        if {hidden_disk!r}:  # the second node cannot see the driver's data cache
            ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
            start = f"{{ray_cli}} start --block --num-cpus=2 --disable-usage-stats --address={{cluster.address}}"
            node = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                                     "mount -t tmpfs tmpfs {cache} && exec " + start],
                                    env=dict(os.environ, EMULATOR_DATA_CACHE={str(node_cache)!r}),
                                    start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        else:
            cluster.add_node(num_cpus=2)
        try:
            ray.init(address=cluster.address)
            deadline = time.time() + 60
            while sum(n["Alive"] for n in ray.nodes()) < 2 and time.time() < deadline:
                time.sleep(0.5)
            ray.shutdown()  # the command line starts its own driver, shipping the plugin package
            code = main(["run", {str(lab / "feddyn.yaml")!r}, "--out", {str(plugin_out)!r}, "--address",
                         cluster.address, "--quiet", "--set", "runtime.runners=2"])
            plasma = {{}}
            for mode, out in (("disk", "first"), ("disk", "again"), ("memory", "memory")):
                lines, seen = [], []
                def measure(row):
                    text = memory_summary(ray.get_runtime_context().gcs_address, stats_only=True)
                    seen.append(int(re.search(r"Plasma memory usage (\\d+) MiB", text)[1]))
                emulator.run({str(POPULATION)!r}, address=cluster.address, out={str(tmp_path)!r} + "/" + out,
                             progress=measure, notify=lines.append,
                             overrides={SMALLER!r} + ["data.store=" + json.dumps(dict(mode=mode, cache={str(cache)!r}))])
                plasma[out] = seen
                print(out, sum(line.startswith("data copied to node") for line in lines))
            print("plasma", json.dumps(plasma))
        finally:
            emulator.shutdown()  # the API's session on the cluster, before its nodes go
            ray.shutdown()
            if node is not None:
                os.killpg(node.pid, signal.SIGTERM)
                node.wait(timeout=60)
            cluster.shutdown()
        sys.exit(code)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=400, cwd=lab)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.split(" ")[0] in
                   ("first", "again", "memory", "plasma"))

    # the plugin: shipped to every actor, its observer run on the cluster, its runners on both nodes
    shipped = "/runtime_resources/py_modules_files/"
    lines = [line.split(" ", 1) for line in imports.read_text().splitlines()]
    local = {pid for pid, path in lines if shipped not in path}
    assert len(local) == 1 and len(lines) > 2, lines  # the driver alone imported the user's own copy
    summary = json.loads((plugin_out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["runner_nodes"] == 2 and summary["runners"] == 2
    fairness_is_the_ledgers(plugin_out)

    # runners on both nodes, from files or from memory, give the metrics of the run in one process
    for out in ("first", "again", "memory"):
        summary = json.loads((tmp_path / out / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["runner_nodes"] == 2, summary
    run_scenario(load_scenario(POPULATION, SMALLER + ["runtime.backend=inline"]), tmp_path / "one")
    assert comparable(tmp_path / "first") == comparable(tmp_path / "again") == comparable(tmp_path / "memory") \
        == comparable(tmp_path / "one")

    # from disk the object store holds a small share of what the data from memory puts there (the first disk
    # run is not measured: its rounds may follow the copy's chunks through the store)
    plasma = json.loads(printed["plasma"])
    assert max(plasma["again"]) * 8 < min(plasma["memory"]), plasma

    if not hidden_disk:
        pytest.skip("needs `unshare -m` to give a Ray node a file system without the driver's data cache; the "
                    "other claims held")
    # the node without the disk: one checked copy in its own cache, sent once per node and data
    assert {key: printed[key] for key in ("first", "again", "memory")} == {"first": "1", "again": "0", "memory": "0"}
    (written,) = cache.iterdir()
    (copy,) = node_cache.iterdir()  # the node's own cache, as its $EMULATOR_DATA_CACHE says
    assert copy.name == written.name
    assert json.loads((copy / "meta.json").read_text()) == json.loads((written / "meta.json").read_text())

"""A node of a Ray cluster that cannot see the driver's disk gets a copy of the run's stored data, once, checked,
in its own data cache (emulator/runtime/data_nodes.py), and trains from it with the metrics of a run from memory.

The node is a real second Ray node on this machine, started in a mount namespace of its own where the driver's
data cache is an empty file system: what a machine without the driver's disk sees. Creating the namespace needs
`unshare -m` (root or user namespaces); where the machine refuses it the test is skipped, saying so.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import yaml

from conftest import STATEFUL, comparable, small_scenario


def can_hide_a_directory() -> bool:
    try:
        return subprocess.run(["unshare", "-m", "--propagation", "private", "mount", "-t", "tmpfs", "tmpfs", "/mnt"],
                              capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not can_hide_a_directory(), reason="needs `unshare -m` to give a Ray node a file system "
                                                       "without the driver's data cache")
def test_a_node_without_the_driver_s_disk_gets_one_checked_copy_and_the_metrics_of_memory(tmp_path):
    cache, node_cache = tmp_path / "cache", tmp_path / "node-cache"
    cache.mkdir()
    scenario = tmp_path / "world.yaml"
    world = {**STATEFUL, "rounds": 2, "runtime.runners": 4, "runtime.backend": "ray"}  # 4 runners: both nodes
    scenario.write_text(yaml.safe_dump(small_scenario(**world)))
    script = textwrap.dedent(f"""
        import os, signal, subprocess, sys, time
        import ray
        from ray.cluster_utils import Cluster
        import emulator
        from emulator.runtime.cluster import configure_token_auth
        configure_token_auth()
        cluster = Cluster(initialize_head=True, head_node_args={{"num_cpus": 2, "include_dashboard": False}})
        ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
        start = f"{{ray_cli}} start --block --num-cpus=2 --disable-usage-stats --address={{cluster.address}}"
        node = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c",
                                 "mount -t tmpfs tmpfs {cache} && exec " + start],
                                env=dict(os.environ, EMULATOR_DATA_CACHE={str(node_cache)!r}), start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            ray.init(address=cluster.address)
            deadline = time.time() + 60
            while sum(n["Alive"] for n in ray.nodes()) < 2 and time.time() < deadline:
                time.sleep(0.5)
            for mode, out in (("disk", "first"), ("disk", "again"), ("memory", "memory")):
                lines = []
                emulator.run({str(scenario)!r}, out={str(tmp_path)!r} + "/" + out, progress=False, notify=lines.append,
                             overrides={{"data.store": {{"mode": mode, "cache": {str(cache)!r}}}}})
                print(out, sum(line.startswith("data copied to node") for line in lines))
        finally:
            emulator.shutdown()
            ray.shutdown()
            os.killpg(node.pid, signal.SIGTERM)
            node.wait(timeout=60)
            cluster.shutdown()
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    copies = dict(line.split() for line in proc.stdout.splitlines() if line.split()[0] in ("first", "again", "memory"))
    assert copies == {"first": "1", "again": "0", "memory": "0"}, proc.stdout  # once per node and data
    (written,) = cache.iterdir()
    (copy,) = node_cache.iterdir()  # the node's own cache, as its $EMULATOR_DATA_CACHE says
    assert copy.name == written.name
    assert json.loads((copy / "meta.json").read_text()) == json.loads((written / "meta.json").read_text())
    for out in ("first", "again", "memory"):
        summary = json.loads((tmp_path / out / "summary.json").read_text())
        assert summary["status"] == "completed" and summary["runner_nodes"] == 2, summary
    assert comparable(tmp_path / "first") == comparable(tmp_path / "memory") == comparable(tmp_path / "again")

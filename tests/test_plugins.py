"""Plugins: a user's algorithm, model and dataset, written outside the repository, run like ours.

The example package examples/fedlab (FedDyn, an MLP for tables, a CSV split by user) is copied to a
temporary directory, so nothing here can lean on files of the emulator's own tree.
"""
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import ray
import yaml

from conftest import ROOT, comparable, digest
from emulator.cli import main
from emulator.registry import ALGORITHMS, MODELS, Registry, RegistryError
from emulator.runtime import idle_servers
from emulator.scenario import ScenarioError, Strict
from emulator.parts import load_scenario, validate_scenario

EXAMPLE = ROOT / "examples" / "fedlab"


def write(path: Path, text: str) -> Path:
    path.write_text(textwrap.dedent(text))
    return path


# ----------------------------------------------------------------------------------- registries
def test_an_unknown_name_lists_what_is_registered():
    with pytest.raises(ScenarioError) as err:
        validate_scenario({"name": "x", "rounds": 1, "algorithm": {"name": "fednova"}})
    message = str(err.value)
    assert "algorithm.name: 'fednova' is not a registered algorithm" in message
    assert all(name in message for name in ("fedavg", "fast", "safari", "fsl", "scaffold"))
    assert "plugins:" in message


def test_builtins_register_through_the_public_registries():
    assert {"fedavg", "fedprox", "fedavgm", "scaffold", "safari", "fsl", "ds", "fast"} <= set(ALGORITHMS.names())
    assert ALGORITHMS.get("safari").fact("needs_server_data") is True
    assert MODELS.get("cnn_fmnist").fact("accepts")((3, 32, 32)) is not None


def test_a_taken_name_config_without_forbid_or_a_wrong_base_is_refused():
    registry = Registry("widget", "name")
    registry.register("a", lambda: 1)
    with pytest.raises(RegistryError, match="already registered by"):
        registry.register("a", lambda: 2)

    from pydantic import BaseModel

    class Loose(BaseModel):
        name: str = "b"

    with pytest.raises(RegistryError, match="must forbid unknown keys"):
        registry.register("b", lambda: 1, config=Loose)
    registry.base = Strict

    class NoTag(Strict):
        size: int = 1

    with pytest.raises(RegistryError, match="needs a 'name' field"):
        registry.register("c", lambda: 1, config=NoTag)


# ----------------------------------------------------------------------------- loading plugins
def test_a_plugin_scenario_validates_with_its_own_config_and_errors(lab):
    scenario = load_scenario(lab / "feddyn.yaml")
    assert scenario.algorithm.name == "feddyn" and scenario.algorithm.alpha == 0.01
    assert scenario.model.options() == {"hidden": [32], "dropout": 0.1}
    with pytest.raises(ScenarioError) as err:
        load_scenario(lab / "feddyn.yaml", ["algorithm.alpha=-1", "model.hidden=[]", "algorithm.alfa=1"])
    message = str(err.value)
    assert "algorithm.alpha: Input should be greater than 0" in message
    assert "model.hidden: List should have at least 1 item" in message
    assert "algorithm.alfa: unknown key; allowed here:" in message and "alpha" in message


def test_plugin_import_problems_name_the_module_and_exit_2(tmp_path, capsys):
    write(tmp_path / "broken_plugin.py", """\
        import numpy
        raise RuntimeError("the plugin's own bug")
    """)
    write(tmp_path / "greedy_plugin.py", """\
        from emulator.extend import FedAvg, register_algorithm
        register_algorithm("fedavg", FedAvg)
    """)
    scenario = write(tmp_path / "s.yaml", "name: x\nrounds: 1\n")
    cases = {"no_such_plugin": "plugins: no module 'no_such_plugin'",
             "broken_plugin": "plugin broken_plugin: failed to import: RuntimeError: the plugin's own bug "
                              f"({tmp_path / 'broken_plugin.py'}:2)",
             "greedy_plugin": "plugin greedy_plugin: greedy_plugin: algorithm 'fedavg' is already registered by "
                              "emulator.parts.builtins"}
    for module, expected in cases.items():
        assert main(["validate", str(scenario), "--plugin", module, "--quiet"]) == 2
        err = capsys.readouterr().err
        assert expected in err, err
        assert "Traceback" not in err


def test_an_installed_package_is_found_by_its_entry_point(lab, tmp_path):
    """A dist-info with an fl_emulator.plugins entry point on sys.path is what `pip install` leaves."""
    site = tmp_path / "site"
    shutil.copytree(lab / "fedlab", site / "fedlab")
    info = site / "fedlab-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fedlab\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[fl_emulator.plugins]\nfedlab = fedlab\n")
    raw = yaml.safe_load((lab / "feddyn.yaml").read_text())
    del raw["plugins"]  # nothing in the scenario names the package
    scenario = write(tmp_path / "s.yaml", yaml.safe_dump(raw))
    proc = subprocess.run([sys.executable, "-m", "emulator", "validate", str(scenario), "--quiet"],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(site)})
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------------------------- running
def test_the_example_availability_model_keeps_its_own_promises():
    """The tutorial's nightly model: online for `hours` a day; next_offline / next_online are the times the
    state flips (t itself where the device is already there), at any time of any day."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        from fedlab.nightly import DAY, Nightly, NightlySettings
    finally:
        sys.path.remove(str(EXAMPLE))
    model = Nightly(np.arange(100, 150), NightlySettings(start_h=22, hours=8), np.random.default_rng(0))
    local = np.arange(50)
    share = np.mean([model.online(local, t).mean() for t in np.linspace(0, 3 * DAY, 721)])
    assert abs(share - 8 / 24) < 0.02
    for t in np.random.default_rng(1).uniform(0, 5 * DAY, 200):
        online = model.online(local, t)
        off, on = model.next_offline(local, t), model.next_online(local, t)
        assert (off[~online] == t).all() and (on[online] == t).all()
        assert (off[online] > t).all() and not model.online(local, off + 1e-6)[online].any()
        assert (on[~online] > t).all() and model.online(local, on + 1e-6)[~online].all()


def test_feddyn_follows_the_papers_update_rule():
    """Acar et al., Algorithm 1, computed by hand for two rounds on a 3-parameter model and 4 devices."""
    sys.path.insert(0, str(EXAMPLE))
    try:
        from fedlab.feddyn import FedDyn, FedDynConfig
    finally:
        sys.path.remove(str(EXAMPLE))
    from emulator.algorithms import AlgorithmContext, ClientUpdate
    from emulator.training.local import TrainStats

    alpha, m = 0.5, 4
    config = FedDynConfig(alpha=alpha, clients_per_round=2)
    algorithm = FedDyn(config, AlgorithmContext(num_devices=m, device_sizes=np.full(m, 10), num_params=3, seed=0,
                                                total_rounds=2))
    assert algorithm.local_training(0).prox_mu == alpha and algorithm.job_payload(0) is None
    stats = TrainStats(steps=5, loss=1.0, accuracy=0.5)
    theta = np.array([1.0, -1.0, 0.5], dtype=np.float32)
    h, grads = np.zeros(3), {}
    rounds = [{0: [0.2, 0.0, -0.4], 2: [0.0, 0.6, 0.2]}, {2: [-0.2, 0.1, 0.0], 3: [0.4, -0.2, 0.2]}]
    for r, deltas in enumerate(rounds, start=1):
        updates = [ClientUpdate(d, 10, np.array(v, dtype=np.float32), stats) for d, v in deltas.items()]
        new = algorithm.aggregate(theta, iter(updates), r)
        # the paper: g_k <- g_k - alpha (theta_k - theta); h <- h - alpha/m sum(theta_k - theta);
        # theta <- mean(theta_k) - h / alpha
        locals_ = [theta + np.array(v, dtype=np.float32) for v in deltas.values()]
        for d, v in deltas.items():
            grads[d] = grads.get(d, 0) - alpha * np.array(v, dtype=np.float32)
        h = h - alpha / m * sum(np.array(v, dtype=np.float32) for v in deltas.values())
        expected = np.mean(locals_, axis=0) - h / alpha
        np.testing.assert_allclose(new, expected, rtol=1e-6, atol=1e-6)
        theta = new
    np.testing.assert_allclose(algorithm.job_payload(2), -grads[2], rtol=1e-6)  # the linear term's gradient


def fairness_is_the_ledgers(run: Path) -> None:
    """The plugin's observer column (fedlab/fairness.py) after the last round is Jain's index of
    participation.csv's report counts, recomputed here; it is in every round's row."""
    import pandas as pd

    metrics, ledger = pd.read_csv(run / "metrics.csv"), pd.read_csv(run / "participation.csv")
    counts = ledger["reported"].to_numpy(dtype=float)
    assert metrics["reported_fairness"].notna().all()
    assert metrics["reported_fairness"].iloc[-1] == pytest.approx(counts.sum() ** 2 / (len(counts) * (counts ** 2).sum()))


def test_the_plugin_package_runs_from_the_cli_and_resumes_bit_identically(ray_session, lab, tmp_path):
    whole, half = tmp_path / "whole", tmp_path / "half"
    assert main(["run", str(lab / "feddyn.yaml"), "--out", str(whole), "--quiet"]) == 0
    fairness_is_the_ledgers(whole)  # a plugin's observer, from the command line, on Ray
    summary = json.loads((whole / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["final_test_acc"] > 0.3
    assert summary["plugin_paths"] == [str(lab)]
    # the first run's server, which imported the shipped package, was kept and serves the later runs
    (kept,) = [servers for key, servers in idle_servers._IDLE.items() if key[2]]
    first = ray.get([server.pid.remote() for server in kept])
    assert main(["run", str(lab / "feddyn.yaml"), "--out", str(half), "--set", "rounds=2", "--quiet"]) == 0
    assert main(["run", "--resume", str(half), "--set", "rounds=4", "--quiet"]) == 0
    assert comparable(half) == comparable(whole)
    (kept,) = [servers for key, servers in idle_servers._IDLE.items() if key[2]]
    assert ray.get([server.pid.remote() for server in kept]) == first  # one process served the three runs


def test_an_observer_returning_a_column_it_did_not_declare_is_named_and_stops_the_run(lab, tmp_path, capsys):
    write(lab / "fedlab" / "sloppy.py", """\
        from typing import Literal
        from emulator.extend import Observer, ObserverSettings, register_observer

        class SloppyConfig(ObserverSettings):
            kind: Literal["sloppy"] = "sloppy"

        class Sloppy(Observer):
            columns = ("declared",)

            def after_round(self, record, played):
                return {"declared": 1.0, "undeclared": record["participants"]}

        register_observer("sloppy", lambda config, world: Sloppy(world), config=SloppyConfig)
    """)
    out = tmp_path / "sloppy"
    code = main(["run", str(lab / "feddyn.yaml"), "--plugin", "fedlab.sloppy", "--out", str(out), "--quiet",
                 "--set", "runtime.backend=inline", "--set", "observers=[sloppy]"])
    err = capsys.readouterr().err
    assert code == 2 and "plugin fedlab.sloppy: observer 'sloppy''s after_round returned undeclared" in err, err


def test_a_plugin_hook_that_fails_stops_the_run_with_exit_2_and_keeps_its_rounds(ray_session, lab, tmp_path,
                                                                                capsys):
    served = tmp_path / "served.log"
    write(lab / "fedlab" / "faulty.py", """\
        SERVED_LOG = "SERVED_PATH"
        from typing import Literal
        import numpy as np
        from emulator.extend import FedAvg, FedAvgConfig, register_algorithm, register_model
        from fedlab.tabular_mlp import TabularMlpConfig, tabular_mlp

        class ShrinkConfig(FedAvgConfig):
            name: Literal["shrink"] = "shrink"
            bad_round: int = 3

        def served(round_index):  # which server process plays each round (the runs' servers)
            import os
            with open(SERVED_LOG, "a") as log:
                log.write(f"{os.getpid()} {round_index}\\n")

        class Shrink(FedAvg):
            def aggregate(self, params, updates, round_index):
                served(round_index)
                new = super().aggregate(params, updates, round_index)
                return new[:-1] if round_index == self.config.bad_round else new

        class BoomConfig(FedAvgConfig):
            name: Literal["boom"] = "boom"

        class Boom(FedAvg):
            def aggregate(self, params, updates, round_index):
                served(round_index)
                if round_index == 3:
                    raise ArithmeticError("the third round")
                return super().aggregate(params, updates, round_index)

        class CrashConfig(TabularMlpConfig):
            name: Literal["crashing_mlp"] = "crashing_mlp"

        def crashing_mlp(shape, classes, **options):
            model = tabular_mlp(shape, classes, **options)
            def forward(x):
                raise ValueError("features must be scaled")
            model.forward = forward
            return model

        register_algorithm("shrink", Shrink, config=ShrinkConfig)
        register_algorithm("boom", Boom, config=BoomConfig)
        register_model("crashing_mlp", crashing_mlp, config=CrashConfig)
    """.replace("SERVED_PATH", str(served)))
    out = tmp_path / "shrinking"
    code = main(["run", str(lab / "feddyn.yaml"), "--plugin", "fedlab.faulty", "--out", str(out), "--quiet",
                 "--set", "algorithm={name: shrink, clients_per_round: 10, client_lr: 0.05}"])
    err = capsys.readouterr().err
    assert code == 2, err
    found = re.search(r"plugin fedlab.faulty: algorithm 'shrink''s aggregate returned an array of shape \((\d+),\); "
                      r"return a flat vector of the model's (\d+) parameters", err)
    assert found and int(found[1]) == int(found[2]) - 1, err
    assert "Traceback" not in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["rounds_completed"] == 2  # rounds 1-2 are kept
    kept = digest(out)

    code = main(["run", str(lab / "feddyn.yaml"), "--plugin", "fedlab.faulty", "--out", str(tmp_path / "crash"),
                 "--quiet", "--set", "model.name=crashing_mlp"])
    err = capsys.readouterr().err
    assert code == 2 and "plugin fedlab.faulty: model 'crashing_mlp''s local training raised ValueError: " \
                          "features must be scaled" in err, err
    assert "no round had finished, so there is nothing to resume" in err, err  # the advice is true
    assert digest(out) == kept  # the earlier run is untouched

    boom = tmp_path / "boom"
    code = main(["run", str(lab / "feddyn.yaml"), "--plugin", "fedlab.faulty", "--out", str(boom), "--quiet",
                 "--set", "algorithm={name: boom, clients_per_round: 10, client_lr: 0.05}"])
    err = capsys.readouterr().err
    assert code == 2 and "algorithm 'boom''s aggregate raised ArithmeticError: the third round" in err, err
    assert f"this run's 2 finished rounds are kept: continue with emulator run --resume {boom}" in err, err
    # a server that answered with the plugin's error went back for the next run, and served it as a fresh
    # one would: boom's first two rounds (FedAvg's, as shrink's) on the server shrink's run failed on
    servers = [line.split()[0] for line in served.read_text().splitlines()]
    assert len(servers) == 6 and len(set(servers)) == 1, servers
    assert comparable(boom)[:2] == comparable(out)[:2]


@pytest.mark.ray  # a cluster in a process of its own
def test_the_tutorial_shows_the_example_files_as_they_are():
    """docs/extending.md prints each plugin module whole; the files in examples/ are what the tests run."""
    text = (ROOT / "docs" / "extending.md").read_text()
    blocks = re.findall(r"```python\n# file: (\S+)\n(.*?)```", text, flags=re.S)
    assert {name for name, _ in blocks} == {"examples/fedlab/fedlab/feddyn.py", "examples/fedlab/fedlab/tabular_mlp.py",
                                            "examples/fedlab/fedlab/user_csv.py", "examples/fedlab/fedlab/nightly.py",
                                            "examples/fedlab/fedlab/fairness.py"}
    for name, body in blocks:
        assert body == (ROOT / name).read_text(), f"docs/extending.md shows an old {name}"
        assert len(body.splitlines()) < 150


@pytest.mark.parametrize("name", sorted(ALGORITHMS.names()))
def test_every_registered_algorithm_keeps_params_on_an_empty_round_and_round_trips_its_state(name):
    """The contract the server relies on, checked for ours and for any plugin registered in this process."""
    from emulator.algorithms import AlgorithmContext, build_algorithm
    from emulator.training.local import TrainStats

    extra = {"fast": {"q": 0.5}, "fedasync": {"concurrency": 4},  # settings a name cannot do without
             "fedbuff": {"concurrency": 4, "buffer": 2}, "fedper": {"personal_layers": ["1.bias"]}}.get(name, {})
    edges = {"model": "simulated", "network": {"access": {"links": 2, "up_mbps": 1, "down_mbps": 1}, "edges": {},
                                               "regions": {"count": 2, "up_mbps": 1, "down_mbps": 1}}}
    world = {"system": edges} if ALGORITHMS.get(name).fact("hierarchical") else {}  # where one must run
    scenario = validate_scenario({"name": "x", "rounds": 3, "algorithm": {"name": name, "clients_per_round": 4,
                                                                          **extra},
                                  "data": {"server_set": {"size": 20}}, "population": {"devices": 8}, **world})
    unchanged = lambda params, spec, purpose: (params.copy(), TrainStats(steps=0, loss=0.0, accuracy=0.0))
    context = AlgorithmContext(num_devices=8, device_sizes=np.full(8, 10), num_params=5, seed=0, total_rounds=3,
                               server_samples=20, server_train=unchanged, model_name="m",
                               parameter_layout=(("1.weight", 0, 3), ("1.bias", 3, 5)))  # logreg's names
    algorithm = build_algorithm(scenario.algorithm, context)
    params = np.linspace(-1, 1, 5, dtype=np.float32)
    plan = algorithm.plan_round(1)
    assert plan.kind in ("client", "snapshot", "server", "async", "cloud")
    if plan.kind == "async":  # a server update from the reports the stream delivered: none keeps the model
        kept = algorithm.apply(params, [], 1)
        assert kept.dtype == np.float32 and np.array_equal(kept, params)
    elif plan.kind == "cloud":  # no edge server took in a report
        kept = algorithm.aggregate_edges(params, [(params + 1, 0.0)], 1)
        assert kept.dtype == np.float32 and np.array_equal(kept, params)
    elif plan.kind != "server":
        kept = algorithm.aggregate(params, iter([]), 1)
        assert kept.dtype == np.float32 and np.array_equal(kept, params)
    again = build_algorithm(scenario.algorithm, context)
    again.load_state(algorithm.state())
    assert again.plan_round(2) == algorithm.plan_round(2)


def test_the_plugin_package_runs_through_the_python_api(ray_session, lab, tmp_path, monkeypatch):
    import emulator

    by_path = emulator.run(lab / "feddyn.yaml", out=tmp_path / "api", progress=False)
    assert by_path.summary["status"] == "completed" and len(by_path.metrics) == 4
    assert by_path.metrics["test_acc"].dropna().iloc[-1] > 0.3
    fairness_is_the_ledgers(by_path.path)  # the plugin's observer, through the API
    # a scenario as a dict, the plugin named by the call and found in the working directory
    monkeypatch.chdir(lab)
    raw = yaml.safe_load((lab / "feddyn.yaml").read_text())
    del raw["plugins"]
    by_dict = emulator.run(raw, plugins=["fedlab"], out=tmp_path / "api-dict", progress=False)
    assert comparable(by_dict.path) == comparable(by_path.path)

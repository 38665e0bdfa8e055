"""The in-process backend (runtime.backend: inline): the same runner and server code without Ray.

Its promises: the metrics of a Ray run, bit for bit (here for a stateful world and algorithm, several
runners and vectorised groups, and across a resume that switches backend; every shipped scenario's first two
rounds are checked against their fingerprints in test_shipped_scenarios.py); no Ray started; a plugin's
exception arrives as itself, and `breakpoint()` in a plugin stops the run at a real pdb prompt.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
import ray

from conftest import ROOT, STATEFUL, comparable, launcher, run_python, small_scenario
from emulator.cli import main
from emulator.driver import resume_run, run_scenario
from emulator.parts import validate_scenario
from emulator.parts.plugins import PluginError
from emulator.runtime import inline
from emulator.scenario import ScenarioError


def scenario(backend: str, **overrides):
    return validate_scenario(small_scenario(**{**STATEFUL, **overrides, "runtime.backend": backend}))


@pytest.mark.parametrize("runtime", [{"runtime.runners": 1}, {"runtime.runners": 3, "runtime.vectorise": True}],
                         ids=["one-runner", "three-runners-vectorised"])
def test_inline_gives_the_metrics_of_a_ray_run(ray_session, tmp_path, runtime):
    on_ray = run_scenario(scenario("ray", **runtime), tmp_path / "ray")
    in_process = run_scenario(scenario("inline", **runtime), tmp_path / "inline")
    assert in_process.summary["status"] == "completed"
    assert in_process.summary["backend"] == "inline" and on_ray.summary["backend"] == "ray"
    assert in_process.summary["runners"] == runtime["runtime.runners"]
    assert comparable(in_process.path) == comparable(on_ray.path)
    assert len(comparable(in_process.path)) == 7


def test_an_async_run_inline_matches_ray(ray_session, tmp_path):
    overrides = {"algorithm": {"name": "fedbuff", "buffer": 4, "concurrency": 8, "client_lr": 0.05,
                               "local_steps": 5, "batch_size": 16}, "rounds": 5}
    on_ray = run_scenario(scenario("ray", **overrides), tmp_path / "ray")
    in_process = run_scenario(scenario("inline", **overrides), tmp_path / "inline")
    assert comparable(in_process.path) == comparable(on_ray.path)


def test_a_run_changes_backend_when_resumed_and_ends_as_if_it_never_had(ray_session, tmp_path):
    whole = run_scenario(scenario("ray"), tmp_path / "whole")
    half = run_scenario(scenario("inline", rounds=4), tmp_path / "half")
    resumed = resume_run(half.path, overrides=["rounds=7", "runtime.backend=ray"])
    assert resumed.summary["backend"] == "ray"
    assert comparable(half.path) == comparable(whole.path)


@pytest.mark.heavy
def test_an_inline_run_starts_no_ray(tmp_path):
    """In a process where Ray is not running, an inline run does not start it."""
    code = textwrap.dedent(f"""
        import ray, sys
        sys.path.insert(0, {str(ROOT / 'tests')!r})
        from conftest import small_scenario
        from emulator.parts import validate_scenario
        from emulator.driver import run_scenario
        result = run_scenario(validate_scenario(small_scenario(**{{"runtime.backend": "inline"}})), {str(tmp_path / 'r')!r})
        print(result.summary["status"], ray.is_initialized())
    """)
    done = run_python(code, tmp_path, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["completed", "False"]


PLUGIN = """\
    from typing import Literal
    from emulator.extend import FedAvg, FedAvgConfig, register_algorithm

    class PokeConfig(FedAvgConfig):
        name: Literal["poke"] = "poke"

    class Poke(FedAvg):
        def aggregate(self, params, updates, round_index):
            new = super().aggregate(params, updates, round_index)
            if round_index == 2:
                {body}
            return new

    register_algorithm("poke", Poke, config=PokeConfig)
"""


def _plugin(tmp_path, body: str) -> dict:
    (tmp_path / "poke.py").write_text(textwrap.dedent(PLUGIN).replace("{body}", body))
    sys.modules.pop("poke", None)
    raw = small_scenario(**{"runtime.backend": "inline", "plugins": ["poke"],
                            "algorithm.name": "poke", "rounds": 3})
    return raw


def test_a_plugin_error_inline_is_the_plugins_own_exception_with_its_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    raw = _plugin(tmp_path, 'raise KeyError("round two")')
    with pytest.raises(PluginError) as caught:
        run_scenario(validate_scenario(raw), tmp_path / "run")
    assert "algorithm 'poke''s aggregate raised KeyError" in str(caught.value)
    cause = caught.value.__cause__
    assert isinstance(cause, KeyError) and not isinstance(cause, ray.exceptions.RayError)
    frames = []
    tb = cause.__traceback__
    while tb is not None:
        frames.append((tb.tb_frame.f_code.co_filename, tb.tb_lineno))
        tb = tb.tb_next
    assert frames[-1] == (str(tmp_path / "poke.py"), 11)  # the plugin's own raise, for pdb's post-mortem
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["rounds_completed"] == 1


def test_breakpoint_in_a_plugin_stops_an_inline_run_at_a_pdb_prompt(tmp_path):
    """The debugging workflow of docs/extending.md: `breakpoint()` in a hook, `emulator run` in a terminal."""
    raw = _plugin(tmp_path, "breakpoint()")
    (tmp_path / "debug.yaml").write_text(json.dumps(raw))
    env = {**os.environ, "PYTHONBREAKPOINT": "pdb.set_trace"}
    done = subprocess.run(launcher().prefix("cli") + ["run", "debug.yaml", "--out", "run"],
                          input="p round_index\np type(new).__name__\nc\n", capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert "(Pdb) 2\n(Pdb) 'ndarray'" in done.stdout, done.stdout  # the hook's own variables, as pdb printed them
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"


def test_inline_refuses_a_cluster_address():
    with pytest.raises(ScenarioError, match="runtime: backend 'inline' runs in this process, but address is 'auto'"):
        validate_scenario(small_scenario(**{"runtime.backend": "inline", "runtime.address": "auto"}))


def test_inline_refuses_a_gpu_share_where_cuda_is_missing(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(ScenarioError, match=r"runtime.num_gpus: 0.5, but this process has no GPU"):
        run_scenario(validate_scenario(small_scenario(**{"runtime.backend": "inline", "runtime.num_gpus": 0.5})),
                     tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_inline_handle_holds_errors_and_resolves_refs_like_ray():
    class Thing:
        def add(self, a, b):
            return a + b

        def fail(self):
            raise ValueError("held")

    handle = inline.InlineActor(Thing())
    ref = handle.add.remote(inline.put(2, inline=True), 3)
    assert inline.get(ref) == 5
    failed = handle.fail.remote()  # the call returns; its error is raised where the result is asked for
    with pytest.raises(ValueError, match="held"):
        inline.get(failed)
    ready, rest = inline.wait([ref, failed], num_returns=1)
    assert ready == [ref] and rest == [failed]


def test_an_array_put_in_process_is_a_read_only_copy_as_ray_hands_it_out():
    import numpy as np

    params = np.zeros(4, np.float32)
    ref = inline.put(params, inline=True)
    params += 1  # the server moves on; what it put does not
    assert inline.get(ref).tolist() == [0, 0, 0, 0]
    with pytest.raises(ValueError):
        inline.get(ref)[0] = 1


def test_the_cli_runs_inline_with_set(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.yaml").write_text(json.dumps(small_scenario(rounds=2)))
    assert main(["run", "s.yaml", "--out", "run", "--quiet", "--set", "runtime.backend=inline"]) == 0
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["backend"] == "inline"


def test_the_server_in_the_driver_beside_ray_runners_gives_the_metrics_of_the_server_actor(ray_session, tmp_path):
    """runtime.server: driver (one process fewer, for large populations on one machine) changes where the
    server runs, not what it computes; no server actor exists while such a run goes on."""
    import emulator

    actors = []
    runtime = {"runtime.runners": 2}
    actor = run_scenario(scenario("ray", **runtime), tmp_path / "actor")

    def servers_playing(row):
        named = [ray.get_actor(name) for name in ray.util.list_named_actors() if name.startswith("server-")]
        actors.append([s for s in named if ray.get(s.serving.remote()) is not None])  # idle ones play none

    in_driver = emulator.run(small_scenario(**{**STATEFUL, **runtime, "runtime.backend": "ray",
                                               "runtime.server": "driver"}), out=tmp_path / "driver",
                             progress=servers_playing)
    assert in_driver.summary["status"] == "completed" and in_driver.summary["runners"] == 2
    assert actors and not any(actors)
    assert comparable(in_driver.path) == comparable(actor.path)
    with pytest.raises(ScenarioError, match="server_num_cpus"):
        scenario("ray", **{"runtime.server": "driver", "runtime.server_num_cpus": 1})


def test_a_run_in_process_computes_as_a_runner_and_leaves_the_callers_arithmetic_as_it_was(tmp_path):
    """A runner's process flushes denormal floats to zero (training.set_torch_arithmetic); in process the
    runners do so inside each call only, so the caller's numpy and torch compute afterwards as before."""
    import numpy as np

    from emulator.runtime.pool import RunnerPool
    from emulator.training.local import flushes_denormals

    tiny = np.float32(1e-39)  # a denormal: flushed, it would read as zero
    assert not flushes_denormals() and tiny * np.float32(1.0) != 0
    pool = RunnerPool.in_process(1, None)
    assert inline.get(pool.runners[0].flushes_denormals.remote())  # inside a runner's call
    run_scenario(validate_scenario(small_scenario(rounds=1)), tmp_path / "run")
    assert not flushes_denormals() and tiny * np.float32(1.0) != 0  # and after a whole run, as before

"""The warm instance (`emulator up` / `emulator down`, emulator/runtime/warm.py).

Its promises: a run attaches to it and uses its runners and an idle server (no new actor processes), with the
metrics of a cold run bit for bit; nothing of a run stays behind in the warm runners (a run, another, then the
first again: the same numbers, and the runners hold no run between them); warm actors running other code are
not used; `emulator down` frees it all, and a stale state file is ignored. Everything runs as the user runs
it: the CLI in processes of its own (forked from the test worker's pre-imported process, conftest.launcher),
with a state file of the test's own.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import comparable, launcher, small_scenario
from emulator.cli import main
from emulator.driver import run_scenario
from emulator.parts import validate_scenario
from emulator.runtime import warm

def _cli(args: list[str], env: dict, cwd, timeout: int = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(launcher().prefix("cli") + args, capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done


def _warm_actors(address: str, env: dict, folder) -> tuple[list[tuple[int, list]], list[int]]:
    """(pid, runs held) of each warm runner, and the pids of the idle servers, asked from another driver."""
    code = textwrap.dedent(f"""
        import json, ray
        from emulator.runtime import warm
        from emulator.runtime.cluster import configure_token_auth
        configure_token_auth("local")  # the token the instance was started with (~/.ray/auth_token)
        ray.init(address={address!r}, logging_level="ERROR")
        runners = warm.lease_runners(1)
        print(json.dumps([[ray.get([r.pid.remote(), r.held_runs.remote()]) for r in runners],
                          warm.idle_server_pids()]))
    """)
    script = folder / "warm_actors.py"
    script.write_text(code)
    done = subprocess.run(launcher().prefix("script") + [str(script)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    runners, servers = json.loads(done.stdout.splitlines()[-1])
    return [tuple(item) for item in runners], servers


@pytest.fixture
def warm_env(tmp_path, monkeypatch):
    env = {**os.environ, "EMULATOR_WARM_STATE": str(tmp_path / "warm.json")}
    yield env
    monkeypatch.setenv("EMULATOR_WARM_STATE", env["EMULATOR_WARM_STATE"])
    warm.down()  # whatever the test did, the instance goes


def test_a_warm_instance_serves_runs_bit_identical_to_cold_keeps_nothing_and_is_not_used_by_other_code(
        tmp_path, warm_env, lab):
    """One instance for the promises that need one: runs on it are bit-identical to cold and leave nothing
    in its runners; once its code differs from the run's (a source file edited after `up`), its actors are
    not used, nor do they keep the CPUs the run's own runners need (as many as the machine's cores, which
    the warm runners hold); `down` frees it all."""
    for seed in (1, 2):
        (tmp_path / f"s{seed}.yaml").write_text(json.dumps(small_scenario(seed=seed, **{"runtime.runners": 1, "runtime.backend": "ray"})))
    # the cold reference in this process (the in-process backend gives a Ray run's metrics bit for bit,
    # test_inline.py); the run after `down` below is a cold Ray run of its own
    run_scenario(validate_scenario(small_scenario(seed=1, **{"runtime.runners": 1})), tmp_path / "cold")

    up = _cli(["up"], warm_env, tmp_path)  # as many runners as cores
    assert "warm instance up at" in up.stdout
    state = tmp_path / "warm.json"
    instance = json.loads(state.read_text())
    before, idle_before = _warm_actors(instance["address"], warm_env, tmp_path)
    assert len(before) == 1 and before[0][1] == [] and len(idle_before) == 1

    first = _cli(["run", "s1.yaml", "--out", "warm1", "--quiet"], warm_env, tmp_path)
    assert "note: on the warm instance (emulator up)" in first.stderr
    _cli(["run", "s2.yaml", "--out", "other", "--quiet"], warm_env, tmp_path)
    again = _cli(["run", "s1.yaml", "--out", "warm2", "--quiet"], warm_env, tmp_path)
    assert "note: on the warm instance" in again.stderr

    assert comparable(tmp_path / "warm1") == comparable(tmp_path / "cold")
    assert comparable(tmp_path / "warm2") == comparable(tmp_path / "cold")
    assert comparable(tmp_path / "other") != comparable(tmp_path / "cold")
    after, idle_after = _warm_actors(instance["address"], warm_env, tmp_path)
    assert [pid for pid, _ in after] == [pid for pid, _ in before]  # the same runner process served every run
    assert after[0][1] == []  # and holds nothing of them
    # the server processes too: the first run's came back for the next runs (the warden started one more
    # when the first run took its last idle one)
    assert len(idle_after) == 2 and set(idle_before) <= set(idle_after)

    # a plugin package's runs (its modules shipped to the actors): the warden's runners and a server of their
    # own, kept for the next run shipping the same files, which starts no actor process either
    imports = tmp_path / "imports.log"  # each import of the package: the process and the file it came from
    with open(lab / "fedlab" / "__init__.py", "a") as init:
        init.write(f"import os as _os\nopen({str(imports)!r}, 'a').write(f'{{_os.getpid()}} {{__file__}}\\n')\n")
    plugin_runs = []
    for out in ("plugin1", "plugin2"):
        done = _cli(["run", "feddyn.yaml", "--out", str(tmp_path / out), "--quiet"], warm_env, lab)
        assert "note: on the warm instance" in done.stderr
        plugin_runs.append({int(line.split()[0]) for line in imports.read_text().splitlines()
                            if "/runtime_resources/py_modules_files/" in line})  # the actors' imports
    assert comparable(tmp_path / "plugin1") == comparable(tmp_path / "plugin2")
    assert len(plugin_runs[0]) == 3 and plugin_runs[1] == plugin_runs[0]  # its two runners and a server, kept
    # a run shipping nothing gets plain runners again, holding nothing
    back, _ = _warm_actors(instance["address"], warm_env, tmp_path)
    assert back[0][0] not in plugin_runs[0] and back[0][1] == []

    raw = small_scenario(rounds=2, **{"runtime.backend": "ray", "runtime.runners": os.cpu_count()})
    (tmp_path / "s.yaml").write_text(json.dumps(raw))
    state.write_text(json.dumps({**instance, "code": "edited-since"}))  # as if a source file changed after `up`
    done = _cli(["run", "s.yaml", "--out", "run", "--quiet"], warm_env, tmp_path)
    assert "the warm instance's actors run other code" in done.stderr
    assert "runner" not in done.stderr.split("refreshes the warm ones)")[1]  # no warning of waiting for resources
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"

    down = _cli(["down"], warm_env, tmp_path)
    assert "stopped the warm instance at" in down.stdout
    assert not state.exists()
    assert not warm.alive(instance["pid"])  # a later run finds no instance (the state file is gone) and starts cold


def test_a_stale_state_file_is_ignored_and_removed(tmp_path, monkeypatch):
    state = tmp_path / "warm.json"
    monkeypatch.setenv("EMULATOR_WARM_STATE", str(state))
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    state.write_text(json.dumps({"address": "127.0.0.1:1", "pid": dead.pid, "code": "x", "runners": 1,
                                 "shape": [1.0, 0.0, None]}))
    assert warm.find() is None
    assert not state.exists()
    state.write_text("{not json")
    assert warm.find() is None


def test_down_without_an_instance_says_so(tmp_path, warm_env, monkeypatch, capsys):
    monkeypatch.setenv("EMULATOR_WARM_STATE", warm_env["EMULATOR_WARM_STATE"])
    assert main(["down"]) == 0  # in this process: nothing to stop needs no process of its own
    assert "none was running" in capsys.readouterr().out

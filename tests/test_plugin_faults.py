"""A broken plugin is one line naming the plugin, what failed and the user's own file and line: exit 2, never
a traceback, for every kind of part (issue 26). Algorithms' and models' hooks: test_plugins.py; here the
availability models (which run inside the simulated clock), wrong signatures and syntax errors; and the
machine itself failing under a run (Ray unable to start).

Each case is a plugin module written beside its scenario; runs are in process (runtime.backend: inline)
except one on the session's Ray instance, where the error crosses an actor boundary.
"""
from __future__ import annotations

import textwrap

import pytest
import yaml

from conftest import small_scenario
from emulator.cli import main

HEADER = """\
import numpy as np
from typing import Literal
from emulator.extend import AvailabilityModel, AvailabilitySettings, register_availability
"""


def plugin_run(tmp_path, module: str, body: str, kind: str, backend: str = "inline", rounds: int = 2):
    (tmp_path / f"{module}.py").write_text(HEADER + textwrap.dedent(body))
    raw = small_scenario(rounds=rounds, plugins=[module], **{"runtime.backend": backend})
    raw["population"]["availability"] = [{"kind": kind}]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path), str(tmp_path / "run")


def availability_model(kind: str, online: str, next_offline: str = "np.full(len(local), np.inf)",
                       next_online: str = "np.full(len(local), float(t))") -> str:
    """A plugin's availability model `kind`, each method's body given (a `return` expression, or a statement)."""
    body = lambda code: code if code.startswith("raise") else f"return {code}"  # noqa: E731
    return f"""
        class Settings(AvailabilitySettings):
            kind: Literal["{kind}"] = "{kind}"

        class Model(AvailabilityModel):
            def online(self, local, t):
                {body(online)}
            def next_offline(self, local, t):
                {body(next_offline)}
            def next_online(self, local, t):
                {body(next_online)}

        register_availability("{kind}", lambda entry, members, rng, key, world: Model(members), config=Settings)
    """


def line_of(tmp_path, module: str, text: str) -> int:
    lines = (tmp_path / f"{module}.py").read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


@pytest.mark.parametrize("backend", ["inline", "ray"])
def test_an_availability_model_that_raises_is_one_line_naming_its_line(backend, tmp_path, capsys, request):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    module = f"flaky_{backend}"
    source = availability_model(module, online='raise RuntimeError("the charging sensor is unplugged")')
    path, out = plugin_run(tmp_path, module, source, module, backend)
    assert main(["run", path, "--out", out, "--quiet"]) == 2
    err = capsys.readouterr().err
    where = f"{tmp_path / module}.py:{line_of(tmp_path, module, 'raise RuntimeError')}"
    assert f"plugin {module}: availability model 'flaky_{backend}''s online raised RuntimeError: the charging " \
           f"sensor is unplugged ({where})" in err, err
    assert "Traceback" not in err and "RayTaskError" not in err and len(err.strip().splitlines()) <= 2, err


def test_a_builder_with_the_wrong_signature_names_where_it_is_defined(tmp_path, capsys):
    module = "twoargs"
    path, out = plugin_run(tmp_path, module, """
        class TwoSettings(AvailabilitySettings):
            kind: Literal["twoargs"] = "twoargs"

        def build_two(entry, members):  # the builder takes (entry, members, rng, key, world)
            return None

        register_availability("twoargs", build_two, config=TwoSettings)
    """, "twoargs")
    assert main(["run", path, "--out", out, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "availability model 'twoargs''s builder raised TypeError" in err
    assert f"calling {tmp_path / module}.py:{line_of(tmp_path, module, 'def build_two')}" in err, err


@pytest.mark.parametrize(("answer", "says"), [
    ("np.full(len(local) + 1, np.inf)", "an array of shape"),
    ("np.full(len(local), t - 10.0)", "a time before t"),
    ("'soon'", "return a numpy array of float64"),
])
def test_an_availability_model_that_answers_wrongly_is_refused_saying_what_to_return(answer, says, tmp_path, capsys):
    module = f"wrong_{abs(hash(answer)) % 10 ** 6}"
    source = availability_model(module, online="np.ones(len(local), dtype=bool)", next_offline=answer)
    path, out = plugin_run(tmp_path, module, source, module)
    assert main(["run", path, "--out", out, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"availability model '{module}''s next_offline returned" in err and says in err, err


def test_a_plugin_with_a_syntax_error_names_its_file_and_line(tmp_path, capsys):
    (tmp_path / "broken_syntax.py").write_text("x = 1\ndef f(:\n    pass\n")
    raw = small_scenario(rounds=1, plugins=["broken_syntax"])
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(raw))
    assert main(["validate", str(tmp_path / "s.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"({tmp_path / 'broken_syntax.py'}:2)" in err and "frozen" not in err, err


@pytest.mark.ray  # a process that tries to start Ray
def test_ray_failing_to_start_is_one_line_naming_the_machine_and_the_way_around(tmp_path):
    """In a fresh process (this one's Ray is running already): Ray's session directory cannot be made."""
    import os
    import subprocess
    import sys

    (tmp_path / "blocker").write_text("a file where Ray wants a directory")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_scenario(rounds=1, **{"runtime.backend": "ray"})))
    env = {**os.environ, "RAY_TMPDIR": str(tmp_path / "blocker" / "ray")}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run([sys.executable, "-m", "emulator", "run", str(path), "--out", str(tmp_path / "run"),
                           "--quiet"], capture_output=True, text=True, env=env, timeout=180)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("error: Ray could not start on this machine (NotADirectoryError") and \
        "--set runtime.backend=inline" in done.stderr and "Traceback" not in done.stderr, done.stderr


PARTITION = """\
import numpy as np
from typing import Literal
from emulator.extend import PartitionSettings, register_partition

class {cls}(PartitionSettings):
    scheme: Literal["{name}"] = "{name}"

def split(labels, num_classes, devices, spec, rng):
{body}

register_partition("{name}", split, config={cls})
"""


def broken_plugin_run(tmp_path, capsys, template: str, name: str, body: str, **overrides) -> str:
    """Write the plugin `name` from `template` with its method's `body`, run a one-round scenario that uses
    it (`overrides`): exit 2; returns what the run printed on stderr."""
    (tmp_path / f"{name}.py").write_text(template.format(cls=name.title().replace("_", ""), name=name, body=body))
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(small_scenario(rounds=1, plugins=[name], **overrides)))
    assert main(["run", str(tmp_path / "s.yaml"), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(("name", "body", "says"), [
    ("overlapping_split", "    return [np.arange(10)] * devices", "a sample given to two devices"),
    ("short_split", "    return [np.arange(5)]", "1 parts for 40 devices"),
    ("past_the_end", "    return [np.array([len(labels) + d]) for d in range(devices)]", "outside the"),
    ("raising_split", "    raise KeyError(num_classes)", "'s split raised KeyError"),
])
def test_a_partition_plugin_that_splits_wrongly_is_refused(name, body, says, tmp_path, capsys):
    err = broken_plugin_run(tmp_path, capsys, PARTITION, name, body, **{"data.partition": {"scheme": name}})
    assert f"plugin {name}: partition '{name}''s split" in err and says in err and "Traceback" not in err, err
    if name == "raising_split":
        assert f"({tmp_path / name}.py:9)" in err, err


SELECTION = """\
from typing import Literal
import numpy as np
from emulator.extend import SelectionPolicy, SelectionSettings, register_selection

class {cls}(SelectionSettings):
    kind: Literal["{name}"] = "{name}"

class Policy(SelectionPolicy):
    def select(self, available, count, rng):
{body}

register_selection("{name}", lambda spec, devices, replace: Policy(), config={cls})
"""


@pytest.mark.parametrize(("name", "body", "says"), [
    ("raising_pick", "        raise IndexError(count)", "'s select raised IndexError: 11 ("),
    ("stranger_pick", "        return np.full(count, 10**6)", "devices that are not in `available`"),
    ("greedy_pick", "        return np.concatenate([available, available])", "for a cohort of 11"),
    ("float_pick", "        return available[:count].astype(float)", "return a 1-D integer array of device ids"),
])
def test_a_selection_plugin_that_picks_wrongly_is_one_line_saying_what_to_return(name, body, says, tmp_path, capsys):
    err = broken_plugin_run(tmp_path, capsys, SELECTION, name, body, **{"algorithm.selection": {"kind": name}})
    assert f"plugin {name}: selection policy '{name}''s select" in err and says in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2, err
    if name == "raising_pick":
        assert f"({tmp_path / name}.py:10)" in err, err


OPTIMIZER = """\
from typing import Literal
import numpy as np
from emulator.extend import ServerOptimizer, ServerOptimizerSettings, register_server_optimizer

class {cls}(ServerOptimizerSettings):
    kind: Literal["{name}"] = "{name}"

class Step(ServerOptimizer):
    def step(self, params, mean_delta, lr):
{body}

register_server_optimizer("{name}", lambda config, size, mask: Step(), config={cls})
"""


@pytest.mark.parametrize(("name", "body", "says"), [
    ("raising_step", "        raise FloatingPointError(lr)", "'s step raised FloatingPointError: 1.0 ("),
    ("short_step", "        return params[:-1]", "return the new parameters, a float numpy array of shape"),
    ("no_step", "        pass", "step returned NoneType"),
])
def test_a_server_optimizer_plugin_that_steps_wrongly_is_one_line(name, body, says, tmp_path, capsys):
    err = broken_plugin_run(tmp_path, capsys, OPTIMIZER, name, body, **{"algorithm.server_optimizer": {"kind": name}})
    assert f"plugin {name}: server optimizer '{name}''s step" in err and says in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) <= 2, err
    if name == "raising_step":
        assert f"({tmp_path / name}.py:10)" in err, err

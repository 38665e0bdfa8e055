"""One real local Ray instance for the whole test session (starting Ray takes seconds)."""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from emulator.parts import load_parts
from session_scratch import session_scratch

# Everything a session writes outside tmp_path goes to one scratch directory, shared by the xdist workers and
# removed when the session ends (tests/session_scratch.py).
SCRATCH, OWN_SCRATCH = session_scratch()

# A developer's warm instance (`emulator up`) must never join the tests: each test process and every process it
# starts look for one in a state file of their own (tests/test_warm.py starts one there).
os.environ["EMULATOR_WARM_STATE"] = str(SCRATCH / f"warm-{os.getpid()}" / "warm.json")

# Stored federations (data.store, emulator/data/store.py) go to this session's own cache, never the user's:
# one for all workers, so each federation is written once.
os.environ["EMULATOR_DATA_CACHE"] = str(SCRATCH / "federations")

# Figures as PNG only (a report in a third of the time), here and in every process the tests start; the tests
# of PDF and SVG output (test_figures.py, test_bias.py) ask for them.
os.environ["EMULATOR_FIGURE_FORMATS"] = "png"
# and at screen resolution, 100 dpi (half a report's time again); test_figures.py checks the print default
os.environ["EMULATOR_FIGURE_DPI"] = "100"

# The test session is an entry point like the CLI: it registers the built-in parts (and installed plugins)
# once, so tests that build a part by name, or parametrise over a registry, see them at collection.
load_parts()

ROOT = Path(__file__).resolve().parents[1]
FMNIST_DIR = Path("/usr/share/datasets/fashion-mnist")


# ------------------------------------------------------------------ how `make test` splits over workers
# `make test` runs `-n 2 --dist loadscope --no-loadscope-reorder`: a worker takes a whole scope at a time.
# A scope is a test file (its module fixtures are built once), but the doc blocks of one Markdown file form
# a scope of their own (they run in order in one directory; test_docs.py holds a third of the suite's time),
# and each shipped scenario is one (independent runs of tens of seconds). Scopes go out heaviest first, so
# the long ones do not start last on one worker while the other sits idle.
SPLIT_BY_PARAMETER = {
    "tests/test_docs.py::test_doc_block_runs": lambda param: param.rpartition(":")[0],  # the Markdown file
    "tests/test_shipped_scenarios.py::test_shipped_scenario_runs_two_rounds": lambda param: param,
}


def scope_of(nodeid: str) -> str:
    function, _, param = nodeid.partition("[")
    split = SPLIT_BY_PARAMETER.get(function)
    return f"{function}[{split(param.removesuffix(']'))}]" if split else nodeid.split("::")[0]


def _cost(item) -> float:
    """A rough weight of one test, from what the tests say about themselves: `slow` ones take tens of
    seconds, a doc block or shipped scenario several, the rest under a second."""
    if item.get_closest_marker("slow"):
        return 30.0
    if item.nodeid.split("[")[0] in SPLIT_BY_PARAMETER:
        return 8.0
    return 0.5


# ------------------------------------------------------------------ the fast tier (make test-fast)
# `ray`: the test starts Ray (it asks for the ray_session fixture, its `backend` parameter is "ray", its file
# runs Ray or whole CLI processes throughout, or it says so itself: a subprocess that starts Ray). `make test-fast` runs `-m "not ray and not slow and not heavy"` with EMULATOR_TEST_TIER=fast,
# where starting Ray fails the test that tried: a test that needs Ray must say so.
RAY_FILES = {"test_docs.py", "test_warm.py", "test_token_auth.py", "test_two_node_cluster.py"}
FAST_TIER = os.environ.get("EMULATOR_TEST_TIER") == "fast"


def _mark_ray(items) -> None:
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_ray = callspec is not None and callspec.params.get("backend") == "ray"  # a test run on both backends
        if on_ray or "ray_session" in getattr(item, "fixturenames", ()) or item.path.name in RAY_FILES:
            item.add_marker(pytest.mark.ray)


if FAST_TIER:
    import ray as _ray

    def _no_ray(*args, **kwargs):
        raise RuntimeError("this test starts Ray, which the fast tier (make test-fast) never does: give it the "
                           "ray_session fixture (it is then marked `ray` and runs in make test)")

    _ray.init = _no_ray


def pytest_collection_modifyitems(config, items):
    """Heaviest scope first, each scope's tests in their own order (every worker sorts the same way)."""
    _mark_ray(items)
    cost: dict[str, float] = {}
    for item in items:
        cost[scope_of(item.nodeid)] = cost.get(scope_of(item.nodeid), 0.0) + _cost(item)
    items.sort(key=lambda item: -cost[scope_of(item.nodeid)])  # stable: a scope keeps its order


_LAUNCHER: list = []


def launcher():
    """This test worker's pre-imported process (tests/doc_launcher.py), started on first use: an `emulator`
    command, a Python file or a sweep's worker process runs in a child forked from it, without the seconds of
    CPU a fresh interpreter spends importing torch, Ray and the emulator. For what a test claims about a
    command's behaviour, not about a fresh process's start-up (tests of that start real processes)."""
    if not _LAUNCHER:
        from doc_launcher import DocLauncher

        folder = SCRATCH / f"launcher-{os.getpid()}"
        folder.mkdir(exist_ok=True)
        _LAUNCHER.append(DocLauncher(folder, sys.executable, dict(os.environ)))
    return _LAUNCHER[0]


@pytest.fixture
def forked_sweep_workers(monkeypatch):
    """A sweep run in this process starts its worker processes (`python -m emulator.sweep_workers`) as children
    forked from the launcher, as a doc block's sweep does: sys.executable is the launcher's shim, which runs
    any other command with the real python. For tests of what the runs give, not of a worker's own start-up
    or of its death with the sweep (tests/test_sweep_workers.py starts real ones for those)."""
    monkeypatch.setattr(sys, "executable", launcher().shim)


def run_python(code: str, folder: Path, **options) -> subprocess.CompletedProcess:
    """`python -c CODE` in a process of its own, forked from the launcher (the code is written to
    folder/snippet_N.py, which is first on its sys.path); `options` as for subprocess.run."""
    script = folder / f"snippet_{len(list(folder.glob('snippet_*.py')))}.py"
    script.write_text(code)
    return subprocess.run(launcher().prefix("script") + [str(script)], **options)


def pytest_unconfigure(config):
    for started in _LAUNCHER:
        started.close()
    if OWN_SCRATCH:
        shutil.rmtree(SCRATCH, ignore_errors=True)


def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist", None) != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ScopeScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return ScopeScheduling(config, log)


@pytest.fixture(autouse=True)
def arithmetic_as_found():
    """A test that builds a runner or a server in this process, as their own processes do, turns this
    process's flush of denormal floats on (training.set_torch_arithmetic); the next test finds it off, as
    a user's process has it (hypothesis, for one, refuses to draw floats with it on)."""
    yield
    import torch

    torch.set_flush_denormal(False)


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from emulator.runtime.cluster import LOCAL_SYSTEM_CONFIG, configure_token_auth, lighten_local_instance

    if not ray.is_initialized():
        configure_token_auth()  # token authentication on, as in every run, without Ray's warning
        # the actors' warnings setting goes in the environment the instance's processes inherit: a runtime_env
        # would start every actor through Ray's setup_worker.py, an interpreter importing Ray twice
        warnings_before = os.environ.get("PYTHONWARNINGS")
        os.environ["PYTHONWARNINGS"] = "ignore::DeprecationWarning"
        try:
            ray.init(address="local", num_cpus=4, include_dashboard=False, logging_level=logging.WARNING,
                     _system_config=LOCAL_SYSTEM_CONFIG)
        finally:
            if warnings_before is None:
                del os.environ["PYTHONWARNINGS"]
            else:
                os.environ["PYTHONWARNINGS"] = warnings_before
        lighten_local_instance()  # as a run's own local instance: no autoscaler monitor, no dashboard process
    yield ray
    ray.shutdown()


@pytest.fixture
def lab(tmp_path):
    """The example plugin package examples/fedlab and its scenario, copied to a directory of their own (outside
    the repository, so nothing can lean on the emulator's own tree), 4 rounds evaluated and checkpointed every 2."""
    import yaml

    home = tmp_path / "lab"
    shutil.copytree(ROOT / "examples" / "fedlab", home)
    raw = yaml.safe_load((home / "feddyn.yaml").read_text())
    raw["data"]["options"]["file"] = str(home / "data" / "users.csv")
    raw.update(rounds=4, evaluation={"every": 2}, output={"checkpoint_every": 2})
    (home / "feddyn.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    forget_fedlab()
    yield home
    forget_fedlab()


def forget_fedlab():
    """Each test imports the package from its own copy (a process keeps the first import of a module)."""
    for name in [n for n in sys.modules if n == "fedlab" or n.startswith("fedlab.")]:
        del sys.modules[name]


def small_scenario(**overrides) -> dict:
    """A few-second scenario: 40 synthetic devices with label skew, logistic regression, FedAvg, in process
    (runtime.backend inline: the metrics of a Ray run, test_inline.py; a test of Ray's part sets it to ray)."""
    raw = {
        "name": "tiny", "seed": 3, "rounds": 4,
        "data": {"dataset": "synthetic", "synthetic": {"iid": True, "max_samples": 200},
                 "partition": {"scheme": "dirichlet", "alpha": 0.5}},
        "model": "logreg",
        "algorithm": {"name": "fedavg", "clients_per_round": 8, "client_lr": 0.05, "local_steps": 5,
                      "batch_size": 16},
        "population": {"devices": 40},
        "runtime": {"runners": 1, "backend": "inline"},  # no Ray: where a test needs it, runtime.backend=ray
        "evaluation": {"every": 1},
    }
    for key, value in overrides.items():
        node = raw
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return raw


# A stateful world and algorithm, so a resume must restore more than the model: Markov availability
# (its trajectories and random stream), dropout, server momentum, the clock and the ledger.
STATEFUL = {
    "rounds": 7, "output.checkpoint_every": 2,
    "population.availability": [{"kind": "markov", "mean_on_s": 900, "mean_off_s": 900}],
    "population.dropout_per_hour": 2.0, "system.deadline_s": 400.0, "system.min_report_fraction": 0.25,
    "algorithm": {"name": "fedavgm", "momentum": 0.5, "clients_per_round": 8, "client_lr": 0.05,
                  "local_steps": 5, "batch_size": 16},
}


def cpu_identity() -> str:
    """What decides torch's float results on this CPU: its kernel capability, and the vendor and AMX units,
    which pick different MKL / oneDNN code paths under the same capability (an AMD and an Intel AVX512
    machine differ in the last bits of a loss). Results are compared bit for bit only between equal ones."""
    import torch

    identity = torch.backends.cpu.get_cpu_capability()
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return identity
    vendor = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("vendor_id")), "")
    return " ".join(filter(None, [identity, vendor, "AMX" if " amx_tile" in info else ""]))


def close_rows(got: list[dict], want: list[dict], loss: float = 1e-2, acc: float = 5e-3) -> None:
    """Assert two runs' metrics rows agree where another CPU may round differently: every column present in
    both; losses to a relative `loss` and accuracies to an absolute `acc` (a rounding difference compounds
    over an epoch of local steps and may flip a prediction or two); every other column (the clock, bytes,
    who took part, the data-bias figures) exactly, since it must not depend on floating-point training."""
    assert [set(r) for r in got] == [set(r) for r in want], "the metrics columns differ"  # in any order
    for index, (row, expected) in enumerate(zip(got, want)):
        for key, value in expected.items():
            if key == "worst_class":  # the argmin of the class accuracies: two close ones may swap places
                continue
            if not any(word in key for word in TRAINED) or value == "" or row[key] == "":
                assert row[key] == value, (index, key, row[key], value)
                continue
            a, b = float(row[key]), float(value)
            allowed = acc if "acc" in key else loss * max(abs(a), abs(b))
            assert abs(a - b) <= allowed, (index, key, row[key], value)


# Columns computed from the trained model or its updates (losses, accuracies, an update's compression error and
# its residual's norm): the only ones another CPU may change.
TRAINED = ("loss", "acc", "error", "norm")


def comparable(path) -> list[dict]:
    """A run's metrics rows without the one column that may differ between identical runs."""
    from emulator.recording.rundir import read_metrics

    return [{k: v for k, v in row.items() if k != "wall_time_s"} for row in read_metrics(path)]


def digest(directory: Path) -> dict:
    """SHA-256 of every file in a directory (recursively), to show that nothing was touched."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(directory).rglob("*")) if p.is_file() and p.name != ".lock"}


"""The Python API (emulator.run / load / sweep / resume) and bringing your own data, on the real local Ray."""
import json
import os
import signal
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

import emulator
from conftest import STATEFUL, comparable, digest, run_python, small_scenario
from emulator.cli import main
from emulator.scenario import ScenarioError
from emulator.parts import validate_scenario

TESTS = Path(__file__).resolve().parent


def arrays(seed: int = 0, n: int = 800, dim: int = 20, classes: int = 3):
    """A small learnable task: labels from a random linear map of Gaussian features."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n + 200, dim)).astype(np.float32)
    y = np.argmax(x @ rng.normal(size=(dim, classes)), axis=1)
    return x[:n], y[:n], x[n:], y[n:]


def unsplit(**overrides) -> dict:
    """small_scenario without a partition or a device count: the data's own split decides both."""
    raw = small_scenario(**overrides)
    raw["data"].pop("partition")
    raw["population"].pop("devices")
    return raw


def quiet(**kwargs):
    return dict(progress=False, **kwargs)


# ------------------------------------------------------------------------------------ run, load
def test_run_from_a_path_a_dict_and_a_scenario_gives_one_result(ray_session, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_scenario(rounds=6)))
    from_path = emulator.run(path, overrides={"rounds": 3}, out=tmp_path / "path", **quiet())
    from_dict = emulator.run(small_scenario(rounds=6), overrides=["rounds=3"], out=tmp_path / "dict", **quiet())
    scenario = validate_scenario(small_scenario(rounds=3))
    from_object = emulator.run(scenario, out=tmp_path / "object", **quiet())

    assert isinstance(from_path, emulator.Run) and from_path.path == tmp_path / "path"
    assert comparable(from_path.path) == comparable(from_dict.path) == comparable(from_object.path)
    for result in (from_path, from_dict, from_object):
        assert result.status == "completed" and result.summary["rounds_completed"] == 3
        on_disk = pd.read_csv(result.path / "metrics.csv")
        pd.testing.assert_frame_equal(result.metrics, on_disk)
        assert list(result.metrics["round"]) == [1, 2, 3]
        assert len(result.participation) == 40 and "reported" in result.participation
        assert result.scenario.rounds == 3
    assert from_path.evaluated()["test_acc"].notna().all()
    assert from_path.data is None  # read its data from the scenario

    loaded = emulator.load(from_path.path)
    assert loaded.summary == from_path.summary
    pd.testing.assert_frame_equal(loaded.metrics, from_path.metrics)
    assert "completed, 3/3 rounds" in repr(loaded) and os.fspath(loaded) == str(from_path.path)
    with pytest.raises(ScenarioError, match="not a run directory"):
        emulator.load(tmp_path)


def test_runs_in_one_process_share_the_ray_session_and_the_runners(ray_session, tmp_path):
    import ray

    from emulator.runtime.pool import shared_runners

    def runners():
        handles = shared_runners()
        return sorted(r._actor_id.hex() for r in handles), sorted(ray.get([r.pid.remote() for r in handles]))

    on_ray = {"runtime.backend": "ray"}  # the shared runners are Ray's: small_scenario runs in process
    emulator.run(small_scenario(rounds=2, **on_ray), out=tmp_path / "a", **quiet())
    job = ray.get_runtime_context().get_job_id()
    before = runners()
    # the second run from a worker thread, where no signal handler can be installed (some notebook front ends)
    done = {}

    def second():
        try:
            done["run"] = emulator.run(small_scenario(rounds=2, seed=5, **on_ray), out=tmp_path / "b", **quiet())
        except BaseException as exc:  # pragma: no cover - reported below
            done["error"] = exc

    thread = threading.Thread(target=second)
    thread.start()
    thread.join()
    assert "error" not in done, done.get("error")
    assert done["run"].status == "completed"
    assert ray.is_initialized() and ray.get_runtime_context().get_job_id() == job
    assert runners() == before and before[0]


@pytest.mark.ray  # in a process of its own
def test_a_process_keeps_the_session_it_started_for_every_run_and_ends_it_at_exit(tmp_path):
    """Without a session of the caller's, the first run starts Ray and later runs reuse it and its runners."""
    script = f"""
import json, sys
sys.path.insert(0, {str(TESTS)!r})
import ray, emulator
from conftest import small_scenario
from emulator.runtime.pool import shared_runners

def state():
    return (ray.get_runtime_context().get_job_id(), sorted(r._actor_id.hex() for r in shared_runners()),
            sorted(ray.get([r.pid.remote() for r in shared_runners()])))

emulator.run(small_scenario(rounds=1, **{{"runtime.backend": "ray"}}), out={str(tmp_path / 'a')!r}, progress=False)
first = state()
emulator.run(small_scenario(rounds=1, seed=4, **{{"runtime.backend": "ray"}}), out={str(tmp_path / 'b')!r},
             progress=False)
second, up = state(), ray.is_initialized()
ray.shutdown()
# then a session of the caller's own: it repeats the first session's job id, and that session's runner
# handles (dead with it) must not be reused
ray.init(address="local", num_cpus=2, include_dashboard=False)
third = emulator.run(small_scenario(rounds=1, **{{"runtime.backend": "ray"}}), out={str(tmp_path / 'd')!r},
                     progress=False)
print(json.dumps({{"first": first, "second": second, "up": up, "third": third.summary["status"]}}))
"""
    env = {**os.environ, "RAY_ADDRESS": ""}
    done = run_python(script, tmp_path, capture_output=True, text=True, timeout=400, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["up"] and report["first"] == report["second"] and report["first"][1]
    assert report["third"] == "completed"
    assert "Traceback" not in done.stderr


def test_bad_input_raises_scenario_error_with_the_command_lines_message(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(small_scenario()))
    with pytest.raises(ScenarioError, match="algorithm.client_lr") as error:
        emulator.run(path, overrides={"algorithm.client_lr": -1}, out=tmp_path / "r", **quiet())
    assert isinstance(error.value, ValueError) and emulator.ScenarioError is ScenarioError
    assert main(["validate", str(path), "--set", "algorithm.client_lr=-1"]) == 2
    assert capsys.readouterr().err.strip() == f"error: {error.value}"
    with pytest.raises(ScenarioError, match="clientlr"):
        emulator.run(small_scenario(), overrides=["algorithm.clientlr=0.1"], **quiet())
    with pytest.raises(ScenarioError, match=r"emulator.run\(scenario=42\): scenario takes a YAML file path"):
        emulator.run(42)
    assert not (tmp_path / "r").exists()


def test_sweep_through_the_api(ray_session, tmp_path, forked_sweep_workers):
    result = emulator.sweep(small_scenario(rounds=2), grid={"algorithm.client_lr": [0.05, 0.1]}, seeds=1,
                            out=tmp_path / "sweep", parallel=2, **quiet())
    assert isinstance(result, emulator.Sweep) and len(result) == 2 and not result.failed
    assert all(run.status == "completed" for run in result)
    table = result.table()
    assert sorted(table["algorithm.client_lr"]) == [0.05, 0.1] and list(table["status"]) == ["completed"] * 2
    assert result.report is not None and Path(result.report).exists()
    assert result[0].grid == {"algorithm.client_lr": 0.05}
    assert result["tiny-client_lr_0.1-seed3"].scenario.algorithm.client_lr == 0.1
    __import__("emulator.sweeps")  # the command line's machinery, a module of its own: the name stays the function
    assert emulator.sweep is emulator.api.sweep


# ------------------------------------------------------------------------------- your own data
def test_arrays_with_device_lists(ray_session, tmp_path):
    x, y, xt, yt = arrays()
    devices = [np.arange(d * 20, (d + 1) * 20) for d in range(40)]
    result = emulator.run(unsplit(rounds=3), data=(x, y, xt, yt), devices=devices, out=tmp_path / "r", **quiet())
    assert result.status == "completed" and result.summary["devices"] == 40
    record = json.loads((result.path / "data.json").read_text())
    assert record["source"] == "memory" and record["form"] == "arrays" and record["split"] == "devices"
    assert record["fingerprint"].startswith("sha256:") and result.summary["data"] == record == result.data
    assert record["input_shape"] == [20] and record["classes"] == 3
    text = (result.path / "scenario.yaml").read_text()
    assert text.startswith("# data: given in memory") and record["fingerprint"] in text
    scenario = result.scenario  # still a valid scenario, describing the data it got
    assert scenario.population.devices == 40 and scenario.data.partition.scheme == "natural"
    assert scenario.data.dataset == "memory" and scenario.data.options.shape == [20]
    assert scenario.data.options.classes == 3 and scenario.data.options.fingerprint == record["fingerprint"]
    assert result.summary["train_samples"] == 800 and result.summary["test_samples"] == 200
    assert result.metrics["test_acc"].iloc[-1] > 0.5  # it learns the task

    # the same arrays as a dict, dealt out by the scenario's partition: another fingerprint
    from emulator.data.custom import read_data

    as_dict = read_data({"x_train": x, "y_train": y, "x_test": xt, "y_test": yt})
    assert as_dict.split is None and as_dict.fingerprint != record["fingerprint"]


def test_data_errors_name_the_argument():
    x, y, xt, yt = arrays()
    with pytest.raises(ScenarioError, match="population.devices: 40, but data= comes split into 2 devices"):
        emulator.run(small_scenario(**{"data.partition": None}), data=(x, y, xt, yt),
                     devices=[np.arange(10), np.arange(10, 20)])
    with pytest.raises(ScenarioError, match="data.partition.scheme: 'dirichlet'"):
        emulator.run(small_scenario(), data=(x, y, xt, yt), users=np.arange(800) % 40)
    with pytest.raises(ScenarioError, match="devices=: sample 5 is held 2 times"):
        emulator.run(unsplit(), data=(x, y, xt, yt), devices=[np.arange(10), np.arange(5, 20)])
    with pytest.raises(ScenarioError, match="devices=: device 1 holds sample 900"):
        emulator.run(unsplit(), data=(x, y, xt, yt), devices=[np.arange(10), [900]])
    with pytest.raises(ScenarioError, match="users=: 10 user ids for 800"):
        emulator.run(unsplit(), data=(x, y, xt, yt), users=np.arange(10))
    with pytest.raises(ScenarioError, match="test set too"):
        import torch.utils.data

        emulator.run(unsplit(), data=torch.utils.data.TensorDataset(torch.zeros(4, 2), torch.zeros(4)))
    with pytest.raises(ScenarioError, match="labels must be classes 0..C-1"):
        emulator.run(unsplit(), data=(x, y - 1, xt, yt))
    with pytest.raises(ScenarioError, match=r"model.name: cnn_cifar expects inputs of shape \(3, 32, 32\), but dataset memory gives"):
        emulator.run(unsplit(model="cnn_cifar", **{"data.dataset": "cifar10"}), data=(x, y, xt, yt))
    with pytest.raises(ScenarioError, match="pass data= too"):
        emulator.run(unsplit(), devices=[np.arange(10)])


def test_a_torch_dataset_split_by_the_scenario_with_a_notebook_display(ray_session, tmp_path, monkeypatch,
                                                                      capsys):
    import torch
    from torch.utils.data import TensorDataset

    x, y, xt, yt = arrays(seed=1)
    train = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    test = TensorDataset(torch.from_numpy(xt), torch.from_numpy(yt))

    class ZMQInteractiveShell:  # what IPython's get_ipython() returns in a Jupyter kernel
        kernel = object()

    monkeypatch.setitem(sys.modules, "IPython", types.SimpleNamespace(get_ipython=ZMQInteractiveShell))
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # without ipywidgets: plain text lines
    result = emulator.run(small_scenario(rounds=3), data=(train, test), out=tmp_path / "r")
    assert "tiny: round 3/3, acc" in capsys.readouterr().out
    assert result.status == "completed" and result.data["form"] == "torch" and result.data["split"] is None
    assert result.scenario.data.partition.scheme == "dirichlet"  # the scenario's partition dealt the data out
    # the same tensors through the generic Dataset path (item by item) give the same arrays and fingerprint
    from emulator.data.custom import read_data

    class Items(torch.utils.data.Dataset):
        def __init__(self, x, y):
            self.x, self.y = x, y

        def __len__(self):
            return len(self.y)

        def __getitem__(self, i):
            return torch.from_numpy(self.x[i]), int(self.y[i])

    assert read_data((Items(x, y), Items(xt, yt))).fingerprint == read_data((train, test)).fingerprint


def test_a_hugging_face_dataset_with_a_user_column_is_a_natural_partition(ray_session, tmp_path):
    datasets = pytest.importorskip("datasets")
    from emulator.data.custom import build_custom_federation, read_data, scenario_for

    x, y, xt, yt = arrays(seed=2)
    rng = np.random.default_rng(7)
    users = np.array([f"user{u:02d}" for u in rng.integers(0, 25, len(y))])
    train = datasets.Dataset.from_dict({"pixels": x, "label": y, "writer": users})
    test = datasets.Dataset.from_dict({"pixels": xt, "label": yt})
    data = datasets.DatasetDict({"train": train, "test": test})

    custom = read_data(data, users="writer")
    scenario = validate_scenario(scenario_for(unsplit(), custom))
    federation = build_custom_federation(scenario, custom)
    names = np.unique(users)
    assert federation.num_devices == len(names) == scenario.population.devices
    for device, name in enumerate(names):  # device d holds exactly the rows of the d-th user (sorted ids)
        assert sorted(federation.device_samples(device)) == list(np.flatnonzero(users == name))
    np.testing.assert_array_equal(federation.train.x, x)

    result = emulator.run(unsplit(rounds=2, **{"algorithm.clients_per_round": 5}), data=data, users="writer",
                          out=tmp_path / "r", **quiet())
    assert result.status == "completed" and result.data["form"] == "huggingface"
    assert result.data["split"] == "users" and result.summary["devices"] == len(names)
    mapping = pd.read_csv(result.path / "users.csv")
    assert list(mapping["user"]) == list(names) and list(mapping["device"]) == list(range(len(names)))


# ------------------------------------------------------------------------- resuming in-memory data
def stateful(**overrides) -> dict:
    raw = small_scenario(**STATEFUL, **overrides)
    raw["data"].pop("partition")
    return raw


def interrupt_after(round_: int):
    """A progress callback that presses Ctrl-C (SIGINT to this process) once round `round_` is done."""
    def callback(row):
        if row["round"] == round_:
            os.kill(os.getpid(), signal.SIGINT)
    return callback


def test_resume_with_the_same_data_ends_as_an_uninterrupted_run(ray_session, tmp_path, capsys):
    x, y, xt, yt = arrays(seed=3)
    users = np.arange(len(y)) % 40
    data = {"x_train": x, "y_train": y, "x_test": xt, "y_test": yt}
    whole = emulator.run(stateful(), data=data, users=users, out=tmp_path / "whole", **quiet())

    with pytest.raises(KeyboardInterrupt) as stopped:
        emulator.run(stateful(), data=data, users=users, out=tmp_path / "cut", progress=interrupt_after(3))
    cut = stopped.value.run
    assert cut.status == "interrupted" and len(cut.metrics) == 3
    assert "emulator.resume(" in capsys.readouterr().err

    # the command line cannot load the data again: it refuses before touching anything
    before = digest(cut.path)
    assert main(["run", "--resume", str(cut.path), "--quiet"]) == 2
    message = capsys.readouterr().err
    assert "data given in memory" in message and f"emulator.resume({str(cut.path)!r}, data=..., users=...)" in message
    assert "Traceback" not in message and digest(cut.path) == before
    # so does the API without data, and with other data
    with pytest.raises(ScenarioError, match="data given in memory"):
        emulator.resume(cut.path, **quiet())
    with pytest.raises(ScenarioError, match="not the data"):
        emulator.resume(cut.path, data={**data, "x_train": x + 1}, users=users, **quiet())
    with pytest.raises(ScenarioError, match="not the data"):
        emulator.resume(cut.path, data=data, users=(users + 1) % 40, **quiet())
    assert digest(cut.path) == before

    resumed = emulator.resume(cut.path, data=data, users=users, **quiet())
    assert resumed.status == "completed" and resumed.summary["resumed_from_round"] == 2
    assert comparable(resumed.path) == comparable(whole.path)
    assert resumed.summary["data"] == whole.summary["data"]


def test_a_failed_resume_keeps_the_summary_it_held(ray_session, tmp_path):
    """A resume that breaks (here: other data slipped past the API's check) leaves summary.json as it was
    (status, data, timings), with a note; its round figures are those of the rounds metrics.csv holds."""
    from emulator.data.custom import build_custom_federation, read_data, record, scenario_for
    from emulator.driver import resume_run

    x, y, xt, yt = arrays(seed=4)
    devices = [np.arange(d * 20, (d + 1) * 20) for d in range(40)]
    with pytest.raises(KeyboardInterrupt):
        emulator.run(stateful(), data=(x, y, xt, yt), devices=devices, out=tmp_path / "r",
                     progress=interrupt_after(3))
    before = json.loads((tmp_path / "r" / "summary.json").read_text())

    other = read_data((x[:, :10].copy(), y, xt[:, :10].copy(), yt), devices=devices)  # fewer features
    scenario = validate_scenario(scenario_for(stateful(), other))
    with pytest.raises(Exception):
        resume_run(tmp_path / "r", federation=build_custom_federation(scenario, other), data_source=record(other))
    after = json.loads((tmp_path / "r" / "summary.json").read_text())
    from emulator.recording.recorder import progress
    from emulator.recording.rundir import read_metrics

    rows = read_metrics(tmp_path / "r")  # rewound to the checkpoint the resume started from
    figures = set(progress(rows))  # the round figures follow metrics.csv: summary.json never disagrees with it
    assert {k: after.get(k) for k in before if k not in figures} == {k: v for k, v in before.items()
                                                                     if k not in figures}
    assert after["status"] == "interrupted" and after["rounds_completed"] == len(rows)
    assert "resume_error" in after


def test_data_handed_over_from_python_is_written_to_the_data_cache_and_gives_the_same_run(tmp_path):
    """data.store: disk with emulator.run(data=...): the arrays are written once under their fingerprint's key
    and mapped, with the metrics of the same data held in memory; the same data again reads the cache."""
    x, y, xt, yt = arrays(seed=5)
    users = np.arange(len(y)) % 40
    runs = {}
    for order, mode in enumerate(("memory", "disk", "disk")):
        lines = []
        runs[mode] = emulator.run(unsplit(), data=(x, y, xt, yt), users=users, out=tmp_path / f"{mode}{order}",
                                  overrides={"data.store": {"mode": mode, "cache": str(tmp_path / "cache")}},
                                  notify=lines.append, **quiet())
        assert any(line.startswith("data written to") for line in lines) == (order == 1)  # then read
    stored = list((tmp_path / "cache").iterdir())
    assert len(stored) == 1 and stored[0].name.startswith("memory-40-"), stored
    assert comparable(runs["disk"].path) == comparable(runs["memory"].path)

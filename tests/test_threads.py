"""Torch's thread count is part of the arithmetic: runtime.num_cpus and server_num_cpus must not set it.
Every runner flushes denormal floats to zero, whatever its share (training.set_torch_arithmetic).

With two threads, oneDNN's convolution backward splits its sum over the minibatch between the threads, so
a CNN's weights come out different in the last bits than with one (the losses soon differ too). Runners
and the server therefore train with one thread unless runtime.torch_threads asks for more.
"""
import logging

import numpy as np
import ray

from conftest import small_scenario
from emulator.data.federation import ArrayDataset, Federation
from emulator.driver import run_scenario
from emulator.recording.rundir import read_metrics
from emulator.runtime.pool import RunnerPool, release_shared_runners
from emulator.parts import validate_scenario


def image_federation(devices=6, per_device=24, seed=0) -> Federation:
    """Random 28x28 images with a learnable label (the brightest quadrant), no data files needed."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(devices * per_device + 64, 1, 28, 28), dtype=np.uint8)
    quadrants = x.reshape(len(x), 2, 14, 2, 14).astype(np.float64).mean(axis=(2, 4)).reshape(len(x), 4)
    y = quadrants.argmax(1).astype(np.int64)
    train, test = ArrayDataset(x[:-64], y[:-64], 10), ArrayDataset(x[-64:], y[-64:], 10)
    return Federation.from_lists(train, test, np.split(np.arange(devices * per_device), devices))


def without_wall_time(path) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "wall_time_s"} for row in read_metrics(path)]


def cnn_scenario(**runtime) -> dict:
    raw = small_scenario(**{"data.dataset": "fashion_mnist", "model": "cnn_fmnist", "population.devices": 6,
                            "algorithm.clients_per_round": 3, "algorithm.local_steps": 3,
                            "algorithm.batch_size": 16, "rounds": 2, "system.model": "ideal"})
    raw["data"].pop("synthetic")
    raw["data"]["partition"] = {"scheme": "iid"}
    raw["runtime"] = {"runners": 1, **runtime}
    return raw


def test_runners_train_with_one_thread_whatever_their_cpu_share_and_a_share_above_one_says_how_to_use_more(
        ray_session, caplog):
    """A runner's threads follow runtime.torch_threads alone; a CPU share above one without it is a share the
    runner cannot use, and the pool says which setting would (one pool per case: each is a runner process)."""
    release_shared_runners()  # earlier tests' idle runners would leave no room for a 2-CPU runner
    for num_cpus, torch_threads, expected, warned in [(2, None, 1, True), (1, None, 1, False), (0.5, None, 1, False),
                                                      (2, 2, 2, False)]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="emulator.runtime.pool"):
            pool = RunnerPool.start(1, num_cpus, 0, torch_threads)
        try:
            assert ray.get(pool.runners[0].threads.remote()) == expected, (num_cpus, torch_threads)
            assert ray.get(pool.runners[0].flushes_denormals.remote())  # training.set_torch_arithmetic
        finally:
            pool.shutdown()
        assert ("runtime.torch_threads" in caplog.text) == warned, (num_cpus, torch_threads, caplog.text)


def test_cpu_shares_do_not_change_a_cnn_runs_metrics(ray_session, tmp_path):
    federation = image_federation()
    runs = {}
    for name, runtime in [("one", {"num_cpus": 1}), ("shares", {"num_cpus": 2, "server_num_cpus": 2})]:
        scenario = validate_scenario(cnn_scenario(**runtime))
        runs[name] = without_wall_time(run_scenario(scenario, tmp_path / name, federation=federation).path)
    assert runs["one"] == runs["shares"]
    assert all(row["train_loss"] != "" for row in runs["one"])

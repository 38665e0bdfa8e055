"""Every scenario shipped under scenarios/ runs: two rounds each, end to end, through run_scenario.

Validating a scenario is not enough (scenarios/cluster/population_100k.yaml validated but could not be
partitioned), so each YAML found under scenarios/ is run for 2 rounds (`--set rounds=2`), in process
(runtime.backend: inline) and, for those in ON_RAY, on the session's Ray instance too, and must finish with
status completed, 2 rows of metrics and the fingerprint recorded for it. New scenarios are picked up by the
glob. Each reads its data from the on-disk format (data.store: disk) in one of its runs and the ON_RAY ones
from memory in the other.

Data: Fashion-MNIST is read from Debian's dataset-fashion-mnist directory (the scenario is skipped when it
is not installed). MNIST, EMNIST and CIFAR-10 cannot be downloaded here, so they are written once per session
in their real file formats (IDX, CIFAR-10's pickled batches) with the real sample counts, random pixels and
balanced random labels, and `data.root` points there: the real loaders, partitions and models run, only the
pixels are noise.

Scenarios marked `slow` (tens of seconds each) run in `make test` too; `-m "not slow"` leaves them out.
"""
from __future__ import annotations

import csv
import fcntl
import json
import os
import pickle
import shutil
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import close_rows, cpu_identity
from session_scratch import SCRATCH_ENV

from emulator.data.vision import DEBIAN_FASHION_MNIST as FMNIST_DIR
from emulator.driver import run_scenario
from emulator.parts import load_scenario

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((ROOT / "scenarios").rglob("*.yaml"))

# Image scenarios are evaluated on this many test images instead of the full test set (10,000 to 18,800):
# on 2 cores the CNNs' final evaluation otherwise costs more than their two rounds of training.
TEST_SAMPLES = 2000

# Where two rounds of a scenario are mostly its devices' (or server's) local training, 25-50 s of a CNN's
# steps on 2 cores, the test trains fewer steps of smaller batches: every code path the scenario takes is the
# same (its algorithm, model, data, world, snapshot and server rounds), a round's work smaller. With TEST_SAMPLES
# these are the only settings changed besides `rounds`; population, data split and model stay as shipped.
LIGHTER = {
    "cluster/population_100k.yaml": ["algorithm.clients_per_round=100"],  # 10^5 devices still split and simulated
    # 10^6 devices take two minutes to generate and write (benchmarks/scale.py runs them): the same world and
    # data path at 2 x 10^4
    "cluster/population_1m.yaml": ["population.devices=20000", "algorithm.clients_per_round=100"],
    "fmnist_fedavg.yaml": ["algorithm.local_steps=2"],
    "papers/fast_fmnist.yaml": ["algorithm.local_steps=2", "algorithm.batch_size=32"],
    "papers/fast_fmnist_adaptive.yaml": ["algorithm.local_steps=2", "algorithm.batch_size=32"],
    "papers/fedavg_fmnist_acp.yaml": ["algorithm.local_steps=2", "algorithm.batch_size=32"],
    "papers/fast_cifar10.yaml": ["algorithm.local_steps=2", "algorithm.batch_size=16"],
    "papers/fedavg_cifar10_acp.yaml": ["algorithm.local_steps=2", "algorithm.batch_size=16"],
    "papers/safari_cifar10.yaml": ["algorithm.local_epochs=null", "algorithm.local_steps=2", "algorithm.batch_size=32",
                                   "algorithm.server_batch_size=32"],
    "papers/fsl_cifar10_scenario1.yaml": ["algorithm.local_epochs=null", "algorithm.local_steps=4",
                                          "algorithm.server_epochs=1"],
    "papers/fsl_cifar10_scenario2.yaml": ["algorithm.local_epochs=null", "algorithm.local_steps=4"],
    "papers/fsl_emnist_scenario1.yaml": ["algorithm.local_epochs=null", "algorithm.local_steps=4",
                                         "algorithm.server_epochs=1"],
    "papers/fsl_emnist_scenario2.yaml": ["algorithm.local_epochs=null", "algorithm.local_steps=4"],
    "papers/fast_shakespeare.yaml": ["algorithm.local_steps=2"],
}

# Scenarios that take more than 15 s for 2 rounds on the 2-core reference machine (with other work on it),
# LIGHTER's settings included. They run in `make test` (every shipped scenario must run in the test suite);
# `-m "not slow"` leaves them out while iterating.
SLOW = {
    "cluster/population_100k.yaml",        # 10^5 devices: ~10 s to generate and split the data
}
# Scenarios whose two rounds train a CNN, an LSTM or a large population for seconds: `make test` checks their
# fingerprints, `make test-fast` (the inner loop) leaves them to it; the light ones cover every algorithm there.
HEAVY = {
    "papers/fedavg_cifar10_acp.yaml", "papers/safari_cifar10.yaml", "papers/fedavg_fmnist_acp.yaml",
    "papers/fast_fmnist.yaml", "papers/fast_fmnist_adaptive.yaml", "papers/fast_cifar10.yaml",
    "system/diurnal_dropout.yaml", "cluster/population_1m.yaml", "privacy/private_slow_tier.yaml",
    "papers/fast_shakespeare.yaml", "papers/fsl_cifar10_scenario1.yaml", "papers/fsl_cifar10_scenario2.yaml",
    "papers/fsl_emnist_scenario1.yaml", "papers/fedavg_two_sided_mnist.yaml", "system/stragglers_deadline.yaml",
    "papers/fsl_emnist_scenario2.yaml", "fmnist_fedavg.yaml",
}

# Real file names, sample counts and classes of the datasets that are faked (see emulator/data/vision.py):
# (name prefix, test split's name, training images, test images, classes).
IDX_FILES = {
    ("mnist", ""): ("", "t10k", 60000, 10000, 10),
    ("emnist", "balanced"): ("emnist-balanced-", "test", 112800, 18800, 47),
    ("emnist", "byclass"): ("emnist-byclass-", "test", 697932, 116323, 62),
    ("emnist", "bymerge"): ("emnist-bymerge-", "test", 697932, 116323, 47),
    ("emnist", "digits"): ("emnist-digits-", "test", 240000, 40000, 10),
    ("emnist", "letters"): ("emnist-letters-", "test", 124800, 20800, 26),  # labelled 1..26 in the files
    ("emnist", "mnist"): ("emnist-mnist-", "test", 60000, 10000, 10),
}
CIFAR10_BATCHES = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]  # 10,000 images each, 10 classes


# The metrics of each scenario's two rounds as recorded from 2df6435 (before the code was reorganised into
# packages): every column but wall_time_s, as the strings metrics.csv holds. A change that should not alter
# results (a refactoring) must leave them bit-identical; one that does alter them re-records them on purpose:
# EMULATOR_RECORD_FINGERPRINTS=1 python -m pytest tests/test_shipped_scenarios.py
FINGERPRINTS = ROOT / "tests" / "fingerprints"
RECORD = os.environ.get("EMULATOR_RECORD_FINGERPRINTS") == "1"


def _fingerprint_file(path: Path) -> Path:
    return FINGERPRINTS / (_name(path).replace("/", "__").removesuffix(".yaml") + ".json")


def _check_fingerprint(path: Path, written: list[dict]) -> None:
    """`written`: metrics.csv's rows as the strings on disk."""
    rows = [{k: v for k, v in row.items() if k != "wall_time_s"} for row in written]
    file = _fingerprint_file(path)
    if RECORD:
        FINGERPRINTS.mkdir(exist_ok=True)
        file.write_text(json.dumps({"scenario": _name(path), "cpu": cpu_identity(), "rows": rows}, indent=1) + "\n")
        return
    assert file.is_file(), f"no fingerprint for {_name(path)}: record one (see FINGERPRINTS above)"
    recorded = json.loads(file.read_text())
    if recorded["cpu"] == cpu_identity():
        assert rows == recorded["rows"]  # bit-identical: same strings in every column of both rounds
    else:  # another CPU rounds floats differently: what does not come from training must still match exactly
        close_rows(rows, recorded["rows"])


def _name(path: Path) -> str:
    return path.relative_to(ROOT / "scenarios").as_posix()


def _write_idx(path: Path, array: np.ndarray) -> None:
    """An unsigned-byte IDX file: 0x00 0x00 0x08 <ndim>, big-endian uint32 dimensions, the bytes."""
    with open(path, "wb") as handle:
        handle.write(bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape))
        handle.write(np.ascontiguousarray(array, dtype=np.uint8).tobytes())


def _labels(n: int, classes: int, rng: np.random.Generator) -> np.ndarray:
    """Every class equally often (up to one), in random order."""
    return rng.permutation(np.arange(n) % classes).astype(np.uint8)


def _write_fake_dataset(folder: Path, dataset: str, split: str, rng: np.random.Generator) -> None:
    folder.mkdir(parents=True)
    if dataset in ("shakespeare", "femnist"):  # LEAF's JSON files: 150 users, more than any scenario keeps
        from leaf_fixtures import femnist_users, shakespeare_users, write_leaf

        sizes = {f"user_{i:03d}": (30 + i % 20, 8) for i in range(150)}
        write_leaf(folder, shakespeare_users(sizes) if dataset == "shakespeare" else femnist_users(sizes), files=3)
        return
    if dataset == "cifar10":
        for name in CIFAR10_BATCHES:
            batch = {b"batch_label": name.encode(),
                     b"data": rng.integers(0, 256, (10000, 3 * 32 * 32), dtype=np.uint8),
                     b"labels": _labels(10000, 10, rng).astype(int).tolist(),
                     b"filenames": [f"{name}_{i}.png".encode() for i in range(10000)]}
            with open(folder / name, "wb") as handle:
                pickle.dump(batch, handle, protocol=2)  # the python2-era pickle the real batches are
        return
    prefix, test, train_n, test_n, classes = IDX_FILES[(dataset, split)]
    first_label = 1 if split == "letters" else 0
    for part, n in (("train", train_n), (test, test_n)):
        _write_idx(folder / f"{prefix}{part}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        _write_idx(folder / f"{prefix}{part}-labels-idx1-ubyte", _labels(n, classes, rng) + first_label)


@pytest.fixture(scope="session")
def fake_data():
    """fake_data(dataset, split) -> a data.root holding that dataset's files in its real format, names and
    counts, with random pixels and balanced labels; each written once per session (for all its workers, in
    the session's scratch directory), when first asked for."""
    root = Path(os.environ[SCRATCH_ENV]) / "datasets"
    root.mkdir(exist_ok=True)

    def make(dataset: str, split: str = "") -> Path:
        folder = root / f"{dataset}-{split}" if split else root / dataset
        with open(root / f".{folder.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker may be writing the same one
            if not folder.exists():
                temporary = folder.with_name(f".{folder.name}.{os.getpid()}")
                shutil.rmtree(temporary, ignore_errors=True)
                # seeded by the name, not the order asked: a scenario's data (and fingerprint) is the same in
                # any subset
                _write_fake_dataset(temporary, dataset, split, np.random.default_rng(zlib.crc32(folder.name.encode())))
                temporary.rename(folder)
        return folder

    return make


# Scenarios also run on the session's Ray instance: one of each algorithm family and of each part of the
# world that the server actor holds (traces, ties, privacy and SecAgg), so each path through the actors is
# exercised end to end. The others' Ray path is the same code; that the two backends agree bit for bit on
# every algorithm is tested in test_inline.py (asynchronous aggregation there too), and here through the
# fingerprints (recorded from Ray runs). A CNN on Ray runners: test_threads.py and test_precision.py.
ON_RAY = {
    "quickstart.yaml",                   # FedAvg, Markov availability, deadline, over-selection
    "papers/fast_fmnist_diurnal.yaml",   # FAST's snapshot rounds
    "papers/fsl_emnist_scenario2.yaml",  # FSL's server steps
    "papers/safari_mnist.yaml",          # SAFARI's server rounds
    "privacy/private_slow_tier.yaml",    # DP-FedAvg with accounting, a slow tier
    "system/trace_driven.yaml",          # availability replayed from a trace
    "worlds/latent_types.yaml",          # behaviour tied to data
    "worlds/what_devices_get.yaml",      # evaluation on every device's own test split (a runner's pass)
    "worlds/personal_layers.yaml",       # per-device state (FedPer): personal models scored on the runners
    "security/backdoor_always_on.yaml",  # attackers: poisoned training on the runners, the backdoor measured
    "worlds/eligible_at_night.yaml",     # eligibility by habits, and the devices' energy
    "network/shared_cells.yaml",         # transfers sharing cells, regions and the server's link
    "network/edge_servers.yaml",         # edge servers: HierFAVG's cloud rounds, per-edge models on the runners
}


def _params() -> list:
    """Every scenario in process (runtime.backend: inline), and those in ON_RAY on Ray as well: both must
    give the fingerprints recorded from Ray runs, so the backends agree bit for bit."""
    params = []
    for path in SCENARIOS:
        slow = _name(path) in SLOW
        for backend in ("ray", "inline") if _name(path) in ON_RAY else ("inline",):
            marks = [pytest.mark.slow] if slow else [pytest.mark.heavy] if _name(path) in HEAVY else []
            params.append(pytest.param(path, backend, id=f"{_name(path)}-{backend}", marks=marks))
    return params


def test_every_listed_scenario_exists():
    """SLOW and ON_RAY name scenarios by path; a renamed scenario must not silently lose its mark."""
    names = {_name(p) for p in SCENARIOS}
    assert SCENARIOS, "no scenarios shipped"
    assert SLOW <= names and HEAVY <= names, sorted((SLOW | HEAVY) - names)
    assert ON_RAY <= names and not ON_RAY & SLOW, sorted(ON_RAY - names)
    assert set(LIGHTER) <= names, sorted(set(LIGHTER) - names)


@pytest.mark.parametrize(("path", "backend"), _params())
def test_shipped_scenario_runs_two_rounds(path, backend, tmp_path, request):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    data = load_scenario(path).data
    # Every scenario reads its data from the on-disk format (memory-mapped) at least once, in its Ray run or its
    # only run, and those in ON_RAY from memory too (their inline run): one fingerprint for all (recorded from
    # data in memory) says the two data paths give the same numbers, scenario by scenario
    store = "memory" if backend == "inline" and _name(path) in ON_RAY else "disk"
    overrides = ["rounds=2", f"runtime.backend={backend}", f"data.store={store}"]
    if data.dataset == "fashion_mnist":
        if not FMNIST_DIR.is_dir():
            pytest.skip(f"Fashion-MNIST is not installed in {FMNIST_DIR} (apt-get install dataset-fashion-mnist)")
        overrides.append(f"data.root={FMNIST_DIR}")
    elif data.dataset != "synthetic":
        split = data.emnist_split if data.dataset == "emnist" else ""
        overrides.append(f"data.root={request.getfixturevalue('fake_data')(data.dataset, split)}")
    if data.dataset != "synthetic" and (data.test_samples is None or data.test_samples > TEST_SAMPLES):
        overrides.append(f"data.test_samples={TEST_SAMPLES}")
    overrides += LIGHTER.get(_name(path), [])
    scenario = load_scenario(path, overrides)

    started = time.perf_counter()
    result = run_scenario(scenario, tmp_path / "run")
    print(f"{_name(path)} ({backend}): 2 rounds in {time.perf_counter() - started:.1f} s")

    assert result.summary["status"] == "completed", result.summary
    assert len(result.rows) == 2
    with open(result.path / "metrics.csv", newline="") as handle:
        written = list(csv.DictReader(handle))
    assert [row["round"] for row in written] == ["1", "2"]
    _check_fingerprint(path, written)

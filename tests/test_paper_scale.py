"""The paper-scale tooling: the plain reference loop, the device session's plan, filing and the tables.

The GPU runs themselves happen on a lent machine (benchmarks/gpu_device_run.sh papers); what is checked here
is that the loop implements the setup it claims, that the plan puts whole cells first and skips finished
runs, and that the tables read the runs as documented.
"""
from __future__ import annotations

import csv
import gzip
import importlib.util
import json
import statistics
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent


def load(path: str):
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


reference = load("benchmarks/reference_fedavg.py")
papers = load("benchmarks/gpu_papers.py")
filing = load("benchmarks/gpu_papers_file.py")
tables = load("analysis/paper_scale.py")


# ------------------------------------------------------------------------------- the plain loop's setup
def test_the_split_gives_every_client_the_same_number_of_distinct_images_skewed_by_alpha():
    labels = np.repeat(np.arange(10), 600)
    shares = reference.dirichlet_balanced(labels, 100, 0.1, np.random.default_rng(3))
    assert [len(s) for s in shares] == [60] * 100
    everything = np.concatenate(shares)
    assert len(np.unique(everything)) == len(everything) == 6000  # each image dealt once
    main_class = [np.bincount(labels[s], minlength=10).max() / 60 for s in shares]
    assert statistics.median(main_class) > 0.6  # alpha 0.1: most clients are mostly one class
    iid = reference.dirichlet_balanced(labels, 100, 100.0, np.random.default_rng(3))
    assert statistics.median(np.bincount(labels[s], minlength=10).max() / 60 for s in iid) < 0.35
    again = reference.dirichlet_balanced(labels, 100, 0.1, np.random.default_rng(3))
    assert all(np.array_equal(a, b) for a, b in zip(shares, again))


def test_beta_participation_favours_low_indices_and_uniform_does_not():
    rng = np.random.default_rng(0)
    beta = [reference.choose("beta", 100, 10, rng) for _ in range(300)]
    uniform = [reference.choose("uniform", 100, 10, rng) for _ in range(300)]
    assert all(len(set(c)) == 10 for c in beta + uniform)
    assert np.mean([i for c in beta for i in c]) < 15  # Beta(1, 10): most draws land in the first tenth
    assert 40 < np.mean([i for c in uniform for i in c]) < 60
    assert len({i for c in beta for i in c}) < 80 and len({i for c in uniform for i in c}) == 100


def test_local_batches_walk_a_shuffled_pass_with_a_partial_last_batch_then_reshuffle():
    generator = reference.torch.Generator().manual_seed(0)
    walked = reference.batches(600, 10, 128, generator, "cpu")
    assert [len(b) for b in walked] == [128, 128, 128, 128, 88] * 2
    first_pass = reference.torch.cat(walked[:5])
    assert sorted(first_pass.tolist()) == list(range(600))
    assert not reference.torch.equal(first_pass, reference.torch.cat(walked[5:]))


def write_idx(path: Path, array: np.ndarray) -> None:
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    path.write_bytes(gzip.compress(header + array.astype(np.uint8).tobytes()))


@pytest.fixture(scope="module")
def tiny_fmnist(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fmnist")
    rng = np.random.default_rng(0)
    for name, count in (("train", 240), ("t10k", 40)):
        write_idx(root / f"{name}-images-idx3-ubyte.gz", rng.integers(0, 256, (count, 28, 28)))
        write_idx(root / f"{name}-labels-idx1-ubyte.gz", np.arange(count) % 10)
    return root


def test_the_plain_loop_runs_evaluates_as_asked_and_says_when_it_stopped_early(tiny_fmnist, tmp_path, capsys):
    args = ["--data", str(tiny_fmnist), "--device", "cpu", "--clients", "4", "--per-round", "2", "--steps", "2",
            "--batch", "16", "--eval-every", "2", "--dense-from", "4", "--rounds", "5"]
    assert reference.main(args + ["--out", str(tmp_path / "done")]) == 0
    rows = list(csv.DictReader((tmp_path / "done" / "metrics.csv").open()))
    assert [int(r["round"]) for r in rows] == [2, 4, 5]  # every 2nd, then every round from the 4th
    summary = json.loads((tmp_path / "done" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rounds_completed"] == 5
    assert summary["best"] == max(float(r["test_acc"]) for r in rows)
    assert reference.main(args + ["--adam", "kept", "--out", str(tmp_path / "kept")]) == 0
    assert reference.main(args + ["--deadline", "0", "--out", str(tmp_path / "late")]) == 3
    assert json.loads((tmp_path / "late" / "summary.json").read_text())["status"] == "unfinished"


def test_the_plain_loops_cnn_is_the_emulators():
    from emulator.models.zoo import cnn_fmnist

    ours, theirs = reference.cnn(), cnn_fmnist((1, 28, 28), 10)
    assert [tuple(p.shape) for p in ours.parameters()] == [tuple(p.shape) for p in theirs.parameters()]
    assert [type(m) for m in ours] == [type(m) for m in theirs]


# ------------------------------------------------------------------------------------ the device plan
def test_the_plan_puts_every_alpha_01_cell_of_a_seed_before_the_next_seed_and_skips_finished_runs(tmp_path):
    jobs = papers.plan()
    first = jobs[:18]
    assert {j.name.rsplit("seed", 1)[1] for j in first[:6]} == {"0"}  # 4 emulator cells + 2 plain-loop cells
    assert sum(j.kind == "reference" for j in first) == 6 and sum(j.kind == "emulator" for j in first) == 12
    assert "fast-fmnist-selection_kind_beta_a_1_b_10-q_0.5-seed2" in {j.name for j in first}
    beta_same = papers.same_setup_jobs(1000, "beta")  # the plain loop on the emulator's Beta splits and cohorts
    assert beta_same and all("beta" in j.name and "--setup" in j.args for j in beta_same)
    assert [j.name for j in jobs[18:18 + len(beta_same)]] == [j.name for j in beta_same]
    after = 18 + len(beta_same)
    assert all("alpha0.05" in j.name for j in jobs[after:after + 6])
    safari = jobs[after + 6:after + 12]  # SAFARI's s = 90 cell: FedAvg (q = 1) and SAFARI (q = 0.8), 3 seeds
    assert all(j.scenario == papers.SAFARI and "s90" in j.name for j in safari)
    assert sorted(a for j in safari for a in j.args if a.startswith("algorithm.q=")) == ["algorithm.q=0.8"] * 3 + [
        "algorithm.q=1"] * 3
    assert papers.SAFARI in papers.command(safari[0], tmp_path)
    uniform_same = papers.same_setup_jobs(1000, "uniform")
    assert [j.name for j in jobs[after + 12:after + 12 + len(uniform_same)]] == [j.name for j in uniform_same]
    seed0 = next(j for j in jobs if j.name == "fast-fmnist-selection_kind_uniform-q_0-seed0")
    assert {"rounds=1000", "seed=0", "algorithm.q=0"} <= set(seed0.args)
    done = tmp_path / "2026-01-01-h200" / seed0.name
    done.mkdir(parents=True)
    (done / "summary.json").write_text(json.dumps({"status": "completed"}))
    stopped = tmp_path / "2026-01-01-h200" / "reference-fedavg-alpha0.1-beta-seed0"
    stopped.mkdir()
    (stopped / "summary.json").write_text(json.dumps({"status": "unfinished"}))
    assert papers.finished(str(tmp_path)) == {seed0.name}


def test_an_emulator_job_runs_in_process_on_the_gpu_and_a_plain_one_names_its_output(tmp_path):
    jobs = papers.plan()
    emulator = papers.command(jobs[0], tmp_path)
    assert "runtime.backend=inline" in emulator and f"output.dir={tmp_path}" in emulator
    plain = papers.command(next(j for j in jobs if j.kind == "reference"), tmp_path)
    assert plain[1].endswith("reference_fedavg.py") and plain[-2:] == ["--out", str(tmp_path)]


# ------------------------------------------------------------------------------- filing and the tables
def fake_run(folder: Path, accuracy: dict[int, float], status: str, emulator: dict | None = None) -> None:
    folder.mkdir(parents=True)
    with (folder / "metrics.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["round", "test_acc"])
        writer.writerows(sorted(accuracy.items()))
    summary = {"status": status}
    if emulator is None:
        summary["settings"] = {"alpha": 0.1, "participation": "uniform", "seed": int(folder.name[-1]), "adam": "fresh"}
    else:
        (folder / "scenario.yaml").write_text(yaml.safe_dump(emulator))
    (folder / "summary.json").write_text(json.dumps(summary))


def emulator_scenario(seed: int, q: float) -> dict:
    return {"seed": seed, "data": {"partition": {"alpha": 0.1}},
            "algorithm": {"name": "fast", "q": q, "selection": {"kind": "beta", "a": 1, "b": 10}}}


def test_the_table_reads_the_papers_metric_the_late_mean_and_stopped_runs_only_when_asked(tmp_path):
    curve = {r: 0.5 + r / 2000 for r in range(10, 1001, 10)}  # acc rises linearly to 1.0 at round 1000
    fake_run(tmp_path / "gpu" / "s" / "fast-fmnist-a-seed0", curve, "completed", emulator_scenario(0, 0))
    fake_run(tmp_path / "gpu" / "s" / "fast-fmnist-a-seed1", {r: a - 0.1 for r, a in curve.items()}, "completed",
             emulator_scenario(1, 0))
    fake_run(tmp_path / "gpu" / "s" / "fast-fmnist-b-seed0", {r: a for r, a in curve.items() if r <= 930},
             "interrupted", emulator_scenario(0, 0.5))
    plain = {**curve, **{r: 0.9 for r in range(996, 1001)}}
    fake_run(tmp_path / "gpu-reference" / "s" / "reference-fedavg-alpha0.1-uniform-seed0", plain, "completed")
    runs = tables.collect(tmp_path)
    assert sorted((r.source, r.algorithm, r.seed) for r in runs) == [
        ("emulator", "fedavg", 0), ("emulator", "fedavg", 1), ("plain loop", "fedavg", 0)]
    fedavg = [m for m in (tables.metrics(r) for r in runs if r.source == "emulator")]
    assert sorted(round(m["last5"], 4) for m in fedavg) == [0.89, 0.99]  # rounds 960-1000: 0.98..1.0 -> 0.99
    assert sorted(round(m["late"], 4) for m in fedavg) == [0.7025, 0.8025]  # rounds 210-1000
    row = next(line for line in tables.table(runs) if "| beta | fedavg | emulator |" in line)
    assert "| 2 (0,1) | 94.00 ± 7.07 |" in row
    plain_row = next(line for line in tables.table(runs) if "plain loop" in line)
    assert "| 97.00 |" in plain_row  # the last 5 evaluations 10 apart: 0.98, 0.985, 0.99, 0.995 and 0.9
    assert "| 90.00 |" in plain_row  # the last 5 rounds back to back
    through = tables.collect(tmp_path, through=900)
    assert ("emulator", "fast q=0.5", 0) in {(r.source, r.algorithm, r.seed) for r in through}
    stopped = next(r for r in through if r.algorithm == "fast q=0.5")
    last_five = statistics.mean(curve[r] for r in range(860, 901, 10))
    assert tables.metrics(stopped, 900)["last5"] == pytest.approx(last_five)


def test_safaris_table_reads_s_and_the_algorithm_from_each_run_and_puts_the_paper_beside_fedavg(tmp_path):
    def scenario(seed: int, q: float, never: int) -> dict:
        return {"seed": seed, "data": {"partition": {"scheme": "classes"}, "server_set": {"size": 600}},
                "algorithm": {"name": "safari", "q": q, "selection": {"kind": "uniform", "exclude": never}}}

    flat = {r: 0.8 for r in range(10, 1001, 10)}
    fake_run(tmp_path / "gpu" / "s" / "safari-fmnist-s90-q_1-seed0", flat, "completed", scenario(0, 1, 90))
    fake_run(tmp_path / "gpu" / "s" / "safari-fmnist-s90-q_1-seed1", {r: 0.7 for r in flat}, "completed",
             scenario(1, 1, 90))
    fake_run(tmp_path / "gpu" / "s" / "safari-fmnist-s90-q_0.8-seed0", {r: 0.85 for r in flat}, "completed",
             scenario(0, 0.8, 90))
    fake_run(tmp_path / "gpu" / "s" / "safari-fmnist-fedavg-exclude_0-seed0", flat, "interrupted", scenario(0, 1, 0))
    runs = tables.collect(tmp_path)
    assert sorted((r.participation, r.algorithm, r.seed) for r in runs) == [
        ("90", "fedavg", 0), ("90", "fedavg", 1), ("90", "safari q=0.8, 600 server samples", 0)]
    rows = tables.safari_table(runs)
    assert rows[2] == "| 90 | fedavg | 2 (0,1) | 75.00 ± 7.07 | 75.00 ± 7.07 | 75.00 ± 7.07 | 80.71 |"
    assert rows[3] == "| 90 | safari q=0.8, 600 server samples | 1 (0) | 85.00 | 85.00 | 85.00 |  |"


def test_filing_puts_finished_and_stopped_runs_apart(tmp_path, monkeypatch):
    packed = tmp_path / "packed"
    fake_run(packed / "runs" / "fast-fmnist-x-seed0", {10: 0.5}, "completed", emulator_scenario(0, 0))
    fake_run(packed / "runs" / "fast-fmnist-y-seed0", {10: 0.5}, "interrupted", emulator_scenario(0, 0))
    fake_run(packed / "runs" / "reference-fedavg-alpha0.1-uniform-seed0", {10: 0.5}, "completed")
    (packed / "jobs.csv").write_text("name\n")
    archive = tmp_path / "papers.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(packed, arcname=".")
    monkeypatch.chdir(tmp_path)
    assert filing.main(str(archive), "day-h200") == 0
    assert (tmp_path / "results/gpu/day-h200/fast-fmnist-x-seed0/scenario.yaml").exists()
    assert (tmp_path / "results/gpu/day-h200-unfinished/fast-fmnist-y-seed0/metrics.csv").exists()
    assert (tmp_path / "results/gpu-reference/day-h200/reference-fedavg-alpha0.1-uniform-seed0/summary.json").exists()
    assert (tmp_path / "results/gpu/day-h200/jobs.csv").exists()


# ------------------------------------------------------------------- the plain loop on an emulator's setup
def test_the_plain_loop_trains_exactly_the_cohorts_a_setup_gives(tiny_fmnist, tmp_path):
    offsets = np.array([0, 60, 120, 180, 240])
    indices = np.random.default_rng(1).permutation(240).astype(np.int32)
    args = ["--data", str(tiny_fmnist), "--device", "cpu", "--steps", "2", "--batch", "16", "--eval-every", "1",
            "--rounds", "3"]
    nobody = tmp_path / "nobody.npz"
    np.savez(nobody, offsets=offsets, indices=indices, cohorts=np.full((3, 2), -1))
    assert reference.main(args + ["--setup", str(nobody), "--out", str(tmp_path / "nobody")]) == 0
    untouched = {r["test_acc"] for r in csv.DictReader((tmp_path / "nobody" / "metrics.csv").open())}
    assert len(untouched) == 1  # no client reported: the model never moved
    some = tmp_path / "some.npz"
    np.savez(some, offsets=offsets, indices=indices, cohorts=np.array([[0, 3], [1, -1], [2, 3]]))
    assert reference.main(args + ["--setup", str(some), "--out", str(tmp_path / "some")]) == 0
    trained = [r["test_loss"] for r in csv.DictReader((tmp_path / "some" / "metrics.csv").open())]
    assert len(set(trained)) == 3
    with pytest.raises(SystemExit, match="cohorts for 3 rounds, but --rounds is 4"):
        reference.main(args[:-1] + ["4", "--setup", str(some), "--out", str(tmp_path / "long")])


def test_an_emulator_runs_setup_is_its_split_and_cohorts_and_a_replay_that_differs_is_refused(tmp_path):
    from conftest import small_scenario
    from emulator.data import build_federation
    from emulator.driver import run_scenario
    from emulator.parts import validate_scenario

    exporter = load("benchmarks/emulator_setup.py")
    scenario = validate_scenario(small_scenario(rounds=3, **{"system.events": True}))
    run_scenario(scenario, tmp_path / "run")
    assert exporter.main([str(tmp_path / "run"), "--out", str(tmp_path / "setup.npz")]) == 0
    setup = np.load(tmp_path / "setup.npz")
    federation = build_federation(scenario.data, scenario.population.devices, scenario.seed)
    assert np.array_equal(setup["offsets"], federation.device_offsets)
    assert np.array_equal(setup["indices"], federation.device_indices)
    events = list(csv.DictReader((tmp_path / "run" / "events.csv").open()))
    for r in (1, 2, 3):  # the replayed cohorts are the run's own reports
        theirs = sorted(int(e["device"]) for e in events if e["event"] == "reported" and int(e["round"]) == r)
        assert sorted(int(d) for d in setup["cohorts"][r - 1] if d >= 0) == theirs
    metrics = (tmp_path / "run" / "metrics.csv").read_text().splitlines()
    header = metrics[0].split(",").index("label_tv")
    cells = metrics[2].split(",")
    cells[header] = "0.999"
    (tmp_path / "run" / "metrics.csv").write_text("\n".join([*metrics[:2], ",".join(cells), *metrics[3:]]) + "\n")
    with pytest.raises(SystemExit, match="label mix differs from round 2"):
        exporter.main([str(tmp_path / "run"), "--out", str(tmp_path / "refused.npz")])
    assert not (tmp_path / "refused.npz").exists()


def test_a_run_that_could_not_finish_in_the_time_left_is_not_started(tmp_path, capsys):
    job = next(j for j in papers.plan(1000) if j.kind == "reference")
    assert papers.run_all([job], tmp_path, limit=60, parallel=2, rounds=1000, cpu=True) == []  # needs 300 s
    assert f"{job.name}: left for the next stretch" in capsys.readouterr().out

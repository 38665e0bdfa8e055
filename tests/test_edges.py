"""Edge servers (system.network.edges; emulator/system/edges.py) and HierFAVG (algorithms/hierarchical.py):
each edge server's rounds take only its region's devices, their transfers end at the access links, the cloud
waits for the last edge and the backhaul shares its links as the fluid model says; HierFAVG's edge and cloud
steps are the weighted means the paper writes; a run is the same whatever runs it; what cannot be honoured
is refused naming the field."""
from __future__ import annotations

import numpy as np
import pytest

from conftest import comparable, small_scenario
from emulator.algorithms.selection import build_selection
from emulator.analysis.report import write_report
from emulator.driver import resume_run, run_scenario
from emulator.parts import validate_scenario
from emulator.scenario import ScenarioError
from emulator.seeding import rng
from emulator.system import SimulatedSystem
from emulator.system.base import CohortRequest
from emulator.system.edges import CloudRequest
from emulator.system.network import BYTES_PER_MBIT

EDGES = {"access": {"links": 6, "up_mbps": 2.0, "down_mbps": 8.0},
         "regions": {"count": 3, "up_mbps": 8.0, "down_mbps": 16.0},
         "server": {"up_mbps": 12.0, "down_mbps": 1000.0}, "edges": {}}
EVEN = {"population.network": {"kind": "tiers", "tiers": [{"share": 1.0, "down_mbps": 20.0, "up_mbps": 5.0,
                                                            "latency_s": 0.05}]},
        "population.compute": {"kind": "tiers", "tiers": [{"share": 1.0, "s_per_sample": 0.01}]},
        "population.compute_jitter": 0.0}


def _edge_scenario(network=None, **overrides):
    raw = small_scenario(**{"population.devices": 120, **EVEN,
                            "algorithm": {"name": "hierfavg", "clients_per_round": 4, "cloud_every": 2,
                                          "client_lr": 0.05, "local_steps": 5, "batch_size": 16},
                            "system": {"model": "simulated", "over_selection": 1.5, "events": True,
                                       "network": network or EDGES}, **overrides})
    return validate_scenario(raw)


def _cloud_round(system, scenario, r=1, model_bytes=10 ** 6):
    selection = build_selection(scenario.algorithm, scenario.population.devices, scenario.seed)

    def edge_request(edge, j):
        return CohortRequest(round_index=r, target=scenario.algorithm.clients_per_round, selection=selection,
                             rng=rng(scenario.seed, "selection", r, edge, j), bytes_down=model_bytes,
                             bytes_up=model_bytes, samples_processed=lambda d: np.full(len(d), 80.0))

    return system.cloud_round(CloudRequest(r, scenario.algorithm.cloud_every, edge_request, model_bytes))


def test_each_edge_round_takes_its_regions_devices_and_the_cloud_waits_for_the_last_edge():
    """Every edge round selects only devices of its edge's region, and they report over their cells alone
    (waits only where devices share a cell); the edges' rounds run one after the other from the cloud round's
    start; the cloud round ends when the model, up the backhaul and down again, is back at the last edge."""
    scenario = _edge_scenario()
    system = SimulatedSystem(scenario)
    cloud = _cloud_round(system, scenario)
    network = system.network
    assert len(cloud.edge_rounds) == 3 and all(len(rounds) == 2 for rounds in cloud.edge_rounds)
    last_closed = []
    for edge, rounds in enumerate(cloud.edge_rounds):
        assert rounds[0].start_s == cloud.outcome.start_s == 0.0
        assert rounds[1].start_s == rounds[0].end_s  # an edge's next round starts when its last closed
        for outcome in rounds:
            assert len(outcome.selected) == 6 and not outcome.failed  # 4 reports over-selected 1.5x
            assert set(network.region_of(outcome.selected)) == {edge}
            assert len(outcome.reported) == 4
        last_closed.append(rounds[1].end_s)
    # each edge sends 1 MB up its region's link (1 MB/s) and the shared server link (1.5 MB/s), then the cloud's
    # model comes down each region's link (2 MB/s; the server's is roomy): the fluid model's times, by hand
    up = _fluid_one_link(np.array(last_closed), 1e6, 8.0 * BYTES_PER_MBIT, 12.0 * BYTES_PER_MBIT)
    down = up.max() + 1e6 / (16.0 * BYTES_PER_MBIT)
    assert cloud.outcome.end_s == pytest.approx(down, rel=1e-9)
    columns = cloud.outcome.network
    assert columns["backhaul_bytes_up"] == columns["backhaul_bytes_down"] == 3 * 10 ** 6
    assert columns["backhaul_s"] == pytest.approx(down - max(last_closed), rel=1e-9)
    assert columns["edge_idle_s"] == pytest.approx(np.mean(down - np.array(last_closed)), rel=1e-9)
    assert columns["edge_rounds_failed"] == 0
    assert cloud.outcome.bytes_up == sum(o.bytes_up for rounds in cloud.edge_rounds for o in rounds) == 24 * 10 ** 6
    assert system.now_s == cloud.outcome.end_s


def _fluid_one_link(start: np.ndarray, size: float, own: float, shared: float) -> np.ndarray:
    """Flows of `size` starting at `start`, each capped at `own`, sharing one link of `shared` fairly: event by
    event, as a reference written out plainly."""
    remaining, done, t = np.full(len(start), size), np.full(len(start), np.inf), float(start.min())
    while np.isinf(done).any():
        active = (start <= t) & np.isinf(done)
        rate = np.where(active, min(own, shared / max(active.sum(), 1)), 0.0)
        with np.errstate(divide="ignore"):
            finishing = np.where(active, remaining / np.where(rate > 0, rate, 1), np.inf)
        upcoming = start[start > t]
        step = min(finishing.min(), (upcoming.min() - t) if upcoming.size else np.inf)
        remaining -= rate * step
        t += step
        done[active & (remaining <= 1e-6)] = t
    return done


def test_edges_finishing_together_share_the_server_link_and_one_alone_runs_at_its_region_link():
    """N equal backhaul transfers through one server link finish at N x size / capacity; one alone takes
    size over its region's link."""
    system = SimulatedSystem(_edge_scenario())
    network = system.network
    together = network.backhaul(np.arange(3), np.zeros(3), 10 ** 6, "up")
    assert together == pytest.approx(np.full(3, 3 * 1e6 / (12.0 * BYTES_PER_MBIT)), rel=1e-12)
    alone = network.backhaul(np.array([1]), np.array([5.0]), 10 ** 6, "up")
    assert alone == pytest.approx([5.0 + 1e6 / (8.0 * BYTES_PER_MBIT)], rel=1e-12)


def test_an_edge_whose_region_sleeps_fails_its_rounds_and_the_cloud_averages_the_others():
    """Regions by time zone at 00:00 UTC: where it is night phones are online, where it is day none is. A
    sleeping region's edge waits out the selection timeout each round and fails; the cloud round is not failed
    while another edge reported, and it lasts at least the sleeping edge's two timeouts."""
    network = {"access": {"devices_per_link": 10, "attach": "zone", "up_mbps": 2.0, "down_mbps": 8.0},
               "regions": {"by": "zone", "up_mbps": 8.0, "down_mbps": 16.0}, "edges": {}}
    scenario = _edge_scenario(network, **{
        "population.availability": [{"kind": "diurnal", "start_hour": 21, "hours": 8, "start_spread_h": 0,
                                     "jitter_h": 0, "timezones": {"offsets_h": [-5, 1, 8]}}],
        "system.selection_timeout_s": 300.0})
    system = SimulatedSystem(scenario)
    online = system.network.region_of(system.availability.online_devices(0.0))
    asleep = [e for e in range(3) if not (online == e).any()]
    assert 0 < len(asleep) < 3
    cloud = _cloud_round(system, scenario)
    failed = [e for e, rounds in enumerate(cloud.edge_rounds) if all(o.failed for o in rounds)]
    assert failed == asleep
    assert cloud.outcome.network["edge_rounds_failed"] == 2 * len(asleep)
    assert not cloud.outcome.failed and cloud.outcome.end_s >= 600.0


def test_hierfavg_steps_are_the_weighted_means_of_the_paper():
    """An edge moves to its model plus the weighted mean of its updates; the cloud to the weighted mean of the
    edges' models (weighed by what each took in), times server_lr from the global model; an edge that took in
    nothing is left out."""
    from emulator.algorithms import AlgorithmContext, build_algorithm
    from emulator.algorithms.base import ClientUpdate
    from emulator.training.local import TrainStats

    config = _edge_scenario(algorithm={"name": "hierfavg", "clients_per_round": 4, "cloud_every": 2,
                                       "weighting": "samples", "server_lr": 0.5, "local_steps": 1}).algorithm
    algorithm = build_algorithm(config, AlgorithmContext(num_devices=10, device_sizes=np.ones(10, np.int64),
                                                         num_params=3, seed=0))
    stream = np.random.default_rng(1)
    x = stream.standard_normal(3).astype(np.float32)
    updates = [ClientUpdate(d, n, stream.standard_normal(3).astype(np.float32), TrainStats(1, 1.0, 0.5))
               for d, n in ((0, 10), (1, 30))]
    mean = algorithm.edge_mean(x, updates)
    expected = (10 * updates[0].delta.astype(np.float64) + 30 * updates[1].delta) / 40
    assert mean.weight == 40
    assert algorithm.edge_step(x, mean) == pytest.approx(x + expected, rel=1e-6)  # float32: the mean, then the step
    a, b = stream.standard_normal(3).astype(np.float32), stream.standard_normal(3).astype(np.float32)
    cloud = algorithm.aggregate_edges(x, [(a, 40.0), (b, 10.0), (x + 100, 0.0)], 1)
    assert cloud == pytest.approx(x + 0.5 * ((40 * a.astype(np.float64) + 10 * b) / 50 - x), abs=1e-6)
    assert algorithm.aggregate_edges(x, [(a, 0.0)], 2) is x  # nothing reached the cloud: the model as it was


def test_a_hierfavg_run_learns_and_is_the_same_whatever_the_runners_and_groups(tmp_path):
    """Three edges, two edge rounds a cloud round: the global model improves on its start, a cloud round's row
    counts every edge round's devices and bytes, and one runner with whole groups gives the same rows as two
    runners with groups of one device."""
    one = _edge_scenario(rounds=4)
    runs = [run_scenario(one, tmp_path / "a").path]
    two = _edge_scenario(rounds=4, runtime={"runners": 2, "backend": "inline", "group_size": 1})
    runs.append(run_scenario(two, tmp_path / "b").path)
    rows = comparable(runs[0])
    assert rows == comparable(runs[1])
    assert [row["kind"] for row in rows] == ["cloud"] * 4
    assert float(rows[-1]["test_loss"]) < float(rows[0]["test_loss"])
    for row in rows:
        assert int(row["participants"]) <= 3 * 2 * 4 and int(row["backhaul_bytes_up"]) > 0
        assert int(row["bytes_up"]) == 3 * 2 * 4 * int(row["backhaul_bytes_up"]) // 3  # 24 reports of one model
    write_report(runs, tmp_path / "report")  # the edges' tier in the comparison table
    backhaul = sum(int(r["backhaul_bytes_up"]) + int(r["backhaul_bytes_down"]) for r in rows) / 1e9
    table = next(line for line in (tmp_path / "report" / "report.md").read_text().splitlines()
                 if line.startswith("| experiment"))
    assert "backhaul GB" in table and "edge idle s" in table
    assert f"| {backhaul:.3f} |" in (tmp_path / "report" / "report.md").read_text()


def test_edge_rounds_folded_on_the_runners_give_the_numbers_of_updates_sent_one_by_one(tmp_path, monkeypatch):
    """Each edge's updates folded into sums on the runners (the default here) and every update sent to the
    server give the same rows, bit for bit; the folded run did fold every edge round with reports."""
    from emulator.algorithms.hierarchical import HierFAVG
    from emulator.server.synchronous import SynchronousEngine

    folded, fold = [], SynchronousEngine._folded
    monkeypatch.setattr(SynchronousEngine, "_folded", lambda self, *a, **k: folded.append(1) or fold(self, *a, **k))
    runtime = {"runners": 2, "backend": "inline", "group_size": 2}
    one = run_scenario(_edge_scenario(rounds=3, runtime=runtime), tmp_path / "folded").path
    assert len(folded) == 3 * 2 * 3  # three cloud rounds of two edge rounds at three edges, all with reports
    monkeypatch.setattr(HierFAVG, "edge_folding", lambda self: None)
    other = run_scenario(_edge_scenario(rounds=3, runtime=runtime), tmp_path / "streamed").path
    assert len(folded) == 18 and comparable(one) == comparable(other)


def test_a_runner_restarted_holding_an_edges_sum_costs_time_not_results(tmp_path, monkeypatch):
    """A runner that restarts after folding an edge's groups, before the server took its sum: those groups are
    trained again from that edge's model, and the run's rows are those of an uninterrupted one."""
    from emulator.runtime.runner import DeviceRunner
    from emulator.server.synchronous import SynchronousEngine

    runtime = {"runners": 2, "backend": "inline", "group_size": 1}
    reference = run_scenario(_edge_scenario(rounds=2, runtime=runtime), tmp_path / "reference").path
    real_train, tickets, trained_again = SynchronousEngine._train, [], []

    def train_then_restart(self, groups, devices, folds=None, after_last=None, params_ref=None):
        def restart_then_take():  # the third edge's groups are all folded: runner 0 restarts, holding nothing
            if folds is not None and folds[0].ticket not in tickets and len(tickets) == 2:
                self.world.pool.runners[0].obj = DeviceRunner()
            if after_last is not None:
                after_last()
        yield from real_train(self, groups, devices, folds, restart_then_take, params_ref)
        if folds[0].ticket in tickets:
            trained_again.extend(fold.group for fold in folds)
        tickets.append(folds[0].ticket)
    monkeypatch.setattr(SynchronousEngine, "_train", train_then_restart)

    restarted = run_scenario(_edge_scenario(rounds=2, runtime=runtime), tmp_path / "restarted").path
    assert len(set(tickets)) == 2 * 2 * 3 and trained_again
    assert comparable(restarted) == comparable(reference)


def test_a_resumed_hierfavg_run_ends_as_an_uninterrupted_one(tmp_path):
    """Markov availability, dropout and a server optimizer's moments: a run stopped after 3 cloud rounds and
    resumed to 6 has the metrics and participation of one that ran 6 at once."""
    world = {"rounds": 6, "output.checkpoint_every": 1, "population.dropout_per_hour": 2.0,
             "population.availability": [{"kind": "markov", "mean_on_s": 900, "mean_off_s": 900}],
             "algorithm": {"name": "hierfavg", "clients_per_round": 4, "cloud_every": 2, "client_lr": 0.05,
                           "local_steps": 5, "batch_size": 16, "server_optimizer": {"kind": "adam"},
                           "server_lr": 0.01}}
    whole = run_scenario(_edge_scenario(**world), tmp_path / "whole").path
    part = run_scenario(_edge_scenario(**{**world, "rounds": 3}), tmp_path / "part").path
    resume_run(part, overrides=["rounds=6"], notify=lambda message: None)
    assert comparable(part) == comparable(whole)
    with open(part / "participation.csv") as a, open(whole / "participation.csv") as b:
        assert a.read() == b.read()


@pytest.mark.parametrize(("change", "says"), [
    ({"system.network": {**EDGES, "regions": None}}, "system.network.edges: edge servers sit at the regions"),
    ({"algorithm": {"name": "fedavg", "clients_per_round": 4, "local_steps": 2}},
     "algorithm.name: fedavg takes every report at one server"),
    ({"system.network": {**EDGES, "edges": None}}, "system.network.edges: hierfavg averages at edge servers"),
    ({"secure_aggregation": {"kind": "secagg"}}, "secure_aggregation: its cost model prices one masked sum"),
    ({"privacy": {"noise_multiplier": 1.0, "clip": 1.0}},
     "privacy: algorithm 'hierfavg'"),
    ({"population.devices": 3, "algorithm.clients_per_round": 1,
      "system.network": {**EDGES, "regions": {"count": 6, "up_mbps": 8.0, "down_mbps": 16.0}}},
     "system.network.edges: the edge server of region"),
    ({"system.network": {**EDGES, "edges": {"deadline_s": 0}}}, "system.network.edges.deadline_s"),
])
def test_edge_servers_that_cannot_be_honoured_are_refused_naming_the_field(change, says):
    raw = small_scenario(**{"population.devices": 120, "algorithm": {"name": "hierfavg", "clients_per_round": 4,
                                                                    "local_steps": 2},
                            "system": {"model": "simulated", "network": EDGES}})
    for key, value in change.items():
        node = raw
        *path, last = key.split(".")
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    with pytest.raises(ScenarioError, match=says.replace(".", r"\.").replace("(", r"\(")):
        validate_scenario(raw)

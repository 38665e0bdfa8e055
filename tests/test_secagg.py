"""Secure aggregation's cost model: bytes against hand counts and the paper's expansion figures, how costs scale
with the cohort, the neighbour graph, the abort rule and the error messages."""
import math

import numpy as np
import pytest

from emulator.uplink.secagg import CryptoCosts, SecAggCost, Stage


def protocol_bytes(cost: SecAggCost, cohort: int) -> int:
    """A device's protocol bytes up and down, no dropouts; the masked upload excluded (it scales with m)."""
    stages = cost.setup(cohort) + cost.finish(cohort, cohort)
    return sum(s.bytes_up + s.bytes_down for s in stages) + cost.masked_download_bytes(cohort)


def test_bytes_by_hand_semi_honest():
    cost = SecAggCost("secagg", num_params=10, input_bits=16)
    n = 4  # k = 3 neighbours, t = floor(4/2) + 1 = 3, l = 16 + ceil(log2 4) = 18 bits
    assert (cost.neighbours(n), cost.threshold(n), cost.field_bits(n)) == (3, 3, 18)
    advertise, share_keys = cost.setup(n)
    assert (advertise.bytes_down, advertise.bytes_up) == (0, 66)  # 2 keys x 33
    assert share_keys.bytes_down == 280  # (k + 1) x (2 x 33 + 4-byte id) = 4 x 70
    assert share_keys.bytes_up == 192  # k x (60-byte share pair + 4-byte id) = 3 x 64
    assert cost.masked_upload_bytes(n) == 23  # ceil(10 x 18 / 8) = ceil(22.5)
    assert cost.masked_download_bytes(n) == 192  # the 3 share pairs routed to it, with the sender's id
    assert cost.masked_input(n) == Stage("masked_input", 192, 23, cost.masking_compute_s(n))
    (unmasking,) = cost.finish(n, survivors=4)
    assert unmasking.bytes_down == 12  # its neighbours' survival list: 3 ids x 4
    assert unmasking.bytes_up == 92  # 3 x (20-byte share + 4-byte id) + its own 20-byte b-share
    assert cost.server_routed_bytes(n) == 768  # 4 devices x 3 pairs x 64


def test_bytes_by_hand_malicious():
    cost = SecAggCost("secagg", num_params=10, input_bits=16, malicious=True)
    n = 4  # k = 3; t = floor(2 x 4 / 3) + 1 = 3
    assert cost.threshold(n) == 3
    advertise, share_keys = cost.setup(n)
    assert advertise.bytes_up == 130  # 2 x 33 + a 64-byte signature
    assert share_keys.bytes_down == 536  # 4 x (130 + 4)
    check, unmasking = cost.finish(n, survivors=3)
    assert (check.name, check.bytes_down, check.bytes_up) == ("consistency_check", 12, 64)  # 3 ids; its signature
    assert unmasking.bytes_down == 136  # the 2 live neighbours' signatures with ids: 2 x (64 + 4)
    assert unmasking.bytes_up == 92


def test_compute_counts_by_hand():
    """Unit prices make each count visible: 1 s per key generation, 10 s per agreement, 1 word or add per s, ..."""
    unit = CryptoCosts(key_generation_s=1, key_agreement_s=10, prg_words_per_s=1, modular_adds_per_s=1,
                       shamir_split_op_s=100, shamir_combine_op_s=1000, encryption_bytes_per_s=60)
    cost = SecAggCost("secagg", num_params=5, input_bits=40, costs=unit)
    n = 4  # k = 3, t = 3, l = 40 + 2 = 42 bits: 2 PRG words per coordinate
    advertise, share_keys = cost.setup(n)
    assert advertise.compute_s == 2  # two key pairs
    # 3 agreements x 10 + 2 secrets x (k + 1 = 4 shares) x t=3 x 100 + 3 encryptions of one 60-byte pair
    assert share_keys.compute_s == 30 + 2400 + 3
    # 3 agreements x 10 + 3 decryptions + (k + 1) x 5 coords x 2 words + (k + 1) x 5 adds
    assert cost.masking_compute_s(n) == 30 + 3 + 40 + 20
    # 3 survivors, 1 dropped with 3 x 3 / 3 = 3 live neighbours: the Lagrange coefficients once (t^2 = 9 ops)
    # and 4 reconstructions x t = 3 ops, x 1000 s; 3 agreements x 10; masks 3 self + 3 pairwise = 6 x 5 coords
    # x 2 words; adds (3 inputs + 6 masks) x 5
    assert cost.server_compute_s(n, survivors=3, dropped_after_sharing=1) == (9 + 12) * 1000 + 30 + 60 + 45


@pytest.mark.parametrize("n_log2, m_log2, expected", [(10, 20, 1.726), (14, 24, 1.976)])
def test_expansion_matches_the_notes(n_log2, m_log2, expected):
    """Bonawitz et al.: 16-bit inputs, 1.73x for n = 2^10, m = 2^20 and 1.98x for n = 2^14, m = 2^24; the notes'
    formula with our sizes (33 B keys, 60 B pairs, 20 B shares, ids excluded) gives 1.726 and 1.976."""
    cost = SecAggCost("secagg", num_params=2 ** m_log2, input_bits=16)
    n = 2 ** n_log2
    assert round(cost.plaintext_ratio(n, 16, count_ids=False), 3) == expected
    # the same from the notes' formula: up 2P + kE + ceil(m l/8) + kH, down 2P(k+1) + kE; we also upload the
    # device's own b-share (one H more), which does not show at 3 decimals
    k, m, l = n - 1, 2 ** m_log2, 16 + n_log2
    formula = (2 * 33 + k * 60 + math.ceil(m * l / 8) + k * 20 + 2 * 33 * (k + 1) + k * 60) / (m * 2)
    assert round(formula, 3) == expected
    assert cost.plaintext_ratio(n, 16) > cost.plaintext_ratio(n, 16, count_ids=False)  # ids cost something


def test_secagg_plus_grows_with_log_n_secagg_with_n():
    plus, full = SecAggCost("secagg_plus", 1000), SecAggCost("secagg", 1000)
    assert (plus.neighbours(100), plus.neighbours(1000)) == (14, 20)  # 2 ceil(log2 n)
    plus_ratio = protocol_bytes(plus, 1000) / protocol_bytes(plus, 100)
    full_ratio = protocol_bytes(full, 1000) / protocol_bytes(full, 100)
    assert 1.3 < plus_ratio < 1.6  # ~ log 1000 / log 100 = 1.5 (k: 20 / 14)
    assert 9.5 < full_ratio < 10.5  # ~ 1000 / 100
    setup_s = lambda cost, n: sum(stage.compute_s for stage in cost.setup(n)) + cost.masking_compute_s(n)
    assert setup_s(full, 1000) / setup_s(full, 100) > 20  # Shamir k t grows ~ n^2
    assert setup_s(plus, 1000) / setup_s(plus, 100) < 3
    assert (plus.neighbours(8), plus.neighbours(6)) == (6, 5)  # 2 ceil(log2 n), at most everyone else (n - 1)


def test_server_compute_grows_with_dropouts_after_sharing():
    for cost in (SecAggCost("secagg", 10_000), SecAggCost("secagg_plus", 10_000)):
        n = 200
        times = [cost.server_compute_s(n, n - d, d) for d in (0, 10, 20, 40)]
        assert all(a < b for a, b in zip(times, times[1:])), times
    with pytest.raises(ValueError, match="split of the cohort"):
        cost.server_compute_s(10, 8, 3)


def test_neighbour_graph_symmetric_regular_deterministic():
    cost = SecAggCost("secagg_plus", 100, neighbours=6)
    n = 30
    graph = cost.neighbour_graph(n, np.random.default_rng(7))
    assert graph.shape == (n, 6)
    adjacency = np.zeros((n, n), dtype=bool)
    adjacency[np.repeat(np.arange(n), 6), graph.ravel()] = True
    assert adjacency.sum(axis=1).tolist() == [6] * n  # 6 distinct neighbours each
    assert not adjacency.diagonal().any()  # nobody is its own neighbour
    assert (adjacency == adjacency.T).all()  # u shares with v iff v shares with u
    assert np.array_equal(graph, cost.neighbour_graph(n, np.random.default_rng(7)))
    assert not np.array_equal(graph, cost.neighbour_graph(n, np.random.default_rng(8)))
    full = SecAggCost("secagg", 100).neighbour_graph(4, np.random.default_rng(0))
    assert full.tolist() == [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]


def test_aborts_at_the_threshold():
    cost = SecAggCost("secagg", 100, threshold=6)
    n = 10
    survived = np.zeros(n, dtype=bool)
    survived[:6] = True
    assert not cost.aborts(n, survived)  # exactly t survivors: every secret has t holders
    survived[5] = False
    assert cost.aborts(n, survived)  # t - 1


def test_secagg_plus_aborts_when_a_survivors_neighbours_dropped():
    cost = SecAggCost("secagg_plus", 100, threshold=3, neighbours=4)
    n = 20
    graph = cost.neighbour_graph(n, np.random.default_rng(3))
    survived = np.ones(n, dtype=bool)
    assert not cost.aborts(n, survived, graph)
    victim = 0
    survived[graph[victim][:3]] = False  # 3 of its 4 neighbours drop: itself + 1 live < t = 3
    assert survived.sum() >= 3 and cost.aborts(n, survived, graph)
    survived[graph[victim][2]] = True  # one comes back: itself + 2 = t, and every dropped device keeps >= 3 live
    dropped = np.flatnonzero(~survived)
    assert all(survived[graph[d]].sum() >= 3 for d in dropped)
    assert not cost.aborts(n, survived, graph)
    with pytest.raises(ValueError, match="needs the neighbour graph"):
        cost.aborts(n, survived)


def test_errors_name_the_field():
    with pytest.raises(ValueError, match=r"^secure_aggregation\.kind: unknown variant 'secagg3'"):
        SecAggCost("secagg3", 10)
    with pytest.raises(ValueError, match=r"^secure_aggregation\.input_bits: 0"):
        SecAggCost("secagg", 10, input_bits=0)
    with pytest.raises(ValueError, match=r"^secure_aggregation\.threshold: 1; at least 2"):
        SecAggCost("secagg", 10, threshold=1)
    with pytest.raises(ValueError, match=r"^secure_aggregation\.threshold: 1.5; a fraction"):
        SecAggCost("secagg", 10, threshold=1.5)
    with pytest.raises(ValueError, match=r"^secure_aggregation\.neighbours: SecAgg shares with everyone"):
        SecAggCost("secagg", 10, neighbours=4)
    with pytest.raises(ValueError, match=r"^secure_aggregation\.neighbours: 5; give an even number"):
        SecAggCost("secagg_plus", 10, neighbours=5)
    plus = SecAggCost("secagg_plus", 10, neighbours=10, threshold=8)
    with pytest.raises(ValueError, match=r"^secure_aggregation\.neighbours: 10, but the cohort has 10 devices"):
        plus.neighbours(10)
    small_group = SecAggCost("secagg_plus", 10, neighbours=4, threshold=8)
    with pytest.raises(ValueError, match=r"^secure_aggregation\.threshold: 8 is larger than a device's share group "
                                         r"of 5"):
        small_group.check(50)
    with pytest.raises(ValueError, match=r"^secure_aggregation\.threshold: the cohort of 5 devices is smaller than "
                                         r"the threshold 8"):
        SecAggCost("secagg", 10, threshold=8).check(5)
    with pytest.raises(ValueError, match=r"^secure_aggregation\.threshold: the cohort of 1 devices"):
        SecAggCost("secagg", 10).check(1)
    SecAggCost("secagg", 10, threshold=8).check(8)  # a cohort the size of the threshold runs


def test_threshold_defaults_and_fractions():
    assert SecAggCost("secagg", 10).threshold(100) == 51  # strict majority of 100 share holders
    assert SecAggCost("secagg", 10, malicious=True).threshold(100) == 67  # more than two thirds
    assert SecAggCost("secagg", 10).threshold(2) == 2  # never below 2
    plus = SecAggCost("secagg_plus", 10, neighbours=8, threshold=0.5)
    assert plus.threshold(100) == 4  # round(0.5 x 9) = 4 (banker's rounding of 4.5), as Flower
    assert SecAggCost("secagg_plus", 10, neighbours=8, threshold=0.1).threshold(100) == 2  # at least 2

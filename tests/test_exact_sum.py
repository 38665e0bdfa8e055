"""Exact sums (aggregation/exact.py) and the weighted mean built on them: the same bits in any order and any
grouping, which is what lets runners fold updates before the server merges them."""
from __future__ import annotations

import math
import pickle

import numpy as np
import pytest

from emulator.aggregation import exact
from emulator.aggregation.exact import ExactSum, unit_for
from emulator.aggregation.mean import WeightedMean


def _terms(count=60, size=500, seed=0):
    rng = np.random.default_rng(seed)
    vectors = [rng.normal(0, 10.0 ** rng.uniform(-6, 1), size).astype(np.float32) for _ in range(count)]
    weights = [float(w) for w in rng.integers(1, 5000, count)]
    return vectors, weights


def _folded(vectors, weights, order, cuts, unit=exact.FINEST_UNIT) -> WeightedMean:
    """The terms added in `order`, cut into partial means at `cuts`, each pickled (as it travels) and merged."""
    total = WeightedMean(len(vectors[0]), unit)
    for part in np.split(np.asarray(order), cuts):
        partial = WeightedMean(len(vectors[0]), unit)
        for i in part:
            partial.add(vectors[i], weights[i])
        total.merge(pickle.loads(pickle.dumps(partial)))
    return total


def test_a_sum_is_the_same_in_any_order_and_any_grouping():
    vectors, weights = _terms()
    rng = np.random.default_rng(1)
    reference = _folded(vectors, weights, range(len(vectors)), [])
    for _ in range(10):
        cuts = sorted(rng.choice(np.arange(1, len(vectors)), rng.integers(0, 12), replace=False))
        other = _folded(vectors, weights, rng.permutation(len(vectors)), cuts)
        assert np.array_equal(other.total, reference.total)
        assert np.array_equal(other.mean(), reference.mean())
        assert other.weight == reference.weight and other.count == reference.count == len(vectors)
    # a float64 running sum does depend on the order: the property is not free
    floats = [sum(w * v.astype(np.float64) for v, w in zip(vectors[::s], weights[::s])) for s in (1, -1)]
    assert not np.array_equal(*floats)


def test_the_exact_sum_is_the_true_sum_to_far_below_a_float32_update_s_last_bit():
    vectors, weights = _terms()
    total = _folded(vectors, weights, range(len(vectors)), []).total
    for j in range(0, len(vectors[0]), 37):
        true = math.fsum(w * float(v[j]) for v, w in zip(vectors, weights))  # correctly rounded
        assert abs(total[j] - true) <= len(vectors) * 2.0 ** -49 + abs(true) * 2.0 ** -52


def test_weights_add_exactly_whatever_their_order():
    mean_a, mean_b = WeightedMean(3), WeightedMean(3)
    for w in (0.1, 0.2, 0.3, 1e-9):
        mean_a.add(np.ones(3, np.float32), w)
    for w in (1e-9, 0.3, 0.2, 0.1):
        mean_b.add(np.ones(3, np.float32), w)
    assert mean_a.weight == mean_b.weight
    assert np.array_equal(mean_a.mean(), mean_b.mean())


def test_non_finite_terms_add_as_floats_do_and_an_overflow_is_not_silent():
    sums = ExactSum(4)
    sums.add(np.array([np.inf, 1.0, np.nan, -np.inf]))
    sums.add(np.array([np.inf, 2.0, 1.0, np.inf]))
    value = sums.value()
    assert value[0] == np.inf and value[1] == 3.0 and np.isnan(value[2]) and np.isnan(value[3])
    huge = ExactSum(2)
    huge.add(np.array([1e12, 1.0]))  # beyond one term's range: read as an overflow, like a float's
    assert huge.value()[0] == np.inf and huge.value()[1] == 1.0
    many = ExactSum(1)
    for _ in range(5000):  # each term in range, their sum (8.6e13) beyond it
        many.add(np.array([2.0 ** 34]))
    assert np.isnan(many.value()).all()


def test_a_partial_travels_in_four_bytes_a_value_at_the_unit_its_last_round_sets():
    """Runners' sums cross the object store: at the unit unit_for picks from a round of this size, under one
    model's worth of bytes (4 a value, the top byte deflated); a round that outgrows the unit's room 16 times
    travels in 8 a value,
    as does a sum at the finest unit (a run's first round), and one too large for an int64 of units as its
    two limbs; every form reads back the same value."""
    rng = np.random.default_rng(2)
    vectors = [rng.normal(0, 0.05, 10_000).astype(np.float32) for _ in range(20)]
    unit = unit_for(_folded(vectors, [100.0] * 20, range(20), []).total)
    assert unit > exact.FINEST_UNIT
    narrow = _folded(vectors, [100.0] * 20, range(20), [], unit)
    assert 3 * 10_000 < len(pickle.dumps(narrow)) < 3.9 * 10_000  # Gaussian values: the top byte is a bit more than a sign
    wider = [v * np.float32(16) for v in vectors]
    assert 7.9 * 10_000 < len(pickle.dumps(_folded(wider, [100.0] * 20, range(20), [], unit))) < 8.1 * 10_000
    finest = _folded(vectors, [100.0] * 20, range(20), [])
    assert 7.9 * 10_000 < len(pickle.dumps(finest)) < 8.1 * 10_000
    vectors[0][0] = 2.0 ** 15 / 100  # past 2^62 units of 2^-48: the limbs travel
    limbs = _folded(vectors, [100.0] * 20, range(20), [])
    assert len(pickle.dumps(limbs)) > 12 * 10_000
    for mean in (narrow, finest, limbs, _folded(wider, [100.0] * 20, range(20), [], unit)):
        again = pickle.loads(pickle.dumps(mean))
        assert np.array_equal(again.total, mean.total) and again.unit == mean.unit


def test_the_top_bytes_deflated_give_back_every_int32_value():
    values = np.array([0, 1, -1, 255, -256, 2 ** 24, -2 ** 24 - 1, 2 ** 31 - 1, -2 ** 31, 123456789], np.int64)
    values = np.concatenate([values, np.random.default_rng(0).integers(-2 ** 31, 2 ** 31, 1000)])
    low, top = exact._split_top_byte(values)
    assert low.shape == (len(values), 3) and isinstance(top, bytes)
    assert np.array_equal(exact._joined_top_byte(low, top), values)


@pytest.mark.parametrize("unit", [exact.FINEST_UNIT, -30, -12, 3])
def test_at_any_unit_a_sum_is_the_same_in_any_order_and_grouping_and_within_half_a_unit_a_term(unit):
    vectors, weights = _terms(count=40, size=300, seed=5)
    rng = np.random.default_rng(6)
    reference = _folded(vectors, weights, range(len(vectors)), [], unit)
    for _ in range(5):
        cuts = sorted(rng.choice(np.arange(1, len(vectors)), rng.integers(1, 8), replace=False))
        other = _folded(vectors, weights, rng.permutation(len(vectors)), cuts, unit)
        assert np.array_equal(other.total, reference.total)
    for j in range(0, 300, 11):
        true = math.fsum(w * float(v[j]) for v, w in zip(vectors, weights))
        assert abs(reference.total[j] - true) <= len(vectors) * 2.0 ** (unit - 1) + abs(true) * 2.0 ** -52


def test_the_unit_leaves_a_round_room_to_double_and_reads_past_what_diverged():
    for largest in (3e-9, 0.7, 1.0, 1000.0, 6.5e4):
        values = np.array([largest * 0.25, -largest, 0.0, np.nan, np.inf])
        unit = unit_for(values)
        assert 2.0 ** (unit + 29) <= largest < 2.0 ** (unit + 30) or unit == exact.FINEST_UNIT
        assert largest * 2 < 2.0 ** (unit + exact.WIRE_BITS)  # twice the size still fits 4 bytes a value
    assert unit_for(np.array([1e-30, 0.0])) == exact.FINEST_UNIT  # never finer than the finest
    assert unit_for(np.zeros(3)) == unit_for(np.array([np.nan])) == unit_for(np.zeros(0)) == exact.FINEST_UNIT


def test_a_coarser_unit_keeps_a_thousand_updates_mean_within_a_float32_s_resolution_of_its_largest_entry():
    """What the unit costs: each term is rounded to 2^-29 or 2^-30 of the round's largest sum, and a
    thousand such roundings average out within a float32 mean's last bit at its largest entries."""
    rng = np.random.default_rng(7)
    vectors = [rng.normal(0.01, 0.05, 2_000).astype(np.float32) for _ in range(1000)]
    weights = [float(w) for w in rng.integers(20, 600, 1000)]
    finest = _folded(vectors, weights, range(1000), [])
    coarse = _folded(vectors, weights, range(1000), [], unit_for(finest.total))
    largest = float(np.max(np.abs(finest.mean())))
    assert 0 < np.max(np.abs(coarse.mean() - finest.mean())) <= largest * 2.0 ** -23


def test_sums_of_different_units_do_not_merge():
    with pytest.raises(ValueError, match="units of 2\\^-30"):
        WeightedMean(2, -30).merge(WeightedMean(2, -20))
    with pytest.raises(ValueError, match="integer unit"):
        ExactSum(2, 1.5)


def test_merging_refuses_a_mean_whose_total_was_set_from_outside():
    released = WeightedMean(2)
    released.total = np.ones(2)
    with pytest.raises(ValueError, match="set from outside"):
        WeightedMean(2).merge(released)


def test_each_term_s_bound_is_its_largest_product_rounded_up_whatever_the_input_s_width():
    """add reads a term's largest magnitude off its input (float32) instead of off the float64 products: the
    same number, since rounding a product is monotonic; a negative scale takes the products' own extremes."""
    rng = np.random.default_rng(3)
    for scale in (1.0, 37.0, 4999.0, 0.3, -2.5):
        vector = (rng.normal(0, 10.0 ** rng.uniform(-6, 3), 257)).astype(np.float32)
        products = np.multiply(vector, scale * 2.0 ** 16, dtype=np.float64)
        expected = int(np.ceil(max(products.max(), -products.min()))) + 1
        narrow, wide = ExactSum(len(vector)), ExactSum(len(vector))
        narrow.add(vector, scale)
        wide.add(vector.astype(np.float64), scale)
        assert narrow.bound == wide.bound == expected
        assert np.array_equal(narrow.value(), wide.value())


def test_small_terms_rounded_in_one_step_give_the_bits_of_the_two_limb_split(monkeypatch):
    """Terms under 8 take the fine limb, which flows into the others as it fills: the sum, its limbs once
    canonical and its pickled form equal those of every term split into the high and low limbs; so do
    mixed sums (large, small, non-finite terms) and merges of partials that took either way."""
    rng = np.random.default_rng(4)
    vectors = [rng.normal(0, 10.0 ** rng.uniform(-8, 0.5), 300).astype(np.float32) for _ in range(80)]
    vectors[3][:5] = [0.5, -0.5, 2.0 ** -49, 3 * 2.0 ** -49, -(2.0 ** -49)]  # ties at the 2^-48 grid
    vectors[7][0], vectors[9][1] = 1e6, np.nan  # a term past the fine range, a diverged one
    weights = [float(w) for w in rng.integers(1, 60, len(vectors))]

    def summed():
        parts = [WeightedMean(300) for _ in range(3)]
        for i, (v, w) in enumerate(zip(vectors, weights)):
            parts[i % 3].add(v, w)
        total = parts[0]
        for part in parts[1:]:
            total.merge(pickle.loads(pickle.dumps(part)) if part is parts[1] else part)
        return total._sum

    monkeypatch.setattr(exact, "_FINE_BOUND", 2 ** 56)  # flows over every few terms
    fine = summed()
    assert 0 < fine.fine_terms < 30  # the fine path was taken, and flushed on the way
    monkeypatch.setattr(exact, "_FINE_LIMIT", 0.0)  # every term split
    split = summed()
    assert split.fine is None
    assert np.array_equal(fine.value(), split.value(), equal_nan=True)
    assert fine.bound == split.bound
    assert np.array_equal(fine.high, split.high) and np.array_equal(fine.low, split.low)
    assert pickle.dumps(fine) == pickle.dumps(split)


def test_the_compiled_add_gives_the_bits_of_numpy_s_arithmetic(monkeypatch):
    """A runner that has folded enough large terms adds them in one compiled pass (_add_scaled): the limbs,
    value and pickled form equal those of numpy's four passes, ties at the unit's grid and float64 terms
    included, and whichever path each term took."""
    pytest.importorskip("numba")
    rng = np.random.default_rng(5)
    vectors = [rng.normal(0, 10.0 ** rng.uniform(-8, 0.5), 3000).astype(np.float32 if i % 3 else np.float64)
               for i in range(40)]
    vectors[2][:4] = [2.0 ** -49, 3 * 2.0 ** -49, -(2.0 ** -49), -(5 * 2.0 ** -49)]  # halfway: to even
    vectors[4][7], vectors[5][9], vectors[6][:] = np.nan, -np.inf, -0.0  # diverged devices; an update of -0s
    weights = [float(w) for w in rng.integers(1, 60, len(vectors))]

    def summed(compiled_from: int):
        monkeypatch.setattr(exact, "COMPILED_SIZE", compiled_from)
        monkeypatch.setattr(exact, "COMPILE_FROM", 9 * 3000 + 1)  # the first nine terms by numpy either way
        monkeypatch.setattr(exact, "_seen_values", [0])
        monkeypatch.setattr(exact, "_kernels", [])
        total = ExactSum(3000)
        for v, w in zip(vectors, weights):
            total.add(v, w)
        return total, exact._kernels

    compiled, kernel = summed(1)
    assert kernel and kernel[0] is not None  # compiled, and used from the tenth term
    plain, kernel = summed(10 ** 9)
    assert not kernel
    assert compiled.fine_terms == plain.fine_terms > 20  # most fine, the largest split in two limbs
    assert np.array_equal(compiled.value(), plain.value(), equal_nan=True)
    assert pickle.dumps(compiled) == pickle.dumps(plain)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_largest_magnitude_read_off_the_bits_is_numpy_s(dtype):
    """The compiled add's term bound (max |v| from the magnitudes' bits) equals max(np.max(v), -np.min(v)),
    NaN and infinities included."""
    pytest.importorskip("numba")
    from emulator.compiled import compile_in
    namespace = {"_largest_bits": exact._largest_bits}
    compile_in(namespace, ("_largest_bits",))
    rng = np.random.default_rng(6)
    cases = [rng.normal(0, 1e-3, 999), -np.abs(rng.normal(0, 5, 10)), np.zeros(4), np.full(3, -0.0),
             np.array([1e-45, -3e-45]), np.array([2.0, -np.inf]), np.array([np.inf, 1.0]),
             np.array([1.0, np.nan, -2.0]), np.array([np.finfo(dtype).max, -np.finfo(dtype).tiny])]
    for values in cases:
        values = values.astype(dtype)
        expected = max(float(np.max(values)), -float(np.min(values)))
        found = exact._largest_magnitude(values, namespace["_largest_bits"])
        assert found == expected or (math.isnan(found) and math.isnan(expected)), (values, found, expected)

"""Exact sums of float vectors: fixed-point integers that add the same in any order and any grouping.

Float addition rounds at every step, so a float sum's last bits depend on the order and the grouping of its
terms. Runners that fold their devices' updates into partial sums, merged by the server, would then change
a run's numbers with the runner count. Integers add exactly, so here, as secure aggregation sums fixed-point
numbers, each term is rounded once, on its own, to a multiple of the sum's unit 2^u (u = `unit`, -48 unless
given) and accumulated in two int64 limbs:

- the high limb counts units of 2^(u + 32) (each term's nearest multiple of that),
- the low limb counts units of 2^u (what the high limb left, to its nearest 2^u).

A term under 8 high units in magnitude is rounded to 2^u in one step into a third limb, `fine`, which flows
into the other two before it could overflow: the same value, in half the arithmetic, since a float64 holds
such a term over 2^u exactly up to the rounding. A process that will add many large such terms (a runner
of a large run) adds them in one compiled pass instead of numpy's four: the same bits, half the time.

A term's rounding (at most half a unit) is its own, whatever else is summed, so a sum of partial sums equals
the sum of the terms in any order. The range: a term up to 2^(u + 83) in magnitude, a sum up to 2^(u + 94)
(2^35 and 2^46 at u = -48; an overflow is never silent: the sum reads as NaN, and a run that takes it says
it diverged). Non-finite terms (a diverged device) add as floats do: inf stays inf, inf - inf and NaN give
NaN.

On the wire a sum travels as its value in units, 4 bytes a value while every value stays under 2^31 units
(8 while it fits an int64, the two limbs beyond). `unit_for` picks the unit that keeps the next round's sum
in 4 bytes a value with room to grow, so runners folding a round's updates send about one model's worth of
bytes each, as secure aggregation's 32-bit sums do. Of those 4 bytes the top one is mostly the sign's
(most values are far below the largest), so it travels deflated (zlib), at under a millisecond for 10^5
values: 3.2 bytes a value for population_100k's MLP, 3.8 for Gaussian values.
"""
from __future__ import annotations

import math
import zlib

import numpy as np

from emulator.compiled import compile_in

FINEST_UNIT = -48  # a sum's unit unless given: float32 updates times integer weights, far below their last bit
LOW_BITS = 32  # the high limb's unit is 2^LOW_BITS of the low limb's
WIRE_BITS = 31  # a sum whose values in units stay under 2^31 travels as int32
HEADROOM_BITS = 1  # unit_for leaves a sum room to grow 2x before it needs more than 4 bytes a value
_UNIT_RANGE = (-200, 200)  # units far beyond any float32 update's (and the float64 arithmetic's) reach
# x + _MAGIC rounds x to the nearest integer (half to even) for |x| < 2^51, and the sum's bits, less _MAGIC's,
# are that integer; x + _LOW_MAGIC does the same in units of 2^-32 for |x| < 2^19
_MAGIC = 1.5 * 2.0 ** 52
_MAGIC_BITS = int(np.float64(_MAGIC).view(np.int64))
_LOW_MAGIC = 1.5 * 2.0 ** (52 - LOW_BITS)
_LOW_MAGIC_BITS = int(np.float64(_LOW_MAGIC).view(np.int64))
_TERM_LIMIT = 2.0 ** 51  # |term| in high units (2^(unit + 83) as a number) beyond this cannot be split exactly
_BOUND_LIMIT = 2 ** 62  # the sum of every term's largest magnitude (in high units) stays below this: no wrap-around
_FINE_LIMIT = 2.0 ** (51 - LOW_BITS)  # |term| in high units below this: x 2^32 it rounds with _MAGIC in one step
_FINE_BOUND = 2 ** 62  # the fine limb flows into the others before its terms' magnitudes could reach this
COMPILED_SIZE, COMPILE_FROM = 2 ** 14, 10 ** 9  # values: see _compiled


def _wrapped(value: int) -> np.int64:
    """A Python integer as the int64 it is congruent to modulo 2^64."""
    return np.int64((value + 2 ** 63) % 2 ** 64 - 2 ** 63)


def unit_for(values: np.ndarray) -> int:
    """The unit for a sum of the size of `values` (the last round's), the finest that keeps it 2^HEADROOM_BITS
    times under 2^WIRE_BITS units: each of a round's terms is then rounded to a unit of 2^-29 to 2^-30 of
    the last round's largest sum, and a thousand terms' roundings average out within about one float32 step
    of the mean's largest entries. Never finer than FINEST_UNIT; a round that outgrows the room still sums
    exactly, in 8 bytes a value. Non-finite values are left out; with nothing finite and non-zero,
    FINEST_UNIT."""
    finite = np.abs(values[np.isfinite(values)]) if len(values) else values
    largest = float(np.max(finite)) if len(finite) else 0.0
    if largest == 0.0:
        return FINEST_UNIT
    return int(min(max(FINEST_UNIT, math.frexp(largest)[1] + HEADROOM_BITS - WIRE_BITS), _UNIT_RANGE[1]))


class ExactSum:
    """A running exact sum of float vectors of one length, each term rounded to a multiple of 2^unit;
    `merge` adds another such sum of the same unit."""

    def __init__(self, size: int, unit: int = FINEST_UNIT):
        if not (isinstance(unit, (int, np.integer)) and _UNIT_RANGE[0] <= unit <= _UNIT_RANGE[1]):
            raise ValueError(f"a sum's unit is 2^unit for an integer unit in {list(_UNIT_RANGE)}, got {unit!r}")
        self.unit = int(unit)
        self.high = np.zeros(size, dtype=np.int64)
        self.low = np.zeros(size, dtype=np.int64)
        self.bound = 0  # sum over the terms of ceil(max |term|) in high units, a Python int (exact, any order)
        self.nonfinite: np.ndarray | None = None  # the non-finite terms' entries summed as floats (NaN, +-inf)
        self.terms = 0  # vectors added since the limbs last lost their offsets (see _canonical)
        self._work: tuple[np.ndarray, np.ndarray] | None = None  # add's float64 work vectors (not pickled)
        self.fine: np.ndarray | None = None  # small terms in units, with their offsets (see _flush_fine)
        self.fine_terms = 0
        self.fine_bound = 0  # sum over its terms of ceil(max |term|) in units

    def __len__(self) -> int:
        return len(self.high)

    def add(self, vector: np.ndarray, scale: float = 1.0) -> None:
        """Add scale * vector (float32 or float64; the product is rounded once, in float64)."""
        factor = scale * 2.0 ** -(self.unit + LOW_BITS)
        top = None
        if factor >= 0 and len(vector):  # rounding is monotonic: the products' extremes are the extremes' products,
            kernels = _compiled(vector) if factor > 0 else None
            if kernels is not None:  # read off the narrower input
                top = _largest_magnitude(vector, kernels[1]) * factor
            else:
                top = max(float(np.max(vector)) * factor, -float(np.min(vector)) * factor)
            if top < _FINE_LIMIT:  # NaN fails
                self._add_fine(vector, factor, top, kernels)
                return
        y, rounded = self._scratch()
        np.multiply(vector, factor, out=y, dtype=np.float64)
        if top is None:
            top = max(float(np.max(y)), -float(np.min(y))) if len(y) else 0.0
        if not top < _TERM_LIMIT:  # NaN, inf or too large: those entries add as floats
            y[:] = self._set_aside(y)
            top = float(np.max(np.abs(y))) if len(y) else 0.0
        self.bound += int(np.ceil(top)) + 1
        np.add(y, _MAGIC, out=rounded)  # its bits hold the nearest integer, plus _MAGIC_BITS (taken off when read)
        self.high += rounded.view(np.int64)  # int64 wraps around: the offsets come off exactly, modulo 2^64
        rounded -= _MAGIC  # that integer as a float (exact)
        y -= rounded  # the remainder, exactly: |y| <= 1/2
        y += _LOW_MAGIC  # rounded to a multiple of 2^-32, which its bits now count, plus _LOW_MAGIC_BITS
        self.low += y.view(np.int64)
        self.terms += 1

    def _add_fine(self, vector: np.ndarray, factor: float, top: float, kernels=None) -> None:
        """A term below _FINE_LIMIT high units, rounded to its nearest unit in one step (the high and low limbs
        would hold the same integer: the high part's unit, 2^32 of these, is even, so rounding half to even
        agrees) and added to the fine limb."""
        fine_top = int(np.ceil(top * 2.0 ** LOW_BITS)) + 1
        if self.fine is None:
            self.fine = np.zeros(len(self), dtype=np.int64)
        elif self.fine_bound + fine_top >= _FINE_BOUND:
            self._flush_fine()
        if kernels is not None:
            kernels[0](vector, factor * 2.0 ** LOW_BITS, self.fine)
        else:
            y, _ = self._scratch()
            np.copyto(y, vector)  # widened, then scaled in place: numpy's mixed-type multiply is twice as slow
            y *= factor * 2.0 ** LOW_BITS  # the high-unit product x 2^32, rounded once as the mixed multiply would
            y += _MAGIC
            self.fine += y.view(np.int64)
        self.fine_terms += 1
        self.fine_bound += fine_top
        self.bound += int(np.ceil(top)) + 1

    def _flush_fine(self) -> None:
        """The fine limb's value (offsets off, exact: it is below 2^62) into the high and low limbs."""
        if self.fine is None or not self.fine_terms:
            return
        self.fine -= _wrapped(self.fine_terms * _MAGIC_BITS)
        self.high += self.fine >> LOW_BITS
        self.low += self.fine & ((1 << LOW_BITS) - 1)
        self.fine[:] = 0
        self.fine_terms = self.fine_bound = 0

    def _scratch(self) -> tuple[np.ndarray, np.ndarray]:
        """Two float64 work vectors kept between adds: a sum that takes a thousand terms a round allocates
        (and faults in) no fresh vector-sized memory for each, and works in memory still in the cache."""
        if self._work is None:
            self._work = (np.empty(len(self), dtype=np.float64), np.empty(len(self), dtype=np.float64))
        return self._work

    def _set_aside(self, y: np.ndarray) -> np.ndarray:
        """Moves the entries the limbs cannot hold into `nonfinite` (as infinities of their sign when finite
        but too large: beyond the range, like a float overflow); returns y with those entries zeroed."""
        wild = ~(np.abs(y) < _TERM_LIMIT)
        values = np.where(wild, np.where(np.isnan(y), np.nan, np.copysign(np.inf, y)), 0.0)
        with np.errstate(invalid="ignore"):  # inf - inf is NaN here, as in a float sum
            self.nonfinite = values if self.nonfinite is None else self.nonfinite + values
        return np.where(wild, 0.0, y)

    def merge(self, other: "ExactSum") -> None:
        if len(other) != len(self):
            raise ValueError(f"cannot merge a sum of {len(other)} values into one of {len(self)}")
        if other.unit != self.unit:
            raise ValueError(f"cannot merge a sum in units of 2^{other.unit} into one in units of 2^{self.unit}")
        other._flush_fine()
        self.high += other.high
        self.low += other.low
        self.terms += other.terms
        self.bound += other.bound
        if other.nonfinite is not None:
            with np.errstate(invalid="ignore"):
                self.nonfinite = other.nonfinite.copy() if self.nonfinite is None else self.nonfinite + other.nonfinite

    def _canonical(self) -> None:
        """The low limb in [0, 2^32), its carry in the high limb: one representation for each exact value.
        Each term added its rounding offsets too (the magic constants' bits); they come off here, in int64
        arithmetic modulo 2^64, which is exact since the true limbs are in range."""
        self._flush_fine()
        if self.terms:
            self.high -= _wrapped(self.terms * _MAGIC_BITS)
            self.low -= _wrapped(self.terms * _LOW_MAGIC_BITS)
            self.terms = 0
        carry = self.low >> LOW_BITS
        self.high += carry
        self.low -= carry << LOW_BITS

    def value(self) -> np.ndarray:
        """The sum as float64 (the exact value, rounded once it is read: the same whatever the order)."""
        if self.bound >= _BOUND_LIMIT:  # the limbs may have wrapped around: no number can be trusted
            return np.full(len(self), np.nan)
        self._canonical()
        total = self.low.astype(np.float64) * 2.0 ** -LOW_BITS
        total += self.high.astype(np.float64)
        total *= 2.0 ** (self.unit + LOW_BITS)
        if self.nonfinite is not None:
            with np.errstate(invalid="ignore"):
                total += self.nonfinite  # finite + inf = inf; the zeros elsewhere change nothing
        return total

    def __getstate__(self) -> dict:
        """Compact on the wire: the value in units as int32 while it fits (int64 while that does), else the
        two limbs (after the carry the low one fits 32 bits)."""
        self._canonical()
        state = {"unit": self.unit, "bound": self.bound, "nonfinite": self.nonfinite}
        if len(self.high) == 0 or int(np.max(np.abs(self.high))) < 2 ** 30:  # high * 2^32 + low fits an int64
            units = (self.high << LOW_BITS) + self.low
            narrow = len(units) == 0 or (int(units.max()) < 2 ** WIRE_BITS and int(units.min()) >= -2 ** WIRE_BITS)
            if narrow:
                state["low_bytes"], state["top_byte"] = _split_top_byte(units)
            else:
                state["units"] = units
        else:
            state["high"], state["low"] = self.high, self.low.astype(np.uint32)
        return state

    def __setstate__(self, state: dict) -> None:
        if "low_bytes" in state:
            units = _joined_top_byte(state["low_bytes"], state["top_byte"]).astype(np.int64)
            self.high, self.low = units >> LOW_BITS, units & ((1 << LOW_BITS) - 1)
        elif "units" in state:
            units = state["units"].astype(np.int64)
            self.high, self.low = units >> LOW_BITS, units & ((1 << LOW_BITS) - 1)
        else:
            self.high, self.low = state["high"].astype(np.int64), state["low"].astype(np.int64)
        self.unit = state.get("unit", FINEST_UNIT)
        self.bound, self.nonfinite, self.terms, self._work = state["bound"], state["nonfinite"], 0, None
        self.fine, self.fine_terms, self.fine_bound = None, 0, 0


def _add_scaled(vector, multiplier, total):
    """total[j] += the bits of float64(vector[j]) * multiplier + _MAGIC as an int64, for |product| < 2^51: what
    _add_fine's numpy arithmetic adds (that integer, _MAGIC_BITS more), in one pass instead of four."""
    for j in range(len(vector)):
        rounded = (np.float64(vector[j]) * multiplier + _MAGIC) - _MAGIC  # the product's nearest integer, exact
        total[j] += np.int64(rounded) + _MAGIC_BITS


def _largest_bits(bits, mask):
    """The largest of bits[j] & mask: a float vector's largest magnitude as its bits (for floats of one sign
    their order is the integers'; a NaN's are above infinity's), in one pass that vectorises."""
    largest = 0
    for j in range(len(bits)):
        largest = max(largest, bits[j] & mask)
    return largest


def _largest_magnitude(vector: np.ndarray, largest_bits) -> float:
    """max |vector|, NaN where an entry is NaN (as max(np.max(v), -np.min(v)) reads, up to that NaN)."""
    ints = np.int64 if vector.dtype == np.float64 else np.int32
    mask = ints(np.iinfo(ints).max)  # all but the sign bit
    return float(np.array([largest_bits(vector.view(ints), mask)], dtype=ints).view(vector.dtype)[0])


_seen_values = [0]  # the values of large terms this process has added the slow way (see _compiled)
_kernels: list = []  # (_add_scaled, _largest_bits) compiled, or None where numba is missing


def compile_adds() -> bool:
    """Compile the adds now (emulator/compiled.py), for a process about to add COMPILE_FROM values or more
    (a runner of a large run, at its start); False where numba is missing."""
    if not _kernels:
        namespace = {"_add_scaled": _add_scaled, "_largest_bits": _largest_bits}
        compiled = compile_in(namespace, ("_add_scaled", "_largest_bits"), nrt=False)
        _kernels.append((namespace["_add_scaled"], namespace["_largest_bits"]) if compiled else None)
        if compiled:  # numba compiles at a first call: here, not in the first round (float32 terms, the usual)
            namespace["_add_scaled"](np.zeros(1, np.float32), 1.0, np.zeros(1, np.int64))
            _largest_magnitude(np.zeros(1, np.float32), namespace["_largest_bits"])
    return _kernels[0] is not None


def _compiled(vector: np.ndarray):
    """(_add_scaled, _largest_bits) compiled by numba, for float32 or float64 terms of at least COMPILED_SIZE
    values, once compile_adds was called or this process has added COMPILE_FROM such values the slow way:
    loading them costs a process about 0.5 s (from numba's cache on disk) and saves about 0.7 ns a value, so
    a process that was not told to compile pays at most twice what compiling at its start would have cost,
    and a small run never compiles. None until then, and where numba is missing: numpy's arithmetic gives
    the same bits."""
    if len(vector) < COMPILED_SIZE or vector.dtype not in (np.float32, np.float64):
        return None
    if not _kernels:
        _seen_values[0] += len(vector)
        if _seen_values[0] < COMPILE_FROM:
            return None
        compile_adds()
    return _kernels[0]


def _split_top_byte(units: np.ndarray) -> tuple[np.ndarray, bytes]:
    """int32-sized values as their three low bytes (n x 3, as they are) and their top bytes deflated."""
    planes = units.astype("<i4").view(np.uint8).reshape(-1, 4)
    return np.ascontiguousarray(planes[:, :3]), zlib.compress(np.ascontiguousarray(planes[:, 3]).tobytes(), 1)


def _joined_top_byte(low_bytes: np.ndarray, top_byte: bytes) -> np.ndarray:
    """_split_top_byte's int32 values back."""
    planes = np.empty((len(low_bytes), 4), dtype=np.uint8)
    planes[:, :3] = low_bytes
    planes[:, 3] = np.frombuffer(zlib.decompress(top_byte), dtype=np.uint8)
    return planes.view("<i4").ravel()

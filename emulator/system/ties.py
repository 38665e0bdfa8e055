"""Behaviour tied to data: latent user types and rules over the partition (population.types, .ties).

Every tie says, for one behaviour (compute, network, availability entry, time zone, dropout rate, online
share, trace device), what each device gets given the data it holds. The system model first draws every
behaviour as if nothing were tied (the same streams as an untied world), then asks `World` what a tie
changes:

- `order(behaviour, members, keys)`: a rank tie re-deals the values the members drew (keys: one number per
  member, e.g. seconds per sample) so that the member with the highest statistic gets the highest value;
- `values(behaviour, members)`: a group or scale tie, or the latent types, give each member its value
  (NaN / -1: keep what it drew).

A type that behaves at its best (`behaves: best`, an attacker's default) gets, for each behaviour it leaves
out, the best the world offers (`best_value`): the availability entry online longest, the fastest compute or
network tier, no dropout; with a compute or network drawn from a distribution or a trace, its devices take
the fastest values the fleet drew (`best_first`), so the fleet's make-up stays as drawn.

population.correlation c loosens every tie alike: the tie is applied in full, then a seeded share 1 - c of
the devices swap what they got at random among themselves. The data never changes and the fleet's make-up
(how many devices are slow, in each time zone, ...) does not change with c; only who gets what does. At
c = 0 behaviour is independent of data. The devices released at c are among those released at any c' < c,
so a scan over c changes the world gradually.

Everything is vectorised over the population and happens once, when the world is built.
"""
from __future__ import annotations

import numpy as np

from emulator.data import statistics
from emulator.scenario import TYPE_BEHAVIOURS, ScenarioError, ScenarioFieldError
from emulator.seeding import device_types, rng

KEEP = -1  # an index value meaning "keep what the device drew"


# ----------------------------------------------------------------------------------------- pure parts
def loosened(values: np.ndarray, correlation: float, stream: np.random.Generator) -> np.ndarray:
    """`values` with a share 1 - correlation of the positions swapped at random among themselves.

    The released positions are those with the smallest of one uniform draw per position, so for a given
    stream the devices released at a higher correlation are among those released at a lower one."""
    values = np.asarray(values)
    n = len(values)
    order = np.argsort(stream.random(n), kind="stable")
    free = int(round((1.0 - correlation) * n))
    out = values.copy()
    if free >= 2:
        released = order[:free]
        out[released] = values[released[stream.permutation(free)]]
    return out


def rank_source(statistic: np.ndarray, keys: np.ndarray, direction: str,
                stream: np.random.Generator) -> np.ndarray:
    """source[j] = the position whose value device j gets, so that values sorted by key follow the
    devices sorted by statistic (direction "same": the highest statistic gets the highest key). Ties on
    either side are broken at random."""
    n = len(statistic)
    devices = np.lexsort((stream.random(n), statistic))
    values = np.lexsort((stream.random(n), keys))
    if direction == "opposite":
        values = values[::-1]
    source = np.empty(n, dtype=np.int64)
    source[devices] = values
    return source


def best_first(wants: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """source[j] = the position whose value device j gets, so that the devices in `wants` hold the values of
    the lowest keys: each wanting device outside them swaps with an unwanting device inside (pairs in device
    and key order); everyone else keeps its own value."""
    wants = np.asarray(wants, bool)
    source = np.arange(len(keys))
    best = np.argsort(keys, kind="stable")[:int(wants.sum())]
    among = np.zeros(len(keys), bool)
    among[best] = True
    takers, freed = np.flatnonzero(wants & ~among), best[~wants[best]]
    source[takers], source[freed] = freed, takers
    return source


def link_seconds(down_mbps, up_mbps, latency_s):
    """Seconds to move a megabyte down and up, with the latency both ways: how a link ranks among others
    (lower: better), for a tier's numbers or a drawn column of them."""
    return 8.0 / down_mbps + 8.0 / up_mbps + 2.0 * latency_s


def best_value(population, behaviour: str):
    """The best value population's entries offer for `behaviour`, as a type would give it (an index, a
    rate); None where the world offers no choice between entries (one availability entry, availability
    whose online share is unknown, compute or network that is not tiers, no dropout to spare)."""
    if behaviour == "availability":
        shares = [e.long_run_online_share() for e in population.availability]
        known = [i for i, share in enumerate(shares) if share is not None]
        return max(known, key=lambda i: shares[i]) if len(population.availability) > 1 and known else None
    if behaviour in ("compute", "network"):
        section = getattr(population, behaviour)
        if section.kind != "tiers":
            return None
        cost = [t.s_per_sample if behaviour == "compute" else link_seconds(t.down_mbps, t.up_mbps, t.latency_s)
                for t in section.tiers]
        return int(np.argmin(cost))
    if behaviour == "dropout_per_hour":
        return 0.0 if population.dropout_per_hour > 0 else None
    return None  # a time zone or an online share is no better than another


def scaled(statistic: np.ndarray, low: float, high: float, shape: str = "linear", exponent: float = 1.0,
           span: list[float] | None = None) -> np.ndarray:
    """A number per device from low (at the lowest statistic) to high (at the highest).

    linear: in the statistic over `span` (default: its observed min..max); rank: in its rank; power:
    x = s**exponent / max(s**exponent) (FLGo's more-data-first with exponent beta, less-data-first with
    -beta), then low + (high - low) x."""
    s = np.asarray(statistic, dtype=np.float64)
    if shape == "rank":
        ranks = np.empty(len(s))
        ranks[np.argsort(s, kind="stable")] = np.arange(len(s))
        x = ranks / max(len(s) - 1, 1)
    elif shape == "power":
        g = np.power(np.maximum(s, 1e-12), exponent)
        x = g / g.max()
    else:
        lo, hi = (span if span is not None else (s.min(), s.max()))
        x = np.clip((s - lo) / (hi - lo), 0.0, 1.0) if hi > lo else np.full(len(s), 0.5)
    return low + (high - low) * x


# ---------------------------------------------------------------------------------------- the world
class World:
    """What population.types and population.ties make of each device, given the data it holds."""

    def __init__(self, population, label_counts: np.ndarray | None, seed: int, classes: int | None = None):
        self.population = population
        self.seed = seed
        self.correlation = population.correlation
        self.label_counts = label_counts
        self.ties = {tie.sets: (i, tie) for i, tie in enumerate(population.ties)}
        self._columns: dict[str, np.ndarray] = {}  # per-device columns for participation.csv (see columns)
        self.types = population.types
        n = population.devices
        if self.ties and label_counts is None:
            raise ScenarioError("population.ties: ties need the devices' data (label counts)")
        if label_counts is not None and len(label_counts) != n:
            raise ScenarioError(f"population.devices: {n}, but the data has {len(label_counts)} devices")
        if self.types:
            # type indices in the smallest integer that holds them (1 byte a device for < 256 types)
            small = np.uint8 if len(self.types) < 256 else np.int32
            self.data_type = device_types([t.share for t in self.types], n, seed).astype(small)
            self.behaviour_type = loosened(self.data_type, self.correlation, rng(seed, "ties", "types"))
        self._groups: dict[str, np.ndarray] = {}
        for behaviour, (i, tie) in self.ties.items():
            if tie.values is not None:
                self._groups[behaviour] = self._group_of(i, tie, classes)

    @property
    def columns(self) -> dict[str, np.ndarray]:
        """Per-device columns for participation.csv. The type names are spelt out only when asked for: a
        column of names costs ~50 bytes a device (0.5 GB at 10^7 devices), the type indices one byte."""
        columns = {}
        if self.types:
            names = np.array([t.name for t in self.types])
            columns["type"] = names[self.data_type]
            columns["behaves_as"] = names[self.behaviour_type]
        return {**columns, **self._columns}

    # ------------------------------------------------------------------------------- statistics
    def _statistic(self, tie) -> np.ndarray:
        if tie.by == "cluster":
            raise AssertionError("cluster is a group statistic")
        return statistics.numeric_statistic(self.label_counts, tie.by, tie.classes)

    def _group_of(self, i: int, tie, classes: int | None) -> np.ndarray:
        counts = self.label_counts
        where = f"population.ties.{i}"
        if tie.by == "cluster":
            group = statistics.label_clusters(counts, tie.k, rng(self.seed, "ties", "cluster", i))
            count = tie.k
        elif tie.by == "label_group":
            group, count = statistics.label_group(counts, tie.groups), len(tie.groups)
        elif tie.groups is not None:  # dominant_label, grouped
            group, count = statistics.group_of_dominant(counts, tie.groups), len(tie.groups)
            if (group < 0).any():
                missing = sorted(set(np.unique(statistics.dominant_label(counts)[group < 0]).tolist()))
                raise ScenarioError(f"{where}.groups: devices whose dominant label is {missing} are in no group; "
                                    "put every class in a group")
        else:
            group, count = statistics.dominant_label(counts), counts.shape[1]
        if len(tie.values) != count:
            raise ScenarioError(f"{where}.values: {len(tie.values)} values for {count} groups (by: {tie.by}); give "
                                f"one value per group")
        sizes = np.bincount(group, minlength=count)
        if (sizes == 0).any():
            empty = np.flatnonzero(sizes == 0).tolist()
            raise ScenarioError(f"{where}: group(s) {empty} hold no device, so their values apply to nobody; "
                                f"change {'groups' if tie.groups else 'by'} or the partition (data.partition)")
        self._columns[f"group_{tie.sets}"] = group
        return group

    # ------------------------------------------------------------------------------- questions
    def _type_table(self, behaviour: str) -> list | None:
        """Each type's value of `behaviour`: as written, or the world's best for a type at its best that
        leaves it out (unless a tie in population.ties sets it); None when no type sets it."""
        if not self.types:
            return None
        best = None if behaviour in self.ties else best_value(self.population, behaviour)
        table = [t.behaviour(behaviour) if t.behaviour(behaviour) is not None or not t.at_best() else best
                 for t in self.types]
        return table if any(v is not None for v in table) else None

    def _at_best(self, behaviour: str, members: np.ndarray) -> np.ndarray | None:
        """Which members take the fleet's fastest drawn `behaviour` (compute or network not in tiers): those
        whose type is at its best and leaves it out; None when nobody does."""
        if not self.types or behaviour not in ("compute", "network") or behaviour in self.ties \
                or getattr(self.population, behaviour).kind == "tiers":
            return None
        wanting = np.array([t.at_best() and t.behaviour(behaviour) is None for t in self.types])
        return wanting[self.behaviour_type[members]] if wanting.any() else None  # loosened with the types

    def order(self, behaviour: str, members: np.ndarray, keys: np.ndarray,
              cost=None) -> np.ndarray | None:
        """For a rank tie on `behaviour`: source positions (into `members`) of the values each member gets,
        loosened by the correlation; for types at their best, the values of lowest `cost()` (a callable, made
        only when needed; default: keys) to their devices; None when neither applies."""
        if behaviour not in self.ties:
            wants = self._at_best(behaviour, members)
            return None if wants is None else best_first(wants, keys if cost is None else cost())
        i, tie = self.ties[behaviour]
        if tie.values is not None or tie.scale is not None:
            return None
        statistic = self._statistic(tie)[members]
        if len(members) and statistic.min() == statistic.max():
            raise ScenarioError(f"population.ties.{i}.by: every device has the same {tie.by} "
                                f"({statistic.min():g}), so ranking by it ties nothing; choose another statistic "
                                "or classes")
        stream = rng(self.seed, "ties", behaviour)
        source = rank_source(statistic, np.asarray(keys), tie.direction, stream)
        self._columns[f"rank_{behaviour}"] = _full(self.population.devices, members, statistic, np.nan)
        return loosened(source, self.correlation, stream)

    def values(self, behaviour: str, members: np.ndarray, resolve=None):
        """For a group or scale tie, or the types: each member's value (resolved by `resolve`, e.g. a tier
        name to its index), loosened by the correlation; None when nothing sets `behaviour`."""
        table = self._type_table(behaviour)
        if table is not None:
            return _lookup(table, self.behaviour_type[members], resolve)  # loosened with the types
        if behaviour not in self.ties:
            return None
        i, tie = self.ties[behaviour]
        stream = rng(self.seed, "ties", behaviour)
        if tie.values is not None:
            assigned = _lookup(tie.values, self._groups[behaviour][members], resolve)
        elif tie.scale is not None:
            statistic = self._statistic(tie)[members]
            assigned = scaled(statistic, tie.scale[0], tie.scale[1], tie.shape, tie.exponent, tie.range)
        else:
            return None
        return loosened(assigned, self.correlation, stream)


def _lookup(table: list, index: np.ndarray, resolve) -> np.ndarray:
    resolved = [resolve(v) if resolve is not None and v is not None else v for v in table]
    if all(isinstance(v, (int, np.integer)) or v is None for v in resolved):
        array = np.array([KEEP if v is None else v for v in resolved], dtype=np.int64)
    else:
        array = np.array([np.nan if v is None else v for v in resolved], dtype=np.float64)
    return array[index]


def _full(n: int, members: np.ndarray, values: np.ndarray, fill) -> np.ndarray:
    out = np.full(n, fill, dtype=np.float64)
    out[members] = values
    return out


# ------------------------------------------------------------------------------- static checks
def entry_index(entries, value, where: str, what: str) -> int:
    """An availability entry or tier given by name or index -> its index."""
    names = [getattr(e, "name", None) for e in entries]
    if isinstance(value, str):
        if value not in names:
            known = [n for n in names if n is not None]
            raise ScenarioFieldError(where, f"no {what} named {value!r}; named ones: {known or 'none (give them a name:)'}"
                                     f", or use an index 0..{len(entries) - 1}")
        return names.index(value)
    if not 0 <= int(value) < len(entries):
        raise ScenarioFieldError(where, f"{what} index {value} out of range; there are {len(entries)} (0..{len(entries) - 1})")
    return int(value)


def check_ties(population) -> None:
    """Cross-field rules of population.ties and .types (run when the scenario is validated)."""
    kinds = [a.kind for a in population.availability]
    needs_entry = {"timezone": (("diurnal", "eligible"), "a diurnal or eligible availability entry (time zones "
                                "belong to daily windows)"),
                   "online_share": (("markov",), "a markov availability entry (an online share sets its off periods)"),
                   "trace": (("trace",), "a trace availability entry")}
    tied: dict[str, str] = {}
    for i, tie in enumerate(population.ties):
        where = f"population.ties.{i}"
        if tie.sets in tied:
            raise ScenarioFieldError(f"{where}.sets", f"{tie.sets} is already tied by {tied[tie.sets]}; tie each "
                                     "behaviour once")
        tied[tie.sets] = where
        if tie.by == "type":
            raise ScenarioFieldError(f"{where}.by", "behaviour by type is given in population.types itself")
        _check_target(population, tie.sets, kinds, needs_entry, f"{where}.sets")
        if tie.values is not None:
            for j, value in enumerate(tie.values):
                _check_value(population, tie.sets, value, f"{where}.values.{j}")
    compute, network = population.compute, population.network
    if "compute" in tied and "network" in tied and compute.kind == network.kind == "trace" \
            and compute.file == network.file:
        raise ScenarioFieldError(tied["network"] + ".sets", "compute and network come from one capacity file, "
                                 "whose rows are phones: a tie on compute moves the link with it; tie one of them")
    _check_zones_used(population)
    for k, user_type in enumerate(population.types or []):
        for behaviour in TYPE_BEHAVIOURS:
            value = user_type.behaviour(behaviour)
            if value is None:
                continue
            where = f"population.types.{k}.{behaviour}"
            if behaviour in tied:
                raise ScenarioFieldError(where, f"{behaviour} is also tied by {tied[behaviour]}; set it in the types "
                                         "or in a tie, not both")
            _check_target(population, behaviour, kinds, needs_entry, where)
            _check_value(population, behaviour, value, where)


def _check_zones_used(population) -> None:
    """The rule between a diurnal (or eligible) entry's own time zones and zones given by type or tie: a
    device whose type (or a tie's value for it) gives a zone takes that one; the entry's `timezones` apply
    to the devices left without one. When every type gives one, no device is left, and time zones written
    in the entry would be ignored without a word: refused. (A tie's groups may leave devices out, so its
    entries' zones may serve.)"""
    if not population.types or any(t.timezone is None for t in population.types):
        return
    for i, entry in enumerate(population.availability):
        # the default (UTC) says nothing
        if entry.kind in ("diurnal", "eligible") and entry.timezones != type(entry.timezones)():
            raise ScenarioFieldError(f"population.availability.{i}.timezones", "every type in population.types "
                                     "sets its timezone, so these time zones would never be used; drop them (or "
                                     "leave timezone out of a type, whose devices then draw from them)")


def _check_target(population, behaviour, kinds, needs_entry, where) -> None:
    if behaviour in needs_entry and not set(needs_entry[behaviour][0]) & set(kinds):
        raise ScenarioFieldError(where, f"{behaviour} needs {needs_entry[behaviour][1]} in population.availability")
    if behaviour == "availability" and len(population.availability) < 2:
        raise ScenarioFieldError(where, "tying availability needs at least two entries in population.availability "
                                 "to choose between")


def _check_value(population, behaviour, value, where) -> None:
    if behaviour in ("compute", "network"):
        section = getattr(population, behaviour)
        if section.kind != "tiers":
            raise ScenarioFieldError(where, f"a {behaviour} value names a tier, but population.{behaviour} is "
                                     f"{section.kind}; use kind: tiers, or a rank tie (leave values out)")
        entry_index(section.tiers, value, where, f"population.{behaviour} tier")
    elif behaviour == "availability":
        entry_index(population.availability, value, where, "population.availability entry")


def check_world(scenario, federation) -> None:
    """Build the world's ties on the actual data once, so a tie the data cannot satisfy (a group no
    device falls in, a statistic every device shares) is a ScenarioError before anything starts; so is
    a world whose set-up leaves a statistic empty in every row (check_local_tests)."""
    check_local_tests(scenario, federation.local_sizes, federation.sizes)
    population = scenario.population
    if scenario.system.model != "simulated" or not (population.ties or population.types):
        return
    world = World(population, federation.label_counts(), scenario.seed)
    everyone = np.arange(population.devices)
    for behaviour, (i, tie) in world.ties.items():
        if tie.values is None:
            world.order(behaviour, everyone, np.zeros(len(everyone))) if tie.scale is None else \
                world.values(behaviour, everyone)


def check_local_tests(scenario, local_sizes: np.ndarray, train_sizes: np.ndarray) -> None:
    """evaluation.devices scores devices on their own test splits (data.local_test): where the data leaves
    no device one, every device statistic would be empty to the end of the run. Refused once the data is
    built (who holds a split depends on each device's samples), naming the field and the fix."""
    local = scenario.data.local_test
    if scenario.evaluation.devices is None or local is None or np.any(np.asarray(local_sizes) > 0):
        return
    largest = int(np.max(np.asarray(train_sizes) + np.asarray(local_sizes))) if len(train_sizes) else 0
    if local.split == "dataset":
        why = f"no user has min_samples ({local.min_samples}) test samples of its own"
        fix = "lower data.local_test.min_samples, or use split: carve with a fraction"
    else:
        why = (f"a device holds round(fraction x its samples) out only where that is at least min_samples "
               f"({local.min_samples}) and leaves it a sample to train on, and the largest device has {largest} "
               f"samples (fraction {local.fraction:g})")
        fix = "raise data.local_test.fraction, lower data.local_test.min_samples, or give the devices more data"
    raise ScenarioError(f"data.local_test: no device holds a local test split ({why}), so every statistic of "
                        f"evaluation.devices would be empty in every row; {fix}")

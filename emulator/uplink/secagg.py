"""Secure aggregation as a cost: the bytes and seconds a round pays for SecAgg (Practical Secure Aggregation for
Privacy-Preserving Machine Learning, Bonawitz et al., CCS 2017) or SecAgg+ (Secure Single-Server Aggregation with
(Poly)Logarithmic Overhead, Bell et al., CCS 2020). Source: ../shared/papers/privacy-compression.md, section 4.

The emulator never masks anything: with or without secure aggregation the server's aggregate is the plain sum,
bit-identical. Masks cancel exactly in the real protocol, so simulating them would change nothing but the run time;
what changes is what a device and the server pay, and that is what this module prices:
- round trips: R0 advertise keys, R1 share keys (both before local training), R2 the masked upload (it replaces the
  plain upload), R3 a consistency check (malicious-server model only), R4 unmasking;
- bytes: 2 public keys per device, an encrypted share pair per neighbour, the upload widened from b to
  l = b + ceil(log2 n) bits per coordinate so the field holds the sum, one share per neighbour back at the end;
- crypto seconds on one reference core (the caller scales them to the device), from the notes' measurements;
- aborts: too few survivors, or (SecAgg+) a device whose secret too few live neighbours hold.

Every device shares with k neighbours (SecAgg: everyone else, k = n - 1; SecAgg+: a sparse ring, k = O(log n)) and
splits its two secrets (self-mask seed b_u, mask key s_u^SK) into k + 1 Shamir shares, one kept, t needed to rebuild.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np

VARIANTS = ("secagg", "secagg_plus")
SECRETS = 2  # b_u and s_u^SK are each Shamir-shared
SECRET_CHUNKS = 1  # the default 20-byte share is one 16-byte chunk plus its 4-byte x-coordinate: 16-byte secrets


@dataclass(frozen=True)
class Stage:
    """One protocol stage as one device sees it: what it downloads and uploads, and the crypto work it does,
    in seconds on the reference core (the caller scales it to the device)."""
    name: str
    bytes_down: int
    bytes_up: int
    compute_s: float


@dataclass(frozen=True)
class CryptoCosts:
    """Seconds per operation on the reference core (one x86 server core, measured for the notes unless said)."""
    key_generation_s: float = 0.18e-3  # P-384 keygen (Flower's curve); an X25519 keygen would be ~0.034 ms
    key_agreement_s: float = 0.034e-3  # X25519 ECDH (P-384 ECDH is 0.41 ms: X25519 is what a lean client would use)
    prg_words_per_s: float = 0.67e9 / 4  # AES-128-CTR at 0.67 GB/s, in 32-bit words
    modular_adds_per_s: float = 1.0e9  # numpy uint64 add + bitwise_and by a power-of-two modulus on 4M-word arrays:
    #                                    1.26e9/s measured here (numpy 2.4, one core), rounded down
    # Shamir per 16-byte chunk (pycryptodome), one field operation = one multiply-add in GF(2^128).
    # Split into k shares with threshold t evaluates a degree t-1 polynomial k times: k t ops. Least squares through
    # the origin on (k=10, t=6: 0.44 ms) and (k=100, t=51: 65 ms) gives 12.7 us/op (the big case dominates; the small
    # one is overestimated 1.7x, where the cost is negligible anyway).
    shamir_split_op_s: float = 12.7e-6
    # Combine from t shares is Lagrange interpolation at 0: t^2 ops, dearer per op (it inverts in the field):
    # 92 ms at t = 51 gives 35.4 us/op.
    shamir_combine_op_s: float = 35.4e-6
    encryption_bytes_per_s: float = 0.67e9  # AES on the share pairs; per-message overhead is left out

    def __post_init__(self):
        for name, value in vars(self).items():
            if not value > 0:
                raise ValueError(f"CryptoCosts.{name} must be > 0, got {value}")


class SecAggCost:
    """What secure aggregation costs per round, built once per run; every method takes the round's cohort size n.

    variant: "secagg" | "secagg_plus". num_params: m, coordinates per upload. input_bits: b, a coordinate's
    fixed-point width before the field grows. threshold: t, an int, or a fraction in (0, 1] of the share group
    (neighbours + 1, as Flower's reconstruction_threshold), None: the default (threshold()). neighbours: k, SecAgg+
    only, an even int (a ring gives k/2 on each side), None: the default (neighbours()). malicious: the
    malicious-server protocol (signed keys, the consistency-check round R3). Byte sizes are the notes' (not the
    paper's): a public key, an encrypted share pair, one share, a device id, a signature.
    """

    def __init__(self, variant: str, num_params: int, input_bits: int = 32, threshold: int | float | None = None,
                 neighbours: int | None = None, malicious: bool = False, *, key_bytes: int = 33,
                 share_pair_bytes: int = 60, share_bytes: int = 20, id_bytes: int = 4, signature_bytes: int = 64,
                 costs: CryptoCosts = CryptoCosts()):
        if variant not in VARIANTS:
            raise ValueError(f"secure_aggregation.kind: unknown variant {variant!r}; use one of {', '.join(VARIANTS)}")
        if isinstance(input_bits, bool) or not isinstance(input_bits, int) or input_bits < 1:
            raise ValueError(f"secure_aggregation.input_bits: {input_bits!r}; give a whole number of bits >= 1")
        if not isinstance(num_params, int) or num_params < 1:
            raise ValueError(f"num_params: {num_params!r}; the model must have at least one parameter")
        _check_threshold_spec(threshold)
        if neighbours is not None:
            if variant == "secagg":
                raise ValueError("secure_aggregation.neighbours: SecAgg shares with everyone in the cohort (n - 1); "
                                 "leave neighbours out, or use kind: secagg_plus for a sparse graph")
            if isinstance(neighbours, bool) or not isinstance(neighbours, int) or neighbours < 2 or neighbours % 2:
                raise ValueError(f"secure_aggregation.neighbours: {neighbours!r}; give an even number >= 2 (a ring "
                                 "gives k/2 neighbours on each side, so the graph is symmetric; Flower's "
                                 "num_shares = neighbours + 1 is made odd for the same reason)")
        for name, size in (("key_bytes", key_bytes), ("share_pair_bytes", share_pair_bytes),
                           ("share_bytes", share_bytes), ("id_bytes", id_bytes), ("signature_bytes", signature_bytes)):
            if size < 0:
                raise ValueError(f"{name}: {size}; a size in bytes cannot be negative")
        self.variant, self.num_params, self.input_bits, self.malicious = variant, num_params, input_bits, malicious
        self._threshold, self._neighbours = threshold, neighbours
        self.key_bytes, self.share_pair_bytes, self.share_bytes = key_bytes, share_pair_bytes, share_bytes
        self.id_bytes, self.signature_bytes, self.costs = id_bytes, signature_bytes, costs

    # --- parameters of a round --------------------------------------------------------------------------------

    def neighbours(self, cohort: int) -> int:
        """k, the devices each one shares with. SecAgg: n - 1. SecAgg+ default: min(n - 1, 2 ceil(log2 n)), an even
        O(log n) degree (Bell et al. only fix k = O(log n); their security-derived degrees are larger, e.g. ~3% of
        10^4 clients ~ 300 in their abstract: set neighbours explicitly for that level)."""
        _check_cohort(cohort)
        if self.variant == "secagg":
            return cohort - 1
        if self._neighbours is None:
            return min(cohort - 1, 2 * math.ceil(math.log2(cohort)))
        if self._neighbours >= cohort:
            raise ValueError(f"secure_aggregation.neighbours: {self._neighbours}, but the cohort has {cohort} devices, "
                             f"so each has at most {cohort - 1} neighbours; lower it or select more devices")
        return self._neighbours

    def threshold(self, cohort: int) -> int:
        """t, the shares needed to rebuild a secret, out of the k + 1 a device makes. Default: a strict majority,
        floor((k+1)/2) + 1, semi-honest; more than two thirds, floor(2(k+1)/3) + 1, malicious (t > 2n/3 for
        Bonawitz et al.'s active-adversary proof: recalled, not verified; the workshop version tolerates 1/3
        failing). Never below 2: one share would be the secret."""
        k = self.neighbours(cohort)
        spec = self._threshold
        if spec is None:
            t = (2 * (k + 1)) // 3 + 1 if self.malicious else (k + 1) // 2 + 1
        elif isinstance(spec, float):
            t = max(2, round(spec * (k + 1)))  # as Flower: a fraction of the share group, at least 2
        else:
            t = spec
        if t > cohort:
            raise _too_small(cohort, t)
        if t > k + 1:
            raise ValueError(f"secure_aggregation.threshold: {t} is larger than a device's share group of {k + 1} "
                             f"(neighbours {k} + itself), so no secret could be rebuilt; lower the threshold or "
                             "raise secure_aggregation.neighbours")
        return t

    def check(self, cohort: int) -> None:
        """Raises ValueError, naming the field, when a cohort of this size cannot run the protocol at all."""
        if cohort < 2:
            raise _too_small(cohort, self._threshold if isinstance(self._threshold, int) else 2)
        self.threshold(cohort)

    def field_bits(self, cohort: int) -> int:
        """l = b + ceil(log2 n): the sum of n b-bit inputs mod 2^l never wraps (needs 2^l >= n (2^b - 1) + 1)."""
        _check_cohort(cohort)
        return self.input_bits + math.ceil(math.log2(cohort))

    # --- a device's stages ------------------------------------------------------------------------------------

    def setup(self, cohort: int) -> list[Stage]:
        """R0 and R1, before local training: advertise 2 public keys; download the share group's keys, upload one
        encrypted share pair per neighbour (addressed by id) for the server to route."""
        k, t, c = self.neighbours(cohort), self.threshold(cohort), self.costs
        signed_keys = 2 * self.key_bytes + (self.signature_bytes if self.malicious else 0)
        advertise = Stage("advertise_keys", bytes_down=0, bytes_up=signed_keys,
                          compute_s=2 * c.key_generation_s)
        share_keys = Stage("share_keys",
                           bytes_down=(k + 1) * (signed_keys + self.id_bytes),  # own pair included, as broadcast
                           bytes_up=k * (self.share_pair_bytes + self.id_bytes),
                           compute_s=k * c.key_agreement_s  # encryption keys c_uv
                           + SECRETS * SECRET_CHUNKS * (k + 1) * t * c.shamir_split_op_s
                           + k * self.share_pair_bytes / c.encryption_bytes_per_s)
        return [advertise, share_keys]

    def masked_upload_bytes(self, cohort: int) -> int:
        """R2's upload, replacing the plain model upload: m coordinates of l bits."""
        return math.ceil(self.num_params * self.field_bits(cohort) / 8)

    def masked_download_bytes(self, cohort: int) -> int:
        """R2's extra download, on top of the model: the k encrypted share pairs routed to this device."""
        return self.neighbours(cohort) * (self.share_pair_bytes + self.id_bytes)

    def masking_compute_s(self, cohort: int) -> float:
        """A device's R2 crypto: k mask-key agreements s_uv, k decryptions of the received share pairs (Flower does
        them here; Bonawitz et al. in R4: the total is the same), k + 1 PRG expansions of m field words (self mask
        and one per neighbour) and (k + 1) m modular adds to apply them."""
        k, c, m = self.neighbours(cohort), self.costs, self.num_params
        return (k * c.key_agreement_s + k * self.share_pair_bytes / c.encryption_bytes_per_s
                + (k + 1) * m * self._prg_words(cohort) / c.prg_words_per_s
                + (k + 1) * m / c.modular_adds_per_s)

    def masked_input(self, cohort: int) -> Stage:
        """R2 as a Stage (model broadcast and local training excluded): the three methods above together."""
        return Stage("masked_input", bytes_down=self.masked_download_bytes(cohort),
                     bytes_up=self.masked_upload_bytes(cohort), compute_s=self.masking_compute_s(cohort))

    def finish(self, cohort: int, survivors: int) -> list[Stage]:
        """R3 (malicious only) and R4, for one device that survived R2, when `survivors` of the cohort did.
        R3: download its neighbours' survival list (k ids), upload a signature of it. R4: download that list
        (semi-honest) or the live neighbours' signatures (malicious); upload one share per neighbour (the b-share
        of a live one, the key share of a dropped one) and its own b-share (self counts toward t, as in Flower).
        Signing and verifying are not charged (no measurement in the notes; small next to key agreement)."""
        if not 1 <= survivors <= cohort:
            raise ValueError(f"survivors: {survivors}, but the cohort has {cohort} devices")
        k = self.neighbours(cohort)
        status = k * self.id_bytes
        shares_up = k * (self.share_bytes + self.id_bytes) + self.share_bytes
        if not self.malicious:
            return [Stage("unmasking", bytes_down=status, bytes_up=shares_up, compute_s=0.0)]
        live = self._live_neighbours(cohort, survivors)
        return [Stage("consistency_check", bytes_down=status, bytes_up=self.signature_bytes, compute_s=0.0),
                Stage("unmasking", bytes_down=live * (self.signature_bytes + self.id_bytes), bytes_up=shares_up,
                      compute_s=0.0)]

    # --- the server -------------------------------------------------------------------------------------------

    def server_compute_s(self, cohort: int, survivors: int, dropped_after_sharing: int) -> float:
        """The server's unmasking work, reference-core seconds: rebuild each survivor's b_u and each dropped device's
        s^SK from t shares, regenerate n3 self masks and, per dropped device, its pairwise masks with its live
        neighbours (one key agreement and m PRG words each), and add: n3 m to sum the inputs plus one m per
        regenerated mask (the notes round the adds to n m)."""
        n3, d, c, m = survivors, dropped_after_sharing, self.costs, self.num_params
        if n3 < 0 or d < 0 or n3 + d > cohort:
            raise ValueError(f"survivors {n3} + dropped_after_sharing {d} must be a split of the cohort of {cohort}")
        k, t = self.neighbours(cohort), self.threshold(cohort)
        pairwise = d * k * n3 / (cohort - 1)  # masks to regenerate: a dropped device's expected live neighbours
        masks = n3 + pairwise
        # Lagrange coefficients (t^2 operations) once per set of share holders, then t a secret: SecAgg's secrets
        # all have the same live holders, each SecAgg+ secret has its own (but t is O(log n) there)
        holder_sets = 1 if self.variant == "secagg" else n3 + d
        return (SECRET_CHUNKS * (holder_sets * t * t + (n3 + d) * t) * c.shamir_combine_op_s
                + pairwise * c.key_agreement_s
                + masks * m * self._prg_words(cohort) / c.prg_words_per_s
                + (n3 + masks) * m / c.modular_adds_per_s)

    def server_routed_bytes(self, cohort: int) -> int:
        """R1's relay: the server receives n k encrypted share pairs and forwards each (counted once)."""
        return cohort * self.neighbours(cohort) * (self.share_pair_bytes + self.id_bytes)

    # --- who shares with whom, and when a round aborts --------------------------------------------------------

    def neighbour_graph(self, cohort: int, rng: np.random.Generator) -> np.ndarray:
        """(cohort, k) cohort positions each device shares with, each row sorted. SecAgg: everyone else. SecAgg+:
        k/2 on each side of the device on a ring shuffled by rng (Flower's construction), so the graph is
        symmetric and k-regular."""
        k = self.neighbours(cohort)
        if k == cohort - 1:
            others = np.arange(k)[None, :]
            return others + (others >= np.arange(cohort)[:, None])  # row i: 0..n-1 without i
        ring = rng.permutation(cohort)
        place = np.empty(cohort, dtype=np.int64)
        place[ring] = np.arange(cohort)
        offsets = np.concatenate([np.arange(-(k // 2), 0), np.arange(1, k // 2 + 1)])
        return np.sort(ring[(place[:, None] + offsets[None, :]) % cohort], axis=1)

    def aborts(self, cohort: int, survived: np.ndarray, graph: np.ndarray | None = None) -> bool:
        """Whether the round aborts, given who survived (reported a masked input and answers unmasking).
        Rule: fewer than t survivors abort; otherwise every secret the server needs must have t live holders:
        a survivor's b_u is held by itself and its live neighbours (own share included, as in Flower), a dropped
        device's s^SK by its live neighbours only, and is needed only if it has a live neighbour (otherwise none of
        its pairwise masks is in the sum). Flower checks every sampled device, so it also aborts in that last,
        rare case. With SecAgg (everyone shares with everyone) this reduces to the survivor count. graph: from
        neighbour_graph (required for secagg_plus)."""
        survived = np.asarray(survived, dtype=bool)
        if survived.shape != (cohort,):
            raise ValueError(f"survived: expected one flag per device of the cohort ({cohort}), got {survived.shape}")
        t = self.threshold(cohort)
        if survived.sum() < t:
            return True
        if graph is None:
            if self.neighbours(cohort) != cohort - 1:
                raise ValueError("aborts: secagg_plus needs the neighbour graph (neighbour_graph(cohort, rng))")
            return False
        live = survived[graph].sum(axis=1)
        survivor_short = survived & (live + 1 < t)
        dropped_short = ~survived & (live > 0) & (live < t)
        return bool(survivor_short.any() or dropped_short.any())

    # --- the paper's headline figure --------------------------------------------------------------------------

    def plaintext_ratio(self, cohort: int, plaintext_bits: int, count_ids: bool = True) -> float:
        """(all protocol bytes up and down for one device, no dropouts, model broadcast excluded) / its plaintext
        upload ceil(m plaintext_bits / 8): Bonawitz et al.'s expansion figure. count_ids=False drops the device
        ids, as the paper's figures do."""
        priced = self if count_ids else self._without_ids()
        stages = priced.setup(cohort) + [priced.masked_input(cohort)] + priced.finish(cohort, cohort)
        total = sum(stage.bytes_up + stage.bytes_down for stage in stages)
        return total / math.ceil(self.num_params * plaintext_bits / 8)

    # --- helpers ----------------------------------------------------------------------------------------------

    def _prg_words(self, cohort: int) -> int:
        """32-bit PRG words per l-bit field element."""
        return math.ceil(self.field_bits(cohort) / 32)

    def _live_neighbours(self, cohort: int, survivors: int) -> int:
        """A survivor's expected surviving neighbours, k (s - 1) / (n - 1) rounded (exact for SecAgg)."""
        k = self.neighbours(cohort)
        return (2 * k * (survivors - 1) + cohort - 1) // (2 * (cohort - 1))

    def _without_ids(self) -> "SecAggCost":
        clone = copy.copy(self)
        clone.id_bytes = 0
        return clone


def _check_threshold_spec(threshold) -> None:
    if threshold is None:
        return
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise ValueError(f"secure_aggregation.threshold: {threshold!r}; give a number of devices (>= 2) or a "
                         "fraction in (0, 1] of a device's share group")
    if isinstance(threshold, float) and not 0 < threshold <= 1:
        raise ValueError(f"secure_aggregation.threshold: {threshold}; a fraction must lie in (0, 1]")
    if isinstance(threshold, int) and threshold < 2:
        raise ValueError(f"secure_aggregation.threshold: {threshold}; at least 2 shares, since one share would be the "
                         "secret itself (or give a fraction such as 0.5)")


def _check_cohort(cohort: int) -> None:
    if cohort < 2:
        raise _too_small(cohort, 2)


def _too_small(cohort: int, t: int) -> ValueError:
    return ValueError(f"secure_aggregation.threshold: the cohort of {cohort} devices is smaller than the threshold "
                      f"{t}; every round would abort: lower secure_aggregation.threshold or select more devices per "
                      "round (algorithm.clients_per_round)")

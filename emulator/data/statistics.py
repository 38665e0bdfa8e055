"""Per-device statistics of the data a device holds, computed from the (devices x classes) label counts.

Pure functions: the label counts in, one number or group index per device out. Behaviour is tied to these
(population.ties), so they are vectorised: 10^6 devices x 10 classes take milliseconds.
"""
from __future__ import annotations

import numpy as np

NUMERIC = ("samples", "label_entropy", "label_count", "min_label", "max_label", "class_share")


def label_mix(label_counts: np.ndarray) -> np.ndarray:
    """Each device's label distribution q_i (rows sum to 1; an empty device gets zeros)."""
    counts = np.asarray(label_counts, dtype=np.float64)
    totals = counts.sum(axis=1, keepdims=True)
    return np.divide(counts, totals, out=np.zeros_like(counts), where=totals > 0)


def label_entropy(label_counts: np.ndarray) -> np.ndarray:
    """Shannon entropy of each device's label distribution, in nats (0: one class)."""
    q = label_mix(label_counts)
    logs = np.log(q, out=np.zeros_like(q), where=q > 0)
    return -(q * logs).sum(axis=1)


def dominant_label(label_counts: np.ndarray) -> np.ndarray:
    """The class each device holds most of (the lowest such class on a tie)."""
    return np.asarray(label_counts).argmax(axis=1)


def class_share(label_counts: np.ndarray, classes: list[int]) -> np.ndarray:
    """Share of each device's samples that belong to `classes`."""
    return label_mix(label_counts)[:, list(classes)].sum(axis=1)


def label_group(label_counts: np.ndarray, groups: list[list[int]]) -> np.ndarray:
    """The group (a list of classes) holding the largest share of each device's samples (the first on a tie)."""
    q = label_mix(label_counts)
    shares = np.stack([q[:, list(g)].sum(axis=1) for g in groups], axis=1)
    return shares.argmax(axis=1)


def group_of_dominant(label_counts: np.ndarray, groups: list[list[int]]) -> np.ndarray:
    """The group that contains each device's dominant label (-1 if none does)."""
    lookup = np.full(np.asarray(label_counts).shape[1], -1, dtype=np.int64)
    for g, classes in enumerate(groups):
        lookup[list(classes)] = g
    return lookup[dominant_label(label_counts)]


def label_clusters(label_counts: np.ndarray, k: int, rng: np.random.Generator, iterations: int = 30) -> np.ndarray:
    """k-means (k-means++ start, Euclidean) over the devices' label distributions: devices with similar
    label mixes share a cluster. Clusters are numbered by their dominant class, so cluster 0 is the one
    whose centre leans to the lowest class (stable across seeds for well-separated data)."""
    q = label_mix(label_counts)
    n = len(q)
    if n < k:
        raise ValueError(f"{n} devices cannot form {k} clusters")
    centres = [q[rng.integers(n)]]
    for _ in range(1, k):
        distance = np.min([((q - c) ** 2).sum(axis=1) for c in centres], axis=0)
        total = distance.sum()
        pick = rng.choice(n, p=distance / total) if total > 0 else rng.integers(n)
        centres.append(q[pick])
    centres = np.array(centres)
    assign = np.zeros(n, dtype=np.int64)
    for _ in range(iterations):
        distance = (q ** 2).sum(axis=1)[:, None] - 2 * q @ centres.T + (centres ** 2).sum(axis=1)[None, :]
        new = distance.argmin(axis=1)
        if _ and np.array_equal(new, assign):
            break
        assign = new
        for c in range(k):
            members = assign == c
            if members.any():
                centres[c] = q[members].mean(axis=0)
    order = np.lexsort((-centres.max(axis=1), centres.argmax(axis=1)))  # by dominant class, then sharpness
    rename = np.empty(k, dtype=np.int64)
    rename[order] = np.arange(k)
    return rename[assign]


def numeric_statistic(label_counts: np.ndarray, name: str, classes: list[int] | None = None) -> np.ndarray:
    """A number per device: samples, label_entropy, label_count, min_label, max_label or class_share."""
    counts = np.asarray(label_counts)
    if name == "samples":
        return counts.sum(axis=1).astype(np.float64)
    if name == "label_entropy":
        return label_entropy(counts)
    if name == "label_count":
        return (counts > 0).sum(axis=1).astype(np.float64)
    held = counts > 0
    if name == "min_label":
        return np.where(held.any(axis=1), held.argmax(axis=1), 0).astype(np.float64)
    if name == "max_label":
        last = counts.shape[1] - 1 - held[:, ::-1].argmax(axis=1)
        return np.where(held.any(axis=1), last, 0).astype(np.float64)
    if name == "class_share":
        return class_share(counts, classes or [])
    raise ValueError(f"unknown statistic {name!r}")

"""The server's (auxiliary) data set, carved out of the devices' data so no sample is in both.

SAFARI and FSL give the server a small labelled set; drawing it from the devices' data (rather than from the
test set or thin air) keeps the total data fixed and lets FSL's "drawn from c clients" case be expressed.
"""
from __future__ import annotations

import numpy as np


def _spread(total: int, parts: int, rng: np.random.Generator, eligible: np.ndarray | None = None) -> np.ndarray:
    """`total` split into `parts` near-equal integers; the remainder goes to random parts (among `eligible`)."""
    out = np.full(parts, total // parts, dtype=np.int64)
    candidates = np.arange(parts) if eligible is None else np.flatnonzero(eligible)
    extra = total % parts
    if extra > len(candidates):
        raise ValueError("not enough parts can take one more")
    out[rng.choice(candidates, extra, replace=False)] += 1
    return out


def carve_server_set(per_device: list[np.ndarray], labels: np.ndarray, num_classes: int, spec,
                     rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    """Take spec.size samples (or spec.fraction of them) out of the devices' data: uniformly (iid),
    class-balanced, or from spec.clients randomly chosen devices. Returns (the devices' remaining data, the
    sorted server indices)."""
    if not spec.wanted:
        return per_device, np.zeros(0, dtype=np.int64)
    pool = np.concatenate(per_device).astype(np.int64) if per_device else np.zeros(0, np.int64)
    size = spec.size_of(len(pool))
    field = "data.server_set.size" if spec.fraction is None else f"data.server_set.fraction ({size} samples)"
    if size > len(pool):
        raise ValueError(f"{field}: {size} exceeds the {len(pool)} training samples the devices hold")
    if spec.source == "iid":
        server = rng.choice(pool, size, replace=False)
    elif spec.source == "balanced":
        server = _balanced(pool, labels, num_classes, size, rng, field)
    elif spec.source == "clients":
        server = _from_clients(per_device, size, spec.clients, rng, field)
    else:
        raise ValueError(f"data.server_set.source: {spec.source!r} is not known; choose iid, balanced or clients")
    server = np.sort(server.astype(np.int64))
    taken = np.zeros(len(labels), dtype=bool)
    taken[server] = True
    return [p[~taken[p]] for p in per_device], server


def _balanced(pool: np.ndarray, labels: np.ndarray, num_classes: int, size: int,
              rng: np.random.Generator, field: str = "data.server_set.size") -> np.ndarray:
    """size / num_classes samples of every class (remainder to random classes), uniform within a class."""
    pool_labels = labels[pool]
    held = np.bincount(pool_labels, minlength=num_classes)
    base = size // num_classes
    short = np.flatnonzero(held < base)
    if len(short) or np.count_nonzero(held > base) < size % num_classes:
        worst = int(short[0]) if len(short) else int(np.argmin(held))
        raise ValueError(f"{field}: a class-balanced set of {size} needs about {base + 1} samples of "
                         f"each of the {num_classes} classes, but the devices hold only {held[worst]} of class "
                         f"{worst}; lower size or use source: iid")
    wanted = _spread(size, num_classes, rng, eligible=held > base)
    order = np.argsort(pool_labels, kind="stable")
    starts = np.concatenate([[0], np.cumsum(held)])
    return np.concatenate([rng.choice(pool[order[starts[c]:starts[c + 1]]], wanted[c], replace=False)
                           for c in range(num_classes)])


def _from_clients(per_device: list[np.ndarray], size: int, clients: int, rng: np.random.Generator,
                  field: str = "data.server_set.size") -> np.ndarray:
    """size / clients samples from each of `clients` random devices that hold enough (FSL's non-IID server set)."""
    if clients > len(per_device):
        raise ValueError(f"data.server_set.clients: {clients} exceeds the {len(per_device)} devices")
    sizes = np.array([len(p) for p in per_device])
    need = -(-size // clients)
    eligible = np.flatnonzero(sizes >= need)
    if len(eligible) < clients:
        raise ValueError(f"{field}: {size} samples from {clients} devices need {need} from each, but "
                         f"only {len(eligible)} devices hold that many; lower {field.split(' ')[0]} or raise "
                         "data.server_set.clients")
    donors = rng.choice(eligible, clients, replace=False)
    wanted = _spread(size, clients, rng)
    return np.concatenate([rng.choice(per_device[d], n, replace=False) for d, n in zip(donors, wanted)])

"""FAST's Fashion-MNIST FedAvg written plainly in PyTorch: the reference a paper-scale emulator run is read against.

No emulator code: its own IDX reader, its own Dirichlet split, its own participation draws, one client after
another with a fresh torch.optim.Adam. What it shares with `scenarios/papers/fast_fmnist.yaml` is the setup
the paper gives (../shared/papers/fast.md): M = 100 clients holding 600 images each, class shares from
Dir(alpha); 10 clients a round, uniform or FAST's Beta(1, 10) indices (x ~ Beta, client int(x M), until 10
distinct); K = 10 steps of batch 128 (a shuffled walk through the client's images, the last batch of a pass
partial), Adam at 1e-3; the server's new model is the plain mean of the returned ones; the CNN
conv3x3(32)-conv3x3(64)-maxpool-dropout.25-FC128-dropout.5-FC10, inputs normalised with Fashion-MNIST's
mean and std. Where an emulator run and this loop agree, a gap to the paper is the setup's; where they
differ, it is the emulator's.

Evaluated on the 10,000 test images every `--eval-every` rounds and every round from `--dense-from` on, so
the paper's metric (the mean of the last 5 test accuracies) can be read both ways: 5 evaluations 10 rounds
apart, as the emulator's scenario evaluates, and the last 5 rounds back to back.

    python benchmarks/reference_fedavg.py --participation beta --seed 1 --out runs/reference/beta-seed1
    python benchmarks/reference_fedavg.py --rounds 3 --device cpu --out /tmp/ref   # a smoke run

`--setup FILE` (benchmarks/emulator_setup.py writes one from an emulator run) trains on that run's own split
and cohorts instead of drawing its own: the plain loop and the emulator then differ in the training code
alone.

Writes OUT/metrics.csv (round, test_acc, test_loss, wall_time_s at each evaluation) and OUT/summary.json
(status completed or unfinished, the settings, the metrics below); `--deadline S` stops after S seconds with
status unfinished, keeping what it evaluated.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530
FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")


def default_root() -> Path:
    env = os.environ.get("EMULATOR_DATA")
    for root in ([Path(env) / "fashion_mnist"] if env else []) + [Path("/usr/share/datasets/fashion-mnist")]:
        if (root / (FILES[0] + ".gz")).exists() or (root / FILES[0]).exists():
            return root
    raise SystemExit("Fashion-MNIST not found: pass --data DIR holding the four IDX files (.gz or not), "
                     "or apt-get install dataset-fashion-mnist")


def read_idx(root: Path, name: str) -> np.ndarray:
    path = root / (name + ".gz") if (root / (name + ".gz")).exists() else root / name
    raw = path.read_bytes()
    raw = gzip.decompress(raw) if path.suffix == ".gz" else raw
    dims = raw[3]
    shape = [int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2), nn.Dropout(0.25),
        nn.Flatten(), nn.Linear(9216, 128), nn.ReLU(), nn.Dropout(0.5), nn.Linear(128, 10))


def dirichlet_balanced(labels: np.ndarray, clients: int, alpha: float, rng: np.random.Generator) -> list[np.ndarray]:
    """Each client gets len/clients images with class shares drawn from Dir(alpha); where a class runs out,
    the client's shortfall is drawn again over the classes left."""
    classes = int(labels.max()) + 1
    size = len(labels) // clients
    pools = [list(rng.permutation(np.flatnonzero(labels == c))) for c in range(classes)]
    shares = []
    for _ in range(clients):
        p = rng.dirichlet(np.full(classes, alpha))
        while not np.isfinite(p).all() or p.sum() <= 0:  # tiny alpha can underflow every share
            p = rng.dirichlet(np.full(classes, alpha))
        mine: list[int] = []
        while len(mine) < size:
            left = np.array([len(pool) for pool in pools], dtype=float)
            weights = np.where(left > 0, p, 0.0)
            weights = weights / weights.sum() if weights.sum() > 0 else left / left.sum()
            want = rng.multinomial(size - len(mine), weights)
            for c in range(classes):
                take = min(int(want[c]), len(pools[c]))
                mine += pools[c][:take]
                del pools[c][:take]
        shares.append(np.array(mine, dtype=np.int64))
    return shares


def choose(participation: str, clients: int, per_round: int, rng: np.random.Generator) -> list[int]:
    if participation == "uniform":
        return list(rng.choice(clients, per_round, replace=False))
    chosen: list[int] = []  # FAST's Beta(1, 10) pattern: draw, map to an index, until per_round distinct
    while len(chosen) < per_round:
        index = int(rng.beta(1, 10) * clients)
        if index < clients and index not in chosen:
            chosen.append(index)
    return chosen


def batches(count: int, steps: int, batch: int, generator: torch.Generator, device) -> list[torch.Tensor]:
    """`steps` minibatches of a shuffled walk through `count` items, reshuffled after each pass."""
    out, order, at = [], torch.randperm(count, generator=generator, device=device), 0
    for _ in range(steps):
        if at >= count:
            order, at = torch.randperm(count, generator=generator, device=device), 0
        out.append(order[at:at + batch])
        at += batch
    return out


@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch: int = 2000) -> tuple[float, float]:
    model.eval()
    correct = torch.zeros((), device=x.device)
    loss = torch.zeros((), device=x.device)
    for start in range(0, len(x), batch):
        out = model(x[start:start + batch])
        loss += F.cross_entropy(out, y[start:start + batch], reduction="sum")
        correct += (out.argmax(1) == y[start:start + batch]).sum()
    return correct.item() / len(x), loss.item() / len(x)


def summarise(rows: list[dict], rounds: int) -> dict:
    every_10 = [r["test_acc"] for r in rows if r["round"] % 10 == 0]
    late = [r["test_acc"] for r in rows if r["round"] % 10 == 0 and r["round"] > rounds * 0.2]
    last = [r for r in rows if r["round"] > rounds - 5]
    return {"last5_every10": float(np.mean(every_10[-5:])) if every_10 else None,
            "last5_consecutive": float(np.mean([r["test_acc"] for r in last])) if len(last) == 5 else None,
            "mean_after_20pct_every10": float(np.mean(late)) if late else None,
            "best": max(r["test_acc"] for r in rows) if rows else None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=None, help="the Fashion-MNIST IDX files (default: found)")
    parser.add_argument("--participation", choices=["uniform", "beta"], default="uniform")
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--adam", choices=["fresh", "kept"], default="fresh",
                        help="fresh: a new Adam each round (the emulator's); kept: each client's Adam state kept "
                             "between its rounds")
    parser.add_argument("--setup", type=Path, default=None,
                        help="an emulator run's split and cohorts (benchmarks/emulator_setup.py) instead of our own")
    parser.add_argument("--eval-every", type=int, default=10)
    parser.add_argument("--dense-from", type=int, default=901, help="also evaluate every round from this one on")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--deadline", type=float, default=None, help="stop after this many seconds (unfinished)")
    args = parser.parse_args(argv)

    started = time.time()
    device = torch.device(args.device)
    root = args.data or default_root()
    train_x, train_y, test_x, test_y = (read_idx(root, name) for name in FILES)
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    if args.setup is None:
        shares = dirichlet_balanced(train_y, args.clients, args.alpha, rng)
        cohorts = None
    else:
        setup = np.load(args.setup)
        offsets, indices, cohorts = setup["offsets"], setup["indices"], setup["cohorts"]
        shares = [indices[offsets[c]:offsets[c + 1]].astype(np.int64) for c in range(len(offsets) - 1)]
        if len(cohorts) < args.rounds:
            raise SystemExit(f"--setup {args.setup}: cohorts for {len(cohorts)} rounds, but --rounds is {args.rounds}")

    def tensor(images):
        return ((torch.tensor(images, dtype=torch.float32) / 255 - MEAN) / STD).unsqueeze(1).to(device)

    train_x, test_x = tensor(train_x), tensor(test_x)
    train_y, test_y = (torch.tensor(a, dtype=torch.int64, device=device) for a in (train_y, test_y))
    shares = [torch.tensor(s, device=device) for s in shares]
    generator = torch.Generator(device=device)
    generator.manual_seed(args.seed)

    model = cnn().to(device)
    global_params = [p.detach().clone() for p in model.parameters()]
    kept_state: dict[int, dict] = {}
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict] = []
    status = "completed"
    with (args.out / "metrics.csv").open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["round", "test_acc", "test_loss", "wall_time_s"])
        writer.writeheader()
        for rnd in range(1, args.rounds + 1):
            if args.deadline is not None and time.time() - started > args.deadline:
                status = "unfinished"
                break
            total = [torch.zeros_like(p) for p in global_params]
            chosen = choose(args.participation, len(shares), args.per_round, rng) if cohorts is None else \
                [int(c) for c in cohorts[rnd - 1] if c >= 0]
            for client in chosen:
                with torch.no_grad():
                    for p, g in zip(model.parameters(), global_params):
                        p.copy_(g)
                optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
                if args.adam == "kept" and client in kept_state:
                    optimizer.load_state_dict(kept_state[client])
                model.train()
                mine = shares[client]
                for picked in batches(len(mine), args.steps, args.batch, generator, device):
                    rows_here = mine[picked]
                    loss = F.cross_entropy(model(train_x[rows_here]), train_y[rows_here])
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                if args.adam == "kept":
                    kept_state[client] = optimizer.state_dict()
                with torch.no_grad():
                    for t, p in zip(total, model.parameters()):
                        t += p
            global_params = [t / len(chosen) for t in total] if chosen else global_params
            if rnd % args.eval_every == 0 or rnd >= args.dense_from or rnd == args.rounds:
                with torch.no_grad():
                    for p, g in zip(model.parameters(), global_params):
                        p.copy_(g)
                acc, loss = evaluate(model, test_x, test_y)
                row = {"round": rnd, "test_acc": acc, "test_loss": loss, "wall_time_s": time.time() - started}
                writer.writerow(row)
                handle.flush()
                rows.append(row)
    summary = {"status": status, "rounds_completed": rows[-1]["round"] if rows else 0,
               "wall_time_s": time.time() - started,
               "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
               "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
               **summarise(rows, args.rounds)}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps({k: summary[k] for k in ("status", "rounds_completed", "wall_time_s", "last5_every10",
                                              "last5_consecutive", "mean_after_20pct_every10", "best")}))
    return 0 if status == "completed" else 3


if __name__ == "__main__":
    raise SystemExit(main())

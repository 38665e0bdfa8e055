"""Small LEAF-format data sets written to a directory, as LEAF's preprocess.sh lays them out.

`write_leaf(root, users)` writes `root/train/*.json` and `root/test/*.json` from
{user: (train_x, train_y, test_x, test_y)} with x, y as LEAF stores them (FEMNIST: lists of 784 floats and
int classes; Shakespeare: 80-character strings and single characters).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

SHAKESPEARE_TEXT = ("To be, or not to be, that is the question: Whether 'tis nobler in the mind to suffer "
                    "The slings and arrows of outrageous fortune, Or to take arms against a sea of troubles "
                    "And by opposing end them. To die - to sleep, No more; and by a sleep to say we end "
                    "The heart-ache and the thousand natural shocks That flesh is heir to.\n")


def windows(text: str, length: int = 80) -> tuple[list[str], list[str]]:
    """LEAF's next-character samples of a text: each `length`-character window and the character after it."""
    padded = " " * length + text
    return ([padded[i:i + length] for i in range(len(padded) - length)],
            [padded[i + length] for i in range(len(padded) - length)])


def femnist_users(sizes: dict[str, tuple[int, int]], seed: int = 0) -> dict[str, tuple]:
    """{user: (train_x, train_y, test_x, test_y)}: random 8-bit grey levels / 255, a few classes per user."""
    gen = np.random.default_rng(seed)
    users = {}
    for name, (n_train, n_test) in sizes.items():
        parts = []
        for n in (n_train, n_test):
            x = (gen.integers(0, 256, (n, 784)) / 255).tolist()
            y = [int(v) for v in gen.integers(0, 62, n)]
            parts += [x, y]
        users[name] = tuple(parts)
    return users


def shakespeare_users(sizes: dict[str, tuple[int, int]]) -> dict[str, tuple]:
    """{user: (train_x, train_y, test_x, test_y)}: each user's lines are a different slice of one text."""
    users = {}
    for k, (name, (n_train, n_test)) in enumerate(sizes.items()):
        text = (SHAKESPEARE_TEXT * 4)[7 * k:]
        x, y = windows(text)
        users[name] = (x[:n_train], y[:n_train], x[n_train:n_train + n_test], y[n_train:n_train + n_test])
    return users


def write_leaf(root: Path, users: dict[str, tuple], files: int = 2, hierarchies: bool = False,
               num_samples: bool = True, split: str = "sample") -> Path:
    """Write the users into `files` train and test JSON files each (users dealt round-robin, in the order
    given); split="user" puts the test samples under other user ids (LEAF's -t user). Returns root."""
    root = Path(root)
    for which, offset in (("train", 0), ("test", 2)):
        (root / which).mkdir(parents=True, exist_ok=True)
        names = list(users)
        for f in range(files):
            chunk = names[f::files]
            ids = [u if split == "sample" or which == "train" else f"{u}_held_out" for u in chunk]
            data: dict = {"users": ids}
            if hierarchies:
                data["hierarchies"] = [f"play_{i % 2}" for i in range(len(ids))]
            if num_samples:
                data["num_samples"] = [len(users[u][offset + 1]) for u in chunk]
            data["user_data"] = {i: {"x": users[u][offset], "y": users[u][offset + 1]} for i, u in zip(ids, chunk)}
            (root / which / f"all_data_{f}_niid_1_keep_0_{which}_9.json").write_text(json.dumps(data))
    return root

"""Writes data/users.csv: 50 users' rows `user,label,f0..f9`, each user with its own label mix and a
shift of its own in feature space (a stand-in for per-person sensor data). Deterministic."""
from pathlib import Path

import numpy as np

rng = np.random.default_rng(7)
users, classes, features = 50, 6, 10
centres = rng.normal(0, 1.0, (classes, features))
rows = []
for user in range(users):
    mix = rng.dirichlet(np.full(classes, 0.5))
    shift = rng.normal(0, 0.5, features)
    for _ in range(int(rng.integers(20, 80))):
        label = rng.choice(classes, p=mix)
        rows.append([user, label, *(centres[label] + shift + rng.normal(0, 1.0, features))])
out = Path(__file__).parent / "data" / "users.csv"
out.parent.mkdir(exist_ok=True)
header = "user,label," + ",".join(f"f{i}" for i in range(features))
np.savetxt(out, np.array(rows), delimiter=",", header=header, comments="",
           fmt=["%d", "%d"] + ["%.4f"] * features)
print(f"{len(rows)} rows of {users} users -> {out}")

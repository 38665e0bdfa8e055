"""The Python API in a few cells: run a scenario, look at it, bring your own data, sweep a knob.

Open it as a notebook (VS Code and Jupytext read the `# %%` cells) or run it whole from the repository root:
`python examples/api_quickstart.py` (about a minute; runs land in runs/). Reference: docs/api.md.
"""
# %% A shipped scenario, shortened; one Ray session serves every run below
import numpy as np

import emulator

run = emulator.run("scenarios/quickstart.yaml", overrides={"rounds": 10, "evaluation.every": 2})
print(run)
print(run.evaluated()[["round", "sim_time_s", "participants", "test_acc"]])

# %% Who took part: participation.csv as a DataFrame
participation = run.participation
print(f"{(participation['reported'] == 0).mean():.0%} of the phones never reported in {len(run.metrics)} rounds")

# %% Your own data: arrays split by user (one device per user), the quickstart's world around them
rng = np.random.default_rng(0)
x = rng.normal(size=(6000, 30)).astype(np.float32)
y = np.argmax(x @ rng.normal(size=(30, 5)), axis=1)
users = rng.integers(0, 300, size=5000)          # who holds each training sample
mine = emulator.run({"name": "my-data", "rounds": 8, "model": "mlp",
                     "population": {"availability": [{"kind": "markov", "mean_on_s": 1800, "mean_off_s": 5400}]},
                     "algorithm": {"name": "fedavg", "clients_per_round": 20, "client_lr": 0.05, "local_steps": 10}},
                    data=(x[:5000], y[:5000], x[5000:], y[5000:]), users=users)
print(mine, mine.data["fingerprint"])

# %% A sweep of the client learning rate, two seeds each, then its report
sweep = emulator.sweep("scenarios/quickstart.yaml", grid={"algorithm.client_lr": [0.02, 0.1]}, seeds=2,
                       overrides={"rounds": 6})
print(sweep.table()[["algorithm.client_lr", "seed", "final_test_acc", "sim_time_s"]])
print("report:", sweep.report)

# %% Any finished (or interrupted) run can be read back later
again = emulator.load(run.path)
assert again.summary["rounds_completed"] == 10

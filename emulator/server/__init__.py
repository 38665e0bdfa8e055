"""The federated server: its round engines (synchronous rounds, asynchronous updates), the observers
around a round (evaluation, bias, what each device gets, attackers, the uplink's figures, the ledger), the
world they share, and the checks before the first round. runtime/ below holds the Ray plumbing it uses."""
from __future__ import annotations

SERVER_ACTOR = "emulator.server.server:ServerActor"  # what a warm instance keeps idle ones of (runtime/warm.py)

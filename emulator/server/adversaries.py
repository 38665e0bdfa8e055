"""Which devices attack, with what, and how much of the aggregate they got: the server's view of a run's
adversaries (population.types[].attack).

The attackers are the devices of a type with an attack: the same deal of types that gives the devices their
data and (at population.correlation 1) their behaviour, so an attacker type that is always online and fast
is as often selected, and as rarely late, as the world allows. Per round the server records how many of the
reports it used came from attackers, against their share of the population. Colluding attackers (an
attack's `collude`) agree on one update per round: the server, which alone sees every report, replaces
theirs by their mean before the uplink encodes them, as an out-of-band channel between them would.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from emulator.errors import ScenarioError, build_part
from emulator.registry import ATTACKS
from emulator.seeding import device_types
from emulator.training.attacks import Attack

COLUMNS = ("attackers_reported", "attackers_accepted", "attacker_accepted_share", "attacker_population_share")


class Adversaries:
    def __init__(self, attacks: list[Attack | None], device_type: np.ndarray):
        self.attacks, self.device_type = attacks, device_type
        self.attacker = np.array([attacks[t] is not None for t in device_type], dtype=bool)
        backdoors = [a for a in attacks if a is not None and a.kind == "backdoor"]
        self.backdoor = backdoors[0] if backdoors else None  # the one whose success is measured

    @classmethod
    def of(cls, population, num_classes: int, seed: int) -> "Adversaries | None":
        """The run's adversaries, or None when no type attacks."""
        types = population.types or []
        if not any(t.attack is not None for t in types):
            return None
        attacks = []
        for i, user_type in enumerate(types):
            config = user_type.attack
            target = getattr(config, "target", None)
            if target is not None and target >= num_classes:
                raise ScenarioError(f"population.types[{i}].attack.target: {target}, but the dataset has "
                                    f"{num_classes} classes; give a label in 0..{num_classes - 1}")
            attacks.append(None if config is None else build_part(
                ATTACKS.get(config.kind), f"attack {config.kind!r}", Attack, lambda built, origin, part: built,
                config, num_classes))
        return cls(attacks, device_types([t.share for t in types], population.devices, seed))

    def attack_of(self, device: int) -> Attack | None:
        return self.attacks[self.device_type[device]]

    @property
    def collude(self) -> bool:
        return any(a is not None and a.config.collude for a in self.attacks)

    def colluded(self, updates):
        """The round's updates with each colluding type's reports replaced by their mean (in float64, then
        float32 as sent); every other update as it came, in the same order. Without colluders, `updates`
        itself (a stream stays a stream: only collusion needs the round's updates all in)."""
        if not self.collude:
            return updates
        updates = list(updates)
        for kind, attack in enumerate(self.attacks):
            if attack is None or not attack.config.collude:
                continue
            members = [i for i, u in enumerate(updates) if self.device_type[u.device] == kind]
            if len(members) < 2:
                continue
            shared = np.mean([updates[i].delta.astype(np.float64) for i in members], axis=0).astype(np.float32)
            for i in members:
                updates[i] = replace(updates[i], delta=shared.copy())
        return updates

    def columns(self, devices: np.ndarray, acceptance: tuple[np.ndarray, np.ndarray] | None) -> dict:
        """The round's attacker columns: reports from attackers, those the aggregate took as they were
        (every report, without a robust rule), and the attackers' share of what it took."""
        devices = np.asarray(devices, np.int64)
        if acceptance is not None:
            used, accepted = acceptance
            taken = used[accepted]
        else:
            taken = devices
        attackers_taken = int(self.attacker[taken].sum()) if len(taken) else 0
        return {"attackers_reported": int(self.attacker[devices].sum()) if len(devices) else 0,
                "attackers_accepted": attackers_taken,
                "attacker_accepted_share": attackers_taken / len(taken) if len(taken) else None,
                "attacker_population_share": float(self.attacker.mean())}

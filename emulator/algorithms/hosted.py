"""An algorithm built on a host algorithm: every hook it does not override goes to the host.

FAST changes only who takes part; its host (FedAvg, FedProx, FedAvgM) trains and aggregates. Forwarding
by hand let a hook added to `Algorithm` later fall silently back to the base default; here the forwarding
is generated from `base.HOOKS` and `base.ATTRIBUTES`, so a new hook reaches the host without a line here.
"""
from __future__ import annotations

from emulator.algorithms.base import ATTRIBUTES, HOOKS, Algorithm


class Hosted(Algorithm):
    """Set `self.host` in `__init__`; override a hook to change it, call `self.host.<hook>` to extend it."""

    host: Algorithm

    @property
    def columns(self) -> tuple[str, ...]:
        own = tuple(type(self).own_columns)
        return own + tuple(c for c in self.host.columns if c not in own)

    own_columns: tuple[str, ...] = ()  # the columns this wrapper fills in itself, before the host's


def _forward_hook(name: str):
    def hook(self, *args, **kwargs):
        return getattr(self.host, name)(*args, **kwargs)

    hook.__name__ = hook.__qualname__ = name
    hook.__doc__ = f"The host's `{name}`."
    return hook


def _forward_attribute(name: str):
    return property(lambda self: getattr(self.host, name), doc=f"The host's `{name}`.")


for _name in HOOKS:
    setattr(Hosted, _name, _forward_hook(_name))
for _name in ATTRIBUTES:
    setattr(Hosted, _name, _forward_attribute(_name))

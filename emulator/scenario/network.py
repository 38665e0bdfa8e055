"""The `system.network:` section: the links devices share on the way to the server.

Devices attach to access links (cells, home networks); access links connect through optional regional
links to the server's link. Every link has an up capacity (what it carries towards the server: uploads)
and a down capacity (downloads). Transfers crossing a link share it max-min fairly, each also capped by
its device's own link (population.network); emulator/system/network.py builds the tree, and
emulator/system/fair_share.py times the transfers on it. Without this section each transfer takes its
bytes over its device's own speed alone, as if nobody else were sending. `edges` puts an edge server at
every region (emulator/system/edges.py).
"""
from __future__ import annotations

import math
from typing import Literal, Optional

from pydantic import Field, model_validator

from emulator.scenario.base import ScenarioFieldError, Strict


class LinkCapacity(Strict):
    """One link's capacity each way, in megabits a second."""

    up_mbps: float = Field(gt=0)
    down_mbps: float = Field(gt=0)


class AccessTier(LinkCapacity):
    """The access links (cells, home networks), each of the same capacity. How devices attach: `links` of
    them (or as many as `devices_per_link` makes), each device drawn to one (`attach: drawn`) or only to
    links of its own time zone (`attach: zone`, which needs diurnal or eligible availability); or
    `trace`, a CSV with the columns device_id,link naming the link of every device 0..N-1."""

    links: Optional[int] = Field(None, ge=1)
    devices_per_link: Optional[float] = Field(None, gt=0)
    attach: Literal["drawn", "zone"] = "drawn"
    trace: Optional[str] = None

    @model_validator(mode="after")
    def _one_way_of_attaching(self):
        given = [name for name in ("links", "devices_per_link", "trace") if getattr(self, name) is not None]
        if len(given) != 1:
            raise ScenarioFieldError("system.network.access", "say how devices attach with exactly one of links, "
                                     f"devices_per_link or trace (got {', '.join(given) or 'none'})")
        if self.trace is not None and self.attach != "drawn":
            raise ScenarioFieldError("system.network.access.attach", "a trace names every device's link itself; "
                                     "leave attach out")
        return self


class RegionTier(LinkCapacity):
    """Regional links between the access links and the server: `count` regions, access links dealt to them
    in turn, or one region a time zone (`by: zone`)."""

    count: Optional[int] = Field(None, ge=1)
    by: Literal["count", "zone"] = "count"

    @model_validator(mode="after")
    def _count_or_zone(self):
        if (self.by == "count") == (self.count is None):
            raise ScenarioFieldError("system.network.regions", "give count (regions dealt access links in turn) "
                                     "or by: zone (one region a time zone), not both")
        return self


class EdgeTier(Strict):
    """An edge server at every region, between its devices and the cloud (system/edges.py): it runs its own
    rounds with its region's devices, whose transfers end at their access links, and exchanges models with
    the cloud over its region's link and the server's. `deadline_s`: an edge round's deadline (None:
    system.deadline_s). How many devices an edge round aims for, and how many edge rounds pass between two
    of the cloud's averages, are the algorithm's (hierfavg's clients_per_round and cloud_every)."""

    deadline_s: Optional[float] = Field(None, gt=0)


class NetworkConfig(Strict):
    """The shared links. `server` is the server's own link (its ingress carries every upload); `edges`, edge
    servers at the regions."""

    access: AccessTier
    regions: Optional[RegionTier] = None
    server: Optional[LinkCapacity] = None
    edges: Optional[EdgeTier] = None

    @model_validator(mode="after")
    def _regions_by_zone_need_links_by_zone(self):
        if self.regions is not None and self.regions.by == "zone" and self.access.attach != "zone":
            raise ScenarioFieldError("system.network.regions.by", "regions by zone need access links by zone: set "
                                     "system.network.access.attach: zone")
        if self.edges is not None and self.regions is None:
            raise ScenarioFieldError("system.network.edges", "edge servers sit at the regions, between their access "
                                     "links and the server: give system.network.regions (count, or by: zone)")
        return self

    def check_population(self, devices: int, zones: int | None) -> None:
        """The rules that need the population: `zones` is how many time zones its devices live in (None: not
        every device has one)."""
        access, regions = self.access, self.regions
        if access.trace is not None:
            return  # the trace's links: checked when it is read (emulator/system/checks.py)
        links = access.links if access.links is not None else max(1, math.ceil(devices / access.devices_per_link))
        if access.attach == "zone":
            if zones is None:
                raise ScenarioFieldError("system.network.access.attach", "attach: zone needs every device in a time "
                                         "zone (diurnal or eligible availability); use attach: drawn")
            if links < zones:
                raise ScenarioFieldError("system.network.access", f"{links} access links for {zones} time zones: "
                                         "give each zone one at least (more links, or fewer devices_per_link)")
        if regions is not None and regions.count is not None and regions.count > links:
            raise ScenarioFieldError("system.network.regions.count", f"{regions.count} regions but {links} access "
                                     "links: a region would serve no device; use at most as many as access links")

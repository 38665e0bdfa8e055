"""The links devices share (system.network): who sits behind which access link, and a round's transfers timed
on them.

The tree: access links 0..A-1, then regional links, then the server's link, in one numbering per
direction (up: uploads, down: downloads; the two directions never share capacity). A device's transfer
crosses its access link, its region's link and the server's link, each where the scenario has that tier,
and is also capped by its device's own speed (population.network). fair_share.finish_times shares the
links max-min fairly, recomputed as transfers start, finish and are cancelled; latency comes first, as
without shared links (accounting.transfer_seconds).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from emulator.compiled import compile_in
from emulator.scenario.base import ScenarioFieldError
from emulator.seeding import rng
from emulator.system.fluid import finish_times

BYTES_PER_MBIT = 1e6 / 8
# a cloud round's columns, with edge servers (system/edges.py): the edge rounds that failed, the backhaul's bytes
# and seconds (the last edge server's model leaving for the cloud, until every edge has the cloud's), and how
# long edge servers waited for the others (their last round closed, until the cloud's model arrived: the mean)
EDGE_COLUMNS = ("edge_rounds_failed", "backhaul_bytes_up", "backhaul_bytes_down", "backhaul_s", "edge_idle_s")


@dataclass
class Transfers:
    """A round's downloads and uploads as the shared links timed them: when each began and completed (just
    after `lost_at` where its device was lost first), and what each would take alone."""

    paths: np.ndarray  # (devices, hops) the links crossed
    begin: np.ndarray  # downloads begin (after the latency)
    download_done: np.ndarray
    upload_from: np.ndarray  # uploads begin
    finish: np.ndarray
    alone_down_s: np.ndarray
    alone_up_s: np.ndarray
    bytes_down: int
    bytes_up: int
    downloaded: np.ndarray  # the download completed (before its device was lost)
    uploaded: np.ndarray


class Network:
    def __init__(self, config, devices: int, seed: int, timezone_h=None):
        """`timezone_h`: a callable giving each device's time zone, asked only where devices attach by zone."""
        access = config.access
        stream = rng(seed, "network")
        zone_of = None
        if access.trace is not None:
            self.link_of, links = attachment_trace(access.trace, devices)
        else:
            links = access.links or max(1, math.ceil(devices / access.devices_per_link))
            if access.attach == "zone":
                self.link_of, zone_of = _attach_by_zone(devices, links, timezone_h(), stream)
            else:
                self.link_of = stream.integers(0, links, devices).astype(np.int32)
        self.access_links = links
        regions = config.regions  # its rules (a region for every zone, none empty) checked by the schema
        if regions is None:
            self.region_of_link = None
        elif regions.by == "zone":
            self.region_of_link = zone_of
        else:
            self.region_of_link = (np.arange(links) % regions.count).astype(np.int32)
        self.regions = 0 if self.region_of_link is None else int(self.region_of_link.max()) + 1
        self.has_server = config.server is not None
        self.edges = config.edges is not None  # an edge server at every region (system/edges.py)
        self.capacity = {way: self._capacities(config, way) for way in ("up", "down")}
        self.slowdown_sum = np.zeros(devices)  # each device's transfers: taken over alone, summed over its rounds
        self.transfer_rounds = np.zeros(devices, dtype=np.int32)
        self._tally = _Tally(self.links)  # what the round's transfers carried so far (measure, round_columns)

    def _capacities(self, config, way: str) -> np.ndarray:
        """Bytes a second of every link one way: access links, regions, the server."""
        mbps = [getattr(config.access, f"{way}_mbps")] * self.access_links
        if self.regions:
            mbps += [getattr(config.regions, f"{way}_mbps")] * self.regions
        if self.has_server:
            mbps.append(getattr(config.server, f"{way}_mbps"))
        return np.asarray(mbps, dtype=np.float64) * BYTES_PER_MBIT

    @property
    def links(self) -> int:
        return self.access_links + self.regions + int(self.has_server)

    def region_of(self, devices: np.ndarray) -> np.ndarray:
        """Each device's region (its access link's)."""
        return self.region_of_link[self.link_of[devices]]

    def paths(self, devices: np.ndarray, access_only: bool = False) -> np.ndarray:
        """(devices, hops): the links each device's transfers cross (the same ids both ways); `access_only`:
        to an edge server, which sits behind the access links."""
        access = self.link_of[devices].astype(np.int64)
        if access_only:
            return access[:, None]
        hops = [access]
        if self.regions:
            hops.append(self.access_links + self.region_of_link[access].astype(np.int64))
        if self.has_server:
            hops.append(np.full(len(devices), self.links - 1, dtype=np.int64))
        return np.stack(hops, axis=1)

    def transfers(self, devices, start, compute_s, lost_at, bytes_down, bytes_up, down_mbps, up_mbps,
                  latency_s, access_only: bool = False) -> Transfers:
        """Each device downloads from `start` (after its latency), computes for `compute_s`, then uploads;
        one lost at `lost_at` stops moving bytes then (its transfer cancelled, freeing its share).
        `access_only`: the transfers of an edge server's round, which end at the access links."""
        paths = self.paths(devices, access_only)
        down_cap, up_cap = down_mbps * BYTES_PER_MBIT, up_mbps * BYTES_PER_MBIT
        begin = start + latency_s
        download_done = _timed(begin, bytes_down, paths, self.capacity["down"], down_cap, lost_at)
        upload_from = download_done + compute_s + latency_s
        finish = _timed(upload_from, bytes_up, paths, self.capacity["up"], up_cap, lost_at)
        downloaded, uploaded = np.isfinite(download_done), np.isfinite(finish)
        # a transfer cancelled when its device was lost: done just after, so that it counts as not done by then
        lost = np.isfinite(lost_at)
        for done in (download_done, finish):
            cut = np.isinf(done) & lost & np.isfinite(start)
            done[cut] = np.nextafter(lost_at[cut], np.inf)
        return Transfers(paths, begin, download_done, upload_from, finish, bytes_down / down_cap, bytes_up / up_cap,
                         int(bytes_down), int(bytes_up), downloaded, uploaded)

    def measure(self, devices: np.ndarray, shared: Transfers, closed: float) -> None:
        """Add a closed round's transfers, those completed by `closed`, to the tally the next round_columns
        reads: the seconds each device's transfers waited for capacity (beyond their time alone) and the
        bytes each link carried. Each device's slowdown (time taken over time alone) joins its running mean
        (participation.csv). One compiled pass over the round's devices (_measured)."""
        if not _compiled:
            compile_in(globals(), ("_measured",))
            _compiled.append(globals()["_measured"])
        down_ok = shared.downloaded & (shared.download_done <= closed)
        up_ok = shared.uploaded & (shared.finish <= closed)
        alone = np.where(down_ok, shared.alone_down_s, 0.0) + np.where(up_ok, shared.alone_up_s, 0.0)  # their dtype
        waits = _compiled[0](np.asarray(devices, dtype=np.int64), shared.paths, shared.begin, shared.download_done,
                             shared.upload_from, shared.finish, alone, down_ok, up_ok, self.slowdown_sum,
                             self.transfer_rounds, self._tally.carried["up"], self._tally.carried["down"],
                             float(shared.bytes_up), float(shared.bytes_down))
        self._tally.waits.append(waits)

    def round_columns(self, started: float, closed: float) -> dict[str, float]:
        """The columns of what was measured since the last call: the mean and largest seconds a device's
        transfers waited, and each tier's busiest link's utilisation each way (bytes carried over capacity x
        the round's length); the tally starts again."""
        tally, self._tally = self._tally, _Tally(self.links)
        wait = np.concatenate(tally.waits) if tally.waits else np.zeros(0)
        columns = {"network_wait_s": float(wait.mean()) if wait.size else 0.0,
                   "network_wait_max_s": float(wait.max()) if wait.size else 0.0}
        length = max(closed - started, 1e-9)
        for way in ("up", "down"):
            utilisation = tally.carried[way] / (self.capacity[way] * length)
            for tier, links in self.tiers().items():  # every tier listed has a link at least
                columns[f"{tier}_{way}_utilisation"] = float(utilisation[links].max())
        return columns

    def backhaul(self, edges: np.ndarray, begin: np.ndarray, nbytes: int, way: str) -> np.ndarray:
        """When each edge server's `nbytes` from `begin` have crossed its region's link and the server's (up: to
        the cloud; down: from it), the edges' transfers sharing those links max-min fairly (one alone on them
        runs at its region link's rate); what they carried joins the tally."""
        paths = self.access_links + np.asarray(edges, dtype=np.int64)[:, None]
        if self.has_server:
            paths = np.hstack([paths, np.full((len(paths), 1), self.links - 1, dtype=np.int64)])
        capacity = self.capacity[way]  # a flow's own cap: its region's link, the first it crosses
        done = finish_times(begin, np.full(len(paths), float(nbytes)), paths, capacity, capacity[paths[:, 0]],
                            tree=True)
        self._tally.carry(way, paths.ravel(), nbytes)
        return done

    def tiers(self) -> dict[str, slice]:
        """Each tier's link ids (a run of them: access links, then regions, then the server's)."""
        out = {"access": slice(0, self.access_links)}
        if self.regions:
            out["region"] = slice(self.access_links, self.access_links + self.regions)
        if self.has_server:
            out["server"] = slice(self.links - 1, self.links)
        return out

    def columns(self) -> list[str]:
        return ["network_wait_s", "network_wait_max_s"] + [f"{tier}_{way}_utilisation" for way in ("up", "down")
                                                            for tier in self.tiers()] + (
            list(EDGE_COLUMNS) if self.edges else [])

    def device_columns(self) -> dict[str, np.ndarray]:
        """participation.csv's: each device's access link, region, and its transfers' mean slowdown."""
        with np.errstate(divide="ignore", invalid="ignore"):
            slowdown = self.slowdown_sum / self.transfer_rounds
        out = {"access_link": self.link_of}
        if self.regions:
            out["region"] = self.region_of_link[self.link_of]
        out["transfer_slowdown"] = slowdown
        return out

    def state(self) -> dict:
        return {"network_slowdown_sum": self.slowdown_sum.copy(), "network_transfer_rounds": self.transfer_rounds.copy()}

    def load_state(self, state: dict) -> None:
        self.slowdown_sum[:] = state["network_slowdown_sum"]
        self.transfer_rounds[:] = state["network_transfer_rounds"]


class _Tally:
    """A round's measured transfers so far: each device's waits, and the bytes each link carried each way."""

    def __init__(self, links: int):
        self.links = links
        self.waits: list[np.ndarray] = []
        self.carried = {way: np.zeros(links) for way in ("up", "down")}

    def carry(self, way: str, links: np.ndarray, nbytes: int) -> None:
        self.carried[way] += np.bincount(links, minlength=self.links + 1)[:self.links] * float(nbytes)


_compiled: list = []  # _measured


def _measured(devices, paths, begin, download_done, upload_from, finish, alone, down_ok, up_ok, slowdown_sum,
              transfer_rounds, carried_up, carried_down, bytes_up, bytes_down):
    """Network.measure's arithmetic, device by device in one pass (numpy took forty passes over a round's
    devices, a sixth of what the shared links add to a round; `alone` comes summed in its own dtype, as numpy
    sums it): returns the waits of the devices that moved bytes, in device order; adds their slowdowns and
    the links' bytes in place."""
    n, links = len(devices), len(carried_up)
    waits, moved = np.empty(n), 0
    up_count, down_count = np.zeros(links + 1, np.int64), np.zeros(links + 1, np.int64)  # as _Tally.carry's
    for i in range(n):
        taken = ((download_done[i] - begin[i] if down_ok[i] else 0.0)
                 + (finish[i] - upload_from[i] if up_ok[i] else 0.0))
        if down_ok[i] or up_ok[i]:
            waits[moved] = max(taken - alone[i], 0.0)
            moved += 1
            slowdown_sum[devices[i]] += taken / alone[i] if alone[i] > 0 else 1.0  # a round's devices are distinct
            transfer_rounds[devices[i]] += 1
        for hop in range(paths.shape[1]):
            if up_ok[i]:
                up_count[paths[i, hop]] += 1
            if down_ok[i]:
                down_count[paths[i, hop]] += 1
    for link in range(links):
        carried_up[link] += up_count[link] * bytes_up
        carried_down[link] += down_count[link] * bytes_down
    return waits[:moved]


def _timed(begin, nbytes, paths, capacity, cap, lost_at) -> np.ndarray:
    """When each transfer of `nbytes` from `begin` completes on the shared links (np.inf: cancelled first)."""
    if not nbytes:
        return np.where(begin < lost_at, begin, np.inf)
    return finish_times(begin, np.full(len(begin), float(nbytes)), paths, capacity, cap, cancel=lost_at, tree=True)


def _attach_by_zone(devices: int, links: int, timezone_h, stream) -> tuple[np.ndarray, np.ndarray]:
    """Each device to a link of its own time zone; the links dealt to zones by their devices (one at least: the
    schema checked that every device has a zone and that there are links enough)."""
    zones, zone = np.unique(timezone_h, return_inverse=True)
    counts = np.bincount(zone, minlength=len(zones))
    share = 1 + np.floor((links - len(zones)) * counts / counts.sum()).astype(np.int64)
    share[np.argsort(-counts)[:links - share.sum()]] += 1  # the remainder to the largest zones
    first = np.r_[0, np.cumsum(share)[:-1]]
    link_of = first[zone] + np.floor(stream.random(devices) * share[zone]).astype(np.int64)
    return link_of.astype(np.int32), np.repeat(np.arange(len(zones)), share).astype(np.int32)


def attachment_trace(path: str, devices: int) -> tuple[np.ndarray, int]:
    """device_id,link rows: every device's access link (link names renumbered 0.. in sorted order)."""
    field = "system.network.access.trace"
    try:
        table = np.genfromtxt(Path(path), delimiter=",", names=True, dtype=None, encoding="utf-8")
    except OSError as exc:
        raise ScenarioFieldError(field, f"cannot read {path}: {exc}") from None
    names = table.dtype.names or ()
    if "device_id" not in names or "link" not in names:
        raise ScenarioFieldError(field, f"{path} needs the columns device_id,link (has {', '.join(names)})")
    ids = np.atleast_1d(table["device_id"]).astype(np.int64)
    _, link_ids = np.unique(np.atleast_1d(table["link"]).astype(str), return_inverse=True)
    link_of = np.full(devices, -1, dtype=np.int64)
    inside = (ids >= 0) & (ids < devices)
    link_of[ids[inside]] = link_ids[inside]
    missing = np.flatnonzero(link_of < 0)
    if missing.size:
        shown = ", ".join(str(d) for d in missing[:5]) + (", ..." if missing.size > 5 else "")
        raise ScenarioFieldError(field, f"{missing.size} devices are attached to no link ({shown}): "
                                 f"{path} must name a link for every device_id 0..{devices - 1}")
    return link_of.astype(np.int32), int(link_ids.max()) + 1

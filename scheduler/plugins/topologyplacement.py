"""TopologyPlacementGenerator (upstream's name, KEP-5732): one candidate
placement per domain of each of the PodGroup's topology keys.

`spec.schedulingConstraints.topology[].key` names node labels, most preferred
first; the placements of the i-th key get rank i, so the core tries the racks
before the blocks before the zones. Only nodes with the label belong to a
domain.

- A domain whose free room, summed over its nodes, is short of the `need`
  smallest requests of the group (per resource, pod slots included) is
  pruned: proposed with the reason, never tried ("at most 3 fit (cpu: 8
  needed, 6 free)").
- A group with pods already placed (a gang refilled after a pod was lost)
  stays where those pods are: only the domain holding all of them is
  proposed; if they span domains, the level is refused with that reason.
- A group without topology constraints is not narrowed (Skip).

Domain masks depend on node labels only and are cached until labels or the
set of nodes change. The free room per domain is kept up to date row by row:
a cycle after a gang was placed recomputes the rows it changed, not 5000.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..api.config import PluginArgs
from ..api.quantity import format_units
from ..cluster.snapshot import Snapshot
from ..framework import events as E
from ..framework.caches import RowResult
from ..framework.interface import CycleState, GroupContext, Handle, Placement, PlacementGeneratePlugin, Status


class _Domains:
    """The domains of one key: a mask per domain, and the labelled rows
    sorted by domain (to sum a column per domain in one pass). Labels only:
    cached until labels or the set of nodes change."""

    def __init__(self, ids: np.ndarray, count: int) -> None:
        self.count = count
        self.ids = ids
        labelled = np.flatnonzero(ids >= 0)
        self.order = labelled[np.argsort(ids[labelled], kind="stable")]
        sizes = np.bincount(ids[labelled], minlength=count)
        self.present = sizes > 0
        self._present_ids = np.flatnonzero(self.present)
        self.present_ids: list[int] = self._present_ids.tolist()
        self._starts = (np.cumsum(sizes) - sizes)[self._present_ids]
        self.masks = [ids == d for d in range(count)]
        for m in self.masks:
            m.flags.writeable = False  # shared by every cycle: nobody may change it

        # Free room per row and summed per domain, valid for the rows whose
        # version `_rows` holds (the whole-cluster case only).
        self._rows = RowResult(None, None)
        self._free: np.ndarray | None = None
        self._room: np.ndarray | None = None

    def room(self, snapshot: Snapshot, within: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Per domain: does it have a node (within `within`), and the free
        room summed over those nodes, per column (a copy: the caller's)."""
        if within is None:
            return self.present, self._whole_room(snapshot).copy()
        free = np.maximum(snapshot.alloc - snapshot.req, 0)
        room = np.zeros((self.count, free.shape[1]), dtype=free.dtype)
        rows = self.order[within[self.order]]
        np.add.at(room, self.ids[rows], free[rows])
        present = np.bincount(self.ids[rows], minlength=self.count) > 0
        return present, room

    def _whole_room(self, snapshot: Snapshot) -> np.ndarray:
        stale = self._rows.stale_rows(snapshot)
        if stale is None or self._free is None or self._room is None:
            free = np.maximum(snapshot.alloc - snapshot.req, 0)
            room = np.zeros((self.count, free.shape[1]), dtype=free.dtype)
            if len(self._present_ids):
                room[self._present_ids] = np.add.reduceat(free[self.order], self._starts, axis=0)
            self._free, self._room = free, room
            self._rows.synced(snapshot)
            return room
        if len(stale):
            fresh = np.maximum(snapshot.alloc[stale] - snapshot.req[stale], 0)
            ids = self.ids[stale]
            labelled = ids >= 0
            np.add.at(self._room, ids[labelled], (fresh - self._free[stale])[labelled])
            self._free[stale] = fresh
            assert self._rows.versions is not None
            self._rows.versions[stale] = snapshot.row_version[stale]
        return self._room


class TopologyPlacementGenerator(PlacementGeneratePlugin):
    name = "TopologyPlacementGenerator"
    # What can make a domain hold a group it could not: nodes joining one or
    # changing labels, room freed or added.
    events = frozenset(
        {E.NODE_ADD, E.NODE_LABEL, E.NODE_ALLOCATABLE, E.NODE_TAINT, E.ASSIGNED_POD_DELETE, E.ASSIGNED_POD_SCALE_DOWN}
    )

    def __init__(self, args: PluginArgs, handle: Handle) -> None:
        super().__init__(args, handle)
        self._cache: dict[tuple[str, int, int], _Domains] = {}

    def generate_placements(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, parents: Sequence[Placement]
    ) -> tuple[list[Placement], Status]:
        keys = group.topology_keys
        if not keys:
            return [], Status.skip(self.name)
        pods = group.pods
        by_spec: dict[object, np.ndarray] = {}
        for p in pods:
            if p.spec_key not in by_spec:
                by_spec[p.spec_key] = snapshot.request_vector(p)[0]
        ascending = np.sort(np.array([by_spec[p.spec_key] for p in pods]), axis=0)
        need = min(group.need, len(pods))
        needed = ascending[:need].sum(axis=0)
        cumulative = ascending.cumsum(axis=0)
        out: list[Placement] = []
        for rank, key in enumerate(keys):
            ids, values = snapshot.domains(key)
            domains = self._domains(key, snapshot, ids, len(values))
            pinned = self._pinned(group, snapshot, ids)
            for parent in parents:
                whole = parent.parent is None and not parent.name
                if isinstance(pinned, str):
                    out.append(self._refused(snapshot, parent, rank, key, pinned))
                    continue
                present, room = domains.room(snapshot, None if whole else parent.nodes)
                short = (needed > room).any(axis=1).tolist()
                rooms = list(room)  # one view per domain
                if pinned is not None:
                    chosen = [pinned] if present[pinned] else []
                else:
                    chosen = domains.present_ids if whole else np.flatnonzero(present).tolist()
                within = None if whole else parent
                for d in chosen:
                    nodes = domains.masks[d] if whole else domains.masks[d] & parent.nodes
                    pruned = _shortage(snapshot, needed, rooms[d], cumulative) if short[d] else ""
                    out.append(Placement(values[d], nodes, within, rank, key, pruned, rooms[d]))
        return out, Status.success()

    def _domains(self, key: str, snapshot: Snapshot, ids: np.ndarray, count: int) -> _Domains:
        ck = (key, snapshot.static_generation, len(snapshot))
        hit = self._cache.get(ck)
        if hit is None:
            if len(self._cache) > 16:
                self._cache.clear()
            hit = self._cache[ck] = _Domains(ids, count)
        return hit

    @staticmethod
    def _pinned(group: GroupContext, snapshot: Snapshot, ids: np.ndarray) -> int | str | None:
        """The one domain the group's placed pods are in (None: none placed),
        or why there is none."""
        if not group.placed_nodes:
            return None
        domains = set()
        for name in group.placed_nodes:
            row = snapshot.row.get(name)
            domains.add(int(ids[row]) if row is not None else -1)
        if domains == {-1} or len(domains) > 1:
            return f"the group's {len(group.placed_nodes)} placed pod(s) are not all in one domain"
        return domains.pop()

    @staticmethod
    def _refused(snapshot: Snapshot, parent: Placement, rank: int, key: str, why: str) -> Placement:
        empty = np.zeros(len(snapshot), dtype=bool)
        return Placement("", empty, None if not parent.name else parent, rank, key, why)


def _shortage(snapshot: Snapshot, needed: np.ndarray, room: np.ndarray, cumulative: np.ndarray) -> str:
    """ "" if the domain's summed free room holds `needed`, else how many of
    the group's pods it could hold at most, and the first short resource."""
    short = np.flatnonzero(needed > room)
    if len(short) == 0:
        return ""
    # Per resource, how many of the smallest requests fit the room; the least over resources.
    fits = min(int(np.searchsorted(cumulative[:, c], room[c], side="right")) for c in range(len(room)))
    c = int(short[0])
    resource = snapshot.resources[c]
    return (
        f"at most {fits} fit ({resource}: {format_units(resource, int(needed[c]))} needed, "
        f"{format_units(resource, int(room[c]))} free)"
    )

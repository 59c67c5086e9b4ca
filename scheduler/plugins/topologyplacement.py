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
set of nodes change.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..api.config import PluginArgs
from ..api.quantity import format_units
from ..cluster.snapshot import Snapshot
from ..framework import events as E
from ..framework.interface import CycleState, GroupContext, Handle, Placement, PlacementGeneratePlugin, Status


class TopologyPlacementGenerator(PlacementGeneratePlugin):
    name = "TopologyPlacementGenerator"
    # What can make a domain hold a group it could not: nodes joining one or
    # changing labels, room freed or added.
    events = frozenset(
        {E.NODE_ADD, E.NODE_LABEL, E.NODE_ALLOCATABLE, E.NODE_TAINT, E.ASSIGNED_POD_DELETE, E.ASSIGNED_POD_SCALE_DOWN}
    )

    def __init__(self, args: PluginArgs, handle: Handle) -> None:
        super().__init__(args, handle)
        self._masks: dict[tuple[str, int, int], list[np.ndarray]] = {}

    def generate_placements(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, parents: Sequence[Placement]
    ) -> tuple[list[Placement], Status]:
        keys = group.topology_keys
        if not keys:
            return [], Status.skip(self.name)
        pods = group.pods
        vectors = np.stack([snapshot.request_vector(p)[0] for p in pods])
        ascending = np.sort(vectors, axis=0)
        need = min(group.need, len(pods))
        needed = ascending[:need].sum(axis=0)
        cumulative = np.cumsum(ascending, axis=0)
        free = (snapshot.alloc - snapshot.req).clip(min=0)
        out: list[Placement] = []
        for rank, key in enumerate(keys):
            ids, values = snapshot.domains(key)
            masks = self._domain_masks(key, snapshot, ids, len(values))
            pinned = self._pinned(group, snapshot, ids)
            for parent in parents:
                whole = parent.parent is None and not parent.name
                within = ids >= 0 if whole else parent.nodes & (ids >= 0)
                if isinstance(pinned, str):
                    out.append(self._refused(snapshot, parent, rank, key, pinned))
                    continue
                in_ids, in_free = ids[within], free[within]
                present = np.bincount(in_ids, minlength=len(values)) > 0
                room = np.stack(
                    [np.bincount(in_ids, weights=in_free[:, c], minlength=len(values)) for c in range(free.shape[1])],
                    axis=1,
                )
                for d in np.flatnonzero(present).tolist():
                    if pinned is not None and d != pinned:
                        continue
                    nodes = masks[d] if whole else masks[d] & parent.nodes
                    pruned = _shortage(snapshot, needed, room[d], cumulative)
                    out.append(Placement(values[d], nodes, None if whole else parent, rank, key, pruned, room[d]))
        return out, Status.success()

    def _domain_masks(self, key: str, snapshot: Snapshot, ids: np.ndarray, count: int) -> list[np.ndarray]:
        ck = (key, snapshot.static_generation, len(snapshot))
        masks = self._masks.get(ck)
        if masks is None:
            if len(self._masks) > 16:
                self._masks.clear()
            masks = self._masks[ck] = [ids == d for d in range(count)]
            for m in masks:
                m.flags.writeable = False  # shared by every cycle: nobody may change it
        return masks

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

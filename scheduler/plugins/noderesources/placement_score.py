"""NodeResourcesFit as a PlacementScore plugin (upstream KEP-5732 names
NodeResourcesFit for the placement score: tightest fit, least fragmentation).

A placement's score is the free room it is left with once the group's
proposed pods are in it, summed over its nodes, per scored resource as a share
of the whole cluster's allocatable (so domains of different sizes compare by
absolute room), weighted as scoringStrategy.resources:

- MostAllocated (packing, the default): MAX * (1 - weighted share of room left);
- LeastAllocated (spreading): MAX * weighted share of room left.

Both are bounded before a trial (the core then tries the best bound first):
packing scores highest when every pod of the cycle lands, spreading when only
the `need` smallest do.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ...cluster.snapshot import Snapshot
from ...framework.interface import MAX_PLACEMENT_SCORE, GroupContext, Placement, PlacementAssignments
from .args import MOST_ALLOCATED, ResourceSpec


class PlacementScorer:
    def __init__(self, strategy: str, resources: Sequence[ResourceSpec]) -> None:
        self.packing = strategy == MOST_ALLOCATED
        self.resources = [(r.name, r.weight) for r in resources]

    def _columns(self, snapshot: Snapshot) -> tuple[list[int], np.ndarray, np.ndarray]:
        """Scored columns present in the snapshot, their weights, the cluster's allocatable of each."""
        cols = [snapshot.column[name] for name, _ in self.resources if name in snapshot.column]
        weights = np.array([w for name, w in self.resources if name in snapshot.column], dtype=np.float64)
        cluster = snapshot.alloc_total()[cols].astype(np.float64).clip(min=1)
        return cols, weights, cluster

    def _scores(self, snapshot: Snapshot, room: np.ndarray, used: np.ndarray) -> np.ndarray:
        """room: (P, columns) free room before; used: (P, columns) the group's requests in it."""
        cols, weights, cluster = self._columns(snapshot)
        if not cols or weights.sum() == 0:
            return np.zeros(len(room), dtype=np.int64)
        left = (room[:, cols] - used[:, cols]).clip(min=0) / cluster
        share = (left * weights).sum(axis=1) / weights.sum()
        value = 1.0 - share if self.packing else share
        scores: np.ndarray = np.rint(value.clip(0.0, 1.0) * MAX_PLACEMENT_SCORE).astype(np.int64)
        return scores

    def score(self, snapshot: Snapshot, proposal: PlacementAssignments) -> int:
        room = proposal.placement.room(snapshot)[None, :]
        used = np.zeros_like(room)
        for pod, _ in proposal.assignments:
            used[0] += snapshot.request_vector(pod)[0]
        return int(self._scores(snapshot, room, used)[0])

    def bounds(self, snapshot: Snapshot, group: GroupContext, placements: Sequence[Placement]) -> np.ndarray:
        room = np.stack([p.room(snapshot) for p in placements])
        vectors = np.sort(np.stack([snapshot.request_vector(p)[0] for p in group.pods]), axis=0)
        # Packing: the most room used is every pod; spreading: the least is the `need` smallest.
        used = vectors.sum(axis=0) if self.packing else vectors[: min(group.need, len(group.pods))].sum(axis=0)
        return self._scores(snapshot, room, np.broadcast_to(used, room.shape))

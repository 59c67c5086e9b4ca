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

from ...api.records import PodInfo
from ...cluster.snapshot import Snapshot
from ...framework.interface import MAX_PLACEMENT_SCORE, GroupContext, Placement, PlacementAssignments
from .args import MOST_ALLOCATED, ResourceSpec


class PlacementScorer:
    def __init__(self, strategy: str, resources: Sequence[ResourceSpec]) -> None:
        self.packing = strategy == MOST_ALLOCATED
        self.resources = [(r.name, r.weight) for r in resources]
        # Columns only ever get appended to a node table: their count identifies the layout.
        self._layout: tuple[int, list[int], np.ndarray] | None = None

    def _columns(self, snapshot: Snapshot) -> tuple[list[int], np.ndarray, np.ndarray]:
        """Scored columns present in the snapshot, their weights, the cluster's allocatable of each."""
        if self._layout is None or self._layout[0] != len(snapshot.resources):
            cols = [snapshot.column[name] for name, _ in self.resources if name in snapshot.column]
            weights = np.array([w for name, w in self.resources if name in snapshot.column], dtype=np.float64)
            self._layout = (len(snapshot.resources), cols, weights)
        _, cols, weights = self._layout
        cluster = snapshot.alloc_total()[cols].astype(np.float64).clip(min=1)
        return cols, weights, cluster

    @staticmethod
    def _requests(snapshot: Snapshot, pods: Sequence[PodInfo]) -> np.ndarray:
        """(pods, columns): each pod's request vector, computed once per distinct spec."""
        by_spec: dict[object, np.ndarray] = {}
        for p in pods:
            if p.spec_key not in by_spec:
                by_spec[p.spec_key] = snapshot.request_vector(p)[0]
        return np.stack([by_spec[p.spec_key] for p in pods])

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
        if not proposal.assignments:
            return int(self._scores(snapshot, room, np.zeros_like(room))[0])
        used = self._requests(snapshot, [pod for pod, _ in proposal.assignments]).sum(axis=0)[None, :]
        return int(self._scores(snapshot, room, used)[0])

    def bounds(self, snapshot: Snapshot, group: GroupContext, placements: Sequence[Placement]) -> np.ndarray:
        room = np.stack([p.room(snapshot) for p in placements])
        vectors = np.sort(self._requests(snapshot, group.pods), axis=0)
        # Packing: the most room used is every pod; spreading: the least is the `need` smallest.
        used = vectors.sum(axis=0) if self.packing else vectors[: min(group.need, len(group.pods))].sum(axis=0)
        return self._scores(snapshot, room, np.broadcast_to(used, room.shape))

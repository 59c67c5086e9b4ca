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
        self._factor: tuple[np.ndarray, np.ndarray] | None = None  # (the cluster total it is for, factor)

    def _columns(self, snapshot: Snapshot) -> tuple[list[int], np.ndarray]:
        """Scored columns present in the snapshot, and per column the factor
        that turns room into its weighted share of the cluster's allocatable."""
        if self._layout is None or self._layout[0] != len(snapshot.resources):
            cols = [snapshot.column[name] for name, _ in self.resources if name in snapshot.column]
            weights = np.array([w for name, w in self.resources if name in snapshot.column], dtype=np.float64)
            self._layout = (len(snapshot.resources), cols, weights)
        _, cols, weights = self._layout
        if not cols or weights.sum() == 0:
            return [], weights
        total = snapshot.alloc_total()
        if self._factor is None or self._factor[0] is not total:  # the total is kept per snapshot
            cluster = total[cols].astype(np.float64).clip(min=1)
            self._factor = (total, weights / weights.sum() / cluster)
        return cols, self._factor[1]

    @staticmethod
    def _requests(snapshot: Snapshot, pods: Sequence[PodInfo]) -> np.ndarray:
        """(pods, columns): each pod's request vector, computed once per distinct spec."""
        by_spec: dict[object, np.ndarray] = {}
        for p in pods:
            if p.spec_key not in by_spec:
                by_spec[p.spec_key] = snapshot.request_vector(p)[0]
        return np.array([by_spec[p.spec_key] for p in pods])

    def _scores(self, snapshot: Snapshot, room: np.ndarray, used: np.ndarray) -> np.ndarray:
        """room: (P, columns) free room before; used: the group's requests in
        each placement, (P, columns), or (columns,) when the same for all."""
        cols, factor = self._columns(snapshot)
        if not cols:
            return np.zeros(len(room), dtype=np.int64)
        left = room[:, cols] - (used[:, cols] if used.ndim == 2 else used[cols])
        share = np.maximum(left, 0) @ factor
        value = 1.0 - share if self.packing else share
        scores: np.ndarray = np.rint(np.minimum(np.maximum(value, 0.0), 1.0) * MAX_PLACEMENT_SCORE).astype(np.int64)
        return scores

    def score(self, snapshot: Snapshot, proposal: PlacementAssignments) -> int:
        room = proposal.placement.room(snapshot)[None, :]
        if not proposal.assignments:
            return int(self._scores(snapshot, room, np.zeros(room.shape[1], dtype=room.dtype))[0])
        used = self._requests(snapshot, [pod for pod, _ in proposal.assignments]).sum(axis=0)
        return int(self._scores(snapshot, room, used)[0])

    def bounds(self, snapshot: Snapshot, group: GroupContext, placements: Sequence[Placement]) -> np.ndarray:
        room = np.array([p.room(snapshot) for p in placements])
        vectors = self._requests(snapshot, group.pods)
        # Packing: the most room used is every pod; spreading: the least is the `need` smallest.
        need = min(group.need, len(group.pods))
        used = (
            vectors.sum(axis=0) if self.packing or need == len(vectors) else np.sort(vectors, axis=0)[:need].sum(axis=0)
        )
        return self._scores(snapshot, room, used)

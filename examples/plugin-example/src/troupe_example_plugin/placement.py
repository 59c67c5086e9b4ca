"""Placement plugins: place a whole group inside one rack.

- `RackPlacement` (PlacementGenerate): one candidate placement per value of
  the node label `example.com/rack`, within each parent placement (so after a
  zone generator it proposes the racks of each zone: `zone=a/rack=r1`).
  A rack whose free cpu cannot hold the group's total cpu request is not
  proposed: troupe would only find out by running the algorithm in it.
- `FewestNodes` (PlacementScore): prefers the feasible placement whose
  proposed assignments use the fewest distinct nodes (pack the group).

troupe runs the default algorithm inside each candidate, keeps those where
the group reaches minCount, scores them, and binds into the best.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from scheduler.api.resources import CPU
from scheduler.cluster.snapshot import Snapshot
from scheduler.framework.interface import (
    CycleState,
    GroupContext,
    Placement,
    PlacementAssignments,
    PlacementGeneratePlugin,
    PlacementScorePlugin,
    Status,
)

RACK_LABEL = "example.com/rack"


class RackPlacement(PlacementGeneratePlugin):
    name = "RackPlacement"
    label = RACK_LABEL  # a subclass may split by another label (see the tests' zones)

    def generate_placements(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, parents: Sequence[Placement]
    ) -> tuple[list[Placement], Status]:
        # O(parents x values) numpy masks over the rows.
        ids, values = snapshot.domains(self.label)
        free_cpu = np.zeros(len(snapshot), dtype=np.int64)
        col = snapshot.column.get(CPU)
        if col is not None:
            free_cpu = snapshot.alloc[:, col] - snapshot.req[:, col]
        need = sum(p.requests.get(CPU, 0) for p in group.pods)
        key = self.label.rsplit("/", 1)[-1]
        out: list[Placement] = []
        for parent in parents:
            for i, value in enumerate(values):
                nodes = parent.nodes & (ids == i)
                if nodes.any() and int(free_cpu[nodes].sum()) >= need:
                    out.append(Placement(f"{key}={value}", nodes, parent))
        if not out:
            return [], Status.unschedulable(f"no {self.label} value has {need}m cpu free", plugin=self.name)
        return out, Status.success()


class FewestNodes(PlacementScorePlugin):
    name = "FewestNodes"

    def score_placement(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, proposal: PlacementAssignments
    ) -> tuple[int, Status]:
        return -len({row for _, row in proposal.assignments}), Status.success()

    def normalize_placement_scores(self, scores: np.ndarray) -> np.ndarray:
        """Min-max to 0..100: the fewest nodes get 100."""
        lo, hi = int(scores.min()), int(scores.max())
        if hi == lo:
            return np.full(len(scores), 100, dtype=np.int64)
        return (100 * (scores - lo) // (hi - lo)).astype(np.int64)

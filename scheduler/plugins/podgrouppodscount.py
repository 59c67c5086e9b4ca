"""PodGroupPodsCount (upstream's name, KEP-5732): a placement scores by the
share of the group's pods of this cycle it holds. For a gang every feasible
placement holds at least minCount; for a basic group, the placement that
holds the most pods wins."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..cluster.snapshot import Snapshot
from ..framework.interface import (
    MAX_PLACEMENT_SCORE,
    CycleState,
    GroupContext,
    Placement,
    PlacementAssignments,
    PlacementScorePlugin,
    Status,
)


class PodGroupPodsCount(PlacementScorePlugin):
    name = "PodGroupPodsCount"

    def score_placement(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, proposal: PlacementAssignments
    ) -> tuple[int, Status]:
        if not group.pods:
            return 0, Status.success()
        return MAX_PLACEMENT_SCORE * len(proposal.assignments) // len(group.pods), Status.success()

    def placement_score_bounds(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, placements: Sequence[Placement]
    ) -> np.ndarray:
        return np.full(len(placements), MAX_PLACEMENT_SCORE, dtype=np.int64)  # every pod placed

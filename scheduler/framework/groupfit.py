"""What a group asks of the cluster beyond each pod's fit: the free room of
its `minResources` (scheduler-plugins' and Volcano's PodGroups; as
coscheduling's PreFilter, CheckClusterResource). The group's cycle does not
try a group the cluster cannot hold, and PostFilters (preemption,
reservations) must not free or hold room for one that still could not bind.
"""

from __future__ import annotations

from ..api.podgroup import PodGroup
from ..api.quantity import format_units
from ..api.resources import PODS
from ..cluster.snapshot import Snapshot


def min_resources_shortfall(snapshot: Snapshot, group: PodGroup, min_count: int) -> str:
    """What of the group's `minResources` (and `minCount` pod slots) the
    snapshot's free room lacks, e.g. "cpu 8 (free 4)"; "" where it holds
    them or none are asked."""
    if not group.min_resources:
        return ""
    wanted = {**group.min_resources, PODS: max(min_count, group.min_resources.get(PODS, 0))}
    free = snapshot.free_total()
    return ", ".join(
        f"{r} {format_units(r, amount)} (free {format_units(r, free.get(r, 0))})"
        for r, amount in sorted(wanted.items())
        if amount > free.get(r, 0)
    )

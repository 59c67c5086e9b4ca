"""PostFilter: name a node where a pod would fit if only resources were freed.

troupe calls PostFilter when a pod fits nowhere (with the diagnosis: node ->
the status of the filter that rejected it) and, for a PodGroup, with every
unplaced pod's diagnosis at once. Real preemption (DefaultPreemption) also
picks victims and evicts them; this example only reads the diagnosis and
nominates: among the nodes that only NodeResourcesFit rejected, the first by
name. troupe writes the nomination to the pod's `status.nominatedNodeName`.
"""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.api.records import PodInfo
from scheduler.cluster.snapshot import Snapshot
from scheduler.framework.diagnosis import Diagnosis
from scheduler.framework.interface import (
    CycleState,
    GroupContext,
    GroupPostFilterResult,
    PostFilterPlugin,
    PostFilterResult,
    Status,
)

RESOURCES = "NodeResourcesFit"


def resource_only_node(diagnosis: Diagnosis) -> str | None:
    """The first node (by name) that only the resource filter rejected."""
    statuses = diagnosis.node_statuses()
    names = sorted(name for name, status in statuses.items() if status.plugin == RESOURCES)
    return names[0] if names else None


class NominateResourceFit(PostFilterPlugin):
    name = "NominateResourceFit"

    def post_filter(
        self, state: CycleState, pod: PodInfo, snapshot: Snapshot, diagnosis: Diagnosis
    ) -> tuple[PostFilterResult | None, Status]:
        node = resource_only_node(diagnosis)
        if node is None:
            return None, Status.unschedulable("no node is short of resources only", plugin=self.name)
        return PostFilterResult(node), Status.success()

    def post_filter_group(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, diagnoses: Mapping[str, Diagnosis]
    ) -> tuple[GroupPostFilterResult | None, Status]:
        nominations = {uid: node for uid, d in diagnoses.items() if (node := resource_only_node(d)) is not None}
        if not nominations:
            return None, Status.unschedulable("no node is short of resources only", plugin=self.name)
        return GroupPostFilterResult(nominations), Status.success()

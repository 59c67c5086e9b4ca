"""Kueue's plain pod groups: no group object. Pods with the same label
`kueue.x-k8s.io/pod-group-name` in a namespace are one gang of the size
their annotation `kueue.x-k8s.io/pod-group-total-count` declares.

Kueue holds the pods with its scheduling gate until the group is admitted
(troupe waits for gates as it always does) and injects its flavor's node
selectors into them (troupe honours a pod's node selectors as it always
does). The group is troupe's `PodGroup` made from what its pods say
(`implied_group`), kept while a pod of it exists; status goes to the pods'
conditions and Events only, since there is no object to write to.

The group's size is Kueue's (v0.17.0, pkg/controller/jobs/pod/): its
webhook (`validatePodGroupMetadata` in pod_webhook.go) refuses a pod whose
label comes without the count, or whose count is not an integer >= 1; it does
not compare the pods with each other. Its controller does, before it makes
the group's Workload (`Pod.validatePodGroupMetadata` in pod_controller.go,
called by `ConstructComposableWorkload`): every pod of the group that has
not Failed must declare the same count, else the error "pods 'a' and 'b'
has different '...total-count' values" and no Workload, so the group is
never admitted. There is no first, largest or newest: the size is the one
count the group's pods (Failed ones aside) agree on (`declared_size`), the
same whatever order their events arrive in; pods that disagree, or one
without a count, are the group's `problem` (a SchedulerError on its pods),
as Kueue would admit no such group.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..podgroup import PodGroup
from ..records import GroupKey, PodInfo
from .base import LabelSource, Source

GROUP = "kueue.x-k8s.io"
API_VERSION = f"{GROUP}/pods"  # not an API: marks a group made from its pods' labels
LABEL = f"{GROUP}/pod-group-name"
TOTAL_COUNT = f"{GROUP}/pod-group-total-count"


class _CountedLabelSource(LabelSource):
    """Kueue's label, and the group size every pod of the group declares."""

    def pod_group_size(self, meta: Mapping[str, Any]) -> int:
        try:
            return max(int((meta.get("annotations") or {}).get(TOTAL_COUNT) or 0), 0)
        except (TypeError, ValueError):
            return 0


NO_WORKLOAD = "Kueue makes no Workload for such a group"


def declared_size(pods: Sequence[PodInfo]) -> tuple[int, str | None]:
    """The group size the pods of one group declare, as Kueue's controller
    reads it (module docstring): the count every pod not Failed declares, and
    None; or 0 and why there is no such count. Only pods that all Failed
    are counted where no other pod is, so that such a group keeps its size."""
    by_name = sorted(pods, key=lambda p: p.name)  # which two pods a message names: not the events' order
    counted = [p for p in by_name if p.phase != "Failed"] or by_name
    if not counted:
        return 0, None
    for p in counted:
        if p.group_size <= 0:
            return 0, f"pod {p.name}: annotation {TOTAL_COUNT} missing or not a positive count: {NO_WORKLOAD}"
    first = counted[0]
    for p in counted[1:]:
        if p.group_size != first.group_size:
            return 0, (
                f"pods {first.name} and {p.name} declare different {TOTAL_COUNT} values "
                f"({first.group_size} != {p.group_size}): {NO_WORKLOAD}"
            )
    return first.group_size, None


def implied_group(key: GroupKey, members: Sequence[PodInfo], creation_timestamp: str) -> PodGroup:
    """The gang the pods of `key` declare together (`declared_size`); where
    they declare no one size, that is the group's problem."""
    size, problem = declared_size(members)
    return PodGroup.model_validate(
        {
            "apiVersion": API_VERSION,
            "metadata": {"name": key.name, "namespace": key.namespace, "creationTimestamp": creation_timestamp},
            "spec": {"schedulingPolicy": {"gang": {"minCount": max(size, 1)}}},
            "problem": problem,
        }
    )


SOURCE = Source(
    name="kueue",
    api_group=GROUP,
    pods=_CountedLabelSource(LABEL),
    help=f"Kueue's plain pod groups, no object: pods join with the label {LABEL} and declare the "
    f"group's size in the annotation {TOTAL_COUNT}",
    implied=implied_group,
    implied_api_version=API_VERSION,
)

"""Kueue's plain pod groups: no group object. Pods with the same label
`kueue.x-k8s.io/pod-group-name` in a namespace are one gang of the size
their annotation `kueue.x-k8s.io/pod-group-total-count` declares.

Kueue holds the pods with its scheduling gate until the group is admitted
(troupe waits for gates as it always does) and injects its flavor's node
selectors into them (troupe honours a pod's node selectors as it always
does). The group is troupe's `PodGroup` made from what its pods say
(`implied_group`), kept while a pod of it exists; status goes to the pods'
conditions and Events only, since there is no object to write to.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..podgroup import PodGroup
from ..records import GroupKey
from .base import LabelSource

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


PODS = _CountedLabelSource("kueue", GROUP, LABEL)


def implied_group(key: GroupKey, size: int, creation_timestamp: str) -> PodGroup:
    """The gang the pods of `key` declare (`size` 0: the annotation is
    missing or not a count, said as the group's problem)."""
    problem = None
    if size <= 0:
        problem = f"annotation {TOTAL_COUNT}: missing or not a positive count on the group's pods"
    return PodGroup.model_validate(
        {
            "apiVersion": API_VERSION,
            "metadata": {"name": key.name, "namespace": key.namespace, "creationTimestamp": creation_timestamp},
            "spec": {"schedulingPolicy": {"gang": {"minCount": max(size, 1)}}},
            "problem": problem,
        }
    )

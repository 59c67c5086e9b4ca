"""What most group sources share: a pod names its group by one label, and
has no task within the group and no group size of its own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class PodSource:
    """A source's answers for a pod; the defaults suit sources without tasks
    (Volcano has them) and with a group object (Kueue has none)."""

    name: str
    api_group: str

    def pod_group(self, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
        raise NotImplementedError

    def pod_task(self, meta: Mapping[str, Any]) -> str:
        return ""

    def pod_group_size(self, meta: Mapping[str, Any]) -> int:
        return 0


class LabelSource(PodSource):
    """A pod joins the group its label `label` names (same namespace)."""

    def __init__(self, name: str, api_group: str, label: str) -> None:
        self.name = name
        self.api_group = api_group
        self.label = label

    def pod_group(self, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
        value = (meta.get("labels") or {}).get(self.label)
        return str(value) if value else None

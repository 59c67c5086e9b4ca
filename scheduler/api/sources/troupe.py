"""troupe's own PodGroups (`scheduling.troupe.dev/v1alpha2`), joined by the
label `scheduling.troupe.dev/pod-group`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import constants as C
from ..podgroup import PodGroup, Workload


class _LabelSource:
    name = "troupe"
    api_group = C.GROUP

    def pod_group(self, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
        labels = meta.get("labels") or {}
        value = labels.get(C.POD_GROUP_LABEL)
        return str(value) if value else None

    def pod_task(self, meta: Mapping[str, Any]) -> str:
        return ""

    def pod_group_size(self, meta: Mapping[str, Any]) -> int:
        return 0


PODS = _LabelSource()


def parse_group(body: Mapping[str, Any]) -> PodGroup:
    return PodGroup.model_validate(body)


def parse_workload(body: Mapping[str, Any]) -> Workload:
    return Workload.model_validate(body)

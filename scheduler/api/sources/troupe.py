"""troupe's own PodGroups (`scheduling.troupe.dev/v1alpha2`), joined by the
label `scheduling.troupe.dev/pod-group`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import constants as C
from ..podgroup import PodGroup, Workload
from .base import LabelSource

PODS = LabelSource("troupe", C.GROUP, C.POD_GROUP_LABEL)


def parse_group(body: Mapping[str, Any]) -> PodGroup:
    return PodGroup.model_validate(body)


def parse_workload(body: Mapping[str, Any]) -> Workload:
    return Workload.model_validate(body)

"""troupe's own PodGroups (`scheduling.troupe.dev/v1alpha2`), joined by the
label `scheduling.troupe.dev/pod-group`, and its Workloads and
CompositePodGroups."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import constants as C
from ..composite import COMPOSITE_KIND, COMPOSITE_PLURAL, parse_composite
from ..podgroup import PodGroup, Workload
from .base import GroupKind, LabelSource, Source


def parse_group(body: Mapping[str, Any]) -> PodGroup:
    return PodGroup.model_validate(body)


def parse_workload(body: Mapping[str, Any]) -> Workload:
    return Workload.model_validate(body)


SOURCE = Source(
    name="troupe",
    api_group=C.GROUP,
    pods=LabelSource(C.POD_GROUP_LABEL),
    kinds=(
        GroupKind(
            C.GROUP, (C.VERSION,), "PodGroup", C.PODGROUP_PLURAL, parse_group, discovered=False, writes_status=True
        ),
        GroupKind(C.GROUP, (C.VERSION,), "Workload", C.WORKLOAD_PLURAL, parse_workload, discovered=False),
        GroupKind(
            C.GROUP,
            (C.VERSION,),
            COMPOSITE_KIND,
            COMPOSITE_PLURAL,
            parse_composite,
            discovered=False,
            writes_status=True,
        ),
    ),
    optional=False,
    help=f"{C.API_VERSION} (troupe's own); pods join with the label {C.POD_GROUP_LABEL}",
)

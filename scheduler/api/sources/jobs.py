"""Jobs that opt in to troupe: their pods join the troupe PodGroup troupe
made for the Job, through the Job's controller ownerReference (api/jobs.py
says what is made)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import constants as C
from ..jobs import JOB_POLICY_ANNOTATION, pod_group_of
from .base import PodSource, Source


class _JobPods(PodSource):
    def pod_group(self, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
        return pod_group_of(meta)


SOURCE = Source(
    name="jobs",
    api_group=C.GROUP,  # the groups are troupe's own PodGroups, made by troupe
    pods=_JobPods(),
    optional=False,
    help=f"batch/v1 Jobs whose pod template has the annotation {JOB_POLICY_ANNOTATION}: troupe makes "
    "their PodGroup; pods join through the Job's controller ownerReference",
)

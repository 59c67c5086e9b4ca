"""Jobs that opt in to troupe: their pods join the troupe PodGroup troupe
made for the Job, through the Job's controller ownerReference (api/jobs.py
says what is made)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import constants as C
from ..jobs import pod_group_of
from .base import PodSource


class _JobSource(PodSource):
    name = "jobs"
    api_group = C.GROUP  # the groups are troupe's own PodGroups

    def pod_group(self, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
        return pod_group_of(meta)


PODS = _JobSource()

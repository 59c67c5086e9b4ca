"""The group sources, in rule order: a pod that names groups of several
sources belongs to the first of them (docs/architecture.md "Group
sources"). Adding a source is one module under api/sources/ and one line
here."""

from __future__ import annotations

from . import coscheduling, jobs, kueue, native, troupe, volcano
from .base import Source

SOURCES: tuple[Source, ...] = (
    native.SOURCE,  # spec.schedulingGroup.podGroupName: the API server validated it
    troupe.SOURCE,  # label scheduling.troupe.dev/pod-group
    jobs.SOURCE,  # the controller ownerReference of a Job that opted in
    coscheduling.SOURCE,  # label scheduling.x-k8s.io/pod-group
    volcano.SOURCE,  # annotation scheduling.k8s.io/group-name
    kueue.SOURCE,  # label kueue.x-k8s.io/pod-group-name
)

"""The group sources, in rule order: a pod that names groups of several
sources belongs to the first of them (docs/architecture.md "Group
sources"). Adding a source is one module under api/sources/ and one line
here."""

from __future__ import annotations

from . import coscheduling, jobs, kueue, native, troupe, volcano
from .base import Source

# troupe's own markers come first: a pod carries them only because a user
# asked troupe for that group, whereas the 1.37 Job controller (WorkloadWithJob)
# writes spec.schedulingGroup on the pods of every Job, a basic group unless
# the Job's spec.scheduling says otherwise: read first, it turned a Job that
# asked troupe for a gang into a basic group, bound in part.
SOURCES: tuple[Source, ...] = (
    troupe.SOURCE,  # label scheduling.troupe.dev/pod-group
    jobs.SOURCE,  # the controller ownerReference of a Job that opted in
    native.SOURCE,  # spec.schedulingGroup.podGroupName: the API server validated it
    coscheduling.SOURCE,  # label scheduling.x-k8s.io/pod-group
    volcano.SOURCE,  # annotation scheduling.k8s.io/group-name
    kueue.SOURCE,  # label kueue.x-k8s.io/pod-group-name
)

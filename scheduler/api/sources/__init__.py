"""Group sources: where PodGroups and their members come from.

A *group source* answers three questions for one way of saying "these pods
go together":

- which group a pod names (`pod_group`): a label, an annotation, a spec
  field, an owner; and, where the source has them, the pod's task within
  the group and the group size the pod itself declares;
- what a group object of the source means as troupe's `PodGroup`
  (`parse_group`; Kueue's pod groups have no object: `implied_group`);
- how a decision is written back in the source's vocabulary
  (`export_status`: troupe's conditions, and the counts of the group's
  pods, as the source's own status fields).

Everything here is pure translation. The watches that feed a source live in
`runtime/sources.py`; the core sees only `PodGroup`s and `GroupKey`s and
never asks which source a group came from.

A pod that names groups of several sources belongs to the first of them in
`ALL_SOURCES` order (the one documented rule, README "Group sources"):

1. `spec.schedulingGroup.podGroupName`: the native API's own field, which the
   API server validated and the 1.37 Job controller writes;
2. troupe's label `scheduling.troupe.dev/pod-group`;
3. the controller ownerReference of a Job that opted in to troupe;
4. scheduler-plugins' label `scheduling.x-k8s.io/pod-group`;
5. Volcano's annotation `scheduling.k8s.io/group-name`;
6. Kueue's label `kueue.x-k8s.io/pod-group-name`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from ..config import GROUP_SOURCE_NAMES
from ..podgroup import PodGroup, Workload
from ..records import GroupKey, PodInfo
from . import coscheduling, jobs, kueue, native, troupe, volcano
from .foreign import MemberCounts

__all__ = ["MemberCounts", "GroupSource", "ALL_SOURCES", "DEFAULT_SOURCES", "OPTIONAL", "enabled_sources"]


class GroupSource(Protocol):
    """Which group a pod names, in the source's own terms."""

    name: str  # short, for logs and configuration: "troupe", "native", "volcano", ...
    api_group: str  # the API group of the PodGroups its pods name (GroupKey.source)

    def pod_group(self, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
        """The name of the group (in the pod's namespace) the pod names, if any."""
        ...

    def pod_task(self, meta: Mapping[str, Any]) -> str:
        """The pod's task within its group ("" where the source has none)."""
        ...

    def pod_group_size(self, meta: Mapping[str, Any]) -> int:
        """The group size the pod declares (0 where the source has a group object)."""
        ...


ALL_SOURCES: tuple[GroupSource, ...] = (
    native.PODS,
    troupe.PODS,
    jobs.PODS,
    coscheduling.PODS,
    volcano.PODS,
    kueue.PODS,
)
# troupe's own kinds are always read; these can be turned off (`groupSources`).
OPTIONAL = GROUP_SOURCE_NAMES
DEFAULT_SOURCES = ALL_SOURCES


def enabled_sources(names: Sequence[str]) -> tuple[GroupSource, ...]:
    """The sources in rule order: troupe's own, and the optional ones named."""
    return tuple(s for s in ALL_SOURCES if s.name not in OPTIONAL or s.name in names)


class Membership(NamedTuple):
    group: GroupKey
    task: str
    group_size: int


def pod_membership(
    meta: Mapping[str, Any], spec: Mapping[str, Any], sources: Sequence[GroupSource] = DEFAULT_SOURCES
) -> Membership | None:
    """The group a pod belongs to: the first source (in order) that names one."""
    namespace = str(meta.get("namespace") or "default")
    for source in sources:
        name = source.pod_group(meta, spec)
        if name:
            key = GroupKey(namespace, name, source.api_group)
            return Membership(key, source.pod_task(meta), source.pod_group_size(meta))
    return None


def pod_group(
    meta: Mapping[str, Any], spec: Mapping[str, Any], sources: Sequence[GroupSource] = DEFAULT_SOURCES
) -> GroupKey | None:
    found = pod_membership(meta, spec, sources)
    return found.group if found is not None else None


def _group_of(api_version: str) -> str:
    return api_version.partition("/")[0]


def is_implied(key: GroupKey) -> bool:
    """The group has no object: its pods make it (Kueue)."""
    return key.source == kueue.GROUP


def implied_group(key: GroupKey, members: Sequence[PodInfo], creation_timestamp: str) -> PodGroup | None:
    """The PodGroup a source with no group object makes of its pods (Kueue:
    the size they all declare), or None where the source has objects of its own."""
    if is_implied(key):
        return kueue.implied_group(key, members, creation_timestamp)
    return None


def has_object(api_version: str) -> bool:
    """The group is an API object troupe can write status and Events to."""
    return api_version != kueue.API_VERSION


def status_path(api_version: str, namespace: str, name: str) -> str:
    """Where a PodGroup's status is patched: its status subresource, or the
    object itself where the kind has none (Volcano's CRD: its scheduler
    updates the whole object)."""
    path = f"/apis/{api_version}/namespaces/{namespace}/podgroups/{name}"
    return path if _group_of(api_version) == volcano.GROUP else f"{path}/status"


def counts_members(api_version: str) -> bool:
    """The source's status counts the group's pods (written as they change)."""
    return _group_of(api_version) in (coscheduling.GROUP, volcano.GROUP)


def export_status(
    group: PodGroup, conditions: list[dict[str, Any]] | None, counts: MemberCounts, now: str
) -> dict[str, Any]:
    """The status patch for `group` in its source's vocabulary: troupe's
    `conditions` (None: leave them as they are) and, for sources that count
    them, the group's pods."""
    source = _group_of(group.api_version)
    if source == coscheduling.GROUP:
        return coscheduling.export_status(group, conditions, counts, now)
    if source == volcano.GROUP:
        return volcano.export_status(group, conditions, counts, now)
    if conditions is None:
        return {}
    if source == native.GROUP:
        return {"conditions": native.export_conditions(group.api_version, conditions)}
    return {"conditions": conditions}


def export_conditions(api_version: str, conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """troupe's conditions under a native version's names (others: as they are)."""
    if _group_of(api_version) == native.GROUP:
        return native.export_conditions(api_version, conditions)
    return conditions


def parse_group(body: Mapping[str, Any]) -> PodGroup:
    """troupe's PodGroup for a group object of any source, chosen by its
    apiVersion (group and version, never the kind alone). Raises
    pydantic.ValidationError where the object cannot be read."""
    source = _group_of(str(body.get("apiVersion") or ""))
    if source == native.GROUP:
        return native.parse_group(body)
    if source == coscheduling.GROUP:
        return coscheduling.parse_group(body)
    if source == volcano.GROUP:
        return volcano.parse_group(body)
    return troupe.parse_group(body)


def parse_workload(body: Mapping[str, Any]) -> Workload:
    if _group_of(str(body.get("apiVersion") or "")) == native.GROUP:
        return native.parse_workload(body)
    return troupe.parse_workload(body)

"""Group sources: where PodGroups and their members come from.

A *group source* answers three questions for one way of saying "these pods
go together":

- which group a pod names (`pod_group`): a label, a spec field, an owner;
- what a group object of the source means as troupe's `PodGroup`
  (`parse_group`; sources without an object of their own have none);
- how a decision is written back in the source's vocabulary
  (`export_conditions`: troupe's condition types to the source's).

Everything here is pure translation. The watches that feed a source live in
`runtime/sources.py`; the core sees only `PodGroup`s and `GroupKey`s and
never asks which source a group came from.

A pod that names groups of several sources belongs to the first of them in
`DEFAULT_SOURCES` order (the one documented rule, README "Group sources"):

1. `spec.schedulingGroup.podGroupName`: the native API's own field, which the
   API server validated and the 1.37 Job controller writes;
2. troupe's label `scheduling.troupe.dev/pod-group`;
3. the controller ownerReference of a Job that opted in to troupe.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..podgroup import PodGroup, Workload
from ..records import GroupKey
from . import jobs, native, troupe


class GroupSource(Protocol):
    """Which group a pod names, in the source's own terms."""

    name: str  # short, for logs and configuration: "troupe", "jobs", "native"
    api_group: str  # the API group of the PodGroups its pods name (GroupKey.source)

    def pod_group(self, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
        """The name of the group (in the pod's namespace) the pod names, if any."""
        ...


DEFAULT_SOURCES: tuple[GroupSource, ...] = (native.PODS, troupe.PODS, jobs.PODS)


def pod_group(
    meta: Mapping[str, Any], spec: Mapping[str, Any], sources: Sequence[GroupSource] = DEFAULT_SOURCES
) -> GroupKey | None:
    """The group a pod belongs to: the first source (in order) that names one."""
    namespace = str(meta.get("namespace") or "default")
    for source in sources:
        name = source.pod_group(meta, spec)
        if name:
            return GroupKey(namespace, name, source.api_group)
    return None


def export_conditions(api_version: str, conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """troupe's conditions in the vocabulary of the PodGroup kind `api_version`."""
    if api_version.partition("/")[0] == native.GROUP:
        return native.export_conditions(api_version, conditions)
    return conditions


def parse_group(body: Mapping[str, Any]) -> PodGroup:
    """troupe's PodGroup for a group object of any source, chosen by its
    apiVersion (group and version, never the kind alone). Raises
    pydantic.ValidationError where the object cannot be read."""
    api_version = str(body.get("apiVersion") or "")
    if api_version.partition("/")[0] == native.GROUP:
        return native.parse_group(body)
    return troupe.parse_group(body)


def parse_workload(body: Mapping[str, Any]) -> Workload:
    api_version = str(body.get("apiVersion") or "")
    if api_version.partition("/")[0] == native.GROUP:
        return native.parse_workload(body)
    return troupe.parse_workload(body)

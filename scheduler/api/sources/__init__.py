"""Group sources: where PodGroups and their members come from.

Each source is one `Source` object (`base.py`: its pod side, the group
kinds it reads, how a decision is written back, what the user sees), listed
once, in rule order, in `registry.SOURCES`. The functions here answer the
rest of troupe's questions by iterating that registry; none names a source.

Everything here is pure translation. The watches that feed the sources live
in `runtime/sources.py`; the core sees only `PodGroup`s and `GroupKey`s and
never asks which source a group came from.

A pod that names groups of several sources belongs to the first of them in
registry order (docs/architecture.md "Group sources").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..composite import COMPOSITE_KIND, CompositePodGroup
from ..podgroup import PodGroup, Workload
from ..records import GroupKey, PodInfo
from . import registry, troupe
from .base import GroupKind, Source
from .foreign import MemberCounts

__all__ = [
    "MemberCounts",
    "GroupKind",
    "GroupSource",
    "Source",
    "DEFAULT_SOURCES",
    "all_sources",
    "optional_names",
    "enabled_sources",
]

GroupSource = Source  # the name the pod parser knows it by
# The shipped sources (a default argument: a registry patched in a test is
# read through all_sources()).
DEFAULT_SOURCES: tuple[Source, ...] = registry.SOURCES


def all_sources() -> tuple[Source, ...]:
    return registry.SOURCES


def optional_names() -> tuple[str, ...]:
    """The sources `groupSources` can name (troupe's own kinds and Jobs are always read)."""
    return tuple(s.name for s in registry.SOURCES if s.optional)


def enabled_sources(names: Sequence[str]) -> tuple[Source, ...]:
    """The sources in rule order: those always read, and the optional ones named."""
    return tuple(s for s in registry.SOURCES if not s.optional or s.name in names)


def scheduler_names() -> dict[str, str]:
    """The schedulerName operators hard-code -> the source that reads their groups."""
    return {name: s.name for s in registry.SOURCES for name in s.scheduler_names}


def discovered_kinds(names: Sequence[str]) -> list[tuple[Source, GroupKind]]:
    """The kinds the running scheduler finds by discovery and watches, of the sources on."""
    return [(s, k) for s in enabled_sources(names) for k in s.kinds if k.watched and k.discovered]


def api_versions(kind: str) -> tuple[str, ...]:
    """Every apiVersion troupe reads `kind` in, across the sources."""
    return tuple(v for s in registry.SOURCES for k in s.kinds if k.kind == kind for v in k.api_versions())


class Membership(NamedTuple):
    group: GroupKey
    task: str
    group_size: int


def pod_membership(
    meta: Mapping[str, Any], spec: Mapping[str, Any], sources: Sequence[Source] | None = None
) -> Membership | None:
    """The group a pod belongs to: the first source (in order) that names one."""
    namespace = str(meta.get("namespace") or "default")
    for source in registry.SOURCES if sources is None else sources:
        name = source.pods.pod_group(meta, spec)
        if name:
            key = GroupKey(namespace, name, source.api_group)
            return Membership(key, source.pods.pod_task(meta), source.pods.pod_group_size(meta))
    return None


def pod_group(
    meta: Mapping[str, Any], spec: Mapping[str, Any], sources: Sequence[Source] | None = None
) -> GroupKey | None:
    found = pod_membership(meta, spec, sources)
    return found.group if found is not None else None


def _group_of(api_version: str) -> str:
    return api_version.partition("/")[0]


def source_of(api_group: str) -> Source | None:
    """The source whose group objects live in `api_group` (GroupKey.source or
    an apiVersion's group): the one with kinds there, else the one whose pods
    name groups there (Kueue: no kind at all)."""
    for s in registry.SOURCES:
        if any(k.group == api_group for k in s.kinds):
            return s
    return next((s for s in registry.SOURCES if s.api_group == api_group), None)


def group_kind(api_version: str, kind: str) -> GroupKind | None:
    """The kind `kind` of the API group in `api_version`, as a source reads it."""
    group = _group_of(api_version)
    source = source_of(group)
    if source is None:
        return None
    return next((k for k in source.kinds if k.group == group and k.kind == kind), None)


def is_implied(key: GroupKey) -> bool:
    """The group has no object: its pods make it (Kueue)."""
    source = source_of(key.source)
    return source is not None and source.implied is not None


def implied_group(key: GroupKey, members: Sequence[PodInfo], creation_timestamp: str) -> PodGroup | None:
    """The PodGroup a source with no group object makes of its pods (Kueue:
    the size they all declare), or None where the source has objects of its own."""
    source = source_of(key.source)
    if source is None or source.implied is None:
        return None
    return source.implied(key, members, creation_timestamp)


def has_object(api_version: str) -> bool:
    """The group is an API object troupe can write status and Events to."""
    source = source_of(_group_of(api_version))
    return source is None or source.implied is None


def status_path(api_version: str, namespace: str, name: str) -> str:
    """Where a PodGroup's status is patched: its status subresource, or the
    object itself where the kind has none (Volcano's CRD: its scheduler
    updates the whole object)."""
    kind = group_kind(api_version, "PodGroup")
    plural = kind.plural if kind is not None else "podgroups"
    path = f"/apis/{api_version}/namespaces/{namespace}/{plural}/{name}"
    return path if kind is not None and not kind.status_subresource else f"{path}/status"


def counts_members(api_version: str) -> bool:
    """The source's status counts the group's pods (written as they change)."""
    source = source_of(_group_of(api_version))
    return source is not None and source.counts_members


def export_status(
    group: PodGroup, conditions: list[dict[str, Any]] | None, counts: MemberCounts, now: str
) -> dict[str, Any]:
    """The status patch for `group` in its source's vocabulary: troupe's
    `conditions` (None: leave them as they are) and, for sources that count
    them, the group's pods."""
    source = source_of(_group_of(group.api_version)) or troupe.SOURCE
    return source.export_status(group, conditions, counts, now)


def export_conditions(api_version: str, conditions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """troupe's conditions under the source's names (most keep troupe's)."""
    source = source_of(_group_of(api_version)) or troupe.SOURCE
    return source.export_conditions(api_version, conditions)


def _parse(body: Mapping[str, Any], kind: str) -> Any:
    # Chosen by apiVersion (group and version, never the kind alone); an
    # apiVersion no source reads is validated as troupe's own kind, whose
    # schema then names what is wrong.
    found = group_kind(str(body.get("apiVersion") or ""), kind) or troupe.SOURCE.kind(kind)
    assert found is not None  # troupe reads PodGroup, Workload and CompositePodGroup
    return found.parse(body)


def parse_group(body: Mapping[str, Any]) -> PodGroup:
    """troupe's PodGroup for a group object of any source. Raises
    pydantic.ValidationError where the object cannot be read."""
    group: PodGroup = _parse(body, "PodGroup")
    return group


def parse_workload(body: Mapping[str, Any]) -> Workload:
    """troupe's Workload for a Workload of any source that has one."""
    workload: Workload = _parse(body, "Workload")
    return workload


def parse_composite(body: Mapping[str, Any]) -> CompositePodGroup:
    """troupe's CompositePodGroup for one of any source that has the kind
    (troupe's own, native v1alpha3). Raises pydantic.ValidationError."""
    composite: CompositePodGroup = _parse(body, COMPOSITE_KIND)
    return composite

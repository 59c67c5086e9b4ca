"""What a group source is: one `Source` object, listed once in `registry.py`.

A source says everything troupe needs to know about one way of saying
"these pods go together":

- the pod side (`pods`): which group a pod names, its task within the group,
  and the group size the pod itself declares;
- the group side (`kinds`): the API objects it reads, each matched by API
  group and version (never by kind alone), with how one becomes troupe's
  `PodGroup` (or `Workload`), whether it has a status subresource, and
  whether the running scheduler discovers and watches it;
- how a decision is written back in the source's vocabulary
  (`export_status`), and whether its status counts the group's pods;
- for a source with no group object (Kueue), the group its pods make
  (`implied_group`);
- what the user sees: its `groupSources` name, the operators' hard-coded
  scheduler names it serves, what to do when its API is not served, and its
  line in `--help`.

Everything that lists the sources (parsing, status export, configuration,
the runtime's watches, simulate's loader, `--help`, the RBAC check) reads
the registry, so that a new source is one module plus one registry line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..podgroup import PodGroup
    from ..records import GroupKey, PodInfo
    from .foreign import MemberCounts

Body = Mapping[str, Any]
Conditions = list[dict[str, Any]]


class PodSource:
    """A source's answers for a pod; the defaults suit sources without tasks
    (Volcano has them) and with a group object (Kueue has none)."""

    def pod_group(self, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
        """The name of the group (in the pod's namespace) the pod names, if any."""
        raise NotImplementedError

    def pod_task(self, meta: Mapping[str, Any]) -> str:
        """The pod's task within its group ("" where the source has none)."""
        return ""

    def pod_group_size(self, meta: Mapping[str, Any]) -> int:
        """The group size the pod declares (0 where the source has a group object)."""
        return 0


class LabelSource(PodSource):
    """A pod joins the group its label `label` names (same namespace)."""

    def __init__(self, label: str) -> None:
        self.label = label

    def pod_group(self, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
        value = (meta.get("labels") or {}).get(self.label)
        return str(value) if value else None


class AnnotationSource(PodSource):
    """A pod joins the group its annotation `annotation` names (same namespace)."""

    def __init__(self, annotation: str) -> None:
        self.annotation = annotation

    def pod_group(self, meta: Mapping[str, Any], spec: Mapping[str, Any]) -> str | None:
        value = (meta.get("annotations") or {}).get(self.annotation)
        return str(value) if value else None


@dataclass(frozen=True)
class GroupKind:
    """One kind of group object a source reads."""

    group: str  # the API group
    versions: tuple[str, ...]  # the versions troupe speaks, preferred first
    kind: str  # "PodGroup", "Workload" (a composite kind later)
    plural: str
    parse: Callable[[Body], Any]  # the object as troupe's PodGroup / Workload; raises pydantic.ValidationError
    # The running scheduler watches it (native Workloads are read only by
    # `troupe simulate`: a native PodGroup carries its template's policy).
    watched: bool = True
    # The running scheduler finds the served version by API discovery and
    # watches it where served (False: troupe's own kinds, installed with it).
    discovered: bool = True
    # troupe writes its status (PodGroup kinds: conditions, counts).
    writes_status: bool = False
    # False where the CRD has none (Volcano's): status is patched on the object.
    status_subresource: bool = True

    def api_versions(self) -> tuple[str, ...]:
        return tuple(f"{self.group}/{v}" for v in self.versions)

    def rbac(self) -> list[tuple[str, str, tuple[str, ...]]]:
        """What the scheduler's ClusterRole must grant for this kind:
        (API group, resource, verbs)."""
        rules: list[tuple[str, str, tuple[str, ...]]] = []
        if self.watched:
            rules.append((self.group, self.plural, ("get", "list", "watch")))
        if self.writes_status:
            resource = f"{self.plural}/status" if self.status_subresource else self.plural
            rules.append((self.group, resource, ("patch",)))
        return rules


def write_conditions(api_version: str, conditions: Conditions) -> Conditions:
    """troupe's conditions as they are (most sources keep troupe's words)."""
    return conditions


@dataclass(frozen=True)
class Source:
    """Everything troupe knows about one group source (module docstring)."""

    name: str  # in `groupSources`, logs and --help: "troupe", "native", "volcano", ...
    api_group: str  # the API group of the groups its pods name (GroupKey.source)
    pods: PodSource
    kinds: tuple[GroupKind, ...] = ()
    help: str = ""  # one line for --help: the objects and the pod's link
    # False: always read (troupe's own kinds, Jobs); True: in `groupSources`.
    optional: bool = True
    # What to do when the cluster serves none of its kinds (log line, pod message).
    not_served: str = ""
    # The schedulerName operators hard-code on pods whose groups this source
    # reads (a troupe profile of that name needs the source on).
    scheduler_names: tuple[str, ...] = ()
    # troupe's conditions under the source's names, as it keeps them.
    export_conditions: Callable[[str, Conditions], Conditions] = write_conditions
    # The whole status patch (source-kept fields as well); None: conditions only.
    export_members: Callable[[PodGroup, Conditions | None, MemberCounts, str], dict[str, Any]] | None = None
    # The source's status counts the group's pods (written as they change).
    counts_members: bool = False
    # A source with no group object: the group its pods make (Kueue).
    implied: Callable[[GroupKey, Sequence[PodInfo], str], PodGroup] | None = None
    # The apiVersion troupe gives such groups (not an API).
    implied_api_version: str = ""

    def kind(self, kind: str) -> GroupKind | None:
        return next((k for k in self.kinds if k.kind == kind), None)

    def export_status(
        self, group: PodGroup, conditions: Conditions | None, counts: MemberCounts, now: str
    ) -> dict[str, Any]:
        """The status patch for `group`: troupe's `conditions` (None: leave
        them as they are) and, for sources that count them, the group's pods."""
        if self.export_members is not None:
            return self.export_members(group, conditions, counts, now)
        if conditions is None:
            return {}
        return {"conditions": self.export_conditions(group.api_version, conditions)}

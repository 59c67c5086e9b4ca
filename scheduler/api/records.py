"""The small immutable records the cache keeps per Pod and Node.

The cache keeps one small record per object instead of the whole body (the
cache holds every pod of the cluster); `parse.py` builds them from API bodies.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple, Protocol

from .constants import GROUP, POD_GROUP_LABEL

_INT = re.compile(r"[+-]?[0-9]+")


def _parse_int64(text: str) -> int | None:
    """Go strconv.ParseInt(text, 10, 64): optional sign, ASCII digits, int64 range."""
    if not _INT.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


class GroupKey(NamedTuple):
    """A PodGroup: its namespace, its name, and the API group of its kind
    (`scheduling.troupe.dev` for troupe's own, `scheduling.k8s.io` for the
    native one, ...), so that two kinds' PodGroups of one name never meet.
    The core compares and prints keys; it never asks which source one is."""

    namespace: str
    name: str
    source: str = GROUP

    def __str__(self) -> str:
        where = f"PodGroup {self.namespace}/{self.name}"
        return where if self.source == GROUP else f"{where} ({self.source})"

    @property
    def member_label(self) -> tuple[str, str]:
        """The label by which selectors recognise the group's pods (default
        spreading): troupe's own label for its groups; for another source a
        key no real label can have (a colon), which parse_pod sets."""
        if self.source == GROUP:
            return (POD_GROUP_LABEL, self.name)
        return (f"{self.source}:pod-group", self.name)


class ObjectError(ValueError):
    """An object carries a field the scheduler needs but cannot interpret."""


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    def __str__(self) -> str:
        return f"{{{self.key}: {self.value}}}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Taint) -> bool:
        """Upstream v1helper.ToleratesTaint."""
        return tolerates(self, taint)


class _TaintFields(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def effect(self) -> str: ...


class _TolerationFields(_TaintFields, Protocol):
    @property
    def operator(self) -> str: ...


def tolerates(toleration: _TolerationFields, taint: _TaintFields) -> bool:
    """A toleration matches a taint: the rule node taints (upstream
    v1helper.ToleratesTaint) and device taints (resourceclaim.ToleratesTaint,
    a copy of it) share. An empty effect or key matches any; `Exists` any
    value, `Equal` (or unset) the same value."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    if toleration.operator in ("Equal", ""):
        return toleration.value == taint.value
    return False


@dataclass(frozen=True, slots=True)
class Requirement:
    """A NodeSelectorRequirement (matchExpressions or matchFields item)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        if op == "In":
            return self.key in labels and labels[self.key] in self.values
        if op == "NotIn":
            return self.key not in labels or labels[self.key] not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        if op in ("Gt", "Lt"):
            if self.key not in labels or len(self.values) != 1:
                return False
            have, want = _parse_int64(labels[self.key]), _parse_int64(self.values[0])
            if have is None or want is None:
                return False
            return have > want if op == "Gt" else have < want
        return False

    def to_api(self) -> dict[str, Any]:
        return {"key": self.key, "operator": self.operator, **({"values": list(self.values)} if self.values else {})}


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        # An empty term matches no objects (upstream nodeaffinity.NodeSelector).
        if not self.match_expressions and not self.match_fields:
            return False
        if not all(r.matches(labels) for r in self.match_expressions):
            return False
        fields = {"metadata.name": node_name}
        return all(r.matches(fields) for r in self.match_fields)

    def to_api(self) -> dict[str, Any]:
        """The term as the API writes it (what parse_node_selector_term reads)."""
        out: dict[str, Any] = {}
        if self.match_expressions:
            out["matchExpressions"] = [r.to_api() for r in self.match_expressions]
        if self.match_fields:
            out["matchFields"] = [r.to_api() for r in self.match_fields]
        return out


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    term: NodeSelectorTerm


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """metav1.LabelSelector: matchLabels and matchExpressions (In, NotIn,
    Exists, DoesNotExist), all ANDed. An empty selector matches everything; a
    missing one (None where a selector is optional) matches nothing."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        for k, v in self.match_labels:
            if labels.get(k) != v:
                return False
        return all(r.matches(labels) for r in self.match_expressions)


@dataclass(frozen=True, slots=True)
class PodDisruptionBudgetInfo:
    """What preemption reads of a policy/v1 PodDisruptionBudget.

    `selector`: an empty selector (`{}`) selects every pod of the namespace
    (policy/v1), a missing one (None) selects none. `disrupted_pods`: names in
    status.disruptedPods, whose eviction the API server has already counted
    against the budget (upstream preemption does not count them again)."""

    namespace: str
    name: str
    uid: str
    selector: LabelSelector | None
    disruptions_allowed: int
    disrupted_pods: frozenset[str] = frozenset()

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def selects(self, pod: PodInfo) -> bool:
        return self.selector is not None and pod.namespace == self.namespace and self.selector.matches(pod.labels)


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """A required (anti-)affinity term. `namespaces` empty and `namespace_selector`
    None means the pod's own namespace (upstream); an empty `namespace_selector`
    means all namespaces."""

    selector: LabelSelector | None
    topology_key: str
    namespaces: tuple[str, ...] = ()
    namespace_selector: LabelSelector | None = None
    match_label_keys: tuple[str, ...] = ()
    mismatch_label_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class WeightedPodAffinityTerm:
    weight: int
    term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class TopologySpreadConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: str  # DoNotSchedule | ScheduleAnyway
    selector: LabelSelector | None
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"  # Honor | Ignore
    node_taints_policy: str = "Ignore"  # Honor | Ignore
    match_label_keys: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class HostPort:
    """A container port with hostPort set (NodePorts)."""

    port: int
    protocol: str = "TCP"
    ip: str = "0.0.0.0"


@dataclass(frozen=True, slots=True)
class PodClaim:
    """`spec.resourceClaims[]`: the pod's name for a claim, and the
    ResourceClaim it is (`resourceClaimName`, or for a template the name in
    `status.resourceClaimStatuses`, "" until a claim controller made it)."""

    name: str
    claim_name: str
    template_name: str = ""


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    uid: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    taints: tuple[Taint, ...]
    unschedulable: bool
    # A field of status.allocatable out of range (api/resources.py), left out
    # of `allocatable` (as if absent); "" when none. Said in a Warning Event.
    problem: str = ""


@dataclass(frozen=True, slots=True)
class PodInfo:
    uid: str
    namespace: str
    name: str
    scheduler_name: str
    node_name: str  # "" while unbound
    phase: str
    deleting: bool
    labels: Mapping[str, str]
    priority: int
    creation_timestamp: str
    requests: Mapping[str, int]  # effective requests incl. init containers and overhead
    nonzero_cpu: int  # for scoring: containers asking nothing count DEFAULT_* (upstream)
    nonzero_memory: int
    node_selector: Mapping[str, str]
    required_affinity: tuple[NodeSelectorTerm, ...] | None  # None: no required node affinity
    preferred_affinity: tuple[PreferredTerm, ...]
    tolerations: tuple[Toleration, ...]
    scheduling_gates: tuple[str, ...]
    pod_affinity: tuple[PodAffinityTerm, ...] = ()  # required
    pod_affinity_preferred: tuple[WeightedPodAffinityTerm, ...] = ()
    pod_anti_affinity: tuple[PodAffinityTerm, ...] = ()  # required
    pod_anti_affinity_preferred: tuple[WeightedPodAffinityTerm, ...] = ()
    topology_spread: tuple[TopologySpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    resource_version: str = ""
    spec_key: tuple[Any, ...] = field(default=(), compare=False)  # what scheduling reads (parse.py)
    preemption_policy: str = "PreemptLowerPriority"  # or "Never"
    start_time: str = ""  # status.startTime (RFC 3339); "" until a kubelet starts it
    active_deadline_seconds: int | None = None  # spec.activeDeadlineSeconds: the kubelet ends the pod then
    nominated_node_name: str = ""  # status.nominatedNodeName
    # The reason of its PodScheduled=False condition ("" when it has none or
    # it is True): "Unschedulable" is what autoscalers provision for.
    unscheduled_reason: str = ""
    resource_claims: tuple[PodClaim, ...] = ()
    group: GroupKey | None = None  # the PodGroup the pod belongs to (api/sources)
    task: str = ""  # the pod's task within its group, where the source has tasks (Volcano's minTaskMember)
    group_size: int = 0  # the group size the pod itself declares (a source with no group object: Kueue)
    owners: tuple[str, ...] = ()  # a group member's ownerReferences' names (scheduler-plugins' occupiedBy)
    # controller.kubernetes.io/pod-deletion-cost (a group member's): which of a
    # gang's pods above its minCount preemption takes first (the lowest).
    deletion_cost: int = 0
    # `priority` is the pod's PodGroup's where the group has one (its pods
    # then all share it: queue, holds, preemption, reservations); this keeps
    # the pod's own `spec.priority` then (None: `priority` is the pod's own).
    own_priority: int | None = None
    # The tree (CompositePodGroups) the pod's PodGroup is part of: its root,
    # or its first missing ancestor (cluster/tree.py); the queue's unit.
    tree: GroupKey | None = None
    # A request out of range (api/resources.py), left out of `requests` (as
    # if absent); "" when none. Such a pod is not scheduled: SchedulerError.
    problem: str = ""

    @property
    def may_preempt(self) -> bool:
        return self.preemption_policy != "Never"

    def with_group_priority(self, priority: int | None) -> PodInfo:
        """The pod with its group's priority (None: the group has none, the
        pod's own applies); the same object where nothing changes."""
        own = self.priority if self.own_priority is None else self.own_priority
        effective, kept = (own, None) if priority is None or priority == own else (priority, own)
        if effective == self.priority and kept == self.own_priority:
            return self
        return replace(self, priority=effective, own_priority=kept)

    def in_group(self, group: GroupKey | None, tree: GroupKey | None) -> PodInfo:
        """The pod in another PodGroup and tree unit (a Volcano sub-group's,
        or back in the group it names); the same object where nothing changes."""
        return self if (group, tree) == (self.group, self.tree) else replace(self, group=group, tree=tree)

    def with_tree(self, tree: GroupKey | None) -> PodInfo:
        """The pod in the tree unit `tree`; the same object where nothing changes."""
        return self if tree == self.tree else replace(self, tree=tree)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def group_name(self) -> str | None:
        """The name of the pod's PodGroup, for display (key by `group`)."""
        return self.group.name if self.group is not None else None

    @property
    def has_pod_affinity_terms(self) -> bool:
        """Any required or preferred pod affinity or anti-affinity term."""
        return bool(
            self.pod_affinity
            or self.pod_anti_affinity
            or self.pod_affinity_preferred
            or self.pod_anti_affinity_preferred
        )

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def bound(self) -> bool:
        return bool(self.node_name)

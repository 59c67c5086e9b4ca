"""Parsing Pods, Nodes and PodDisruptionBudgets from API bodies into records.

Parsing never raises on fields the scheduler does not use; a field it needs
but cannot read raises `ObjectError`, which the caller reports instead of
crashing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

from . import constants as C
from . import shape
from .records import (
    GroupKey,
    HostPort,
    NodeInfo,
    NodeSelectorTerm,
    ObjectError,
    PodAffinityTerm,
    PodClaim,
    PodDisruptionBudgetInfo,
    PodInfo,
    PreferredTerm,
    Taint,
    Toleration,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from .resources import pod_requests, resource_map
from .selectors import parse_label_selector
from .selectors import requirements as _requirements
from .shape import shape_error
from .sources import DEFAULT_SOURCES, GroupSource, pod_membership


def parse_node_selector_term(raw: Mapping[str, Any] | None) -> NodeSelectorTerm:
    raw = raw or {}
    return NodeSelectorTerm(_requirements(raw.get("matchExpressions")), _requirements(raw.get("matchFields")))


def _affinity_term(raw: Mapping[str, Any]) -> PodAffinityTerm:
    ns_selector = raw.get("namespaceSelector")
    return PodAffinityTerm(
        selector=parse_label_selector(raw.get("labelSelector")),
        topology_key=str(raw.get("topologyKey") or ""),
        namespaces=tuple(sorted(str(n) for n in raw.get("namespaces") or ())),
        namespace_selector=parse_label_selector(ns_selector) if ns_selector is not None else None,
        match_label_keys=tuple(str(k) for k in raw.get("matchLabelKeys") or ()),
        mismatch_label_keys=tuple(str(k) for k in raw.get("mismatchLabelKeys") or ()),
    )


def _affinity_terms(raw: Mapping[str, Any], field: str) -> tuple[PodAffinityTerm, ...]:
    return tuple(_affinity_term(t) for t in raw.get(f"{field}DuringSchedulingIgnoredDuringExecution") or ())


def _weighted_terms(raw: Mapping[str, Any]) -> tuple[WeightedPodAffinityTerm, ...]:
    return tuple(
        WeightedPodAffinityTerm(int(t.get("weight", 0)), _affinity_term(t.get("podAffinityTerm") or {}))
        for t in raw.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    )


def _spread(raw: Mapping[str, Any]) -> TopologySpreadConstraint:
    min_domains = raw.get("minDomains")
    return TopologySpreadConstraint(
        max_skew=int(raw.get("maxSkew") or 1),
        topology_key=str(raw.get("topologyKey") or ""),
        when_unsatisfiable=str(raw.get("whenUnsatisfiable") or "DoNotSchedule"),
        selector=parse_label_selector(raw.get("labelSelector")),
        min_domains=int(min_domains) if min_domains is not None else None,
        node_affinity_policy=str(raw.get("nodeAffinityPolicy") or "Honor"),
        node_taints_policy=str(raw.get("nodeTaintsPolicy") or "Ignore"),
        match_label_keys=tuple(str(k) for k in raw.get("matchLabelKeys") or ()),
    )


def _host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    ports = []
    # Upstream GetHostPorts: regular containers and sidecars (restartable init
    # containers); a classic init container's port is gone once it finishes.
    sidecars = [c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"]
    for c in list(spec.get("containers") or ()) + sidecars:
        for p in c.get("ports") or ():
            host_port = int(p.get("hostPort") or 0)
            if host_port > 0:
                ports.append(HostPort(host_port, str(p.get("protocol") or "TCP"), str(p.get("hostIP") or "0.0.0.0")))
    return tuple(ports)


def parse_pod(
    body: Mapping[str, Any],
    sources: Sequence[GroupSource] = DEFAULT_SOURCES,
    tree_of: Callable[[GroupKey], GroupKey | None] | None = None,
) -> PodInfo:
    """The pod's record; `sources`, in order, say which PodGroup it belongs
    to, and `tree_of` which tree unit that PodGroup waits in (the cache
    knows; made here, not by a copy of the record per pod event)."""
    try:
        return _parse_pod(body, sources, tree_of)
    except (AttributeError, TypeError) as exc:  # a field of the wrong type: say which
        raise ObjectError(shape_error(body, shape.POD) or f"unexpected structure: {exc}") from None


class _PodTerms(NamedTuple):
    """What the pod asks of the pods around it, and the host ports it takes."""

    pod_affinity: tuple[PodAffinityTerm, ...]
    pod_affinity_preferred: tuple[WeightedPodAffinityTerm, ...]
    pod_anti_affinity: tuple[PodAffinityTerm, ...]
    pod_anti_affinity_preferred: tuple[WeightedPodAffinityTerm, ...]
    topology_spread: tuple[TopologySpreadConstraint, ...]
    host_ports: tuple[HostPort, ...]

    @property
    def has_affinity(self) -> bool:
        return bool(
            self.pod_affinity
            or self.pod_affinity_preferred
            or self.pod_anti_affinity
            or self.pod_anti_affinity_preferred
        )


def _pod_terms(body: Mapping[str, Any], spec: Mapping[str, Any], affinity: Mapping[str, Any]) -> _PodTerms:
    pod_aff = affinity.get("podAffinity") or {}
    pod_anti = affinity.get("podAntiAffinity") or {}
    try:
        return _PodTerms(
            pod_affinity=_affinity_terms(pod_aff, "required"),
            pod_affinity_preferred=_weighted_terms(pod_aff),
            pod_anti_affinity=_affinity_terms(pod_anti, "required"),
            pod_anti_affinity_preferred=_weighted_terms(pod_anti),
            topology_spread=tuple(_spread(c) for c in spec.get("topologySpreadConstraints") or ()),
            host_ports=_host_ports(spec),
        )
    except (TypeError, ValueError, AttributeError) as exc:
        where = shape_error(body, shape.POD)
        raise ObjectError(where or f"spec.affinity / topologySpreadConstraints / ports: {exc}") from None


def _node_affinity(
    node_affinity: Mapping[str, Any],
) -> tuple[tuple[NodeSelectorTerm, ...] | None, tuple[PreferredTerm, ...]]:
    """(required terms, None where there are none; preferred terms)."""
    required_raw = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    required = None
    if required_raw is not None:
        required = tuple(parse_node_selector_term(t) for t in required_raw.get("nodeSelectorTerms") or ())
    preferred = tuple(
        PreferredTerm(int(p.get("weight", 0)), parse_node_selector_term(p.get("preference")))
        for p in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    )
    return required, preferred


def _tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    return tuple(
        Toleration(
            str(t.get("key") or ""),
            str(t.get("operator") or "Equal"),
            str(t.get("value") or ""),
            str(t.get("effect") or ""),
        )
        for t in spec.get("tolerations") or ()
    )


def _string_map(raw: Mapping[str, Any] | None) -> dict[str, str]:
    return {str(k): str(v) for k, v in (raw or {}).items()}


def _text(raw: Mapping[str, Any], field: str, default: str = "") -> str:
    """A string field, `default` where it is unset or empty (as the API server defaults it)."""
    return str(raw.get(field) or default)


def _unscheduled_reason(status: Mapping[str, Any]) -> str:
    """The reason of the pod's PodScheduled=False condition; "" without one."""
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return ""
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == C.POD_SCHEDULED and c.get("status") == "False":
            return str(c.get("reason") or "")
    return ""


def _priority(spec: Mapping[str, Any]) -> int:
    try:
        return int(spec.get("priority") or 0)
    except (TypeError, ValueError):
        raise ObjectError(f"spec.priority: not an integer: {spec.get('priority')!r}") from None


def _spec_key(
    requests: Mapping[str, int],
    node_selector: Mapping[str, str],
    required: tuple[NodeSelectorTerm, ...] | None,
    preferred: tuple[PreferredTerm, ...],
    tolerations: tuple[Toleration, ...],
    terms: _PodTerms,
    labels: Mapping[str, str],
    namespace: str,
    claims: tuple[PodClaim, ...],
) -> tuple[Any, ...]:
    """Everything scheduling reads from the pod. Not a cache signature (plugins
    sign pods themselves, `sign_pod`): the queue compares it to tell an update
    that can change where the pod fits from one that cannot."""
    return (
        tuple(sorted(requests.items())),
        tuple(sorted(node_selector.items())),
        required,
        preferred,
        tolerations,
        *terms,
        # Affinity, spread and matchLabelKeys can depend on the pod's own labels
        # (and affinity on its namespace).
        tuple(sorted(labels.items())) if terms.has_affinity or terms.topology_spread else (),
        namespace if terms.has_affinity else "",
        claims,
    )


def _parse_pod(
    body: Mapping[str, Any], sources: Sequence[GroupSource], tree_of: Callable[[GroupKey], GroupKey | None] | None
) -> PodInfo:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    problems: list[str] = []  # requests out of range: left out, and the pod is not scheduled
    requests, nz_cpu, nz_mem = pod_requests(spec, problems)
    affinity = spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") or {}
    terms = _pod_terms(body, spec, affinity)
    required, preferred = _node_affinity(node_affinity)
    tolerations = _tolerations(spec)
    node_selector = _string_map(spec.get("nodeSelector"))
    gates = tuple(str(g.get("name", "")) for g in spec.get("schedulingGates") or ())
    labels = _string_map(meta.get("labels"))
    membership = pod_membership(meta, spec, sources)
    group = membership.group if membership is not None else None
    if group is not None:
        # Default spreading selects the group's pods by this label (a pod
        # that joined through its Job or a spec field gets it here).
        key, value = group.member_label
        labels[key] = value
    priority = _priority(spec)
    claims = _pod_claims(spec, status)
    namespace = _text(meta, "namespace", "default")
    spec_key = _spec_key(requests, node_selector, required, preferred, tolerations, terms, labels, namespace, claims)
    problem = "; ".join(problems)
    if problem:  # an update that changes only the problem is judged again
        spec_key = (*spec_key, problem)
    if not meta.get("uid") or not meta.get("name"):
        raise ObjectError("metadata.uid and metadata.name are required")
    return PodInfo(
        uid=str(meta["uid"]),
        namespace=namespace,
        name=str(meta["name"]),
        scheduler_name=_text(spec, "schedulerName", "default-scheduler"),
        node_name=_text(spec, "nodeName"),
        phase=_text(status, "phase", "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        labels=labels,
        priority=priority,
        creation_timestamp=_text(meta, "creationTimestamp"),
        requests=requests,
        nonzero_cpu=nz_cpu,
        nonzero_memory=nz_mem,
        node_selector=node_selector,
        required_affinity=required,
        preferred_affinity=preferred,
        tolerations=tolerations,
        scheduling_gates=gates,
        pod_affinity=terms.pod_affinity,
        pod_affinity_preferred=terms.pod_affinity_preferred,
        pod_anti_affinity=terms.pod_anti_affinity,
        pod_anti_affinity_preferred=terms.pod_anti_affinity_preferred,
        topology_spread=terms.topology_spread,
        host_ports=terms.host_ports,
        resource_version=_text(meta, "resourceVersion"),
        spec_key=spec_key,
        preemption_policy=_text(spec, "preemptionPolicy", "PreemptLowerPriority"),
        start_time=_text(status, "startTime"),
        active_deadline_seconds=_active_deadline(spec),
        nominated_node_name=_text(status, "nominatedNodeName"),
        unscheduled_reason=_unscheduled_reason(status),
        resource_claims=claims,
        group=group,
        tree=tree_of(group) if group is not None and tree_of is not None else None,
        task=membership.task if membership is not None else "",
        group_size=membership.group_size if membership is not None else 0,
        owners=_owner_names(meta) if group is not None else (),
        deletion_cost=_deletion_cost(meta) if group is not None else 0,
        problem=problem,
    )


DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def _deletion_cost(meta: Mapping[str, Any]) -> int:
    """The pod-deletion-cost annotation (an int32, as the ReplicaSet
    controller reads it); 0 where absent or not a number."""
    raw = (meta.get("annotations") or {}).get(DELETION_COST)
    try:
        return max(min(int(str(raw)), 2**31 - 1), -(2**31)) if raw is not None else 0
    except ValueError:
        return 0


def _owner_names(meta: Mapping[str, Any]) -> tuple[str, ...]:
    refs = meta.get("ownerReferences")
    if not isinstance(refs, list):
        return ()
    return tuple(str(r.get("name") or "") for r in refs if isinstance(r, Mapping))


def _pod_claims(spec: Mapping[str, Any], status: Mapping[str, Any]) -> tuple[PodClaim, ...]:
    generated = {
        str(s.get("name", "")): str(s.get("resourceClaimName") or "") for s in status.get("resourceClaimStatuses") or ()
    }
    claims = []
    for i, c in enumerate(spec.get("resourceClaims") or ()):
        if not isinstance(c, Mapping) or not c.get("name"):
            raise ObjectError(f"spec.resourceClaims[{i}].name: required")
        name = str(c["name"])
        if c.get("resourceClaimName"):
            claims.append(PodClaim(name, str(c["resourceClaimName"])))
        elif c.get("resourceClaimTemplateName"):
            claims.append(PodClaim(name, generated.get(name, ""), str(c["resourceClaimTemplateName"])))
        else:
            raise ObjectError(f"spec.resourceClaims[{i}]: resourceClaimName or resourceClaimTemplateName is required")
    return tuple(claims)


def parse_node(body: Mapping[str, Any]) -> NodeInfo:
    try:
        return _parse_node(body)
    except (AttributeError, TypeError) as exc:  # a field of the wrong type: say which
        raise ObjectError(shape_error(body, shape.NODE) or f"unexpected structure: {exc}") from None


def _parse_node(body: Mapping[str, Any]) -> NodeInfo:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    if not meta.get("name"):
        raise ObjectError("metadata.name is required")
    # Allocatable defaults to capacity, as the kubelet reports both.
    raw_alloc = status.get("allocatable") or status.get("capacity") or {}
    where = "status.allocatable" if status.get("allocatable") or not status.get("capacity") else "status.capacity"
    # A field out of range is taken as absent (0 of it), not as "as much as
    # an int64 holds": nothing that asks for it is placed on the node, so
    # nothing is overcommitted on a guess, and no sum over nodes can wrap;
    # the node still counts for spread and affinity, its pods stay counted,
    # and the rest of it is used. The node says which field (a Warning Event).
    problems: list[str] = []
    allocatable = resource_map(raw_alloc, where, problems)
    taints = tuple(
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in spec.get("taints") or ()
    )
    return NodeInfo(
        name=str(meta["name"]),
        uid=str(meta.get("uid") or ""),
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        allocatable=allocatable,
        taints=taints,
        unschedulable=bool(spec.get("unschedulable")),
        problem="; ".join(problems),
    )


def parse_pdb(body: Mapping[str, Any]) -> PodDisruptionBudgetInfo:
    """A policy/v1 PodDisruptionBudget. Only its status says how many pods may
    go now (the disruption controller computes it): no status yet means none."""
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    if not meta.get("uid") or not meta.get("name"):
        raise ObjectError("metadata.uid and metadata.name are required")
    try:
        selector = parse_label_selector(spec.get("selector"))
        allowed = int(status.get("disruptionsAllowed") or 0)
        disrupted = frozenset(str(name) for name in status.get("disruptedPods") or {})
    except (TypeError, ValueError, AttributeError) as exc:
        raise ObjectError(f"spec.selector / status: {exc}") from None
    return PodDisruptionBudgetInfo(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta["name"]),
        uid=str(meta["uid"]),
        selector=selector,
        disruptions_allowed=allowed,
        disrupted_pods=disrupted,
    )


def _active_deadline(spec: Mapping[str, Any]) -> int | None:
    """spec.activeDeadlineSeconds, None if unset; a value that is not a
    positive integer counts as unset (the API server refuses such pods)."""
    value = spec.get("activeDeadlineSeconds")
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return None
    return value

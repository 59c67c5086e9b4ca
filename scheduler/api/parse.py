"""Parsing Pods, Nodes and PodDisruptionBudgets from API bodies into records.

Parsing never raises on fields the scheduler does not use; a field it needs
but cannot read raises `ObjectError`, which the caller reports instead of
crashing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import shape
from .records import (
    HostPort,
    LabelSelector,
    NodeInfo,
    NodeSelectorTerm,
    ObjectError,
    PodAffinityTerm,
    PodClaim,
    PodDisruptionBudgetInfo,
    PodInfo,
    PreferredTerm,
    Requirement,
    Taint,
    Toleration,
    TopologySpreadConstraint,
    WeightedPodAffinityTerm,
)
from .resources import pod_requests, resource_map
from .shape import shape_error
from .sources import DEFAULT_SOURCES, GroupSource, pod_membership


def _requirements(raw: list[Mapping[str, Any]] | None) -> tuple[Requirement, ...]:
    return tuple(
        Requirement(str(r.get("key", "")), str(r.get("operator", "")), tuple(str(v) for v in r.get("values") or ()))
        for r in raw or ()
    )


def parse_node_selector_term(raw: Mapping[str, Any] | None) -> NodeSelectorTerm:
    raw = raw or {}
    return NodeSelectorTerm(_requirements(raw.get("matchExpressions")), _requirements(raw.get("matchFields")))


def parse_label_selector(raw: Mapping[str, Any] | None) -> LabelSelector | None:
    if raw is None:
        return None
    return LabelSelector(
        tuple(sorted((str(k), str(v)) for k, v in (raw.get("matchLabels") or {}).items())),
        _requirements(raw.get("matchExpressions")),
    )


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


def parse_pod(body: Mapping[str, Any], sources: Sequence[GroupSource] = DEFAULT_SOURCES) -> PodInfo:
    """The pod's record; `sources`, in order, say which PodGroup it belongs to."""
    try:
        return _parse_pod(body, sources)
    except (AttributeError, TypeError) as exc:  # a field of the wrong type: say which
        raise ObjectError(shape_error(body, shape.POD) or f"unexpected structure: {exc}") from None


def _parse_pod(body: Mapping[str, Any], sources: Sequence[GroupSource]) -> PodInfo:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    requests, nz_cpu, nz_mem = pod_requests(spec)
    affinity = spec.get("affinity") or {}
    node_affinity = affinity.get("nodeAffinity") or {}
    pod_aff = affinity.get("podAffinity") or {}
    pod_anti = affinity.get("podAntiAffinity") or {}
    try:
        pod_affinity = _affinity_terms(pod_aff, "required")
        pod_affinity_preferred = _weighted_terms(pod_aff)
        pod_anti_affinity = _affinity_terms(pod_anti, "required")
        pod_anti_affinity_preferred = _weighted_terms(pod_anti)
        topology_spread = tuple(_spread(c) for c in spec.get("topologySpreadConstraints") or ())
        host_ports = _host_ports(spec)
    except (TypeError, ValueError, AttributeError) as exc:
        where = shape_error(body, shape.POD)
        raise ObjectError(where or f"spec.affinity / topologySpreadConstraints / ports: {exc}") from None
    required_raw = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    required = None
    if required_raw is not None:
        required = tuple(parse_node_selector_term(t) for t in required_raw.get("nodeSelectorTerms") or ())
    preferred = tuple(
        PreferredTerm(int(p.get("weight", 0)), parse_node_selector_term(p.get("preference")))
        for p in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    )
    tolerations = tuple(
        Toleration(
            str(t.get("key") or ""),
            str(t.get("operator") or "Equal"),
            str(t.get("value") or ""),
            str(t.get("effect") or ""),
        )
        for t in spec.get("tolerations") or ()
    )
    node_selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    gates = tuple(str(g.get("name", "")) for g in spec.get("schedulingGates") or ())
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    membership = pod_membership(meta, spec, sources)
    group = membership.group if membership is not None else None
    if group is not None:
        # Default spreading selects the group's pods by this label (a pod
        # that joined through its Job or a spec field gets it here).
        key, value = group.member_label
        labels[key] = value
    try:
        priority = int(spec.get("priority") or 0)
    except (TypeError, ValueError):
        raise ObjectError(f"spec.priority: not an integer: {spec.get('priority')!r}") from None
    has_affinity = bool(pod_affinity or pod_affinity_preferred or pod_anti_affinity or pod_anti_affinity_preferred)
    # Everything scheduling reads from the pod. Not a cache signature (plugins
    # sign pods themselves, `sign_pod`): the queue compares it to tell an
    # update that can change where the pod fits from one that cannot.
    claims = _pod_claims(spec, status)
    spec_key = (
        tuple(sorted(requests.items())),
        tuple(sorted(node_selector.items())),
        required,
        preferred,
        tolerations,
        pod_affinity,
        pod_affinity_preferred,
        pod_anti_affinity,
        pod_anti_affinity_preferred,
        topology_spread,
        host_ports,
        # Affinity, spread and matchLabelKeys can depend on the pod's own labels
        # (and affinity on its namespace).
        tuple(sorted(labels.items())) if has_affinity or topology_spread else (),
        str(meta.get("namespace") or "default") if has_affinity else "",
        claims,
    )
    if not meta.get("uid") or not meta.get("name"):
        raise ObjectError("metadata.uid and metadata.name are required")
    return PodInfo(
        uid=str(meta["uid"]),
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta["name"]),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or "Pending"),
        deleting=bool(meta.get("deletionTimestamp")),
        labels=labels,
        priority=priority,
        creation_timestamp=str(meta.get("creationTimestamp") or ""),
        requests=requests,
        nonzero_cpu=nz_cpu,
        nonzero_memory=nz_mem,
        node_selector=node_selector,
        required_affinity=required,
        preferred_affinity=preferred,
        tolerations=tolerations,
        scheduling_gates=gates,
        pod_affinity=pod_affinity,
        pod_affinity_preferred=pod_affinity_preferred,
        pod_anti_affinity=pod_anti_affinity,
        pod_anti_affinity_preferred=pod_anti_affinity_preferred,
        topology_spread=topology_spread,
        host_ports=host_ports,
        resource_version=str(meta.get("resourceVersion") or ""),
        spec_key=spec_key,
        preemption_policy=str(spec.get("preemptionPolicy") or "PreemptLowerPriority"),
        start_time=str(status.get("startTime") or ""),
        active_deadline_seconds=_active_deadline(spec),
        nominated_node_name=str(status.get("nominatedNodeName") or ""),
        resource_claims=claims,
        group=group,
        task=membership.task if membership is not None else "",
        group_size=membership.group_size if membership is not None else 0,
        owners=_owner_names(meta) if group is not None else (),
    )


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
    allocatable = resource_map(raw_alloc, "status.allocatable")
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

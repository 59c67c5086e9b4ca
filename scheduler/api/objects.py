"""The few fields of Pods and Nodes the scheduler uses, parsed from API bodies.

The cache keeps one small immutable record per object instead of the whole
body (DESIGN.md: "keep the per-pod record small"). Parsing never raises on
fields we do not use; a field we need but cannot read raises `ObjectError`,
which the caller reports instead of crashing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from .constants import POD_GROUP_LABEL
from .quantity import QuantityError, to_units

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

# Requests assumed for scoring when a container asks for nothing, as upstream
# (pkg/scheduler/util: DefaultMilliCPURequest, DefaultMemoryRequest).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024


_INT = re.compile(r"[+-]?[0-9]+")


def _parse_int64(text: str) -> int | None:
    """Go strconv.ParseInt(text, 10, 64): optional sign, ASCII digits, int64 range."""
    if not _INT.fullmatch(text):
        return None
    value = int(text)
    return value if -(2**63) <= value < 2**63 else None


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
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        if self.operator in ("Equal", ""):
            return self.value == taint.value
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
class NodeInfo:
    name: str
    uid: str
    labels: Mapping[str, str]
    allocatable: Mapping[str, int]
    taints: tuple[Taint, ...]
    unschedulable: bool


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
    spec_key: tuple[Any, ...] = field(default=(), compare=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def group_name(self) -> str | None:
        return self.labels.get(POD_GROUP_LABEL) or None

    @property
    def has_pod_affinity_terms(self) -> bool:
        """Any required or preferred pod affinity or anti-affinity term."""
        return bool(self.pod_affinity or self.pod_anti_affinity or self.pod_affinity_preferred or self.pod_anti_affinity_preferred)

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def bound(self) -> bool:
        return bool(self.node_name)


# ---------------------------------------------------------------- parsing


def _resource_map(raw: Mapping[str, Any] | None, where: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for name, value in (raw or {}).items():
        try:
            out[name] = to_units(name, value)
        except QuantityError as exc:
            raise ObjectError(f"{where}.{name}: {exc}") from None
    return out


def _add(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        into[k] = into.get(k, 0) + v


def _max(into: dict[str, int], other: Mapping[str, int]) -> None:
    for k, v in other.items():
        if v > into.get(k, 0):
            into[k] = v


def _nz(req: Mapping[str, int], resource: str) -> int:
    """A container's request for scoring: a missing (not a zero) request counts the default."""
    if resource in req:
        return req[resource]
    return DEFAULT_MILLI_CPU_REQUEST if resource == CPU else DEFAULT_MEMORY_REQUEST


def pod_requests(spec: Mapping[str, Any]) -> tuple[dict[str, int], int, int]:
    """Effective requests of a pod as upstream `resource.PodRequests`.

    Returns (requests, nonzero_cpu, nonzero_memory). Regular containers and
    restartable init containers (sidecars) add up; each classic init container
    runs alone with the sidecars started before it, so the pod needs the max
    of that and the steady state. Pod overhead is added. Pod-level
    `spec.resources.requests` replaces the container sum for the resources it
    names (PodLevelResources).
    """
    total: dict[str, int] = {}
    nz_cpu = nz_mem = 0
    for i, c in enumerate(spec.get("containers") or []):
        req = _resource_map((c.get("resources") or {}).get("requests"), f"spec.containers[{i}].resources.requests")
        _add(total, req)
        nz_cpu += _nz(req, CPU)
        nz_mem += _nz(req, MEMORY)

    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    nz_init_cpu = nz_init_mem = 0
    nz_side_cpu = nz_side_mem = 0
    for i, c in enumerate(spec.get("initContainers") or []):
        req = _resource_map((c.get("resources") or {}).get("requests"), f"spec.initContainers[{i}].resources.requests")
        if c.get("restartPolicy") == "Always":
            _add(sidecars, req)
            nz_side_cpu += _nz(req, CPU)
            nz_side_mem += _nz(req, MEMORY)
            # A sidecar is itself running alongside the sidecars before it.
            _max(init_peak, sidecars)
        else:
            running = dict(sidecars)
            _add(running, req)
            _max(init_peak, running)
            nz_init_cpu = max(nz_init_cpu, nz_side_cpu + (_nz(req, CPU)))
            nz_init_mem = max(nz_init_mem, nz_side_mem + (_nz(req, MEMORY)))
    _add(total, sidecars)
    _max(total, init_peak)
    nz_cpu = max(nz_cpu + nz_side_cpu, nz_init_cpu)
    nz_mem = max(nz_mem + nz_side_mem, nz_init_mem)

    pod_level = _resource_map((spec.get("resources") or {}).get("requests"), "spec.resources.requests")
    for k, v in pod_level.items():
        if k in (CPU, MEMORY) or k.startswith("hugepages-"):
            total[k] = v
    if CPU in pod_level:
        nz_cpu = pod_level[CPU] or DEFAULT_MILLI_CPU_REQUEST
    if MEMORY in pod_level:
        nz_mem = pod_level[MEMORY] or DEFAULT_MEMORY_REQUEST

    overhead = _resource_map(spec.get("overhead"), "spec.overhead")
    _add(total, overhead)
    nz_cpu += overhead.get(CPU, 0)
    nz_mem += overhead.get(MEMORY, 0)
    return {k: v for k, v in total.items() if v}, nz_cpu, nz_mem


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


def parse_pod(body: Mapping[str, Any]) -> PodInfo:
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
        raise ObjectError(f"spec.affinity / topologySpreadConstraints / ports: {exc}") from None
    required_raw = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    required = None
    if required_raw is not None:
        required = tuple(parse_node_selector_term(t) for t in required_raw.get("nodeSelectorTerms") or ())
    preferred = tuple(
        PreferredTerm(int(p.get("weight", 0)), parse_node_selector_term(p.get("preference")))
        for p in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    )
    tolerations = tuple(
        Toleration(str(t.get("key") or ""), str(t.get("operator") or "Equal"), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in spec.get("tolerations") or ()
    )
    node_selector = {str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()}
    gates = tuple(str(g.get("name", "")) for g in spec.get("schedulingGates") or ())
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    try:
        priority = int(spec.get("priority") or 0)
    except (TypeError, ValueError):
        raise ObjectError(f"spec.priority: not an integer: {spec.get('priority')!r}") from None
    has_affinity = bool(pod_affinity or pod_affinity_preferred or pod_anti_affinity or pod_anti_affinity_preferred)
    # Everything a Filter or Score plugin reads from the pod: pods with equal
    # keys get the same answer from the static filters (shared filter pass).
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
    )


def parse_node(body: Mapping[str, Any]) -> NodeInfo:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    if not meta.get("name"):
        raise ObjectError("metadata.name is required")
    # Allocatable defaults to capacity, as the kubelet reports both.
    raw_alloc = status.get("allocatable") or status.get("capacity") or {}
    allocatable = _resource_map(raw_alloc, "status.allocatable")
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

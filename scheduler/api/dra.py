"""Records of the Dynamic Resource Allocation API (`resource.k8s.io/v1`):
DeviceClasses, ResourceSlices and ResourceClaims, parsed from API bodies into
what the allocator needs, and the allocation result written back.

Only the structured-parameters model is understood (the one kube-scheduler's
DynamicResources plugin allocates). A field troupe does not interpret is
kept out of these records; a field it needs and cannot read raises
ObjectError naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from .quantity import QuantityError, parse_quantity
from .records import ObjectError, tolerates

GROUP = "resource.k8s.io"
VERSION = "v1"
API_VERSION = f"{GROUP}/{VERSION}"
# kube-scheduler's finalizer on a claim it allocated: the claim is not deleted
# while its allocation (and the devices) are still in use.
DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"

EXACT_COUNT = "ExactCount"
ALL = "All"


@dataclass(frozen=True, slots=True)
class Version:
    """A `version` device attribute (semantic version text, as published)."""

    text: str


AttributeValue = bool | int | str | Version


# A device taint's effects that keep a device from being allocated (upstream
# taintPreventsAllocation); None and any effect not known yet do not.
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    """A taint on a device (`devices[].taints[]` of its slice, or a
    DeviceTaintRule's), as `resource.k8s.io/v1` has it."""

    key: str
    value: str = ""
    effect: str = ""

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class DeviceToleration:
    """A request's `tolerations[]` entry (upstream resourceclaim.ToleratesTaint)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None

    def tolerates(self, taint: DeviceTaint) -> bool:
        return tolerates(self, taint)

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"operator": self.operator}
        for field_name, value in (("key", self.key), ("value", self.value), ("effect", self.effect)):
            if value:
                out[field_name] = value
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice. `attributes` and `capacity` are keyed
    by fully qualified name (`domain/id`; an unqualified name gets the
    driver's name as domain, as upstream does). `taints`: its slice's, and
    those DeviceTaintRules put on it (cluster/dra.py)."""

    driver: str
    pool: str
    name: str
    attributes: Mapping[str, AttributeValue]
    capacity: Mapping[str, Decimal]
    taints: tuple[DeviceTaint, ...] = ()
    # consumesCounters: per counter set of its pool, what it takes of each
    # counter while allocated (a partition of a GPU: its share of memory).
    consumes: tuple[tuple[str, tuple[tuple[str, Decimal], ...]], ...] = ()

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """One term of a v1 NodeSelector: every expression must match."""

    match_expressions: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    match_fields: tuple[tuple[str, str, tuple[str, ...]], ...] = ()

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        for key, op, values in self.match_expressions:
            if not _requirement(labels.get(key), key in labels, op, values):
                return False
        for key, op, values in self.match_fields:
            got = node_name if key == "metadata.name" else None
            if not _requirement(got, got is not None, op, values):
                return False
        return True


def _requirement(value: str | None, present: bool, op: str, values: tuple[str, ...]) -> bool:
    if op == "In":
        return present and value in values
    if op == "NotIn":
        return not present or value not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and value is not None and len(values) == 1:
        try:
            a, b = int(value), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """A v1 NodeSelector: any term matches."""

    terms: tuple[NodeSelectorTerm, ...]

    def matches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        return any(t.matches(node_name, labels) for t in self.terms)

    def to_api(self) -> dict[str, Any]:
        def reqs(items: tuple[tuple[str, str, tuple[str, ...]], ...]) -> list[dict[str, Any]]:
            return [{"key": k, "operator": op, **({"values": list(v)} if v else {})} for k, op, v in items]

        terms = []
        for t in self.terms:
            term: dict[str, Any] = {}
            if t.match_expressions:
                term["matchExpressions"] = reqs(t.match_expressions)
            if t.match_fields:
                term["matchFields"] = reqs(t.match_fields)
            terms.append(term)
        return {"nodeSelectorTerms": terms}

    def node_names(self) -> set[str] | None:
        """The nodes a selector of only `metadata.name In` fields names; None
        for any other selector."""
        names: set[str] = set()
        for t in self.terms:
            if t.match_expressions or len(t.match_fields) != 1:
                return None
            key, op, values = t.match_fields[0]
            if key != "metadata.name" or op != "In":
                return None
            names.update(values)
        return names

    @staticmethod
    def for_node(node_name: str) -> NodeSelector:
        return NodeSelector((NodeSelectorTerm(match_fields=(("metadata.name", "In", (node_name,)),)),))


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    name: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str = ""  # devices local to this node
    node_selector: NodeSelector | None = None  # devices reachable from the nodes it selects
    all_nodes: bool = False
    devices: tuple[Device, ...] = ()
    # sharedCounters (a slice has devices or counter sets): counter set -> counter -> value.
    shared_counters: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)

    def reaches(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if self.node_name:
            return self.node_name == node_name
        if self.node_selector is not None:
            return self.node_selector.matches(node_name, labels)
        return self.all_nodes


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    """An opaque driver configuration (`config[].opaque`), passed through
    to the allocation result; `requests` empty means every request."""

    driver: str
    parameters: Any
    requests: tuple[str, ...] = ()

    def to_api(self, source: str) -> dict[str, Any]:
        out: dict[str, Any] = {"source": source, "opaque": {"driver": self.driver, "parameters": self.parameters}}
        if self.requests:
            out["requests"] = list(self.requests)
        return out


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()  # CEL expressions
    config: tuple[DeviceConfig, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One `exactly` request, or one subrequest of a `firstAvailable` list
    (then `name` is `request/subrequest`)."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    mode: str = EXACT_COUNT
    count: int = 1
    tolerations: tuple[DeviceToleration, ...] = ()

    def untolerated(self, device: Device) -> DeviceTaint | None:
        """A taint of `device` that keeps it from this request (upstream
        taintPreventsAllocation), None where none does."""
        for taint in device.taints:
            if taint.effect in BLOCKING_EFFECTS and not any(t.tolerates(taint) for t in self.tolerations):
                return taint
        return None


@dataclass(frozen=True, slots=True)
class RequestSlot:
    """A request of a claim: exactly one request, or alternatives tried in
    order (`firstAvailable`)."""

    name: str
    alternatives: tuple[DeviceRequest, ...]


@dataclass(frozen=True, slots=True)
class MatchConstraint:
    """`constraints[].matchAttribute`: every device allocated for `requests`
    (empty: all of the claim's) has this attribute, with one value."""

    attribute: str
    requests: tuple[str, ...] = ()

    def applies_to(self, request: str) -> bool:
        top = request.split("/", 1)[0]
        return not self.requests or request in self.requests or top in self.requests


@dataclass(frozen=True, slots=True)
class AllocationResult:
    """One device given to one request (`status.allocation.devices.results[]`)."""

    request: str
    driver: str
    pool: str
    device: str
    # A copy of the request's tolerations when the device was allocated (as
    # upstream writes it: what the eviction controller reads for NoExecute).
    tolerations: tuple[DeviceToleration, ...] = ()

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"request": self.request, "driver": self.driver, "pool": self.pool, "device": self.device}
        if self.tolerations:
            out["tolerations"] = [t.to_api() for t in self.tolerations]
        return out


@dataclass(frozen=True, slots=True)
class Allocation:
    results: tuple[AllocationResult, ...]
    config: tuple[dict[str, Any], ...] = ()
    node_selector: NodeSelector | None = None

    def devices(self) -> set[tuple[str, str, str]]:
        return {(r.driver, r.pool, r.device) for r in self.results}

    def to_api(self) -> dict[str, Any]:
        out: dict[str, Any] = {"devices": {"results": [r.to_api() for r in self.results]}}
        if self.config:
            out["devices"]["config"] = list(self.config)
        if self.node_selector is not None:
            out["nodeSelector"] = self.node_selector.to_api()
        return out


@dataclass(frozen=True, slots=True)
class ConsumerRef:
    """A `status.reservedFor` entry."""

    resource: str  # "pods" or "podgroups"
    name: str
    uid: str
    api_group: str = ""

    def to_api(self) -> dict[str, Any]:
        out = {"resource": self.resource, "name": self.name, "uid": self.uid}
        if self.api_group:
            out["apiGroup"] = self.api_group
        return out


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str
    resource_version: str
    requests: tuple[RequestSlot, ...] = ()
    constraints: tuple[MatchConstraint, ...] = ()
    config: tuple[DeviceConfig, ...] = ()
    allocation: Allocation | None = None
    reserved_for: tuple[ConsumerRef, ...] = ()
    deleting: bool = False
    finalizers: tuple[str, ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)
    owner_uids: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


# ------------------------------------------------------------------ parsing


def _str(raw: Mapping[str, Any], key: str, where: str, required: bool = True) -> str:
    value = raw.get(key)
    if value is None:
        if required:
            raise ObjectError(f"{where}.{key}: required")
        return ""
    if not isinstance(value, str):
        raise ObjectError(f"{where}.{key}: not a string")
    return value


def _list(raw: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = raw.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ObjectError(f"{where}.{key}: not a list")
    return value


def group_claim_name(group: str, entry: str) -> str:
    """The ResourceClaim troupe makes for a PodGroup's `resourceClaimTemplateName`
    entry: deterministic, so a retried create finds the one it made."""
    return f"{group}-{entry}"[:253]


def qualified(name: str, driver: str) -> str:
    """`domain/id`; an unqualified attribute or capacity name belongs to the driver's domain."""
    return name if "/" in name else f"{driver}/{name}"


def _attribute(raw: Any, where: str) -> AttributeValue:
    if not isinstance(raw, Mapping) or len(raw) != 1:
        raise ObjectError(f"{where}: exactly one of int, bool, string, version")
    ((kind, value),) = raw.items()
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind == "bool" and isinstance(value, bool):
        return value
    if kind == "string" and isinstance(value, str):
        return value
    if kind == "version" and isinstance(value, str):
        return Version(value)
    raise ObjectError(f"{where}: {kind!r} with a value of type {type(value).__name__}")


def _requirements(term: Mapping[str, Any], kind: str, where: str) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    out = []
    for j, r in enumerate(_list(term, kind, where)):
        w = f"{where}.{kind}[{j}]"
        out.append((_str(r, "key", w), _str(r, "operator", w), tuple(str(v) for v in _list(r, "values", w))))
    return tuple(out)


def _selector_terms(raw: Any, where: str) -> NodeSelector:
    if not isinstance(raw, Mapping):
        raise ObjectError(f"{where}: not an object")
    terms = []
    for i, t in enumerate(_list(raw, "nodeSelectorTerms", where)):
        w = f"{where}.nodeSelectorTerms[{i}]"
        terms.append(NodeSelectorTerm(_requirements(t, "matchExpressions", w), _requirements(t, "matchFields", w)))
    return NodeSelector(tuple(terms))


def parse_resource_slice(body: Mapping[str, Any]) -> ResourceSlice:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    where = "spec"
    driver = _str(spec, "driver", where)
    pool = spec.get("pool") or {}
    pool_name = _str(pool, "name", "spec.pool")
    try:
        generation = int(pool.get("generation", 0))
        slice_count = int(pool.get("resourceSliceCount", 1))
    except (TypeError, ValueError):
        raise ObjectError("spec.pool.generation/resourceSliceCount: not integers") from None
    devices = []
    for i, d in enumerate(_list(spec, "devices", where)):
        w = f"spec.devices[{i}]"
        attributes = {
            qualified(k, driver): _attribute(v, f"{w}.attributes[{k}]") for k, v in (d.get("attributes") or {}).items()
        }
        capacity: dict[str, Decimal] = {}
        for k, v in (d.get("capacity") or {}).items():
            value = v.get("value") if isinstance(v, Mapping) else None
            try:
                if not isinstance(value, (str, int, float)):
                    raise QuantityError(f"{value!r}")
                capacity[qualified(k, driver)] = parse_quantity(value)
            except QuantityError:
                raise ObjectError(f"{w}.capacity[{k}].value: not a quantity") from None
        taints = tuple(_taint(t, f"{w}.taints[{j}]") for j, t in enumerate(_list(d, "taints", w)))
        consumes = tuple(
            (
                _str(c, "counterSet", f"{w}.consumesCounters[{j}]"),
                tuple(sorted(_counters(c, f"{w}.consumesCounters[{j}]").items())),
            )
            for j, c in enumerate(_list(d, "consumesCounters", w))
        )
        devices.append(Device(driver, pool_name, _str(d, "name", w), attributes, capacity, taints, consumes))
    shared: dict[str, dict[str, Decimal]] = {}
    for j, c in enumerate(_list(spec, "sharedCounters", where)):
        w = f"spec.sharedCounters[{j}]"
        shared[_str(c, "name", w)] = _counters(c, w)
    selector = spec.get("nodeSelector")
    return ResourceSlice(
        name=str(meta.get("name", "")),
        driver=driver,
        pool=pool_name,
        generation=generation,
        slice_count=slice_count,
        node_name=_str(spec, "nodeName", where, required=False),
        node_selector=_selector_terms(selector, "spec.nodeSelector") if selector else None,
        all_nodes=bool(spec.get("allNodes")),
        devices=tuple(devices),
        shared_counters=shared,
    )


def _counters(raw: Mapping[str, Any], where: str) -> dict[str, Decimal]:
    """A counter set's or a consumption's `counters`: name -> quantity."""
    out: dict[str, Decimal] = {}
    counters = raw.get("counters") or {}
    if not isinstance(counters, Mapping):
        raise ObjectError(f"{where}.counters: not a map")
    for name, c in counters.items():
        value = c.get("value") if isinstance(c, Mapping) else None
        try:
            if not isinstance(value, (str, int, float)):
                raise QuantityError(f"{value!r}")
            out[str(name)] = parse_quantity(value)
        except QuantityError:
            raise ObjectError(f"{where}.counters[{name}].value: not a quantity") from None
    return out


def _taint(raw: Any, where: str) -> DeviceTaint:
    if not isinstance(raw, Mapping):
        raise ObjectError(f"{where}: not an object")
    return DeviceTaint(_str(raw, "key", where), str(raw.get("value") or ""), str(raw.get("effect") or ""))


def _tolerations(raw: Mapping[str, Any], where: str) -> tuple[DeviceToleration, ...]:
    out = []
    for i, t in enumerate(_list(raw, "tolerations", where)):
        w = f"{where}.tolerations[{i}]"
        if not isinstance(t, Mapping):
            raise ObjectError(f"{w}: not an object")
        seconds = t.get("tolerationSeconds")
        if seconds is not None and not isinstance(seconds, int):
            raise ObjectError(f"{w}.tolerationSeconds: not an integer")
        out.append(
            DeviceToleration(
                str(t.get("key") or ""),
                str(t.get("operator") or "Equal"),
                str(t.get("value") or ""),
                str(t.get("effect") or ""),
                seconds,
            )
        )
    return tuple(out)


@dataclass(frozen=True, slots=True)
class DeviceTaintRule:
    """A DeviceTaintRule (`resource.k8s.io/v1`, on by default in 1.37): its
    taint on every device its selector picks. No selector picks none; an
    empty one every device; `driver`, `pool`, `device` narrow it (all must
    match), as upstream's ResourceSlice tracker applies them."""

    name: str
    taint: DeviceTaint
    selects: bool
    driver: str | None = None
    pool: str | None = None
    device: str | None = None

    def applies_to(self, device: Device) -> bool:
        return (
            self.selects
            and (self.driver is None or self.driver == device.driver)
            and (self.pool is None or self.pool == device.pool)
            and (self.device is None or self.device == device.name)
        )


def parse_device_taint_rule(body: Mapping[str, Any]) -> DeviceTaintRule:
    spec = body.get("spec") or {}
    selector = spec.get("deviceSelector")
    if selector is not None and not isinstance(selector, Mapping):
        raise ObjectError("spec.deviceSelector: not an object")
    selector = selector if isinstance(selector, Mapping) else {}

    def part(key: str) -> str | None:
        value = selector.get(key)
        return None if value is None else str(value)

    return DeviceTaintRule(
        name=str((body.get("metadata") or {}).get("name", "")),
        taint=_taint(spec.get("taint"), "spec.taint"),
        selects=spec.get("deviceSelector") is not None,
        driver=part("driver"),
        pool=part("pool"),
        device=part("device"),
    )


def _selectors(raw: Mapping[str, Any], where: str) -> tuple[str, ...]:
    out = []
    for i, s in enumerate(_list(raw, "selectors", where)):
        out.append(_str(s.get("cel") or {}, "expression", f"{where}.selectors[{i}].cel"))
    return tuple(out)


def _configs(raw: Mapping[str, Any], where: str) -> tuple[DeviceConfig, ...]:
    out = []
    for i, c in enumerate(_list(raw, "config", where)):
        opaque = c.get("opaque")
        if not opaque:
            continue
        out.append(
            DeviceConfig(
                _str(opaque, "driver", f"{where}.config[{i}].opaque"),
                opaque.get("parameters"),
                tuple(str(r) for r in _list(c, "requests", f"{where}.config[{i}]")),
            )
        )
    return tuple(out)


def parse_device_class(body: Mapping[str, Any]) -> DeviceClass:
    spec = body.get("spec") or {}
    return DeviceClass(
        name=str((body.get("metadata") or {}).get("name", "")),
        selectors=_selectors(spec, "spec"),
        config=_configs(spec, "spec"),
    )


def _exact(raw: Mapping[str, Any], name: str, where: str) -> DeviceRequest:
    mode = str(raw.get("allocationMode") or EXACT_COUNT)
    if mode not in (EXACT_COUNT, ALL):
        raise ObjectError(f"{where}.allocationMode: {mode!r} is not ExactCount or All")
    count = raw.get("count", 1)
    if mode == EXACT_COUNT and (not isinstance(count, int) or count < 1):
        raise ObjectError(f"{where}.count: must be a positive integer")
    return DeviceRequest(
        name=name,
        device_class=_str(raw, "deviceClassName", where),
        selectors=_selectors(raw, where),
        mode=mode,
        count=int(count) if mode == EXACT_COUNT else 0,
        tolerations=_tolerations(raw, where),
    )


def parse_allocation(raw: Mapping[str, Any] | None) -> Allocation | None:
    if not raw:
        return None
    devices = raw.get("devices") or {}
    results = tuple(
        AllocationResult(
            str(r.get("request", "")),
            str(r.get("driver", "")),
            str(r.get("pool", "")),
            str(r.get("device", "")),
            _tolerations(r, "status.allocation.devices.results[]"),
        )
        for r in devices.get("results") or []
    )
    selector = raw.get("nodeSelector")
    return Allocation(
        results,
        tuple(devices.get("config") or []),
        _selector_terms(selector, "status.allocation.nodeSelector") if selector else None,
    )


def parse_resource_claim(body: Mapping[str, Any]) -> ResourceClaim:
    meta = body.get("metadata") or {}
    spec = body.get("spec") or {}
    status = body.get("status") or {}
    devices = spec.get("devices") or {}
    slots = []
    for i, r in enumerate(_list(devices, "requests", "spec.devices")):
        where = f"spec.devices.requests[{i}]"
        name = _str(r, "name", where)
        if r.get("exactly"):
            slots.append(RequestSlot(name, (_exact(r["exactly"], name, f"{where}.exactly"),)))
        elif r.get("firstAvailable"):
            subs = []
            for j, s in enumerate(_list(r, "firstAvailable", where)):
                w = f"{where}.firstAvailable[{j}]"
                subs.append(_exact(s, f"{name}/{_str(s, 'name', w)}", w))
            slots.append(RequestSlot(name, tuple(subs)))
        else:
            raise ObjectError(f"{where}: exactly or firstAvailable is required")
    constraints = []
    for i, c in enumerate(_list(devices, "constraints", "spec.devices")):
        attribute = c.get("matchAttribute")
        if attribute:
            requests = tuple(str(r) for r in _list(c, "requests", f"spec.devices.constraints[{i}]"))
            constraints.append(MatchConstraint(str(attribute), requests))
    reserved = tuple(
        ConsumerRef(
            str(r.get("resource", "")), str(r.get("name", "")), str(r.get("uid", "")), str(r.get("apiGroup", ""))
        )
        for r in status.get("reservedFor") or []
    )
    return ResourceClaim(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        requests=tuple(slots),
        constraints=tuple(constraints),
        config=_configs(devices, "spec.devices"),
        allocation=parse_allocation(status.get("allocation")),
        reserved_for=reserved,
        deleting=bool(meta.get("deletionTimestamp")),
        finalizers=tuple(meta.get("finalizers") or ()),
        annotations=dict(meta.get("annotations") or {}),
        owner_uids=tuple(str(o.get("uid", "")) for o in meta.get("ownerReferences") or ()),
    )


def pool_devices(slices: Sequence[ResourceSlice]) -> list[ResourceSlice]:
    """The slices of complete pools only: per (driver, pool), the slices of
    the highest generation, and only if all `resourceSliceCount` of them are
    there (a pool being republished is not allocated from, as upstream)."""
    pools: dict[tuple[str, str], list[ResourceSlice]] = {}
    for s in slices:
        pools.setdefault((s.driver, s.pool), []).append(s)
    out: list[ResourceSlice] = []
    for members in pools.values():
        newest = max(s.generation for s in members)
        current = [s for s in members if s.generation == newest]
        if len(current) >= current[0].slice_count:
            out.extend(current)
    return out

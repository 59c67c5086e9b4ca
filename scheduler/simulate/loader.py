"""Reading a simulation input: a multi-document YAML of ordinary Kubernetes objects.

Every problem that would stop `kubectl apply` (or the API server's admission)
is an `InputError` whose message names the document and the field, e.g.
`in.yaml: document 3 (Pod default/p1): spec.containers[0].resources.requests.cpu: invalid quantity 'lots'`.
What a cluster would accept but the scheduler cannot use (an invalid PodGroup
or Workload) is *not* an input error: it goes to the scheduler as is and
becomes a `SchedulerError` in the output, as it would in a cluster; the loader
only warns.

Priority admission does not run in a simulation, so the loader does its work:
`spec.priorityClassName` (or the `globalDefault` PriorityClass) is resolved to
`spec.priority` from the file's PriorityClasses plus the two built-in ones,
with upstream's messages (plugin/pkg/admission/priority).

Pods, PodGroups and ResourceClaims get simulated uids (`simulate-pod/ns/name`,
...); a claim's `status.reservedFor` and `ownerReferences` that name a pod or
PodGroup of the input by name are given its simulated uid, so that a cluster
dumped with `kubectl get -o yaml` keeps its reservations.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import yaml
from pydantic import ValidationError

from ..api import constants as C
from ..api.composite import COMPOSITE_KIND, CompositePodGroup
from ..api.dra import ResourceClaim, group_claim_name, parse_device_class, parse_resource_claim, parse_resource_slice
from ..api.jobs import JOB_POLICY_ANNOTATION
from ..api.parse import parse_node, parse_pod
from ..api.podgroup import PodGroup, describe_validation_error
from ..api.records import GroupKey, ObjectError, PodClaim, PodInfo
from ..api.resources import PODS
from ..api.sources import api_versions, is_implied, parse_composite, parse_group, parse_workload
from .jobs import expand_job

# Kinds the simulation feeds to the scheduler, and whether they are namespaced;
# the group sources' kinds (PodGroup, Workload) come from their registry.
KINDS: dict[str, bool] = {
    "Node": False,
    "NodePool": False,  # karpenter.sh/v1: what new nodes troupe may ask for (docs/autoscaling.md)
    "Namespace": False,
    "PriorityClass": False,
    "Pod": True,
    "DeviceClass": False,
    "ResourceSlice": False,
    "DeviceTaintRule": False,
    "ResourceClaim": True,
    "ResourceClaimTemplate": True,
}


def _namespaced(kind: str) -> bool | None:
    """Whether `kind` is namespaced, or None where it is not simulated."""
    if kind in KINDS:
        return KINDS[kind]
    return True if api_versions(kind) else None


_T = TypeVar("_T")

# Controllers whose pods a user might expect the simulation to create.
_CONTROLLERS = {"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob", "ReplicationController"}

HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
# Created by every API server at startup (scheduling/types.go).
BUILTIN_PRIORITY_CLASSES: dict[str, int] = {
    "system-node-critical": 2000001000,
    "system-cluster-critical": 2000000000,
}


# libyaml when PyYAML was built with it (about 10x faster on large inputs); same results.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class InputError(ValueError):
    """The input cannot be simulated; the message names the file, document and field."""


@dataclass(slots=True)
class SourceObject:
    """One object of the input, with where it came from (for messages)."""

    where: str  # "document 3" or "document 3, items[1]"
    kind: str
    namespace: str  # "" for cluster-scoped kinds
    name: str
    body: dict[str, Any]

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    @property
    def label(self) -> str:
        return f"{self.where} ({self.kind} {self.ref})"


@dataclass(slots=True)
class SimulationInput:
    source: str  # the file name as given, "<stdin>" for -
    objects: list[SourceObject] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[SourceObject]:
        return [o for o in self.objects if o.kind == kind]


def read_input(path: str) -> SimulationInput:
    """Reads and checks FILE (`-` = stdin). Raises InputError."""
    if path == "-":
        return load_text(sys.stdin.read(), "<stdin>")
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise InputError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text: {exc.reason} at byte {exc.start}") from None
    return load_text(text, path)


def load_text(text: str, source: str) -> SimulationInput:
    """Parses, checks and prepares the objects of one input. O(objects)."""
    out = SimulationInput(source)
    seen: dict[tuple[str, str, str], str] = {}
    for where, doc in _documents(text, source):
        for obj in _objects(doc, where, source, out.warnings):
            # Two kinds of one name in different API groups are two objects.
            key = (f"{obj.kind}.{str(obj.body.get('apiVersion') or '').partition('/')[0]}", obj.namespace, obj.name)
            if key in seen:
                raise InputError(f"{source}: {obj.label}: duplicate of {seen[key]}")
            seen[key] = obj.where
            out.objects.append(obj)
    _check(out)
    return out


# --------------------------------------------------------------- structure


def _documents(text: str, source: str) -> Iterator[tuple[str, Any]]:
    """(where, document) for every non-empty YAML document, numbered from 1 as
    they stand in the stream (an empty document still takes its number)."""
    try:
        docs = list(yaml.load_all(text, Loader=_LOADER))
    except yaml.YAMLError as fast_exc:
        # Parse again with the pure-Python loader: its messages are the same on
        # every machine (libyaml words them differently). Error path only.
        docs = []
        try:
            docs.extend(yaml.load_all(text, Loader=yaml.SafeLoader))
        except yaml.YAMLError as exc:
            _syntax_error(exc, source, len(docs))
        _syntax_error(fast_exc, source, 0)  # only libyaml objected
    for number, doc in enumerate(docs, 1):
        if doc is not None:
            yield f"document {number}", doc


def _syntax_error(exc: yaml.YAMLError, source: str, loaded: int) -> NoReturn:
    number = loaded
    if isinstance(exc, yaml.MarkedYAMLError):
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else f"document {number + 1}"
        what = exc.problem or "invalid YAML"
        if exc.context:
            what = f"{what} ({exc.context})"
        raise InputError(f"{source}: {where}: YAML syntax error: {what}") from None
    raise InputError(f"{source}: document {number + 1}: YAML error: {exc}") from None


def _objects(doc: Any, where: str, source: str, warnings: list[str]) -> Iterator[SourceObject]:
    """The objects of one document: itself, a List's items, or the pods a Job
    that opts in stands for. A kind that is not simulated is warned and skipped."""
    kind = _kind_of(doc, where, source)
    if kind == "List" or (kind.endswith("List") and "items" in doc):
        yield from _list_items(doc, kind, where, source, warnings)
        return
    meta, name = _metadata_of(doc, kind, where, source)
    if kind == "Job" and doc.get("apiVersion") == "batch/v1":
        expanded = _job_objects(doc, meta, name, where, source, warnings)
        if expanded is not None:
            yield from expanded
            return
    namespaced = _namespaced(kind)
    if namespaced is None:
        warnings.append(_not_simulated(kind, meta, name, where, source))
        return
    namespace = str(meta.get("namespace") or "default") if namespaced else ""
    api_version = doc.get("apiVersion")
    # Kinds that several API groups define: matched by group and version,
    # never by kind alone (a scheduler-plugins or Volcano PodGroup is not troupe's).
    readable = api_versions(kind)
    if readable and api_version not in readable:
        ref = f"{namespace}/{name}"
        warnings.append(
            f"{source}: {where} ({kind} {ref}): warning: apiVersion {api_version!r} is not one troupe reads "
            f"({', '.join(readable)}); skipped"
        )
        return
    yield SourceObject(where, kind, namespace, str(name), doc)


def _kind_of(doc: Any, where: str, source: str) -> str:
    """The document's kind; a document that is not an object is an input error."""
    if not isinstance(doc, dict):
        raise InputError(f"{source}: {where}: expected a mapping (a Kubernetes object), got {_type_name(doc)}")
    kind = doc.get("kind")
    if kind is None or kind == "":
        raise InputError(f"{source}: {where}: kind is required")
    if not isinstance(kind, str):
        raise InputError(f"{source}: {where}: kind must be a string, got {kind!r}")
    return kind


def _list_items(doc: dict[str, Any], kind: str, where: str, source: str, warnings: list[str]) -> Iterator[SourceObject]:
    """The objects of a List (`kubectl get -o yaml` writes one), each where it stands in `items`."""
    items = doc.get("items")
    if items is None:
        return
    if not isinstance(items, list):
        raise InputError(f"{source}: {where} ({kind}): items must be a list, got {_type_name(items)}")
    for i, item in enumerate(items):
        yield from _objects(item, f"{where}, items[{i}]", source, warnings)


def _metadata_of(doc: dict[str, Any], kind: str, where: str, source: str) -> tuple[dict[str, Any], Any]:
    """(metadata, metadata.name); an object without a name is an input error."""
    meta = doc.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise InputError(f"{source}: {where} ({kind}): metadata must be a mapping, got {_type_name(meta)}")
    meta = meta or {}
    name = meta.get("name")
    if name is None or name == "":
        raise InputError(f"{source}: {where} ({kind}): metadata.name is required")
    return meta, name


def _job_objects(
    doc: dict[str, Any], meta: dict[str, Any], name: Any, where: str, source: str, warnings: list[str]
) -> list[SourceObject] | None:
    """The objects a batch/v1 Job that opts in to troupe stands for ([] when
    it cannot be expanded: warned), or None for a Job that does not opt in
    (skipped as a kind that is not simulated)."""
    namespace = str(meta.get("namespace") or "default")
    expanded, problem = expand_job(doc, namespace)
    if problem is not None:
        warnings.append(f"{source}: {where} (Job {namespace}/{name}): warning: {problem}; skipped")
        return []
    if not expanded:
        return None
    return [
        SourceObject(f"{where}, from Job {namespace}/{name}", obj["kind"], namespace, obj["metadata"]["name"], obj)
        for obj in expanded
    ]


def _not_simulated(kind: str, meta: dict[str, Any], name: Any, where: str, source: str) -> str:
    """The warning for an object of a kind the simulation does not run, with
    what to list instead where the kind is a controller's."""
    ns = str(meta.get("namespace") or "")
    ref = f"{ns}/{name}" if ns else str(name)
    hint = " (list its Pods instead: the simulation runs no controllers)" if kind in _CONTROLLERS else ""
    if kind == "Job":
        hint = f" (it does not opt in to troupe with {JOB_POLICY_ANNOTATION}; list its Pods instead)"
    return f"{source}: {where} ({kind} {ref}): warning: kind {kind} is not simulated; skipped{hint}"


def _type_name(value: Any) -> str:
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        int: "an integer",
        float: "a number",
        bool: "a boolean",
    }.get(type(value), type(value).__name__)


# ------------------------------------------------------------------ checks


def _error(inp: SimulationInput, obj: SourceObject, message: str) -> InputError:
    return InputError(f"{inp.source}: {obj.label}: {message}")


def _warn(inp: SimulationInput, obj: SourceObject, message: str) -> None:
    inp.warnings.append(f"{inp.source}: {obj.label}: warning: {message}")


def _parsed(
    inp: SimulationInput, obj: SourceObject, parse: Callable[[Mapping[str, Any]], _T], body: Mapping[str, Any]
) -> _T:
    """`parse(body)`, as the scheduler will read the object: what it cannot
    read is an input error (a template's fields are under `spec.`)."""
    try:
        return parse(body)
    except ObjectError as exc:
        prefix = "spec." if obj.kind == "ResourceClaimTemplate" else ""
        raise _error(inp, obj, f"{prefix}{exc}") from None
    except (TypeError, AttributeError, ValueError) as exc:
        raise _error(inp, obj, f"cannot read: {exc}") from None


def _check(inp: SimulationInput) -> None:
    """Per-kind checks, priority resolution, and the links between objects."""
    for obj in inp.objects:
        for part in ("spec", "status"):
            value = obj.body.get(part)
            if value is not None and not isinstance(value, dict):
                raise _error(inp, obj, f"{part} must be a mapping, got {_type_name(value)}")
    classes, default = _priority_classes(inp)
    nodes = _check_nodes(inp)
    groups = _check_groups(inp)
    claims = _check_dra(inp, groups)
    for obj in inp.of_kind("Pod"):
        body, pod = _prepared_pod(inp, obj, classes, default)
        _check_pod_links(inp, obj, pod, nodes, groups, claims)
        obj.body = body


def _priority_classes(inp: SimulationInput) -> tuple[dict[str, int], tuple[str, int] | None]:
    """(the value of every PriorityClass: the built-in ones, overridden by the
    file's; the globalDefault one), checked as the API server's validation does."""
    classes: dict[str, int] = dict(BUILTIN_PRIORITY_CLASSES)
    default: tuple[str, int] | None = None
    for obj in inp.of_kind("PriorityClass"):
        value = _priority_value(inp, obj)
        classes[obj.name] = value
        if obj.body.get("globalDefault") is True:
            if default is not None:
                raise _error(
                    inp,
                    obj,
                    f"globalDefault: PriorityClass {default[0]} is already marked as default. Only one default can exist",
                )
            default = (obj.name, value)
    return classes, default


def _priority_value(inp: SimulationInput, obj: SourceObject) -> int:
    value = obj.body.get("value")
    if value is None:
        raise _error(inp, obj, "value: Required value")
    if isinstance(value, bool) or not isinstance(value, int):
        raise _error(inp, obj, f"value: must be an integer, got {value!r}")
    if not obj.name.startswith("system-") and value > HIGHEST_USER_DEFINABLE_PRIORITY:
        raise _error(
            inp,
            obj,
            f"value: Forbidden: maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}",
        )
    if not -(2**31) <= value < 2**31:
        raise _error(inp, obj, f"value: Invalid value: {value}: must be a 32-bit integer")
    return value


def _check_nodes(inp: SimulationInput) -> set[str]:
    """The Nodes given uids and parsed; returns their names."""
    nodes: set[str] = set()
    for obj in inp.of_kind("Node"):
        obj.body = copy.deepcopy(obj.body)
        obj.body.setdefault("metadata", {})["uid"] = f"simulate-node/{obj.name}"
        node = _parsed(inp, obj, parse_node, obj.body)
        if node.problem:  # a cluster runs with it (a Warning Event on the Node); a simulation of it would mislead
            raise _error(inp, obj, node.problem)
        nodes.add(obj.name)
        if PODS not in node.allocatable:
            _warn(
                inp,
                obj,
                "status.allocatable has no 'pods' (the kubelet reports it, usually 110): no pod fits on this node",
            )
    return nodes


def _check_groups(inp: SimulationInput) -> dict[GroupKey, PodGroup | None]:
    """PodGroups (of every source) and Workloads parsed as the scheduler will;
    one it cannot use is warned, not an input error. Returns the PodGroups
    (None: invalid)."""
    groups: dict[GroupKey, PodGroup | None] = {}
    for obj in inp.of_kind("PodGroup") + inp.of_kind("Workload") + inp.of_kind(COMPOSITE_KIND):
        body = dict(obj.body)
        body["metadata"] = {**(obj.body.get("metadata") or {}), "name": obj.name, "namespace": obj.namespace}
        key = GroupKey(obj.namespace, obj.name, str(body.get("apiVersion") or "").partition("/")[0])
        if obj.kind == "PodGroup":
            body["metadata"]["uid"] = group_uid(key)
            groups[key] = None
        elif obj.kind == COMPOSITE_KIND:
            body["metadata"]["uid"] = f"simulate-compositepodgroup/{key.source}/{key.namespace}/{key.name}"
        obj.body = body
        _check_group(inp, obj, groups)
    return groups


def _check_group(inp: SimulationInput, obj: SourceObject, groups: dict[GroupKey, PodGroup | None]) -> None:
    parse = {"PodGroup": parse_group, COMPOSITE_KIND: parse_composite}.get(obj.kind, parse_workload)
    try:
        parsed = parse(obj.body)
    except ValidationError as exc:
        consequence = {
            "PodGroup": "the scheduler reports it as SchedulerError, as it would in a cluster",
            COMPOSITE_KIND: "the scheduler reports its tree as Invalid, as it would in a cluster",
        }.get(obj.kind, "the scheduler ignores it, as it would in a cluster")
        _warn(inp, obj, f"invalid {obj.kind}: {describe_validation_error(exc)}; {consequence}")
        return
    if isinstance(parsed, PodGroup):
        groups[parsed.key] = parsed
    if isinstance(parsed, PodGroup | CompositePodGroup) and parsed.problem:
        _warn(inp, obj, f"{parsed.problem}; the scheduler reports it as SchedulerError")


def _prepared_pod(
    inp: SimulationInput, obj: SourceObject, classes: Mapping[str, int], default: tuple[str, int] | None
) -> tuple[dict[str, Any], PodInfo]:
    """The pod's body as the API server would store it (its uid, its priority
    resolved) and the scheduler's record of it."""
    body = copy.deepcopy(obj.body)
    meta = body.setdefault("metadata", {})
    meta["namespace"] = obj.namespace
    meta["uid"] = pod_uid(obj.namespace, obj.name)
    if body.get("spec") is None:
        body["spec"] = {}  # as the API server reads `spec: null`
    if isinstance(body["spec"], dict):  # else parse_pod names the field
        try:
            _resolve_priority(body["spec"], classes, default)
        except ValueError as exc:
            raise _error(inp, obj, str(exc)) from None
    pod = _parsed(inp, obj, parse_pod, body)
    if pod.problem:  # a request out of range (api/resources.py): bad input, as an invalid quantity is
        raise _error(inp, obj, pod.problem)
    return body, pod


def _check_pod_links(
    inp: SimulationInput,
    obj: SourceObject,
    pod: PodInfo,
    nodes: set[str],
    groups: Mapping[GroupKey, PodGroup | None],
    claims: set[tuple[str, str]],
) -> None:
    """The pod's node must be in the input; a group or claim that is not
    leaves it waiting (warned)."""
    if pod.node_name and pod.node_name not in nodes:
        raise _error(inp, obj, f"spec.nodeName: no Node named {pod.node_name} in the input")
    if pod.group is not None and pod.group not in groups and not is_implied(pod.group):  # Kueue: no object
        _warn(inp, obj, f"names {pod.group}, which is not in the input: the pod waits for it to be created")
    group = groups.get(pod.group) if pod.group is not None else None
    for i, ref in enumerate(pod.resource_claims):
        problem = _pod_claim_problem(pod.namespace, ref, group, claims)
        if problem:
            _warn(inp, obj, f"spec.resourceClaims[{i}] {problem}")


def pod_uid(namespace: str, name: str) -> str:
    return f"simulate-pod/{namespace}/{name}"


def group_uid(key: GroupKey) -> str:
    """troupe's own PodGroups keep the uid they always had; others name their API group."""
    if key.source == C.GROUP:
        return f"simulate-podgroup/{key.namespace}/{key.name}"
    return f"simulate-podgroup/{key.source}/{key.namespace}/{key.name}"


def claim_uid(namespace: str, name: str) -> str:
    return f"simulate-claim/{namespace}/{name}"


# Where a ResourceSlice's devices are reachable from: exactly one (API validation).
_SLICE_NODES = ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection")


def _check_dra(inp: SimulationInput, groups: Mapping[GroupKey, PodGroup | None]) -> set[tuple[str, str]]:
    """DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates
    parsed as the scheduler will (an object it cannot read is an input error),
    claims given uids, and what would leave a pod waiting forever warned.
    Returns the (namespace, name) of the claims."""
    classes = {obj.name for obj in inp.of_kind("DeviceClass")}
    for obj in inp.of_kind("DeviceClass"):
        _parsed(inp, obj, parse_device_class, obj.body)
    for obj in inp.of_kind("ResourceSlice"):
        _check_slice(inp, obj)
    claims = _check_claims(inp, groups, classes)
    templates = _check_claim_templates(inp, classes)
    for obj in inp.of_kind("PodGroup"):
        _check_group_claims(inp, obj, groups, claims, templates)
    return set(claims)


def _check_slice(inp: SimulationInput, obj: SourceObject) -> None:
    spec = obj.body.get("spec") or {}
    reach = [k for k in _SLICE_NODES if spec.get(k)]
    if len(reach) != 1:
        raise _error(inp, obj, f"spec: exactly one of {', '.join(_SLICE_NODES)} is required")
    _parsed(inp, obj, parse_resource_slice, obj.body)
    if reach == ["perDeviceNodeSelection"]:
        _warn(inp, obj, "spec.perDeviceNodeSelection is not supported: its devices reach no node")


def _warn_unknown_classes(inp: SimulationInput, obj: SourceObject, claim: ResourceClaim, classes: set[str]) -> None:
    """A claim not allocated yet that asks for a DeviceClass not in the input matches no device."""
    if claim.allocation is not None:
        return
    wanted = {r.device_class for slot in claim.requests for r in slot.alternatives}
    for name in sorted(wanted - classes):
        _warn(inp, obj, f"requests DeviceClass {name}, which is not in the input: no device matches it")


def _check_claims(
    inp: SimulationInput, groups: Mapping[GroupKey, PodGroup | None], classes: set[str]
) -> dict[tuple[str, str], ResourceClaim]:
    """The ResourceClaims given uids (theirs, and those of the consumers and
    owners they name) and parsed."""
    pods = {(o.namespace, o.name) for o in inp.of_kind("Pod")}
    claims: dict[tuple[str, str], ResourceClaim] = {}
    for obj in inp.of_kind("ResourceClaim"):
        obj.body = body = copy.deepcopy(obj.body)
        meta = body.setdefault("metadata", {})
        meta.update(namespace=obj.namespace, uid=claim_uid(obj.namespace, obj.name), resourceVersion="1")
        _own_uids(body, obj.namespace, pods, groups)
        claim = _parsed(inp, obj, parse_resource_claim, body)
        claims[(obj.namespace, obj.name)] = claim
        _warn_unknown_classes(inp, obj, claim, classes)
    return claims


def _check_claim_templates(inp: SimulationInput, classes: set[str]) -> set[tuple[str, str]]:
    """The ResourceClaimTemplates, their claim spec parsed as a claim's."""
    templates: set[tuple[str, str]] = set()
    for obj in inp.of_kind("ResourceClaimTemplate"):
        inner = (obj.body.get("spec") or {}).get("spec")
        if inner is not None and not isinstance(inner, dict):
            raise _error(inp, obj, f"spec.spec must be a mapping, got {_type_name(inner)}")
        as_claim = {"metadata": {"name": obj.name, "namespace": obj.namespace}, "spec": inner or {}}
        _warn_unknown_classes(inp, obj, _parsed(inp, obj, parse_resource_claim, as_claim), classes)
        templates.add((obj.namespace, obj.name))
    return templates


def _check_group_claims(
    inp: SimulationInput,
    obj: SourceObject,
    groups: Mapping[GroupKey, PodGroup | None],
    claims: Mapping[tuple[str, str], ResourceClaim],
    templates: set[tuple[str, str]],
) -> None:
    """A PodGroup's `spec.resourceClaims` entries that leave its pods waiting:
    a claim or template not in the input, or a claim of the name troupe would
    make that is not the group's."""
    key = GroupKey(obj.namespace, obj.name, str(obj.body.get("apiVersion") or "").partition("/")[0])
    group = groups.get(key)
    for i, entry in enumerate(group.spec.resource_claims if group is not None else ()):
        where = f"spec.resourceClaims[{i}]"
        if entry.resource_claim_name and (obj.namespace, entry.resource_claim_name) not in claims:
            _warn(
                inp,
                obj,
                f"{where} names ResourceClaim {obj.namespace}/{entry.resource_claim_name}, which is not in the "
                f"input: its pods wait for it",
            )
        template = entry.resource_claim_template_name
        if not template:
            continue
        if (obj.namespace, template) not in templates:
            _warn(
                inp,
                obj,
                f"{where} names ResourceClaimTemplate {obj.namespace}/{template}, which is not in the input: "
                f"its claim is not made and its pods wait",
            )
        made = claims.get((obj.namespace, group_claim_name(obj.name, entry.name)))
        if made is not None and group_uid(key) not in made.owner_uids:
            _warn(
                inp,
                obj,
                f"{where}: ResourceClaim {obj.namespace}/{made.name} exists and is not this PodGroup's: "
                f"its claim is not made and its pods wait",
            )


def _own_uids(body: dict[str, Any], namespace: str, pods: set[tuple[str, str]], groups: Mapping[GroupKey, Any]) -> None:
    """A claim's `reservedFor` and `ownerReferences` entries that name a pod
    or PodGroup of the input get its simulated uid (others are left: a
    reservation for a pod not in the input is released, as at troupe's start)."""
    status = body.get("status")
    for ref in (status.get("reservedFor") if isinstance(status, dict) else None) or ():
        if isinstance(ref, dict):
            _own_consumer_uid(ref, namespace, pods, groups)
    for owner in body["metadata"].get("ownerReferences") or ():
        if not isinstance(owner, dict):
            continue
        group = GroupKey(namespace, str(owner.get("name") or ""), str(owner.get("apiVersion") or "").partition("/")[0])
        if owner.get("kind") == "PodGroup" and group in groups:
            owner["uid"] = group_uid(group)


def _own_consumer_uid(
    ref: dict[str, Any], namespace: str, pods: set[tuple[str, str]], groups: Mapping[GroupKey, Any]
) -> None:
    """A `reservedFor` entry (a core pod, or a PodGroup of an API group) gets the uid of the object it names."""
    key = (namespace, str(ref.get("name") or ""))
    if ref.get("resource") == "pods" and not ref.get("apiGroup") and key in pods:
        ref["uid"] = pod_uid(*key)
    elif ref.get("resource") == "podgroups" and ref.get("apiGroup"):
        group = GroupKey(namespace, str(ref.get("name") or ""), str(ref["apiGroup"]))
        if group in groups:
            ref["uid"] = group_uid(group)


def _pod_claim_problem(namespace: str, ref: PodClaim, group: PodGroup | None, claims: set[tuple[str, str]]) -> str:
    """Why a pod's `spec.resourceClaims` entry would leave it waiting, or ""."""
    if ref.claim_name:  # named, or recorded in the pod's status for its template
        if (namespace, ref.claim_name) in claims:
            return ""
        return f"names ResourceClaim {namespace}/{ref.claim_name}, which is not in the input: the pod waits for it"
    if group is not None and any(
        e.name == ref.name and e.resource_claim_template_name == ref.template_name for e in group.spec.resource_claims
    ):
        return ""  # its PodGroup's claim (the template is checked with the PodGroup)
    return (
        f"names ResourceClaimTemplate {namespace}/{ref.template_name}: a claim per pod is made by "
        f"kube-controller-manager, which the simulation does not run: the pod waits (name a ResourceClaim, "
        f"or its PodGroup's entry for the template)"
    )


def _resolve_priority(spec: dict[str, Any], classes: Mapping[str, int], default: tuple[str, int] | None) -> None:
    """Upstream Priority admission: the class names the priority; a priority
    given in the spec must agree with it."""
    name = spec.get("priorityClassName")
    if name:
        if name not in classes:
            raise ValueError(f"spec.priorityClassName: no PriorityClass with name {name} was found")
        priority = classes[name]
    elif default is not None:
        name, priority = default
        spec["priorityClassName"] = name
    else:
        priority = 0  # DefaultPriorityWhenNoDefaultClassExists
    given = spec.get("priority")
    if given is not None and given != priority:
        raise ValueError(
            f"spec.priority: the integer value of priority ({given}) must not be provided in pod spec; "
            f"priority admission controller computed {priority} from the given PriorityClass name"
        )
    spec["priority"] = priority

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
from typing import Any, NoReturn

import yaml
from pydantic import ValidationError

from ..api import constants as C
from ..api.dra import ResourceClaim, group_claim_name, parse_device_class, parse_resource_claim, parse_resource_slice
from ..api.jobs import JOB_POLICY_ANNOTATION
from ..api.parse import parse_node, parse_pod
from ..api.podgroup import PodGroup, describe_validation_error
from ..api.records import GroupKey, ObjectError, PodClaim
from ..api.resources import PODS
from ..api.sources import api_versions, is_implied, parse_group, parse_workload
from .jobs import expand_job

# Kinds the simulation feeds to the scheduler, and whether they are namespaced;
# the group sources' kinds (PodGroup, Workload) come from their registry.
KINDS: dict[str, bool] = {
    "Node": False,
    "Namespace": False,
    "PriorityClass": False,
    "Pod": True,
    "DeviceClass": False,
    "ResourceSlice": False,
    "ResourceClaim": True,
    "ResourceClaimTemplate": True,
}


def _namespaced(kind: str) -> bool | None:
    """Whether `kind` is namespaced, or None where it is not simulated."""
    if kind in KINDS:
        return KINDS[kind]
    return True if api_versions(kind) else None


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
    if not isinstance(doc, dict):
        raise InputError(f"{source}: {where}: expected a mapping (a Kubernetes object), got {_type_name(doc)}")
    kind = doc.get("kind")
    if kind is None or kind == "":
        raise InputError(f"{source}: {where}: kind is required")
    if not isinstance(kind, str):
        raise InputError(f"{source}: {where}: kind must be a string, got {kind!r}")
    if kind == "List" or (kind.endswith("List") and "items" in doc):
        items = doc.get("items")
        if items is None:
            return
        if not isinstance(items, list):
            raise InputError(f"{source}: {where} ({kind}): items must be a list, got {_type_name(items)}")
        for i, item in enumerate(items):
            yield from _objects(item, f"{where}, items[{i}]", source, warnings)
        return
    meta = doc.get("metadata")
    if meta is not None and not isinstance(meta, dict):
        raise InputError(f"{source}: {where} ({kind}): metadata must be a mapping, got {_type_name(meta)}")
    meta = meta or {}
    name = meta.get("name")
    if name is None or name == "":
        raise InputError(f"{source}: {where} ({kind}): metadata.name is required")
    namespaced = _namespaced(kind)
    if kind == "Job" and doc.get("apiVersion") == "batch/v1":
        namespace = str(meta.get("namespace") or "default")
        expanded, problem = expand_job(doc, namespace)
        if problem is not None:
            warnings.append(f"{source}: {where} (Job {namespace}/{name}): warning: {problem}; skipped")
            return
        for obj in expanded:
            yield SourceObject(
                f"{where}, from Job {namespace}/{name}", obj["kind"], namespace, obj["metadata"]["name"], obj
            )
        if expanded:
            return
    if namespaced is None:
        ns = str(meta.get("namespace") or "")
        ref = f"{ns}/{name}" if ns else str(name)
        hint = " (list its Pods instead: the simulation runs no controllers)" if kind in _CONTROLLERS else ""
        if kind == "Job":
            hint = f" (it does not opt in to troupe with {JOB_POLICY_ANNOTATION}; list its Pods instead)"
        warnings.append(f"{source}: {where} ({kind} {ref}): warning: kind {kind} is not simulated; skipped{hint}")
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


def _check(inp: SimulationInput) -> None:
    """Per-kind checks, priority resolution, and the links between objects."""
    src = inp.source

    def fail(obj: SourceObject, message: str) -> InputError:
        return InputError(f"{src}: {obj.label}: {message}")

    for obj in inp.objects:
        for part in ("spec", "status"):
            value = obj.body.get(part)
            if value is not None and not isinstance(value, dict):
                raise fail(obj, f"{part} must be a mapping, got {_type_name(value)}")

    # PriorityClasses: the built-in ones, overridden by the file's.
    classes: dict[str, int] = dict(BUILTIN_PRIORITY_CLASSES)
    default: tuple[str, int] | None = None
    for obj in inp.of_kind("PriorityClass"):
        value = obj.body.get("value")
        if value is None:
            raise fail(obj, "value: Required value")
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail(obj, f"value: must be an integer, got {value!r}")
        if not obj.name.startswith("system-") and value > HIGHEST_USER_DEFINABLE_PRIORITY:
            raise fail(
                obj,
                f"value: Forbidden: maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}",
            )
        if not -(2**31) <= value < 2**31:
            raise fail(obj, f"value: Invalid value: {value}: must be a 32-bit integer")
        classes[obj.name] = value
        if obj.body.get("globalDefault") is True:
            if default is not None:
                raise fail(
                    obj,
                    f"globalDefault: PriorityClass {default[0]} is already marked as default. Only one default can exist",
                )
            default = (obj.name, value)

    nodes: set[str] = set()
    for obj in inp.of_kind("Node"):
        obj.body = copy.deepcopy(obj.body)
        obj.body.setdefault("metadata", {})["uid"] = f"simulate-node/{obj.name}"
        try:
            node = parse_node(obj.body)
        except ObjectError as exc:
            raise fail(obj, str(exc)) from None
        except (TypeError, AttributeError, ValueError) as exc:
            raise fail(obj, f"cannot read: {exc}") from None
        nodes.add(obj.name)
        if PODS not in node.allocatable:
            inp.warnings.append(
                f"{src}: {obj.label}: warning: status.allocatable has no 'pods' (the kubelet reports it, "
                f"usually 110): no pod fits on this node"
            )

    groups: dict[GroupKey, PodGroup | None] = {}  # None: invalid
    for obj in inp.of_kind("PodGroup") + inp.of_kind("Workload"):
        parse = parse_group if obj.kind == "PodGroup" else parse_workload
        body = dict(obj.body)
        body["metadata"] = {**(obj.body.get("metadata") or {}), "name": obj.name, "namespace": obj.namespace}
        key = GroupKey(obj.namespace, obj.name, str(body.get("apiVersion") or "").partition("/")[0])
        if obj.kind == "PodGroup":
            body["metadata"]["uid"] = group_uid(key)
            groups[key] = None
        obj.body = body
        try:
            parsed = parse(body)
            if isinstance(parsed, PodGroup):
                groups[parsed.key] = parsed
                if parsed.problem:
                    inp.warnings.append(
                        f"{src}: {obj.label}: warning: {parsed.problem}; the scheduler reports it as SchedulerError"
                    )
        except ValidationError as exc:
            consequence = (
                "the scheduler reports it as SchedulerError, as it would in a cluster"
                if obj.kind == "PodGroup"
                else "the scheduler ignores it, as it would in a cluster"
            )
            inp.warnings.append(
                f"{src}: {obj.label}: warning: invalid {obj.kind}: {describe_validation_error(exc)}; {consequence}"
            )

    claims = _check_dra(inp, groups, fail)

    for obj in inp.of_kind("Pod"):
        body = copy.deepcopy(obj.body)
        meta = body.setdefault("metadata", {})
        meta["namespace"] = obj.namespace
        meta["uid"] = pod_uid(obj.namespace, obj.name)
        spec = body.setdefault("spec", {})
        try:
            _resolve_priority(spec, classes, default)
        except ValueError as exc:
            raise fail(obj, str(exc)) from None
        try:
            pod = parse_pod(body)
        except ObjectError as exc:
            raise fail(obj, str(exc)) from None
        except (TypeError, AttributeError, ValueError) as exc:
            raise fail(obj, f"cannot read: {exc}") from None
        if pod.node_name and pod.node_name not in nodes:
            raise fail(obj, f"spec.nodeName: no Node named {pod.node_name} in the input")
        if pod.group is not None and pod.group not in groups and not is_implied(pod.group):  # Kueue: no object
            inp.warnings.append(
                f"{src}: {obj.label}: warning: names {pod.group}, which is not in the "
                f"input: the pod waits for it to be created"
            )
        for i, ref in enumerate(pod.resource_claims):
            group = groups.get(pod.group) if pod.group is not None else None
            problem = _pod_claim_problem(pod.namespace, ref, group, claims)
            if problem:
                inp.warnings.append(f"{src}: {obj.label}: warning: spec.resourceClaims[{i}] {problem}")
        obj.body = body


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


def _check_dra(
    inp: SimulationInput,
    groups: Mapping[GroupKey, PodGroup | None],
    fail: Callable[[SourceObject, str], InputError],
) -> set[tuple[str, str]]:
    """DeviceClasses, ResourceSlices, ResourceClaims and ResourceClaimTemplates
    parsed as the scheduler will (an object it cannot read is an input error),
    claims given uids, and what would leave a pod waiting forever warned.
    Returns the (namespace, name) of the claims."""
    src = inp.source

    def parsed(obj: SourceObject, parse: Callable[[Mapping[str, Any]], Any], body: Mapping[str, Any]) -> Any:
        try:
            return parse(body)
        except ObjectError as exc:
            prefix = "spec." if obj.kind == "ResourceClaimTemplate" else ""
            raise fail(obj, f"{prefix}{exc}") from None
        except (TypeError, AttributeError, ValueError) as exc:
            raise fail(obj, f"cannot read: {exc}") from None

    def warn(obj: SourceObject, message: str) -> None:
        inp.warnings.append(f"{src}: {obj.label}: warning: {message}")

    classes = {obj.name for obj in inp.of_kind("DeviceClass")}
    for obj in inp.of_kind("DeviceClass"):
        parsed(obj, parse_device_class, obj.body)

    for obj in inp.of_kind("ResourceSlice"):
        spec = obj.body.get("spec") or {}
        reach = [k for k in _SLICE_NODES if spec.get(k)]
        if len(reach) != 1:
            raise fail(obj, f"spec: exactly one of {', '.join(_SLICE_NODES)} is required")
        parsed(obj, parse_resource_slice, obj.body)
        if reach == ["perDeviceNodeSelection"]:
            warn(obj, "spec.perDeviceNodeSelection is not supported: its devices reach no node")

    def unknown_classes(obj: SourceObject, claim: ResourceClaim) -> None:
        if claim.allocation is not None:
            return
        wanted = {r.device_class for slot in claim.requests for r in slot.alternatives}
        for name in sorted(wanted - classes):
            warn(obj, f"requests DeviceClass {name}, which is not in the input: no device matches it")

    pods = {(o.namespace, o.name) for o in inp.of_kind("Pod")}
    claims: dict[tuple[str, str], ResourceClaim] = {}
    for obj in inp.of_kind("ResourceClaim"):
        obj.body = body = copy.deepcopy(obj.body)
        meta = body.setdefault("metadata", {})
        meta.update(namespace=obj.namespace, uid=claim_uid(obj.namespace, obj.name), resourceVersion="1")
        _own_uids(body, obj.namespace, pods, groups)
        claim = parsed(obj, parse_resource_claim, body)
        claims[(obj.namespace, obj.name)] = claim
        unknown_classes(obj, claim)

    templates: set[tuple[str, str]] = set()
    for obj in inp.of_kind("ResourceClaimTemplate"):
        inner = (obj.body.get("spec") or {}).get("spec")
        if inner is not None and not isinstance(inner, dict):
            raise fail(obj, f"spec.spec must be a mapping, got {_type_name(inner)}")
        as_claim = {"metadata": {"name": obj.name, "namespace": obj.namespace}, "spec": inner or {}}
        unknown_classes(obj, parsed(obj, parse_resource_claim, as_claim))
        templates.add((obj.namespace, obj.name))

    for obj in inp.of_kind("PodGroup"):
        key = GroupKey(obj.namespace, obj.name, str(obj.body.get("apiVersion") or "").partition("/")[0])
        group = groups.get(key)
        for i, entry in enumerate(group.spec.resource_claims if group is not None else ()):
            where = f"spec.resourceClaims[{i}]"
            if entry.resource_claim_name and (obj.namespace, entry.resource_claim_name) not in claims:
                warn(
                    obj,
                    f"{where} names ResourceClaim {obj.namespace}/{entry.resource_claim_name}, which is not in the "
                    f"input: its pods wait for it",
                )
            template = entry.resource_claim_template_name
            if not template:
                continue
            if (obj.namespace, template) not in templates:
                warn(
                    obj,
                    f"{where} names ResourceClaimTemplate {obj.namespace}/{template}, which is not in the input: "
                    f"its claim is not made and its pods wait",
                )
            made = claims.get((obj.namespace, group_claim_name(obj.name, entry.name)))
            if made is not None and group_uid(key) not in made.owner_uids:
                warn(
                    obj,
                    f"{where}: ResourceClaim {obj.namespace}/{made.name} exists and is not this PodGroup's: "
                    f"its claim is not made and its pods wait",
                )
    return set(claims)


def _own_uids(body: dict[str, Any], namespace: str, pods: set[tuple[str, str]], groups: Mapping[GroupKey, Any]) -> None:
    """A claim's `reservedFor` and `ownerReferences` entries that name a pod
    or PodGroup of the input get its simulated uid (others are left: a
    reservation for a pod not in the input is released, as at troupe's start)."""
    status = body.get("status")
    for ref in (status.get("reservedFor") if isinstance(status, dict) else None) or ():
        if not isinstance(ref, dict):
            continue
        key = (namespace, str(ref.get("name") or ""))
        if ref.get("resource") == "pods" and not ref.get("apiGroup") and key in pods:
            ref["uid"] = pod_uid(*key)
        elif ref.get("resource") == "podgroups" and ref.get("apiGroup"):
            group = GroupKey(namespace, str(ref.get("name") or ""), str(ref["apiGroup"]))
            if group in groups:
                ref["uid"] = group_uid(group)
    for owner in body["metadata"].get("ownerReferences") or ():
        if not isinstance(owner, dict):
            continue
        group = GroupKey(namespace, str(owner.get("name") or ""), str(owner.get("apiVersion") or "").partition("/")[0])
        if owner.get("kind") == "PodGroup" and group in groups:
            owner["uid"] = group_uid(group)


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

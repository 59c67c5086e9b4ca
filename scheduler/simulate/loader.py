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
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import yaml
from pydantic import ValidationError

from ..api.parse import parse_node, parse_pod
from ..api.podgroup import describe_validation_error, parse_podgroup, parse_workload
from ..api.records import ObjectError
from ..api.resources import PODS

# Kinds the simulation feeds to the scheduler, and whether they are namespaced.
KINDS: dict[str, bool] = {
    "Node": False,
    "Namespace": False,
    "PriorityClass": False,
    "Workload": True,
    "PodGroup": True,
    "Pod": True,
}
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
            key = (obj.kind, obj.namespace, obj.name)
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
    namespaced = KINDS.get(kind)
    if namespaced is None:
        ns = str(meta.get("namespace") or "")
        ref = f"{ns}/{name}" if ns else str(name)
        hint = " (list its Pods instead: the simulation runs no controllers)" if kind in _CONTROLLERS else ""
        warnings.append(f"{source}: {where} ({kind} {ref}): warning: kind {kind} is not simulated; skipped{hint}")
        return
    namespace = str(meta.get("namespace") or "default") if namespaced else ""
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

    groups: set[tuple[str, str]] = set()
    for obj in inp.of_kind("PodGroup") + inp.of_kind("Workload"):
        parse = parse_podgroup if obj.kind == "PodGroup" else parse_workload
        body = dict(obj.body)
        body["metadata"] = {**(obj.body.get("metadata") or {}), "name": obj.name, "namespace": obj.namespace}
        obj.body = body
        if obj.kind == "PodGroup":
            groups.add((obj.namespace, obj.name))
        try:
            parse(body)
        except ValidationError as exc:
            consequence = (
                "the scheduler reports it as SchedulerError, as it would in a cluster"
                if obj.kind == "PodGroup"
                else "the scheduler ignores it, as it would in a cluster"
            )
            inp.warnings.append(
                f"{src}: {obj.label}: warning: invalid {obj.kind}: {describe_validation_error(exc)}; {consequence}"
            )

    for obj in inp.of_kind("Pod"):
        body = copy.deepcopy(obj.body)
        meta = body.setdefault("metadata", {})
        meta["namespace"] = obj.namespace
        meta["uid"] = f"simulate-pod/{obj.namespace}/{obj.name}"
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
        if pod.group_name and (pod.namespace, pod.group_name) not in groups:
            inp.warnings.append(
                f"{src}: {obj.label}: warning: names PodGroup {pod.namespace}/{pod.group_name}, which is not in the "
                f"input: the pod waits for it to be created"
            )
        obj.body = body


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

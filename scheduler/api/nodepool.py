"""Karpenter NodePools (`karpenter.sh/v1`), as troupe reads them to ask for
capacity for a whole unit in one topology domain (docs/autoscaling.md).

Of a pool troupe needs: the labels every node it makes carries (its
template's labels, and each requirement `In` one value), the values a label
may take on its nodes (a requirement `In` several values: the autoscaler
picks one per node), the taints its nodes keep, and what its limits leave
(`spec.limits` minus `status.resources`, both sums of node capacity). A pool
troupe cannot read is kept with its problem and never asked.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .records import GroupKey, ObjectError, PodInfo, Taint
from .resources import resource_map

API_GROUP = "karpenter.sh"
API_VERSION = f"{API_GROUP}/v1"
PLURAL = "nodepools"
# The label Karpenter puts on each node it makes: the pool's name.
NODEPOOL_LABEL = f"{API_GROUP}/nodepool"


@dataclass(frozen=True)
class NodeTemplate:
    """What a NodePool can make."""

    name: str
    labels: Mapping[str, str]  # on every node it makes
    choices: Mapping[str, tuple[str, ...]]  # label -> the values it may take (one per node)
    excluded: Mapping[str, tuple[str, ...]]  # label -> values its nodes never take (NotIn)
    absent: frozenset[str]  # labels its nodes never carry (DoesNotExist)
    taints: tuple[Taint, ...]
    limits: Mapping[str, int]  # spec.limits (troupe's units); a resource not named is unlimited
    used: Mapping[str, int]  # status.resources: the capacity of the nodes it has
    weight: int = 0
    problem: str = ""  # why troupe does not ask it for nodes
    uid: str = ""

    def values(self, key: str) -> tuple[str, ...] | None:
        """The values `key` may take on this pool's nodes; () where they never
        carry it, None where the pool does not say (any the cloud offers)."""
        if key in self.labels:
            return (self.labels[key],)
        if key in self.absent:
            return ()
        return self.choices.get(key)

    def left(self, resource: str) -> int | None:
        """What the limits leave of `resource` (None: no limit on it)."""
        if resource not in self.limits:
            return None
        return self.limits[resource] - self.used.get(resource, 0)


def parse_nodepool(raw: Mapping[str, Any]) -> NodeTemplate:
    """A NodePool; ObjectError without a name. Anything else troupe cannot
    read becomes the template's `problem`."""
    meta = raw.get("metadata") or {}
    name = str(meta.get("name") or "")
    if not name:
        raise ObjectError("metadata.name is required")
    spec = raw.get("spec") or {}
    template = spec.get("template") or {}
    node_spec = template.get("spec") or {}
    labels = {str(k): str(v) for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()}
    choices, excluded, absent, problems = _requirements(node_spec.get("requirements") or (), labels)
    taints = tuple(
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in node_spec.get("taints") or ()
    )
    limits, used, weight = _amounts(raw, spec, problems)
    return NodeTemplate(
        name=name,
        labels=labels,
        choices=choices,
        excluded=excluded,
        absent=frozenset(absent),
        taints=taints,
        limits=limits,
        used=used,
        weight=weight,
        problem=problems[0] if problems else "",
        uid=str(meta.get("uid") or ""),
    )


def _amounts(
    raw: Mapping[str, Any], spec: Mapping[str, Any], problems: list[str]
) -> tuple[dict[str, int], dict[str, int], int]:
    """spec.limits, status.resources and spec.weight; what cannot be read is
    said in `problems` (and counts as none)."""
    try:
        limits = resource_map(spec.get("limits"), "spec.limits", problems)
        used = resource_map((raw.get("status") or {}).get("resources"), "status.resources", problems)
    except ObjectError as exc:
        limits, used = {}, {}
        problems.append(str(exc))
    try:
        weight = int(spec.get("weight") or 0)
    except (TypeError, ValueError):
        weight = 0
        problems.append(f"spec.weight: not a number: {spec.get('weight')!r}")
    return limits, used, weight


def _requirements(
    requirements: Any, labels: dict[str, str]
) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]], set[str], list[str]]:
    """The template's requirements: `In` one value joins `labels`; returns
    the choices (`In` several), the exclusions (`NotIn`), the labels never
    carried (`DoesNotExist`), and what troupe cannot read."""
    choices: dict[str, tuple[str, ...]] = {}
    excluded: dict[str, tuple[str, ...]] = {}
    absent: set[str] = set()
    problems: list[str] = []
    for i, req in enumerate(requirements):
        key, op = str(req.get("key") or ""), str(req.get("operator") or "")
        values = tuple(str(v) for v in req.get("values") or ())
        if op == "In" and len(values) == 1:
            labels.setdefault(key, values[0])
        elif op == "In":
            choices[key] = values
        elif op == "NotIn":
            excluded[key] = values
        elif op == "DoesNotExist":
            absent.add(key)
        elif op not in ("Exists", "Gt", "Lt", "Gte", "Lte"):
            problems.append(f"spec.template.spec.requirements[{i}].operator: {op!r} is not one troupe reads")
    return choices, excluded, absent, problems


@dataclass
class NodeTemplates:
    """The NodePools troupe knows (an empty set: autoscaling is not asked)."""

    pools: dict[str, NodeTemplate] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.pools)


@dataclass(frozen=True, slots=True)
class CapacityPlan:
    """New nodes a PostFilter asks an autoscaler for, for a whole unit that
    fits nowhere now: room for `pods` in one domain (`key`=`value`; no key:
    anywhere), from the NodePools `pools` (docs/autoscaling.md). With no
    pools, nothing can be asked: the unit waits whole and says why, and
    its pods must not look provisionable either."""

    unit: GroupKey  # the PodGroup, or the tree's root CompositePodGroup, it is for
    pods: tuple[PodInfo, ...]
    key: str = ""
    value: str = ""
    pools: tuple[str, ...] = ()
    requests: Mapping[str, int] = field(default_factory=dict)  # summed over `pods`
    timeout: float = 600.0  # seconds the nodes may take to come before another domain is asked

    @property
    def domain(self) -> str:
        return f"{self.key}={self.value}" if self.key else "anywhere"

    def made_for(self, labels: Mapping[str, str]) -> bool:
        """Is a node with these labels one of those asked for: made by one of
        the plan's pools, in its domain?"""
        return labels.get(NODEPOOL_LABEL) in self.pools and (not self.key or labels.get(self.key) == self.value)

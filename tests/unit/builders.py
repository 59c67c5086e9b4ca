"""Builders for the unit tests: API-shaped dict bodies, parsed the way the
watch handlers parse them (`parse_node` / `parse_pod` / `parse_podgroup`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scheduler.api.config import Profile
from scheduler.api.constants import DEFAULT_SCHEDULER_NAME, POD_GROUP_LABEL
from scheduler.api.parse import parse_node, parse_pod
from scheduler.api.podgroup import PodGroup, parse_podgroup
from scheduler.api.records import NodeInfo, PodInfo
from scheduler.cluster.cache import ClusterCache
from scheduler.framework.framework import Framework
from scheduler.framework.interface import Handle
from scheduler.plugins import in_tree_registry

GiB = 2**30
MiB = 2**20


def node_body(
    name: str,
    cpu: str | int | None = "4",
    memory: str | int | None = "8Gi",
    pods: int | None = 110,
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    unschedulable: bool = False,
    extra: Mapping[str, Any] | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    alloc: dict[str, Any] = {}
    if cpu is not None:
        alloc["cpu"] = cpu
    if memory is not None:
        alloc["memory"] = memory
    if pods is not None:
        alloc["pods"] = pods
    alloc.update(extra or {})
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "uid": uid or f"node-uid-{name}", "labels": dict(labels or {})},
        "spec": spec,
        "status": {"allocatable": alloc, "capacity": dict(alloc)},
    }


def make_node(
    name: str, cpu: str | int | None = "4", memory: str | int | None = "8Gi", pods: int | None = 110, **kw: Any
) -> NodeInfo:
    return parse_node(node_body(name, cpu, memory, pods, **kw))


def taint(key: str, value: str = "", effect: str = "NoSchedule") -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect}


def toleration(key: str = "", value: str = "", effect: str = "", operator: str | None = None) -> dict[str, str]:
    t: dict[str, str] = {}
    if key:
        t["key"] = key
    if operator is not None:
        t["operator"] = operator
    if value:
        t["value"] = value
    if effect:
        t["effect"] = effect
    return t


def requirement(key: str, operator: str, *values: str) -> dict[str, Any]:
    r: dict[str, Any] = {"key": key, "operator": operator}
    if values:
        r["values"] = list(values)
    return r


def required_affinity(*terms: Mapping[str, Any]) -> dict[str, Any]:
    """`affinity` with required node affinity; each term is a NodeSelectorTerm dict."""
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [dict(t) for t in terms]}
        }
    }


def preferred_affinity(*weighted: tuple[int, Mapping[str, Any]]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "preference": dict(term)} for w, term in weighted
            ]
        }
    }


def container(
    name: str = "c", requests: Mapping[str, Any] | None = None, *, restart_policy: str | None = None
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "registry.k8s.io/pause:3.10"}
    if requests is not None:
        c["resources"] = {"requests": dict(requests)}
    if restart_policy is not None:
        c["restartPolicy"] = restart_policy
    return c


def pod_body(
    name: str,
    cpu: str | int | None = None,
    memory: str | int | None = None,
    *,
    namespace: str = "default",
    uid: str | None = None,
    group: str | None = None,
    labels: Mapping[str, str] | None = None,
    priority: int | None = None,
    node_name: str = "",
    phase: str | None = None,
    scheduler_name: str | None = DEFAULT_SCHEDULER_NAME,
    requests: Mapping[str, Any] | None = None,
    containers: Sequence[Mapping[str, Any]] | None = None,
    init_containers: Sequence[Mapping[str, Any]] | None = None,
    overhead: Mapping[str, Any] | None = None,
    pod_resources: Mapping[str, Any] | None = None,
    tolerations: Sequence[Mapping[str, str]] = (),
    node_selector: Mapping[str, str] | None = None,
    affinity: Mapping[str, Any] | None = None,
    gates: Sequence[str] = (),
    deleting: bool = False,
    creation_timestamp: str | None = None,
    resource_version: str | None = None,
) -> dict[str, Any]:
    """A Pod body. `cpu`/`memory`/`requests` make one container; `containers` replaces it."""
    if containers is None:
        req: dict[str, Any] = {}
        if cpu is not None:
            req["cpu"] = cpu
        if memory is not None:
            req["memory"] = memory
        req.update(requests or {})
        c: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
        if req:
            c["resources"] = {"requests": req}
        containers = [c]
    lab = dict(labels or {})
    if group is not None:
        lab[POD_GROUP_LABEL] = group
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{namespace}-{name}",
        "labels": lab,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if creation_timestamp is not None:
        meta["creationTimestamp"] = creation_timestamp
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    spec: dict[str, Any] = {"containers": [dict(c) for c in containers]}
    if scheduler_name is not None:
        spec["schedulerName"] = scheduler_name
    if init_containers:
        spec["initContainers"] = [dict(c) for c in init_containers]
    if overhead:
        spec["overhead"] = dict(overhead)
    if pod_resources:
        spec["resources"] = {"requests": dict(pod_resources)}
    if priority is not None:
        spec["priority"] = priority
    if node_name:
        spec["nodeName"] = node_name
    if tolerations:
        spec["tolerations"] = [dict(t) for t in tolerations]
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if affinity:
        spec["affinity"] = dict(affinity)
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if phase is not None:
        body["status"] = {"phase": phase}
    return body


def make_pod(name: str, cpu: str | int | None = None, memory: str | int | None = None, **kw: Any) -> PodInfo:
    return parse_pod(pod_body(name, cpu, memory, **kw))


def podgroup_body(
    name: str,
    min_count: int | None = None,
    *,
    namespace: str = "default",
    basic: bool | None = None,
    topology: Sequence[str] = (),
) -> dict[str, Any]:
    policy: dict[str, Any] = {"basic": {}} if (basic or min_count is None) else {"gang": {"minCount": min_count}}
    spec: dict[str, Any] = {"schedulingPolicy": policy}
    if topology:
        spec["schedulingConstraints"] = {"topology": [{"key": k} for k in topology]}
    return {
        "apiVersion": "scheduling.troupe.dev/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace, "uid": f"pg-uid-{namespace}-{name}", "generation": 1},
        "spec": spec,
    }


def make_group(name: str, min_count: int | None = None, **kw: Any) -> PodGroup:
    """A gang with `min_count`, or a basic group when `min_count` is None."""
    return parse_podgroup(podgroup_body(name, min_count, **kw))


def make_cache(
    nodes: Iterable[NodeInfo] = (), pods: Iterable[PodInfo] = (), groups: Iterable[PodGroup] = ()
) -> ClusterCache:
    cache = ClusterCache()
    for n in nodes:
        cache.upsert_node(n)
    for p in pods:
        cache.upsert_pod(p)
    for g in groups:
        cache.upsert_group(g.key, g)
    return cache


def make_framework(cache: ClusterCache | None = None, profile: Mapping[str, Any] | None = None) -> Framework:
    """A fresh Framework over `cache` with the in-tree registry (the default profile unless given)."""
    prof = Profile.model_validate(dict(profile or {}))
    return Framework(prof, in_tree_registry(), Handle(cache if cache is not None else ClusterCache()))


def profile_with_args(plugin: str, args: Mapping[str, Any]) -> dict[str, Any]:
    return {"pluginConfig": [{"name": plugin, "args": dict(args)}]}

"""The end-to-end benchmark's objects and the one pod creator all three runs share.

Shapes are upstream scheduler_perf's GangScheduling workloads (a, b),
troupe's larger c, and upstream's TopologyAwareScheduling workload (t); every
gang has minCount = its size. Pods ask for 100m CPU / 100Mi. Nodes have
32 CPU / 128Gi / 110 pods allocatable (set on create; the benchmark reads one
back to check that the status stuck). Shape t has nodes of their own kind,
upstream's tas/templates/node.yaml: 4 CPU / 32Gi / 110 pods, labelled
``topology.kubernetes.io/zone`` and ``topology.kubernetes.io/rack`` =
``zone-``/``rack-{i // 100}`` (5 racks below 500 nodes), and every PodGroup
of t has ``schedulingConstraints: {topology: [{key: topology.kubernetes.io/rack}]}``.

Shape l is a tree per replica (issue 36): a root CompositePodGroup, a gang of
its two groups (``minGroupCount: 2``) with the rack constraint, over a 1-pod
leader PodGroup and a 7-pod worker gang (``parentCompositePodGroupName``).
Pod 0 of a replica is its leader, pods 1..7 its workers. It runs on the TAS
nodes, on a control plane whose gates add ``CompositePodGroup`` (node kind
"tree"). Native: ``scheduling.k8s.io/v1alpha3`` CompositePodGroup, v1beta1
PodGroups with ``workloadRef`` (no Workload object: the scheduler never reads
it); troupe's own: ``scheduling.troupe.dev/v1alpha2`` CompositePodGroup and
PodGroups with ``parentCompositePodGroupName``.

What differs between the three runs is only what each scheduler needs to see
(``Flavor``): troupe gets its CRD PodGroup and the pod-group label with
``schedulerName: troupe-scheduler``; upstream gets the native
``scheduling.k8s.io`` PodGroup and ``spec.schedulingGroup`` with the default
scheduler name; the raw bind loop gets the same objects as upstream but a
schedulerName nobody else serves. The creator is the same code with the same
concurrency and order for all three:

- groups one after another, in order; the PodGroup is created (the create
  has returned) before any of its pods is sent;
- ``concurrency`` creates in flight (pods of one group in index order, the
  next group's PodGroup and pods as soon as workers are free);
- a pod's "created" time is the client's clock right after its create returned.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scheduler.api.constants import API_VERSION as TROUPE_API_VERSION
from scheduler.api.constants import DEFAULT_SCHEDULER_NAME as TROUPE_SCHEDULER_NAME
from scheduler.api.constants import POD_GROUP_LABEL, POD_GROUP_SCHEDULED
from scheduler.api.sources import native

from .e2e_kube import ApiError, Kube

NODE_CPU, NODE_MEMORY, NODE_PODS = "32", "128Gi", 110
POD_CPU_MILLI, POD_MEMORY_MI = 100, 100
NODE_CPU_MILLI, NODE_MEMORY_MI = 32_000, 128 * 1024
ZONES, REGIONS = 10, 2
# Shape t's nodes (upstream's podgroup/tas/templates/node.yaml)
TAS_NODE_CPU, TAS_NODE_MEMORY = "4", "32Gi"
TAS_NODE_CPU_MILLI, TAS_NODE_MEMORY_MI = 4_000, 32 * 1024
RACK_KEY = "topology.kubernetes.io/rack"
NODES_PER_RACK = 100  # rack-{{DivideInt .Index 100}}
IMAGE = "registry.k8s.io/pause:3.10.1"

NATIVE_PODGROUP_API = "scheduling.k8s.io/v1beta1"  # what kube-scheduler 1.37's informer reads
NATIVE_COMPOSITE_API = "scheduling.k8s.io/v1alpha3"  # CompositePodGroup is served only there
TREE_WORKLOAD = "bench"  # workloadRef.workloadName of shape l's objects (no such Workload exists)
RAW_SCHEDULER_NAME = "e2e-raw-binder"
SCHEDULERS = ("troupe", "upstream", "raw")
# scheduler-plugins' PodGroup and label: what the Kubeflow training-operator,
# Spark and KubeRay write for a coscheduling scheduler (crds/compat/).
COSCHEDULING_PODGROUP_API = "scheduling.x-k8s.io/v1alpha1"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
# Runs `--schedulers` may also name: troupe given the very objects upstream
# gets (native PodGroups, spec.schedulingGroup; only schedulerName differs),
# troupe given scheduler-plugins' PodGroups (spec.minMember) and label, and
# the raw loop given troupe's own kinds (the peer of the troupe run: the same
# custom resources to create and to write status to).
EXTRA_SCHEDULERS = ("troupe-native", "troupe-coscheduling", "raw-troupe")
TROUPE_RUNS = ("troupe", "troupe-native", "troupe-coscheduling")
RAW_RUNS = ("raw", "raw-troupe")


def scheduled_condition_type(podgroup_api: str) -> str:
    """The scheduled condition troupe writes on PodGroups of `podgroup_api` (and the raw loop, with
    --raw-group-status): troupe's own rule for native versions, PodGroupScheduled on the others."""
    group, _, version = podgroup_api.partition("/")
    return native.scheduled_condition(version) if group == native.GROUP else POD_GROUP_SCHEDULED


@dataclass(frozen=True)
class Shape:
    key: str
    gangs: int
    size: int  # pods per gang = minCount
    topology_key: str | None = None  # every PodGroup: schedulingConstraints.topology[0].key (TAS nodes)
    leaders: int = 0  # > 0: a tree per gang (a "replica"): root CompositePodGroup over leader + worker PodGroups

    @property
    def pods(self) -> int:
        return self.gangs * self.size

    @property
    def tree(self) -> bool:
        return self.leaders > 0

    @property
    def node_kind(self) -> str:
        """Which nodes the shape runs on: "default" (32 CPU), "tas" (upstream's TAS nodes, in racks), or
        "tree" (the TAS nodes, on a control plane with the CompositePodGroup gate too)."""
        return "tree" if self.tree else "tas" if self.topology_key else "default"

    def label(self) -> str:
        where = " in one rack" if self.topology_key else ""
        if self.tree:
            return f"{self.key}: {self.gangs} replicas x ({self.leaders} leader + {self.size - self.leaders} workers){where}"
        return f"{self.key}: {self.gangs} gangs x {self.size}{where}"

    def child_of(self, i: int) -> str:
        """A tree shape's child PodGroup of pod i of a replica: "leader" or "workers"."""
        return "leader" if i < self.leaders else "workers"

    def child_sizes(self) -> tuple[tuple[str, int], ...]:
        return (("leader", self.leaders), ("workers", self.size - self.leaders))


FULL_SHAPES = {
    "a": Shape("a", 1000, 3),
    "b": Shape("b", 3, 1000),
    "c": Shape("c", 10, 5000),
    "t": Shape("t", 750, 4, RACK_KEY),
    "l": Shape("l", 500, 8, RACK_KEY, leaders=1),
}
QUICK_SHAPES = {
    "a": Shape("a", 100, 3),
    "b": Shape("b", 3, 100),
    "c": Shape("c", 2, 500),
    "t": Shape("t", 50, 4, RACK_KEY),
    "l": Shape("l", 20, 8, RACK_KEY, leaders=1),
}
QUICK_NODES = 100

_SHAPE_RE = re.compile(r"^([a-z][a-z0-9]*)(?:=(\d+)x(\d+))?$")


def parse_shapes(text: str, quick: bool) -> list[Shape]:
    """``a,b,c`` or with sizes: ``a,b,c=10x2000`` (gangs x pods per gang)."""
    base = QUICK_SHAPES if quick else FULL_SHAPES
    out: list[Shape] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = _SHAPE_RE.match(part)
        if not m:
            raise ValueError(f"bad shape {part!r}: use a, b, c or KEY=GANGSxSIZE (e.g. c=10x2000)")
        key, gangs, size = m.group(1), m.group(2), m.group(3)
        if gangs:
            base_shape = base.get(key)
            if base_shape is not None:  # resized: keeps the shape's topology constraint
                out.append(dataclasses.replace(base_shape, gangs=int(gangs), size=int(size)))
            else:
                out.append(Shape(key, int(gangs), int(size)))
        elif key in base:
            out.append(base[key])
        else:
            raise ValueError(f"unknown shape {key!r} (known: {', '.join(base)}; or KEY=GANGSxSIZE)")
        if out[-1].gangs < 1 or out[-1].size < 1 or out[-1].gangs > 99_999 or out[-1].size > 99_999:
            raise ValueError(f"shape {part!r}: gangs and size must be 1..99999")
    return out


def fits(shape: Shape, nodes: int) -> str | None:
    """None if the shape fits the nodes (pods, cpu, memory in total; a gang in one rack); else why not."""
    per_node = math.ceil(shape.pods / nodes)
    cpu, mem = (TAS_NODE_CPU_MILLI, TAS_NODE_MEMORY_MI) if shape.topology_key else (NODE_CPU_MILLI, NODE_MEMORY_MI)
    if shape.pods > nodes * NODE_PODS:
        return f"{shape.pods} pods > {nodes} nodes x {NODE_PODS} pods"
    if per_node * POD_CPU_MILLI > cpu or per_node * POD_MEMORY_MI > mem:
        return f"{per_node} pods per node exceed a node's cpu/memory"
    if shape.topology_key and shape.size * POD_CPU_MILLI > nodes_per_rack(nodes) * cpu:
        return f"a gang of {shape.size} does not fit in a rack of {nodes_per_rack(nodes)} nodes"
    return None


def group_name(g: int) -> str:
    return f"g{g:05d}"


def child_name(g: int, child: str) -> str:
    """A tree shape's leaf PodGroup (child "leader" or "workers") of replica g; the root is group_name(g)."""
    return f"{group_name(g)}-{child}"


def pod_name(g: int, i: int) -> str:
    return f"g{g:05d}-{i:05d}"


def parse_pod_name(name: str) -> tuple[int, int] | None:
    """(group, member) of a pod_name(); None for other names."""
    if len(name) == 12 and name[0] == "g" and name[6] == "-":
        try:
            return int(name[1:6]), int(name[7:])
        except ValueError:
            return None
    return None


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def nodes_per_rack(nodes: int) -> int:
    """Upstream's racks of 100 nodes; below 500 nodes, 5 racks (so --quick has racks to choose from)."""
    return NODES_PER_RACK if nodes >= 5 * NODES_PER_RACK else max(1, nodes // 5)


def rack_of(i: int, nodes: int) -> str:
    return f"rack-{i // nodes_per_rack(nodes)}"


def node_index(name: str) -> int | None:
    """i of node_name(i); None for other names."""
    prefix, _, num = name.rpartition("-")
    return int(num) if prefix == "node" and num.isdigit() else None


def node_body_of(kind: str, i: int, nodes: int) -> dict[str, Any]:
    """Node i of ``nodes`` of a kind (Shape.node_kind)."""
    if kind == "default":
        return node_body(i)
    if kind not in ("tas", "tree"):
        raise ValueError(kind)
    body = node_body(i)
    name, rack = node_name(i), i // nodes_per_rack(nodes)
    body["metadata"]["labels"] = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "topology.kubernetes.io/zone": f"zone-{rack}",
        RACK_KEY: f"rack-{rack}",
    }
    res = {"cpu": TAS_NODE_CPU, "memory": TAS_NODE_MEMORY, "pods": str(NODE_PODS)}
    body["status"]["capacity"] = res
    body["status"]["allocatable"] = dict(res)
    return body


def node_body(i: int) -> dict[str, Any]:
    name = node_name(i)
    res = {"cpu": NODE_CPU, "memory": NODE_MEMORY, "pods": str(NODE_PODS)}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "topology.kubernetes.io/zone": f"zone-{i % ZONES}",
                "topology.kubernetes.io/region": f"region-{i % REGIONS}",
            },
        },
        "spec": {},
        "status": {
            "capacity": res,
            "allocatable": res,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "e2e bench"}],
        },
    }


@dataclass(frozen=True)
class Flavor:
    """What one scheduler needs on its objects."""

    podgroup_path: str  # under /apis/, with {ns}
    podgroup_api: str
    scheduler_name: str
    group_label: str | None  # the label that joins a pod to its group; None: spec.schedulingGroup (native)
    composite_path: str | None = None  # CompositePodGroups, under /apis/, with {ns}; None: no trees
    composite_api: str | None = None

    def composite(self, ns: str, g: int, min_groups: int, topology_key: str | None) -> dict[str, Any]:
        """Replica g's root: a gang of min_groups children, with the topology constraint."""
        if self.composite_api is None:
            raise ValueError(f"{self.podgroup_api} has no CompositePodGroup")
        spec: dict[str, Any] = {
            "workloadRef": {"workloadName": TREE_WORKLOAD, "templateName": "replica"},
            "schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
        }
        if topology_key:
            spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
        return {
            "apiVersion": self.composite_api,
            "kind": "CompositePodGroup",
            "metadata": {"name": group_name(g), "namespace": ns},
            "spec": spec,
        }

    def child_podgroup(self, ns: str, g: int, child: str, min_count: int) -> dict[str, Any]:
        """Replica g's leaf PodGroup `child` (a gang of min_count), under its root."""
        body = self.podgroup(ns, g, min_count)
        body["metadata"]["name"] = child_name(g, child)
        body["spec"]["parentCompositePodGroupName"] = group_name(g)
        if self.podgroup_api == NATIVE_PODGROUP_API:  # required with a parent (validation); never read
            body["spec"]["workloadRef"] = {"workloadName": TREE_WORKLOAD, "templateName": child}
        return body

    def podgroup(self, ns: str, g: int, min_count: int, topology_key: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any]
        if self.podgroup_api == COSCHEDULING_PODGROUP_API:
            if topology_key:
                raise ValueError("scheduler-plugins' PodGroup has no topology constraint: shape t has no such run")
            spec = {"minMember": min_count}
        else:
            spec = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
        if topology_key:  # the same field in troupe's CRD and in scheduling.k8s.io/v1beta1
            spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
        return {
            "apiVersion": self.podgroup_api,
            "kind": "PodGroup",
            "metadata": {"name": group_name(g), "namespace": ns},
            "spec": spec,
        }

    def pod(self, ns: str, g: int, i: int, group: str | None = None) -> dict[str, Any]:
        """Pod i of group g (of the PodGroup named group, for a tree shape's leaf)."""
        spec: dict[str, Any] = {
            "schedulerName": self.scheduler_name,
            "containers": [
                {
                    "name": "pause",
                    "image": IMAGE,
                    "resources": {"requests": {"cpu": f"{POD_CPU_MILLI}m", "memory": f"{POD_MEMORY_MI}Mi"}},
                }
            ],
        }
        meta: dict[str, Any] = {"name": pod_name(g, i), "namespace": ns}
        group = group or group_name(g)
        if self.group_label is None:
            spec["schedulingGroup"] = {"podGroupName": group}
        else:
            meta["labels"] = {self.group_label: group}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def flavor(scheduler: str) -> Flavor:
    native = f"/apis/{NATIVE_PODGROUP_API}/namespaces/{{ns}}/podgroups"
    native_cpg = (f"/apis/{NATIVE_COMPOSITE_API}/namespaces/{{ns}}/compositepodgroups", NATIVE_COMPOSITE_API)
    if scheduler in ("troupe", "raw-troupe"):
        return Flavor(
            f"/apis/{TROUPE_API_VERSION}/namespaces/{{ns}}/podgroups",
            TROUPE_API_VERSION,
            TROUPE_SCHEDULER_NAME if scheduler == "troupe" else RAW_SCHEDULER_NAME,
            POD_GROUP_LABEL,
            f"/apis/{TROUPE_API_VERSION}/namespaces/{{ns}}/compositepodgroups",
            TROUPE_API_VERSION,
        )
    if scheduler == "troupe-coscheduling":
        return Flavor(
            f"/apis/{COSCHEDULING_PODGROUP_API}/namespaces/{{ns}}/podgroups",
            COSCHEDULING_PODGROUP_API,
            TROUPE_SCHEDULER_NAME,
            COSCHEDULING_LABEL,
        )
    if scheduler == "troupe-native":
        return Flavor(native, NATIVE_PODGROUP_API, TROUPE_SCHEDULER_NAME, None, *native_cpg)
    if scheduler == "upstream":
        return Flavor(native, NATIVE_PODGROUP_API, "default-scheduler", None, *native_cpg)
    if scheduler == "raw":
        return Flavor(native, NATIVE_PODGROUP_API, RAW_SCHEDULER_NAME, None, *native_cpg)
    raise ValueError(scheduler)


# ------------------------------------------------------------------ nodes


async def create_nodes(
    kube: Kube, count: int, concurrency: int, progress: Callable[[str], None], kind: str = "default"
) -> float:
    """Create node-00000.. of a kind concurrently (skipping ones that exist); seconds taken.
    Reads the first and last node back to check that status.allocatable stuck
    (and patches the status subresource if it did not)."""
    t0 = time.monotonic()
    it = iter(range(count))
    done = 0

    async def worker() -> None:
        nonlocal done
        for i in it:
            await kube.request("POST", "/api/v1/nodes", node_body_of(kind, i, count), ok=(409,), decode=False)
            done += 1
            if done % 1000 == 0:
                progress(f"nodes: {done}/{count} created")

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    for i in {0, count - 1}:
        node = await kube.request("GET", f"/api/v1/nodes/{node_name(i)}")
        alloc = (node.get("status") or {}).get("allocatable") or {}
        want = node_body_of(kind, i, count)["status"]["allocatable"]
        if alloc.get("pods") != want["pods"] or alloc.get("cpu") != want["cpu"]:
            progress(f"nodes: status did not stick on create ({alloc}); patching the status subresource")
            await _patch_node_status(kube, count, concurrency, kind)
            break
    return time.monotonic() - t0


async def _patch_node_status(kube: Kube, count: int, concurrency: int, kind: str) -> None:
    it = iter(range(count))

    async def worker() -> None:
        for i in it:
            body = json.dumps({"status": node_body_of(kind, i, count)["status"]}).encode()
            async with kube.session.patch(
                f"{kube.creds.server}/api/v1/nodes/{node_name(i)}/status",
                data=body,
                headers={"Content-Type": "application/merge-patch+json"},
            ) as r:
                if r.status >= 300:
                    raise ApiError("PATCH", f"/api/v1/nodes/{node_name(i)}/status", r.status, await r.text())

    await asyncio.gather(*(worker() for _ in range(concurrency)))


# ----------------------------------------------------------------- creator


@dataclass
class Creation:
    """What the creator did, on the client's monotonic clock."""

    shape: Shape
    started: float = 0.0
    finished: float = 0.0
    pod_created: list[float] = field(default_factory=list)  # per pod (g * size + i); nan until created
    pods_created: int = 0
    podgroups_created: int = 0
    errors: list[str] = field(default_factory=list)

    def group_last_created(self, g: int) -> float:
        s = self.shape.size
        return max(self.pod_created[g * s : (g + 1) * s])

    @property
    def first_created(self) -> float:
        return min((t for t in self.pod_created if t == t), default=math.nan)

    @property
    def last_created(self) -> float:
        return max((t for t in self.pod_created if t == t), default=math.nan)

    @property
    def rate(self) -> float:
        """Pods created per second, from the first request sent to the last create returned."""
        span = self.last_created - self.started
        return self.pods_created / span if span > 0 else math.nan


async def create_workload(
    kube: Kube, ns: str, shape: Shape, fl: Flavor, concurrency: int, creation: Creation
) -> Creation:
    """Create the shape's PodGroups and pods in ``ns`` (see the module docstring)."""
    size = shape.size
    creation.pod_created = [math.nan] * shape.pods
    pg_ready = [asyncio.Event() for _ in range(shape.gangs)]
    pods_path = f"/api/v1/namespaces/{ns}/pods"
    pg_path = fl.podgroup_path.format(ns=ns)
    cpg_path = (fl.composite_path or "").format(ns=ns)

    def items():
        for g in range(shape.gangs):
            yield ("pg", g, 0)
            for i in range(size):
                yield ("pod", g, i)

    it = items()

    async def worker() -> None:
        for kind, g, i in it:
            try:
                if kind == "pg" and shape.tree:  # the root, then its children, before any pod
                    root = fl.composite(ns, g, len(shape.child_sizes()), shape.topology_key)
                    await kube.request("POST", cpg_path, root, ok=(409,), decode=False)
                    for child, n in shape.child_sizes():
                        await kube.request("POST", pg_path, fl.child_podgroup(ns, g, child, n), ok=(409,), decode=False)
                    creation.podgroups_created += 1
                    pg_ready[g].set()
                elif kind == "pg":
                    body = fl.podgroup(ns, g, size, shape.topology_key)
                    await kube.request("POST", pg_path, body, ok=(409,), decode=False)
                    creation.podgroups_created += 1
                    pg_ready[g].set()
                else:
                    await pg_ready[g].wait()
                    leaf = child_name(g, shape.child_of(i)) if shape.tree else None
                    await kube.request("POST", pods_path, fl.pod(ns, g, i, leaf), ok=(409,), decode=False)
                    creation.pod_created[g * size + i] = time.monotonic()
                    creation.pods_created += 1
            except Exception as exc:  # noqa: BLE001 - recorded, the run reports it
                if kind == "pg":
                    pg_ready[g].set()  # its pods are still sent (and will wait)
                creation.errors.append(f"{kind} {group_name(g)}/{i}: {exc}")

    creation.started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    creation.finished = time.monotonic()
    return creation


# ------------------------------------------------------------------ check


def partial_groups(shape: Shape, node_of: list[str | None]) -> int:
    """Gangs (replicas, for a tree shape) with some but not all of their pods bound."""
    s = shape.size
    return sum(1 for g in range(shape.gangs) if 0 < sum(n is not None for n in node_of[g * s : (g + 1) * s]) < s)


def topology_check(shape: Shape, nodes: int, node_of: list[str | None]) -> dict[str, Any]:
    """For a shape with a topology key: the gangs whose bound pods are in more
    than one rack (node_body_of's labels, from the node names), from the node
    of every pod (None: not bound)."""
    per_gang: dict[int, set[str]] = {}
    for k, node in enumerate(node_of):
        if node is None:
            continue
        i = node_index(node)
        per_gang.setdefault(k // shape.size, set()).add(rack_of(i, nodes) if i is not None else f"<{node}>")
    spans = [len(d) for d in per_gang.values()]
    gangs_in: dict[str, int] = {}  # domain -> gangs wholly inside it
    for d in per_gang.values():
        if len(d) == 1:
            (only,) = d
            gangs_in[only] = gangs_in.get(only, 0) + 1
    return {
        "key": shape.topology_key,
        "gangs": shape.gangs,
        "gangs_with_bound_pods": len(per_gang),
        "gangs_per_domain": dict(sorted(gangs_in.items(), key=lambda kv: (len(kv[0]), kv[0]))),
        "violations": sum(1 for n in spans if n > 1),
        "max_domains_per_gang": max(spans, default=0),
        "domains_used": len(set().union(*per_gang.values())) if per_gang else 0,
    }


# ---------------------------------------------------------------- cleanup


async def delete_all_pods(kube: Kube, ns: str, timeout: float = 600.0) -> float:
    """deletecollection with gracePeriodSeconds=0 (no kubelet: bound pods go only
    so), for pods and every kind of PodGroup; wait until the pod list is empty.
    Seconds taken."""
    t0 = time.monotonic()
    opts = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    deadline = t0 + timeout
    while True:
        try:
            await kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods", opts, decode=False, retries=1)
        except (TimeoutError, ApiError) as exc:  # a long deletecollection can time out server-side; poll and repeat
            if isinstance(exc, ApiError) and exc.status not in (500, 504):
                raise
        left = await kube.request("GET", f"/api/v1/namespaces/{ns}/pods", params={"limit": "1"})
        if not left.get("items"):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"pods in {ns} still there after {timeout:.0f}s")
        await asyncio.sleep(1.0)
    for path in (
        f"/apis/{TROUPE_API_VERSION}/namespaces/{ns}/podgroups",
        f"/apis/{NATIVE_PODGROUP_API}/namespaces/{ns}/podgroups",
        f"/apis/{COSCHEDULING_PODGROUP_API}/namespaces/{ns}/podgroups",
        f"/apis/{TROUPE_API_VERSION}/namespaces/{ns}/compositepodgroups",
        f"/apis/{NATIVE_COMPOSITE_API}/namespaces/{ns}/compositepodgroups",  # 404 without the gate
    ):
        await kube.request("DELETE", path, opts, decode=False, ok=(404,))
    return time.monotonic() - t0

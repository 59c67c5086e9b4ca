"""The benchmark shapes: upstream scheduler_perf workloads, as API-shaped bodies.

Upstream (test/integration/scheduler_perf/podgroup/gangscheduling and
misc/performance-config.yaml) uses `5000Nodes_1000Gangs_3000Pods`,
`5000Nodes_3Gangs_3000Pods_1000PerGroup` and `SchedulingBasic/5000Nodes_10000Pods`;
troupe adds a 10 x 5000 gang shape (50 000 pods on 550 000 pod slots: fits).
Pods ask for 100m CPU / 100Mi as upstream's gang-pod.yaml; gang minCount = size.
Nodes are larger than upstream's node-default.yaml (32 CPU / 128Gi instead of
4 / 32Gi, 110 pods) and carry hostname / zone / region labels.

Shape t is upstream's topology-aware shape (podgroup/tas/performance-config.yaml,
`TopologyAwareScheduling/5000Nodes_750Gangs_3000Pods`) as its templates have
it: nodes of 4 CPU / 32Gi / 110 pods labelled `topology.kubernetes.io/zone` and
`topology.kubernetes.io/rack` = `zone-`/`rack-{i // 100}` (50 racks of 100
nodes), 750 gangs of 4 (minCount 4), every PodGroup with
`schedulingConstraints: {topology: [{key: topology.kubernetes.io/rack}]}`: a
gang must land inside one rack.

Shapes r and g are devices: 5000 nodes of 4 CPU / 32Gi / 110 pods (no racks)
with 8 GPUs each, 500 gangs of 4 pods (minCount 4), each pod asking one GPU.
Shape r (DRA) publishes the GPUs as one ResourceSlice per node (driver
`gpu.example.com`, pool = node name) with one DeviceClass selecting the
driver, and gives every pod its own ResourceClaim (namespace bench, name =
pod name, one request `exactly: {deviceClassName: gpu.example.com}`) named
in `spec.resourceClaims`. Shape g is the same cluster with the GPUs as the
extended resource `nvidia.com/gpu: 8` on the nodes and `nvidia.com/gpu: 1`
in each pod's requests and limits: no DRA objects.

Bodies are generated from an index on demand, so the benchmark keeps no copy
of 50 000 pod bodies (that would inflate the RSS it reports).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scheduler.api.constants import API_VERSION, DEFAULT_SCHEDULER_NAME, POD_GROUP_LABEL
from scheduler.api.dra import DELETE_PROTECTION_FINALIZER

NAMESPACE = "bench"
ZONES = 10  # topology.kubernetes.io/zone values (node i is in zone i % ZONES)
REGIONS = 2
RACK_KEY = "topology.kubernetes.io/rack"
NODES_PER_RACK = 100  # upstream's tas/templates/node.yaml: rack-{{DivideInt .Index 100}}
DRA_DRIVER = "gpu.example.com"  # shape r: the driver of the ResourceSlices, also the DeviceClass's name
EXTENDED_GPU = "nvidia.com/gpu"  # shape g: the extended resource
DRA = "dra"  # Shape.devices: GPUs as ResourceSlices, a ResourceClaim per pod
EXTENDED = "extended"  # Shape.devices: GPUs as the extended resource EXTENDED_GPU


@dataclass(frozen=True, slots=True)
class Shape:
    key: str  # a, b, c, d, t, g, r
    name: str  # upstream-style workload name
    nodes: int
    gangs: int  # 0: pods without any PodGroup
    pods_per_gang: int  # or, with gangs == 0, the number of pods
    # Every PodGroup asks for schedulingConstraints.topology[0].key = this (shape t);
    # its nodes are then upstream's TAS nodes (4 CPU, racks of NODES_PER_RACK).
    topology_key: str | None = None
    # DRA or EXTENDED: every node has `devices_per_node` GPUs, every pod asks for one (shapes r, g);
    # nodes are then 4 CPU / 32Gi / 110 pods.
    devices: str | None = None
    devices_per_node: int = 0

    @property
    def pods(self) -> int:
        return self.gangs * self.pods_per_gang if self.gangs else self.pods_per_gang

    @property
    def largest_unit(self) -> int:
        return self.pods_per_gang if self.gangs else 1

    def group_of(self, i: int) -> str | None:
        return f"gang-{i // self.pods_per_gang:05d}" if self.gangs else None


FULL: dict[str, Shape] = {
    "a": Shape("a", "5000Nodes_1000Gangs_3000Pods", 5000, 1000, 3),
    "b": Shape("b", "5000Nodes_3Gangs_3000Pods_1000PerGroup", 5000, 3, 1000),
    "c": Shape("c", "5000Nodes_10Gangs_50000Pods_5000PerGroup", 5000, 10, 5000),
    "d": Shape("d", "5000Nodes_10000Pods_NoGroups", 5000, 0, 10000),
    "t": Shape("t", "TAS/5000Nodes_750Gangs_3000Pods", 5000, 750, 4, RACK_KEY),
    "g": Shape("g", "ExtendedResource/5000Nodes_500Gangs_2000Pods_8GPUsPerNode", 5000, 500, 4, None, EXTENDED, 8),
    "r": Shape("r", "DRA/5000Nodes_500Gangs_2000Pods_8DevicesPerNode", 5000, 500, 4, None, DRA, 8),
}

# --quick: 500 nodes and a tenth of the pods (fewer gangs where there are many, smaller gangs otherwise).
QUICK: dict[str, Shape] = {
    "a": Shape("a", "500Nodes_100Gangs_300Pods", 500, 100, 3),
    "b": Shape("b", "500Nodes_3Gangs_300Pods_100PerGroup", 500, 3, 100),
    "c": Shape("c", "500Nodes_10Gangs_5000Pods_500PerGroup", 500, 10, 500),
    "d": Shape("d", "500Nodes_1000Pods_NoGroups", 500, 0, 1000),
    "t": Shape("t", "TAS/500Nodes_50Gangs_200Pods", 500, 50, 4, RACK_KEY),
    "g": Shape("g", "ExtendedResource/500Nodes_50Gangs_200Pods_8GPUsPerNode", 500, 50, 4, None, EXTENDED, 8),
    "r": Shape("r", "DRA/500Nodes_50Gangs_200Pods_8DevicesPerNode", 500, 50, 4, None, DRA, 8),
}


def shapes(quick: bool) -> dict[str, Shape]:
    return QUICK if quick else FULL


def shape_node_body(shape: Shape, i: int) -> dict[str, Any]:
    """Node i of the shape: upstream's TAS node for a shape with a topology key, a GPU node for a shape
    with devices, else node_body(i)."""
    if shape.topology_key:
        return tas_node_body(i)
    if shape.devices:
        return gpu_node_body(shape, i)
    return node_body(i)


def tas_node_body(i: int) -> dict[str, Any]:
    """upstream's podgroup/tas/templates/node.yaml: 4 CPU / 32Gi / 110 pods, zone = rack = i // 100."""
    body = node_body(i)
    domain = i // NODES_PER_RACK
    body["metadata"]["labels"] = {
        "kubernetes.io/hostname": body["metadata"]["name"],
        "topology.kubernetes.io/zone": f"zone-{domain}",
        RACK_KEY: f"rack-{domain}",
    }
    cap = {"pods": "110", "cpu": "4", "memory": "32Gi"}
    body["status"]["capacity"] = dict(cap)
    body["status"]["allocatable"] = dict(cap)
    return body


def gpu_node_body(shape: Shape, i: int) -> dict[str, Any]:
    """Shapes r and g: 4 CPU / 32Gi / 110 pods (upstream's node-default.yaml); with EXTENDED, also
    `nvidia.com/gpu: <devices_per_node>` (with DRA the GPUs are in the node's ResourceSlice)."""
    body = node_body(i)
    cap = {"pods": "110", "cpu": "4", "memory": "32Gi"}
    if shape.devices == EXTENDED:
        cap[EXTENDED_GPU] = str(shape.devices_per_node)
    body["status"]["capacity"] = dict(cap)
    body["status"]["allocatable"] = dict(cap)
    return body


def node_name(i: int) -> str:
    return f"node-{i:05d}"


def node_body(i: int) -> dict[str, Any]:
    name = node_name(i)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {
                "kubernetes.io/hostname": name,
                "topology.kubernetes.io/zone": f"zone-{i % ZONES}",
                "topology.kubernetes.io/region": f"region-{i % REGIONS}",
            },
        },
        "spec": {},
        "status": {
            "capacity": {"pods": "110", "cpu": "32", "memory": "128Gi"},
            "allocatable": {"pods": "110", "cpu": "32", "memory": "128Gi"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def podgroup_body(shape: Shape, g: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": shape.pods_per_gang}}}
    if shape.topology_key:
        spec["schedulingConstraints"] = {"topology": [{"key": shape.topology_key}]}
    return {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": f"gang-{g:05d}", "namespace": NAMESPACE, "uid": f"uid-pg-{g}", "generation": 1},
        "spec": spec,
    }


def pod_name(i: int) -> str:
    return f"pod-{i:06d}"  # zero-padded: name order == creation order


def pod_index(name: str) -> int:
    return int(name.rsplit("-", 1)[1])


def pod_body(shape: Shape, i: int, node_name: str = "") -> dict[str, Any]:
    name = pod_name(i)
    requests = {"cpu": "100m", "memory": "100Mi"}
    if shape.devices == EXTENDED:
        requests[EXTENDED_GPU] = "1"
        body = api_pod(name, shape.group_of(i), requests, node_name, "Pending", limits={EXTENDED_GPU: "1"})
    else:
        body = api_pod(name, shape.group_of(i), requests, node_name, "Pending")
    if shape.devices == DRA:
        body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": name}]  # the claim is named as the pod
    return body


def api_pod(
    name: str,
    group: str | None,
    requests: dict[str, str],
    node_name: str,
    phase: str,
    priority: int | None = None,
    limits: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Pod as the API returns it: one pause container asking `requests` (and `limits`, if given)."""
    resources: dict[str, Any] = {"requests": requests}
    if limits:
        resources["limits"] = limits
    spec: dict[str, Any] = {
        "schedulerName": DEFAULT_SCHEDULER_NAME,
        "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1", "resources": resources}],
    }
    if priority is not None:
        spec["priority"] = priority
    if node_name:
        spec["nodeName"] = node_name
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-{name}",
            "labels": {POD_GROUP_LABEL: group} if group else {},
        },
        "spec": spec,
        "status": {"phase": phase},
    }


# ------------------------------------------------------------------ DRA (r)


def device_class_body() -> dict[str, Any]:
    """Shape r's one DeviceClass: every device of the driver."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": DRA_DRIVER, "uid": f"uid-class-{DRA_DRIVER}"},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}]},
    }


def resource_slice_body(shape: Shape, i: int) -> dict[str, Any]:
    """Node i's ResourceSlice: its `devices_per_node` GPUs, pool = node name, one slice per pool."""
    node = node_name(i)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpus", "uid": f"uid-slice-{node}"},
        "spec": {
            "driver": DRA_DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": f"gpu-{k}",
                    "attributes": {"model": {"string": "a100"}},
                    "capacity": {"memory": {"value": "80Gi"}},
                }
                for k in range(shape.devices_per_node)
            ],
        },
    }


def resource_claim_body(
    i: int, allocation: dict[str, Any] | None = None, resource_version: str = "1"
) -> dict[str, Any]:
    """Pod i's ResourceClaim (named as the pod): one GPU of the class. With `allocation` (the API form of
    `status.allocation`), as the API shows it once the pod's PreBind wrote it: allocated and reserved for
    the pod."""
    name = pod_name(i)
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"uid-claim-{name}",
            "resourceVersion": resource_version,
        },
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRA_DRIVER}}]}},
    }
    if allocation is not None:
        body["metadata"]["finalizers"] = [DELETE_PROTECTION_FINALIZER]
        body["status"] = {
            "allocation": allocation,
            "reservedFor": [{"resource": "pods", "name": name, "uid": f"uid-{name}"}],
        }
    return body


# ------------------------------------------------------------- preemption (p)


@dataclass(frozen=True, slots=True)
class PreemptShape:
    """Shape p: every node full of running low-priority 3-pod gangs, then
    high-priority gangs that can only fit by evicting some of them.

    Nodes have 4 CPU; low pods ask for 1 CPU, high pods for 4: a high pod
    needs a whole node, a high gang of 8 needs 8 freed nodes. Half of the
    nodes hold gangs packed on consecutive slots (4 gangs fill 3 nodes, so
    8 nodes cost 11 gangs, 33 pods); the other half hold gangs spread one pod
    per node over 3 consecutive nodes (round robin: a node carries pods of 4
    gangs, so freeing whole nodes there costs more gangs). So which gangs
    are chosen matters. 4 x nodes is not a multiple of 3: the last slots
    hold lone low-priority pods.
    """

    key: str
    name: str
    nodes: int
    high_gangs: int
    high_size: int = 8
    low_size: int = 3
    node_cpu: int = 4
    low_cpu: int = 1
    high_cpu: int = 4
    low_priority: int = 0
    high_priority: int = 1000

    @property
    def slots(self) -> int:
        return self.nodes * self.node_cpu // self.low_cpu

    @property
    def low_gangs(self) -> int:
        return self.slots // self.low_size

    @property
    def low_pods(self) -> int:
        return self.slots  # gang members, then lone pods in the leftover slots

    @property
    def high_pods(self) -> int:
        return self.high_gangs * self.high_size

    @property
    def spread_nodes(self) -> int:
        return self.nodes // 2

    def low_node(self, i: int) -> int:
        """The node low pod i runs on (i = slot index, in creation order).

        The packed gangs come first by name but run on the second half of the
        nodes: the baseline's reprieve (ties broken by name) spares packed
        gangs first, the gang search's ranking (ties broken by node row)
        looks at spread nodes first. Neither gets its easy side for free."""
        per_node = self.node_cpu // self.low_cpu
        packed_slots = (self.nodes - self.spread_nodes) * per_node
        if i < packed_slots:
            return self.spread_nodes + i // per_node  # a gang on 1 or 2 nodes
        return (i - packed_slots) % self.spread_nodes  # a gang's 3 pods on 3 consecutive nodes

    def low_group(self, i: int) -> str | None:
        g = i // self.low_size
        return f"low-{g:05d}" if g < self.low_gangs else None


PREEMPT_FULL = PreemptShape("p", "5000Nodes_Preempt_100Gangs_x8", 5000, 100)
PREEMPT_QUICK = PreemptShape("p", "500Nodes_Preempt_10Gangs_x8", 500, 10)


def preempt_shape(quick: bool) -> PreemptShape:
    return PREEMPT_QUICK if quick else PREEMPT_FULL


def preempt_node_body(shape: PreemptShape, i: int) -> dict[str, Any]:
    body = node_body(i)
    cap = {"pods": "110", "cpu": str(shape.node_cpu), "memory": "64Gi"}
    body["status"]["capacity"] = dict(cap)
    body["status"]["allocatable"] = dict(cap)
    return body


def preempt_podgroup_body(name: str, size: int, priority: int, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": uid, "generation": 1},
        "spec": {"schedulingPolicy": {"gang": {"minCount": size}}, "priority": priority},
    }


def _preempt_pod(name: str, group: str | None, cpu: int, priority: int, node_name: str) -> dict[str, Any]:
    requests = {"cpu": str(cpu), "memory": "1Gi"}
    return api_pod(name, group, requests, node_name, "Running" if node_name else "Pending", priority)


def low_pod_body(shape: PreemptShape, i: int) -> dict[str, Any]:
    """Low pod i, running (spec.nodeName set): it was there before the bench."""
    node = f"node-{shape.low_node(i):05d}"
    return _preempt_pod(f"low-{i:06d}", shape.low_group(i), shape.low_cpu, shape.low_priority, node)


def high_name(g: int) -> str:
    return f"high-{g:03d}"


def high_pod_body(shape: PreemptShape, g: int, j: int, node_name: str = "") -> dict[str, Any]:
    return _preempt_pod(f"{high_name(g)}-{j}", high_name(g), shape.high_cpu, shape.high_priority, node_name)

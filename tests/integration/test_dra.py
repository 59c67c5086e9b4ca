"""DynamicResources end to end: the real scheduler process, as its
ServiceAccount, against the real kube-apiserver serving resource.k8s.io/v1.

The test publishes ResourceSlices as a DRA driver would (one slice per node,
its pool named after the node) and a DeviceClass; pods reference
ResourceClaims by name. troupe allocates the devices, writes each claim as
kube-scheduler does (finalizer, status.allocation, reservedFor) before any
pod of the gang is bound, and a gang that needs more devices than exist
waits whole, allocating nothing.
"""

from __future__ import annotations

from typing import Any

import pytest
from objects import bound, create, pod, podgroup, wait_condition, wait_pod_unschedulable
from troupe_process import TroupeProcess, supervised
from wait import wait_for

pytestmark = pytest.mark.integration

DRIVER = "gpu.example.com"


@pytest.fixture(scope="module")
def troupe(installed, tmp_path_factory):
    yield from supervised(TroupeProcess(installed.scheduler_kubeconfig, tmp_path_factory.mktemp("troupe")))


@pytest.fixture
def devices(installed):
    """`devices(node, count, memory)` publishes a node's GPUs; the DeviceClass
    exists; every slice and class is removed after the test."""
    installed.kubectl("delete", "resourceslices,deviceclasses", "--all", "--wait=false", check=False)
    create(
        installed,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
    )

    def publish(
        node: str, count: int, memory: str = "80Gi", taints: dict[int, list[dict[str, str]]] | None = None
    ) -> None:
        create(
            installed,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": f"{node}-gpus"},
                "spec": {
                    "driver": DRIVER,
                    "nodeName": node,
                    "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {
                            "name": f"gpu-{i}",
                            "attributes": {"model": {"string": "a100"}, "index": {"int": i}},
                            "capacity": {"memory": {"value": memory}},
                            **({"taints": (taints or {})[i]} if i in (taints or {}) else {}),
                        }
                        for i in range(count)
                    ],
                },
            },
        )

    yield publish
    installed.kubectl("delete", "resourceslices,deviceclasses,devicetaintrules", "--all", "--wait=false", check=False)


def claim(
    ns: str, name: str, selector: str | None = None, tolerations: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": DRIVER}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    if tolerations:
        exactly["tolerations"] = tolerations
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }


def gpu_pod(ns: str, name: str, claim_name: str, group: str | None = None) -> dict[str, Any]:
    body = pod(ns, name, group=group, cpu="100m")
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    return body


def group_sharing(ns: str, name: str, size: int, entry: dict[str, str]) -> list[dict[str, Any]]:
    """A gang PodGroup listing `entry` in spec.resourceClaims, and its pods naming the same entry."""
    group = podgroup(ns, name, size)
    group["spec"]["resourceClaims"] = [entry]
    pods = []
    for i in range(size):
        body = pod(ns, f"{name}-{i}", group=name, cpu="1")
        body["spec"]["resourceClaims"] = [entry]
        pods.append(body)
    return [group, *pods]


def claims(cluster, ns: str) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c for c in cluster.get_json("resourceclaims", "-n", ns)["items"]}


def test_a_gang_with_one_gpu_per_pod_is_spread_by_devices(installed, troupe, nodes, devices, namespace):
    c, ns = installed, namespace
    for n in ("node-0", "node-1"):
        nodes(n, cpu="8")  # cpu alone would hold all four pods on one node
        devices(n, 2)
    create(c, *[claim(ns, f"c{i}") for i in range(4)])
    create(c, podgroup(ns, "train", 4), *[gpu_pod(ns, f"train-{i}", f"c{i}", group="train") for i in range(4)])
    placed = wait_for(lambda: len(b := bound(c, ns)) == 4 and b, timeout=30, message="4 pods bound")
    assert sorted(placed.values()) == ["node-0", "node-0", "node-1", "node-1"], placed
    got = claims(c, ns)
    pods = c.get_json("pods", "-n", ns)["items"]
    uid = {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}
    seen = set()
    for i in range(4):
        cl = got[f"c{i}"]
        results = cl["status"]["allocation"]["devices"]["results"]
        assert len(results) == 1 and results[0]["driver"] == DRIVER and results[0]["request"] == "gpu"
        # The device is on the node the pod was bound to (pool = node), and only this claim has it.
        assert results[0]["pool"] == placed[f"train-{i}"], (cl["status"], placed)
        seen.add((results[0]["pool"], results[0]["device"]))
        assert cl["status"]["reservedFor"] == [{"resource": "pods", "name": f"train-{i}", "uid": uid[f"train-{i}"]}]
        assert "resource.kubernetes.io/delete-protection" in cl["metadata"]["finalizers"]
        selector = cl["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]
        assert selector == {"key": "metadata.name", "operator": "In", "values": [placed[f"train-{i}"]]}
    assert len(seen) == 4


def test_a_gang_needing_more_gpus_than_exist_waits_whole_and_allocates_nothing(
    installed, troupe, nodes, devices, namespace
):
    c, ns = installed, namespace
    nodes("node-0", cpu="8")
    devices("node-0", 3)
    create(c, *[claim(ns, f"c{i}") for i in range(4)])
    create(c, podgroup(ns, "big", 4), *[gpu_pod(ns, f"big-{i}", f"c{i}", group="big") for i in range(4)])
    cond = wait_condition(c, ns, "big", "False", "Unschedulable")
    assert "cannot allocate all claims" in cond["message"], cond
    assert bound(c, ns) == {}
    for name, cl in claims(c, ns).items():
        assert not (cl.get("status") or {}).get("allocation"), (name, cl.get("status"))


def test_a_selector_on_a_capacity_quantity_picks_the_node_with_big_gpus(installed, troupe, nodes, devices, namespace):
    c, ns = installed, namespace
    nodes("small", cpu="8")
    nodes("large", cpu="8")
    devices("small", 4, memory="16Gi")
    devices("large", 1, memory="80Gi")
    create(c, claim(ns, "big-mem", f'device.capacity["{DRIVER}"].memory.compareTo(quantity("40Gi")) >= 0'))
    create(c, gpu_pod(ns, "solo", "big-mem"))
    placed = wait_for(lambda: bound(c, ns), timeout=30, message="the pod bound")
    assert placed == {"solo": "large"}
    result = claims(c, ns)["big-mem"]["status"]["allocation"]["devices"]["results"][0]
    assert (result["pool"], result["device"]) == ("large", "gpu-0")


def test_a_deleted_pod_releases_its_claim_and_the_device_is_used_again(installed, troupe, nodes, devices, namespace):
    c, ns = installed, namespace
    nodes("node-0", cpu="8")
    devices("node-0", 1)
    create(c, claim(ns, "first"), gpu_pod(ns, "first", "first"))
    wait_for(lambda: bound(c, ns) == {"first": "node-0"}, timeout=30, message="the first pod bound")
    assert claims(c, ns)["first"]["status"]["allocation"]
    # The only device is taken: a second claim's pod waits.
    create(c, claim(ns, "second"), gpu_pod(ns, "second", "second"))
    c.kubectl("delete", "pod", "first", "-n", ns, "--grace-period=0", "--force")
    # Without kube-controller-manager, troupe releases the claim: no consumer, no allocation, no finalizer.
    released = wait_for(
        lambda: (
            not (cl := claims(c, ns)["first"]).get("status", {}).get("allocation")
            and not cl["metadata"].get("finalizers")
            and cl
        ),
        timeout=30,
        message="claim first released",
    )
    assert not released.get("status", {}).get("reservedFor"), released["status"]
    wait_for(lambda: bound(c, ns) == {"second": "node-0"}, timeout=30, message="the second pod bound on the freed GPU")


def test_a_group_claim_on_a_multi_node_pool_is_allocated_once_for_the_podgroup(
    installed, troupe, nodes, devices, namespace
):
    c, ns = installed, namespace
    for n in ("fabric-0", "fabric-1"):
        nodes(n, cpu="2", labels={"example.com/fabric": "f1"})
    nodes("plain", cpu="8")  # most room, but no interconnect
    devices("plain", 1)  # a DeviceClass exists; this node's GPU is not what the claim asks
    create(
        c,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "fabric-f1"},
            "spec": {
                "driver": DRIVER,
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "example.com/fabric", "operator": "In", "values": ["f1"]}]}
                    ]
                },
                "pool": {"name": "fabric-f1", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "link-0", "attributes": {"kind": {"string": "interconnect"}}}],
            },
        },
        claim(ns, "fabric", f'device.attributes["{DRIVER}"].kind == "interconnect"'),
    )
    create(c, *group_sharing(ns, "train", 4, {"name": "fabric", "resourceClaimName": "fabric"}))
    placed = wait_for(lambda: len(b := bound(c, ns)) == 4 and b, timeout=30, message="4 pods bound")
    assert sorted(placed.values()) == ["fabric-0", "fabric-0", "fabric-1", "fabric-1"], placed
    fabric = claims(c, ns)["fabric"]
    results = fabric["status"]["allocation"]["devices"]["results"]
    assert [(r["pool"], r["device"]) for r in results] == [("fabric-f1", "link-0")]
    uid = c.get_json("podgroup", "train", "-n", ns)["metadata"]["uid"]
    assert fabric["status"]["reservedFor"] == [
        {"apiGroup": "scheduling.troupe.dev", "resource": "podgroups", "name": "train", "uid": uid}
    ]
    terms = fabric["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["key"] == "example.com/fabric"
    # The group goes: its claim is released and deallocated.
    c.kubectl("delete", "podgroup", "train", "-n", ns)
    wait_for(
        lambda: not claims(c, ns)["fabric"].get("status", {}).get("allocation"),
        timeout=30,
        message="the group claim deallocated after its PodGroup was deleted",
    )


def test_a_podgroup_claim_from_a_template_is_made_allocated_and_deleted_with_its_group(
    installed, troupe, nodes, devices, namespace
):
    c, ns = installed, namespace
    nodes("node-0", cpu="8")
    devices("node-0", 2)
    create(
        c,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": ns},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}},
        },
    )
    create(c, *group_sharing(ns, "train", 2, {"name": "gpu", "resourceClaimTemplateName": "one-gpu"}))
    placed = wait_for(lambda: len(b := bound(c, ns)) == 2 and b, timeout=30, message="2 pods bound")
    assert set(placed.values()) == {"node-0"}
    made = claims(c, ns)["train-gpu"]
    pg = c.get_json("podgroup", "train", "-n", ns)
    assert made["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
    owner = made["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "PodGroup",
        "train",
        pg["metadata"]["uid"],
        True,
    )
    assert pg["status"]["resourceClaimStatuses"] == [{"name": "gpu", "resourceClaimName": "train-gpu"}]
    assert len(made["status"]["allocation"]["devices"]["results"]) == 1  # one GPU for the group, not one per pod
    assert made["status"]["reservedFor"][0]["resource"] == "podgroups"
    c.kubectl("delete", "podgroup", "train", "-n", ns)
    wait_for(lambda: "train-gpu" not in claims(c, ns), timeout=30, message="the group's claim deleted with it")


UNHEALTHY = {"key": "gpu.example.com/unhealthy", "value": "ecc", "effect": "NoSchedule"}


def test_a_tainted_gpu_goes_only_to_a_claim_that_tolerates_it(installed, troupe, nodes, devices, namespace):
    """Kubernetes 1.37 device taints: node-0's only GPU is tainted NoSchedule
    by its driver, node-1's is not. A claim without tolerations gets
    node-1's; one that tolerates the taint may have node-0's, and its
    allocation records the toleration, as upstream writes it."""
    c, ns = installed, namespace
    nodes("node-0", cpu="8")
    nodes("node-1", cpu="8")
    devices("node-0", 1, taints={0: [UNHEALTHY]})
    devices("node-1", 1)
    create(c, claim(ns, "plain"), gpu_pod(ns, "plain", "plain"))
    wait_for(lambda: bound(c, ns).get("plain") == "node-1", timeout=30, message="plain bound to node-1")
    create(c, claim(ns, "late"), gpu_pod(ns, "late", "late"))  # only the tainted GPU is left
    wait_pod_unschedulable(c, ns, "late")  # the only free GPU is tainted
    tolerating = [{"key": "gpu.example.com/unhealthy", "operator": "Exists", "effect": "NoSchedule"}]
    create(c, claim(ns, "tolerant", tolerations=tolerating), gpu_pod(ns, "tolerant", "tolerant"))
    wait_for(lambda: bound(c, ns).get("tolerant") == "node-0", timeout=30, message="tolerant bound to node-0")
    (result,) = claims(c, ns)["tolerant"]["status"]["allocation"]["devices"]["results"]
    assert result["pool"] == "node-0" and result["tolerations"] == tolerating, result
    assert "late" not in bound(c, ns)


def test_a_device_taint_rule_keeps_gpus_until_it_is_deleted(installed, troupe, nodes, devices, namespace):
    """A DeviceTaintRule (resource.k8s.io/v1, served from 1.37) takes node-0's
    pool out of use: the pod waits; the rule deleted, it binds there."""
    c, ns = installed, namespace
    nodes("node-0", cpu="8")
    devices("node-0", 1)
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "drain-node-0"},
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": "node-0"},
            "taint": {"key": "example.com/maintenance", "effect": "NoSchedule"},
        },
    }
    create(c, rule)
    create(c, claim(ns, "c"), gpu_pod(ns, "p", "c"))
    wait_pod_unschedulable(c, ns, "p")  # while the rule taints the GPU
    assert not bound(c, ns)
    c.kubectl("delete", "devicetaintrule", "drain-node-0")
    wait_for(lambda: bound(c, ns).get("p") == "node-0", timeout=30, message="p bound once the rule is gone")


def test_a_whole_gpu_waits_while_its_partitions_are_allocated(installed, troupe, nodes, devices, namespace):
    """Partitionable devices (sharedCounters / consumesCounters, on by
    default since 1.36): node-0's GPU is published whole (80Gi of its memory
    counter) and as two halves (40Gi each). Two pods claim a half each and
    bind; a pod claiming the whole GPU waits (the counters are used up),
    and binds once both halves are released."""
    c, ns = installed, namespace
    nodes("node-0", cpu="8")
    pool = {"name": "node-0", "generation": 1, "resourceSliceCount": 2}
    counter_slice = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-0-counters"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-0",
            "pool": pool,
            "sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}],
        },
    }

    def part(name: str, size: str, memory: str) -> dict[str, Any]:
        return {
            "name": name,
            "attributes": {"size": {"string": size}},
            "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": memory}}}],
        }

    device_slice = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-0-gpus"},
        "spec": {
            "driver": DRIVER,
            "nodeName": "node-0",
            "pool": pool,
            "devices": [
                part("gpu-0", "full", "80Gi"),
                part("gpu-0-a", "half", "40Gi"),
                part("gpu-0-b", "half", "40Gi"),
            ],
        },
    }
    assert devices is not None  # the fixture made the DeviceClass
    create(c, counter_slice, device_slice)
    size = 'device.attributes["gpu.example.com"].size == "{}"'
    create(c, claim(ns, "h0", size.format("half")), gpu_pod(ns, "h0", "h0"))
    create(c, claim(ns, "h1", size.format("half")), gpu_pod(ns, "h1", "h1"))
    wait_for(lambda: {"h0", "h1"} <= set(bound(c, ns)), timeout=30, message="both halves bound")
    create(c, claim(ns, "w", size.format("full")), gpu_pod(ns, "w", "w"))
    wait_pod_unschedulable(c, ns, "w")  # its halves use up the counters
    assert "w" not in bound(c, ns)
    c.kubectl("delete", "pod", "-n", ns, "h0", "h1", "--grace-period=0", "--force")
    wait_for(lambda: bound(c, ns).get("w") == "node-0", timeout=60, message="w bound once the halves are released")
    (result,) = claims(c, ns)["w"]["status"]["allocation"]["devices"]["results"]
    assert result["device"] == "gpu-0", result

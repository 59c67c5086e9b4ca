"""Smoke tests of the throwaway control plane (hack/localcluster.py) itself:
what the rest of the integration suite relies on."""

from __future__ import annotations

import json
import uuid

import pytest
from localcluster import (
    K8S_VERSION,
    SCHEDULER_GROUPS,
    SCHEDULER_USER,
    ControlPlaneNotBuilt,
    KubectlError,
    LocalCluster,
)
from wait import wait_for


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def node_manifest(name: str, cpu: str = "8", memory: str = "32Gi") -> str:
    resources = {"cpu": cpu, "memory": memory, "pods": "110"}
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"capacity": resources, "allocatable": resources},
        }
    )


def pod_manifest(name: str, namespace: str, **spec) -> str:
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "schedulerName": "troupe-scheduler",
                "containers": [
                    {
                        "name": "c",
                        "image": "registry.k8s.io/pause:3.10",
                        "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                    }
                ],
                **spec,
            },
        }
    )


@pytest.fixture
def node(cluster: LocalCluster) -> str:
    name = unique("smoke-node")
    cluster.kubectl("create", "-f", "-", input=node_manifest(name))
    yield name
    cluster.kubectl("delete", "node", name, "--wait=false", check=False)


def test_apiserver_answers(cluster: LocalCluster) -> None:
    assert cluster.server.startswith("https://127.0.0.1:")
    assert cluster.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    version = json.loads(cluster.kubectl("get", "--raw", "/version").stdout)
    assert version["gitVersion"] == f"v{K8S_VERSION}"
    assert cluster.startup_seconds is not None and cluster.startup_seconds < 30
    names = {n["metadata"]["name"] for n in cluster.get_json("namespaces")["items"]}
    assert {"default", "kube-system"} <= names


def test_node_status_is_kept_on_create_and_set_via_status_subresource(cluster: LocalCluster, node: str) -> None:
    got = cluster.get_json("node", node)
    assert got["status"]["capacity"] == {"cpu": "8", "memory": "32Gi", "pods": "110"}
    assert got["status"]["allocatable"]["cpu"] == "8"
    # TaintNodesByCondition is disabled: no node.kubernetes.io/not-ready taint that nothing would remove
    assert not got["spec"].get("taints")

    # a patch of the main resource ignores status ...
    cluster.kubectl("patch", "node", node, "--type=merge", "-p", '{"status": {"allocatable": {"cpu": "1"}}}')
    assert cluster.get_json("node", node)["status"]["allocatable"]["cpu"] == "8"
    # ... the status subresource changes it
    cluster.kubectl(
        "patch", "node", node, "--subresource=status", "--type=merge", "-p", '{"status": {"allocatable": {"cpu": "6"}}}'
    )
    assert cluster.get_json("node", node)["status"]["allocatable"]["cpu"] == "6"


def test_pod_is_created_bound_and_force_deleted(cluster: LocalCluster, namespace: str, node: str) -> None:
    pod = unique("smoke-pod")
    cluster.kubectl("create", "-f", "-", input=pod_manifest(pod, namespace))
    created = cluster.get_json("pod", pod, "-n", namespace)
    assert created["spec"]["schedulerName"] == "troupe-scheduler"
    assert not created["spec"].get("nodeName")
    assert created["status"]["phase"] == "Pending"

    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod, "namespace": namespace, "uid": created["metadata"]["uid"]},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    cluster.kubectl(
        "create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{pod}/binding", "-f", "-", input=json.dumps(binding)
    )
    bound = cluster.get_json("pod", pod, "-n", namespace)
    assert bound["spec"]["nodeName"] == node
    conditions = {c["type"]: c["status"] for c in bound["status"].get("conditions", [])}
    assert conditions.get("PodScheduled") == "True"

    # no kubelet: a bound pod goes away only when forced
    cluster.kubectl("delete", "pod", pod, "-n", namespace, "--grace-period=0", "--force", "--wait=false")
    wait_for(
        lambda: cluster.kubectl("get", "pod", pod, "-n", namespace, check=False).returncode != 0,
        timeout=20,
        message=f"pod {namespace}/{pod} deleted",
    )


def test_scheduler_identity_is_the_service_account_and_cannot_read_secrets(cluster: LocalCluster) -> None:
    who = json.loads(cluster.kubectl("auth", "whoami", "-o", "json", as_scheduler=True).stdout)
    assert who["status"]["userInfo"]["username"] == SCHEDULER_USER
    assert set(SCHEDULER_GROUPS) <= set(who["status"]["userInfo"]["groups"])

    r = cluster.kubectl("get", "secrets", "-A", as_scheduler=True, check=False)
    assert r.returncode != 0 and "forbidden" in r.stderr.lower(), r
    # the admin can
    cluster.kubectl("get", "secrets", "-A")


def test_priority_class_name_is_resolved(cluster: LocalCluster, namespace: str) -> None:
    pc = unique("smoke-prio")
    cluster.apply_yaml(
        json.dumps(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": pc},
                "value": 1000,
                "preemptionPolicy": "Never",
            }
        )
    )
    try:
        pod = unique("smoke-prio-pod")
        cluster.kubectl("create", "-f", "-", input=pod_manifest(pod, namespace, priorityClassName=pc))
        spec = cluster.get_json("pod", pod, "-n", namespace)["spec"]
        assert spec["priority"] == 1000
        assert spec["preemptionPolicy"] == "Never"

        plain = unique("smoke-noprio-pod")
        cluster.kubectl("create", "-f", "-", input=pod_manifest(plain, namespace))
        assert cluster.get_json("pod", plain, "-n", namespace)["spec"]["priority"] == 0

        with pytest.raises(KubectlError, match="no PriorityClass with name"):
            cluster.kubectl(
                "create", "-f", "-", input=pod_manifest(unique("smoke-bad"), namespace, priorityClassName="nope")
            )
    finally:
        cluster.kubectl("delete", "priorityclass", pc, "--wait=false", check=False)


def test_fresh_cluster_denies_scheduler_everything_and_stops_cleanly(controlplane_binaries) -> None:
    """A cluster of its own: before any manifests, the scheduler identity may
    only do discovery and self-reviews; stop() kills everything and cleans up."""
    c = LocalCluster().start()
    try:
        for verb, resource in [
            ("list", "pods"),
            ("create", "pods/binding"),
            ("list", "nodes"),
            ("watch", "pods"),
            ("get", "secrets"),
            ("create", "events"),
            ("create", "leases.coordination.k8s.io"),
        ]:
            r = c.kubectl("auth", "can-i", verb, resource, "-A", as_scheduler=True, check=False)
            assert r.stdout.strip() == "no", (verb, resource, r)
        r = c.kubectl("get", "pods", "-A", as_scheduler=True, check=False)
        assert r.returncode != 0 and "forbidden" in r.stderr.lower(), r
        assert c.kubectl("auth", "can-i", "list", "pods", "-A").stdout.strip() == "yes"
        procs = [c._apiserver, c._etcd]
    finally:
        c.stop()
    assert all(p.poll() is not None for p in procs)
    assert not c.workdir.exists()
    c.stop()  # idempotent


def test_missing_binaries_say_make_controlplane(tmp_path) -> None:
    with pytest.raises(ControlPlaneNotBuilt, match="make controlplane"):
        LocalCluster(k8s_bin_dir=tmp_path, etcd_bin_dir=tmp_path)

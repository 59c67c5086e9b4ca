"""kube-controller-manager in the test control plane (hack/localcluster.py):
the Job, garbage-collector and namespace controllers do their part, and the
controller manager outlives restarts of kube-apiserver and etcd.

No kube-scheduler and no kubelet run here: the Job's pods (schedulerName
default-scheduler) stay Pending and unbound, so they can be deleted without
playing the kubelet."""

from __future__ import annotations

import json
from typing import Any

import pytest
from localcluster import ControlPlaneNotBuilt, LocalCluster
from objects import create, pod, podgroup
from wait import wait_for

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"


def job(ns: str, name: str, parallelism: int = 2) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "100m", "memory": "100Mi"}},
                        }
                    ],
                }
            },
        },
    }


def job_pods(cluster: LocalCluster, ns: str, name: str) -> list[dict[str, Any]]:
    return cluster.get_json("pods", "-n", ns, "-l", f"{JOB_NAME_LABEL}={name}")["items"]


def wait_job_pods(cluster: LocalCluster, ns: str, name: str, n: int, timeout: float = 30) -> list[dict[str, Any]]:
    return wait_for(
        lambda: len(p := job_pods(cluster, ns, name)) == n and p,
        timeout=timeout,
        message=f"{n} pods of Job {name}",
    )


def test_a_job_gets_its_pods_from_the_job_controller(installed, namespace, nodes) -> None:
    c, ns = installed, namespace
    nodes("node-0", cpu="8")  # room enough: the pods stay Pending only because no default-scheduler runs
    create(c, job(ns, "work"))
    pods = wait_job_pods(c, ns, "work", 2)
    uid = c.get_json("job", "work", "-n", ns)["metadata"]["uid"]
    for p in pods:
        owners = [(o["kind"], o["name"], o["uid"], o.get("controller")) for o in p["metadata"]["ownerReferences"]]
        assert owners == [("Job", "work", uid, True)], p["metadata"]
        assert p["spec"]["schedulerName"] == "default-scheduler"
        assert not p["spec"].get("nodeName")
        assert p["status"]["phase"] == "Pending"
    wait_for(
        lambda: c.get_json("job", "work", "-n", ns).get("status", {}).get("active") == 2,
        timeout=30,
        message="Job work status.active == 2",
    )


def test_deleting_a_job_removes_its_pods_through_the_garbage_collector(installed, namespace) -> None:
    c, ns = installed, namespace
    create(c, job(ns, "doomed"))
    wait_job_pods(c, ns, "doomed", 2)
    c.kubectl("delete", "job", "doomed", "-n", ns, "--wait=false")  # kubectl's default: --cascade=background
    # The pods go only through the GC (owner gone), then the Job controller drops
    # their job-tracking finalizer (orphaned pods).
    wait_for(lambda: job_pods(c, ns, "doomed") == [], timeout=30, message="Job doomed's pods deleted")


def test_deleting_a_namespace_removes_what_is_in_it(installed, namespace) -> None:
    c, ns = installed, namespace
    create(
        c,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm", "namespace": ns}, "data": {"k": "v"}},
        pod(ns, "loose", scheduler="default-scheduler"),
        podgroup(ns, "pg", min_count=2),  # a custom resource: the namespace controller finds it by discovery
        job(ns, "work"),
    )
    wait_job_pods(c, ns, "work", 2)
    c.kubectl("delete", "namespace", ns, "--wait=false")
    wait_for(
        lambda: c.kubectl("get", "namespace", ns, check=False).returncode != 0,
        timeout=45,
        message=f"namespace {ns} gone",
    )
    left = c.get_json("configmaps,pods,jobs,podgroups", "-n", ns)["items"]
    assert left == [], [(o["kind"], o["metadata"]["name"]) for o in left]


def test_controller_manager_outlives_apiserver_and_etcd_restarts(controlplane_binaries) -> None:
    """A cluster of its own (the session one is never restarted): the same
    kube-controller-manager process reconnects and keeps working."""
    c = LocalCluster().start(timeout=90)
    try:
        kcm = c._controller_manager
        assert kcm is not None and c.controller_manager_healthy()
        c.kubectl("create", "namespace", "r")
        c.restart_apiserver(down=1, graceful=False)
        c.restart_etcd(down=1)
        wait_for(c.controller_manager_healthy, timeout=30, message="kube-controller-manager healthy")
        assert c._controller_manager is kcm and kcm.poll() is None
        c.kubectl("create", "-f", "-", input=json.dumps(job("r", "after")))
        wait_job_pods(c, "r", "after", 2)
        assert kcm.poll() is None
    finally:
        c.stop()
    assert kcm.poll() is not None


def test_controller_manager_is_optional(controlplane_binaries, tmp_path) -> None:
    """controller_manager=False (benchmarks) does not even need the binary."""
    for name in ("kube-apiserver", "kubectl", "etcd"):
        (tmp_path / name).symlink_to(controlplane_binaries[name])
    with pytest.raises(ControlPlaneNotBuilt, match="kube-controller-manager"):
        LocalCluster(k8s_bin_dir=tmp_path, etcd_bin_dir=tmp_path)
    c = LocalCluster(k8s_bin_dir=tmp_path, etcd_bin_dir=tmp_path, controller_manager=False)
    assert c.controller_manager_path is None and not c.controller_manager_healthy()
    c.stop()

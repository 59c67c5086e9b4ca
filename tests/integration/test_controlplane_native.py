"""The control planes that serve the upstream native Workload API
(`native_cluster`, `native_cluster_136` in conftest.py, built on
hack/localcluster.py's ``workload_api=True``): what they serve and keep.

Gates and runtime-config (hack/localcluster.WORKLOAD_API), read off each
release's pkg/features/kube_features.go, pkg/registry/scheduling/*/strategy.go,
pkg/api/pod/util.go, plugin/pkg/admission/priority and the Job controller:

v1.37.2 (`native_cluster`), kube-apiserver:
  --feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true,
    DRAWorkloadResourceClaims=true,PodGroupPreemptionPolicy=true,
    CompositePodGroup=true,WorkloadWithJob=true
  --runtime-config=scheduling.k8s.io/v1beta1=true,scheduling.k8s.io/v1alpha3=true
  kube-controller-manager: --feature-gates=GenericWorkload=true,WorkloadWithJob=true
  - GenericWorkload (beta, off by default) registers workloads/podgroups storage
    and keeps a pod's spec.schedulingGroup (dropped on create without it); the
    API versions themselves also need --runtime-config (beta/alpha APIs are off).
    disruptionMode, priorityClassName and priority need nothing more.
  - TopologyAwareWorkloadScheduling (alpha): spec.schedulingConstraints
    (forbidden by declarative validation without it).
  - DRAWorkloadResourceClaims (beta, off by default): spec.resourceClaims
    (silently dropped without it).
  - PodGroupPreemptionPolicy (alpha): spec.preemptionPolicy (forbidden without
    it). With it an unset preemptionPolicy is defaulted to PreemptLowerPriority
    and then the Priority admission plugin rejects a PodGroup whose
    preemptionPolicy differs from its PriorityClass's: a class with Never needs
    preemptionPolicy: Never spelled out, and the 1.37.2 Job controller (which
    never sets it) cannot make the PodGroup of a Job whose pods use such a class
    (the Job gets its Workload, then no PodGroup and no pods).
  - CompositePodGroup (alpha): spec.parentCompositePodGroupName and v1alpha3
    compositepodgroups (on so that every PodGroup field can be set).
  - WorkloadWithJob (alpha) on kube-apiserver: Job spec.scheduling is kept (it is
    forbidden otherwise); on kube-controller-manager: the Job controller watches
    v1beta1 Workloads/PodGroups and, for every new Job it manages (a Job with no
    controller owner whose pod template has no schedulingGroup: with or without
    spec.scheduling, which only chooses gang vs basic), creates a Workload, a
    PodGroup and pods with spec.schedulingGroup. No other controller is needed
    (podgroup-protection-controller only removes the finalizer of the
    PodGroupProtection admission plugin, which stays disabled).
  - PodGroupProtection stays in --disable-admission-plugins (its finalizer would
    need that controller).

v1.36.3 (`native_cluster_136`, kube-apiserver only; kubectl v1.37.2, etcd 3.6.16):
  --feature-gates=GenericWorkload=true,GangScheduling=true,WorkloadAwarePreemption=true,
    TopologyAwareWorkloadScheduling=true,DRAWorkloadResourceClaims=true
  --runtime-config=scheduling.k8s.io/v1alpha2=true
  - GenericWorkload (alpha): workloads/podgroups, pods' spec.schedulingGroup.
  - WorkloadAwarePreemption (needs GangScheduling): disruptionMode ("Pod" /
    "PodGroup" in v1alpha2), priorityClassName and priority.
  - TopologyAwareWorkloadScheduling, DRAWorkloadResourceClaims: as in 1.37.
  - The same disabled admission plugins exist in 1.36. Its PodGroupWorkloadExists
    plugin (gone in 1.37) stays on: a PodGroup whose podGroupTemplateRef names a
    missing Workload or template is rejected.
  - No kube-controller-manager: a 1.37 one must not run against a 1.36 apiserver.

No scheduler runs here: pods stay Pending.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from localcluster import K8S_136_VERSION, KubectlError
from wait import wait_for

SCHEDULER = "troupe-scheduler"
V1BETA1 = "scheduling.k8s.io/v1beta1"
V1ALPHA2 = "scheduling.k8s.io/v1alpha2"


def apply(cluster, obj: dict[str, Any]) -> dict[str, Any]:
    """``kubectl create`` one object and return it as the server stored it."""
    return json.loads(cluster.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(obj)).stdout)


def get(cluster, resource: str, ns: str, name: str) -> dict[str, Any]:
    return cluster.get_json(resource, name, "-n", ns)


def worker_pod(ns: str, name: str, group: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "schedulerName": SCHEDULER,
            "schedulingGroup": {"podGroupName": group},
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def new_priority_class(cluster) -> Iterator[str]:
    """A PriorityClass of value 1000 with preemptionPolicy Never (removed afterwards)."""
    name = f"native-{uuid.uuid4().hex[:8]}"
    apply(
        cluster,
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": 1000,
            "preemptionPolicy": "Never",
        },
    )
    yield name
    cluster.kubectl("delete", "priorityclass", name, "--wait=false", check=False)


@pytest.fixture(scope="module")
def priority_class(native_cluster):
    yield from new_priority_class(native_cluster)


@pytest.fixture(scope="module")
def priority_class_136(native_cluster_136):
    yield from new_priority_class(native_cluster_136)


# --- v1.37.2 ----------------------------------------------------------------------


def test_discovery_serves_v1beta1_and_v1alpha3(native_cluster):
    out = native_cluster.kubectl("api-resources", "--api-group=scheduling.k8s.io", "--no-headers").stdout
    preferred = {line.split()[0]: line.split()[-3] for line in out.splitlines() if line.strip()}
    assert preferred["podgroups"] == V1BETA1, out
    assert preferred["workloads"] == V1BETA1, out
    for version in ("v1beta1", "v1alpha3"):
        listed = json.loads(native_cluster.kubectl("get", "--raw", f"/apis/scheduling.k8s.io/{version}").stdout)
        names = {r["name"] for r in listed["resources"]}
        assert {"podgroups", "podgroups/status", "workloads"} <= names, (version, names)
    group = json.loads(native_cluster.kubectl("get", "--raw", "/apis/scheduling.k8s.io").stdout)
    served = [v["version"] for v in group["versions"]]
    assert "v1alpha2" not in served and {"v1", "v1beta1", "v1alpha3"} <= set(served), served


def test_default_cluster_does_not_serve_the_native_api(cluster):
    out = cluster.kubectl("api-resources", "--api-group=scheduling.k8s.io", "--no-headers").stdout
    assert "podgroups" not in out and "workloads" not in out, out


def test_v1beta1_podgroup_keeps_every_field(native_cluster, native_namespace, priority_class):
    ns = native_namespace
    template = {
        "name": "worker",
        "schedulingPolicy": {"gang": {"minCount": 3}},
        "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
        "resourceClaims": [{"name": "shared", "resourceClaimName": "rack-claim"}],
        "disruptionMode": {"all": {}},
        "priorityClassName": priority_class,
        "preemptionPolicy": "Never",
    }
    workload = apply(
        native_cluster,
        {
            "apiVersion": V1BETA1,
            "kind": "Workload",
            "metadata": {"name": "training", "namespace": ns},
            "spec": {"podGroupTemplates": [template]},
        },
    )
    assert {k: v for k, v in workload["spec"]["podGroupTemplates"][0].items() if k != "priority"} == template
    spec = {
        "workloadRef": {"workloadName": "training", "templateName": "worker"},
        **{k: v for k, v in template.items() if k != "name"},
    }
    apply(
        native_cluster,
        {"apiVersion": V1BETA1, "kind": "PodGroup", "metadata": {"name": "training-0", "namespace": ns}, "spec": spec},
    )
    got = get(native_cluster, "podgroups.v1beta1.scheduling.k8s.io", ns, "training-0")
    assert got["apiVersion"] == V1BETA1
    # The Priority admission plugin resolves priority from the class; nothing else is added or dropped.
    assert got["spec"] == {**spec, "priority": 1000}
    assert got["metadata"].get("finalizers") is None  # PodGroupProtection is disabled

    # The same object through v1alpha3.
    alpha = get(native_cluster, "podgroups.v1alpha3.scheduling.k8s.io", ns, "training-0")
    assert alpha["apiVersion"] == "scheduling.k8s.io/v1alpha3"
    assert alpha["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}


def test_v1beta1_podgroup_preemption_policy_must_match_its_priority_class(
    native_cluster, native_namespace, priority_class
):
    """Defaulting, then admission: with PodGroupPreemptionPolicy an unset
    preemptionPolicy is defaulted to PreemptLowerPriority *before* the Priority
    plugin compares it with the PriorityClass's, so a class with Never needs
    preemptionPolicy: Never spelled out. disruptionMode defaults to single."""
    ns = native_namespace

    def podgroup(name: str, **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": V1BETA1,
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"schedulingPolicy": {"basic": {}}, **spec},
        }

    for policy in ("PreemptLowerPriority", None):
        spec = {"priorityClassName": priority_class, **({"preemptionPolicy": policy} if policy else {})}
        with pytest.raises(KubectlError, match=r"PreemptionPolicy \(PreemptLowerPriority\) must not be provided"):
            apply(native_cluster, podgroup("mismatch", **spec))
    created = apply(native_cluster, podgroup("never", priorityClassName=priority_class, preemptionPolicy="Never"))
    assert created["spec"]["priority"] == 1000
    assert created["spec"]["disruptionMode"] == {"single": {}}
    no_class = apply(native_cluster, podgroup("no-class"))["spec"]
    assert (no_class.get("priorityClassName"), no_class["priority"], no_class["preemptionPolicy"]) == (
        None,
        0,
        "PreemptLowerPriority",
    )


def test_pod_keeps_scheduling_group(native_cluster, native_namespace):
    ns = native_namespace
    apply(native_cluster, worker_pod(ns, "w-0", "training-0"))
    got = get(native_cluster, "pod", ns, "w-0")
    assert got["spec"]["schedulingGroup"] == {"podGroupName": "training-0"}
    assert got["spec"]["schedulerName"] == SCHEDULER


def job_with_scheduling(ns: str, name: str, parallelism: int, scheduling: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "completions": parallelism,
        "backoffLimit": 100,
        "template": {
            "spec": {
                "schedulerName": SCHEDULER,
                "restartPolicy": "Never",
                "containers": [{"name": "worker", "image": "registry.k8s.io/pause:3.10"}],
            }
        },
    }
    if scheduling is not None:
        spec["scheduling"] = scheduling
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def owned_by(items: list[dict[str, Any]], uid: str) -> list[dict[str, Any]]:
    return [o for o in items if any(r["uid"] == uid for r in o["metadata"].get("ownerReferences", []))]


def native_objects_of_job(cluster, ns: str, job: dict[str, Any], pods: int):
    """Poll until the Job controller made the Job's Workload, PodGroup and
    ``pods`` pods that name the PodGroup; return (workload, podgroup, pods)."""
    uid = job["metadata"]["uid"]

    def made():
        wls = owned_by(cluster.get_json("workloads.v1beta1.scheduling.k8s.io", "-n", ns)["items"], uid)
        pgs = owned_by(cluster.get_json("podgroups.v1beta1.scheduling.k8s.io", "-n", ns)["items"], uid)
        ps = owned_by(cluster.get_json("pods", "-n", ns)["items"], uid)
        if len(wls) == 1 and len(pgs) == 1 and len(ps) == pods:
            return wls[0], pgs[0], ps
        return None

    return wait_for(
        made,
        timeout=60,
        interval=0.3,
        message=f"Workload, PodGroup and {pods} pods of Job {ns}/{job['metadata']['name']}",
    )


def test_job_with_scheduling_gets_native_workload_podgroup_and_pods(native_cluster, native_namespace):
    ns = native_namespace
    job = apply(
        native_cluster,
        job_with_scheduling(
            ns,
            "train",
            2,
            {
                "schedulingPolicy": {"gang": {"minCount": 2}},
                "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
                "disruptionMode": {"all": {}},
            },
        ),
    )
    assert job["spec"]["scheduling"]["schedulingPolicy"] == {"gang": {"minCount": 2}}  # kept (WorkloadWithJob)
    workload, pg, pods = native_objects_of_job(native_cluster, ns, job, pods=2)
    uid = job["metadata"]["uid"]
    job_owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "train",
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }

    # Workload "<job>-<hash of the Job's UID>", controlled by the Job, one template "<job>-pgt-0".
    assert workload["metadata"]["name"].startswith("train-")
    assert workload["metadata"]["ownerReferences"] == [job_owner]
    assert workload["spec"]["controllerRef"] == {"apiGroup": "batch", "kind": "Job", "name": "train"}
    [template] = workload["spec"]["podGroupTemplates"]
    assert template["name"] == "train-pgt-0"
    assert template["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert template["schedulingConstraints"] == {"topology": [{"key": "topology.kubernetes.io/rack"}]}
    assert template["disruptionMode"] == {"all": {}}

    # PodGroup "<workload>-<template>-<hash>", controlled by the Job, also owned by the Workload.
    assert pg["metadata"]["name"].startswith(f"{workload['metadata']['name']}-train-pgt-0-")
    refs = pg["metadata"]["ownerReferences"]
    assert job_owner in refs
    assert {
        "apiVersion": V1BETA1,
        "kind": "Workload",
        "name": workload["metadata"]["name"],
        "uid": workload["metadata"]["uid"],
    } in refs
    assert pg["spec"]["workloadRef"] == {"workloadName": workload["metadata"]["name"], "templateName": "train-pgt-0"}
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert pg["spec"]["schedulingConstraints"] == {"topology": [{"key": "topology.kubernetes.io/rack"}]}
    assert pg["spec"]["disruptionMode"] == {"all": {}}

    # The PodGroup is found through spec.schedulingGroup only: in v1.37.2 the pods'
    # only ownerReference is the Job's (the PodGroup one the controller puts on
    # its pod template is not carried over to the pods it creates).
    for p in pods:
        assert p["spec"]["schedulingGroup"] == {"podGroupName": pg["metadata"]["name"]}
        assert p["spec"]["schedulerName"] == SCHEDULER
        assert p["metadata"]["ownerReferences"] == [job_owner]


def test_job_with_a_never_preempting_priority_class_gets_no_podgroup(native_cluster, native_namespace):
    """An upstream 1.37.2 limit that PodGroupPreemptionPolicy brings: the Job
    controller's PodGroup leaves preemptionPolicy to defaulting
    (PreemptLowerPriority), which the Priority plugin refuses for a class with
    Never; the controller retries for ever and creates no pods."""
    ns = native_namespace
    name = f"never-{uuid.uuid4().hex[:8]}"
    apply(
        native_cluster,
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": 10,
            "preemptionPolicy": "Never",
        },
    )
    try:
        body = job_with_scheduling(ns, "humble", 1, None)
        body["spec"]["template"]["spec"]["priorityClassName"] = name
        apply(native_cluster, body)
        wait_for(
            lambda: (
                f"Job {ns}/humble: podgroups.scheduling.k8s.io" in native_cluster.controller_manager_log.read_text()
                and "must not be provided in pod group spec" in native_cluster.controller_manager_log.read_text()
            ),
            timeout=60,
            interval=0.3,
            message="the Job controller's PodGroup create refused by the Priority admission plugin",
        )
        assert native_cluster.get_json("workloads.v1beta1.scheduling.k8s.io", "-n", ns)["items"]
        assert not native_cluster.get_json("podgroups.v1beta1.scheduling.k8s.io", "-n", ns)["items"]
        assert not native_cluster.get_json("pods", "-n", ns)["items"]  # the sync stops before creating pods
    finally:
        native_cluster.kubectl("delete", "priorityclass", name, "--wait=false", check=False)


def test_job_without_scheduling_gets_a_basic_native_podgroup_too(native_cluster, native_namespace):
    """WorkloadWithJob manages every new root Job: spec.scheduling only picks gang over basic."""
    ns = native_namespace
    job = apply(native_cluster, job_with_scheduling(ns, "plain", 1, None))
    workload, pg, [p] = native_objects_of_job(native_cluster, ns, job, pods=1)
    assert workload["spec"]["podGroupTemplates"][0]["schedulingPolicy"] == {"basic": {}}
    assert pg["spec"]["schedulingPolicy"] == {"basic": {}}
    assert p["spec"]["schedulingGroup"] == {"podGroupName": pg["metadata"]["name"]}


# --- v1.36.3 ----------------------------------------------------------------------


def test_136_serves_v1alpha2(native_cluster_136):
    version = json.loads(native_cluster_136.kubectl("get", "--raw", "/version").stdout)
    assert version["gitVersion"] == f"v{K8S_136_VERSION}"
    listed = json.loads(native_cluster_136.kubectl("get", "--raw", "/apis/scheduling.k8s.io/v1alpha2").stdout)
    assert {"podgroups", "podgroups/status", "workloads"} <= {r["name"] for r in listed["resources"]}


def test_136_v1alpha2_workload_and_podgroup(native_cluster_136, native_namespace_136, priority_class_136):
    ns = native_namespace_136
    fields = {
        "schedulingPolicy": {"gang": {"minCount": 2}},
        "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
        "resourceClaims": [{"name": "shared", "resourceClaimName": "rack-claim"}],
        "disruptionMode": "PodGroup",
        "priorityClassName": priority_class_136,
    }
    workload = apply(
        native_cluster_136,
        {
            "apiVersion": V1ALPHA2,
            "kind": "Workload",
            "metadata": {"name": "training", "namespace": ns},
            "spec": {"podGroupTemplates": [{"name": "worker", **fields}]},
        },
    )
    [template] = workload["spec"]["podGroupTemplates"]
    assert {k: v for k, v in template.items() if k != "priority"} == {"name": "worker", **fields}
    ref = {"workload": {"workloadName": "training", "podGroupTemplateName": "worker"}}
    apply(
        native_cluster_136,
        {
            "apiVersion": V1ALPHA2,
            "kind": "PodGroup",
            "metadata": {"name": "training-0", "namespace": ns},
            "spec": {"podGroupTemplateRef": ref, **fields},
        },
    )
    got = get(native_cluster_136, "podgroups.v1alpha2.scheduling.k8s.io", ns, "training-0")
    assert got["apiVersion"] == V1ALPHA2
    # priority comes from the class (Priority admission, with WorkloadAwarePreemption).
    assert got["spec"] == {"podGroupTemplateRef": ref, **fields, "priority": 1000}

    # PodGroupWorkloadExists: the template a PodGroup names must exist.
    with pytest.raises(KubectlError, match="not found"):
        apply(
            native_cluster_136,
            {
                "apiVersion": V1ALPHA2,
                "kind": "PodGroup",
                "metadata": {"name": "orphan", "namespace": ns},
                "spec": {
                    "podGroupTemplateRef": {"workload": {"workloadName": "training", "podGroupTemplateName": "nope"}},
                    "schedulingPolicy": {"basic": {}},
                },
            },
        )


def test_136_pod_keeps_scheduling_group(native_cluster_136, native_namespace_136):
    ns = native_namespace_136
    apply(native_cluster_136, worker_pod(ns, "w-0", "training-0"))
    got = get(native_cluster_136, "pod", ns, "w-0")
    assert got["spec"]["schedulingGroup"] == {"podGroupName": "training-0"}
    assert got["spec"]["schedulerName"] == SCHEDULER

"""Kueue in front, troupe behind (issue 37): the real Kueue v0.17.0 (built
from its Go module by `make operators`, tests/integration/kueue.py) admits
by quota, the real troupe process places whole, on the real kube-apiserver
with kube-controller-manager's Job controller.

Kueue admits by quota, not by fit: quota can admit two gangs whose pods the
nodes cannot hold at once. Pod by pod (kube-scheduler) both get part of the
room; troupe binds one whole and the other waits whole.

There is no kubelet: the tests finish pods as a kubelet would (status
phase Succeeded) and force-delete pods being deleted.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import fresh_namespace
from kueue import (
    ADMISSION_GATE,
    POD_GROUP_COUNT,
    POD_GROUP_LABEL,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    REQUIRED_TOPOLOGY,
    Kueue,
    cluster_queue,
    kueue_build,
    local_queue,
    resource_flavor,
    topology,
    workload_priority_class,
)
from objects import create, events_for, node, pods_by_name
from troupe_process import TroupeProcess, supervised
from wait import holds, wait_for

pytestmark = pytest.mark.integration

SCHEDULER = "troupe-scheduler"
POLICY = "scheduling.troupe.dev/job-policy"
RACK = "topology.kubernetes.io/rack"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def troupe(kueue_cluster, tmp_path_factory) -> Iterator[TroupeProcess]:
    yield from supervised(TroupeProcess(kueue_cluster.scheduler_kubeconfig, tmp_path_factory.mktemp("troupe-kueue")))


@pytest.fixture(scope="module")
def kueue(kueue_cluster, tmp_path_factory) -> Iterator[Kueue]:
    k = Kueue(kueue_build(), kueue_cluster, tmp_path_factory.mktemp("kueue")).start()
    try:
        yield k
    finally:
        k.stop()


def clean(c) -> None:
    """Nothing of an earlier test left: its Jobs (first: their controller would
    make their pods again), its pods (force-deleted: no kubelet confirms a
    graceful delete, and a Terminating pod holds its room), its queues,
    flavors and nodes."""
    c.kubectl("delete", "jobs", "--all", "--all-namespaces", "--wait=false", check=False)
    kubelet_kills(c, c.get_json("pods", "--all-namespaces")["items"])
    c.kubectl("delete", "localqueues.kueue.x-k8s.io", "--all", "--all-namespaces", "--wait=false", check=False)
    for kind in ("clusterqueues.kueue.x-k8s.io", "resourceflavors.kueue.x-k8s.io", "topologies.kueue.x-k8s.io"):
        c.kubectl("delete", kind, "--all", "--wait=false", check=False)
    c.kubectl("delete", "nodes", "--all", "--wait=false", check=False)


def explain(c, ns: str) -> None:
    """What the namespace holds, printed (pytest shows it when the test fails):
    each pod's node, phase, gates, node selector and PodScheduled message,
    each Job's suspension, each group's condition."""
    for p in pods_by_name(c, ns).values():
        spec, status = p["spec"], p.get("status", {})
        scheduled = next((x for x in status.get("conditions", []) if x["type"] == "PodScheduled"), {})
        gates = [g["name"] for g in spec.get("schedulingGates", [])]
        print(
            p["metadata"]["name"], spec.get("nodeName"), status.get("phase"), gates, spec.get("nodeSelector"),
            bool(p["metadata"].get("deletionTimestamp")), scheduled.get("reason"), scheduled.get("message"),
        )  # fmt: skip
    for j in c.get_json("jobs", "-n", ns)["items"]:
        print("job", j["metadata"]["name"], "suspend", j["spec"].get("suspend"), j.get("status", {}))
    for kind in ("podgroups.scheduling.troupe.dev", "podgroups.scheduling.k8s.io"):
        for g in c.get_json(kind, "-n", ns)["items"]:
            print(kind, g["metadata"]["name"], g.get("status", {}).get("conditions"))


@pytest.fixture
def ns(kueue_cluster, troupe, kueue) -> Iterator[str]:
    """A fresh namespace in a cluster with nothing of an earlier test left."""
    clean(kueue_cluster)
    with fresh_namespace(kueue_cluster) as name:
        yield name
        explain(kueue_cluster, name)
        clean(kueue_cluster)


# ------------------------------------------------------------------ helpers


def ready_node(name: str, cpu: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A node with Ready=True (Kueue's topology-aware admission counts only Ready nodes)."""
    body = node(name, cpu=cpu, labels=labels)
    body["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}]
    return body


def queues(c, ns: str, cpu: str, flavor: dict[str, Any] | None = None, **queue_kw: Any) -> None:
    """A ResourceFlavor (`flavor`, or a plain one), a ClusterQueue `cq-<ns>`
    of `cpu` CPUs over it and a LocalQueue `lq` in `ns`. Cluster-scoped
    names carry the namespace: Kueue's finalizers keep the previous test's
    ClusterQueue and flavor a while after they are deleted."""
    flavor = flavor or resource_flavor(f"default-{ns}")
    cq = f"cq-{ns}"
    create(c, flavor, cluster_queue(cq, flavor["metadata"]["name"], cpu, **queue_kw), local_queue(ns, "lq", cq))


def job(ns: str, name: str, pods: int, cpu: str, labels: dict[str, str] | None = None, **template_annotations: str):
    """A Job in Kueue's LocalQueue `lq` (label), opted into troupe as a gang."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {QUEUE_LABEL: "lq", **(labels or {})}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 100,
            "template": {
                "metadata": {"annotations": {POLICY: "gang", **template_annotations}},
                "spec": {
                    "schedulerName": SCHEDULER,
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "worker",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": cpu, "memory": "100Mi"}},
                        }
                    ],
                },
            },
        },
    }


def job_pods(c, ns: str, name: str) -> list[dict[str, Any]]:
    return [
        p
        for p in pods_by_name(c, ns).values()
        if p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") == name
        and not p["metadata"].get("deletionTimestamp")
        and p.get("status", {}).get("phase") not in ("Succeeded", "Failed")
    ]


def bound_count(c, ns: str, name: str) -> int:
    return sum(1 for p in job_pods(c, ns, name) if p["spec"].get("nodeName"))


def suspended(c, ns: str, name: str) -> bool:
    return bool(c.get_json("job", "-n", ns, name)["spec"].get("suspend"))


def finish(c, ns: str, pods: list[dict[str, Any]]) -> None:
    """What a kubelet does when the containers exit 0: phase Succeeded."""
    for p in pods:
        c.kubectl(
            "patch", "pod", "-n", ns, p["metadata"]["name"], "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": {"phase": "Succeeded"}}),
        )  # fmt: skip


def kubelet_kills(c, pods: list[dict[str, Any]]) -> None:
    """What a kubelet does for pods being deleted: stop them (phase Failed,
    after which Kueue lifts its `kueue.x-k8s.io/managed` finalizer) and
    confirm the delete (force)."""
    for p in pods:
        meta = p["metadata"]
        if p.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            c.kubectl(
                "patch", "pod", "-n", meta["namespace"], meta["name"], "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"phase": "Failed"}}), check=False,
            )  # fmt: skip
        c.kubectl(
            "delete", "pod", "-n", meta["namespace"], meta["name"], "--grace-period=0", "--force", "--wait=false",
            check=False,
        )  # fmt: skip


def kubelet_deletes(c, ns: str) -> int:
    """The pods of `ns` being deleted, stopped and confirmed as a kubelet would; how many there were."""
    gone = [p for p in pods_by_name(c, ns).values() if p["metadata"].get("deletionTimestamp")]
    kubelet_kills(c, gone)
    return len(gone)


def no_partial_job(c, ns: str, sizes: dict[str, int]) -> bool:
    """No Job has some but not all of its pods bound."""
    return all(bound_count(c, ns, name) in (0, size) for name, size in sizes.items())


def kueue_admitted(c, ns: str) -> set[str]:
    """The Jobs whose Kueue Workload is admitted (by the Job's name)."""
    out = set()
    for w in c.get_json("workloads.kueue.x-k8s.io", "-n", ns)["items"]:
        conds = {x["type"]: x["status"] for x in w.get("status", {}).get("conditions", [])}
        if conds.get("Admitted") == "True":
            owners = w["metadata"].get("ownerReferences") or [{}]
            out.add(owners[0].get("name", ""))
    return out


# -------------------------------------------------------------- scenarios


def native_job(ns: str, name: str, pods: int, cpu: str) -> dict[str, Any]:
    """A 1.37 Job asking for a gang itself (`spec.scheduling`: the Job
    controller makes its native Workload and PodGroup), in Kueue's queue."""
    body = job(ns, name, pods, cpu)
    body["spec"]["scheduling"] = {"schedulingPolicy": {"gang": {"minCount": pods}}}
    del body["spec"]["template"]["metadata"]["annotations"][POLICY]
    return body


@pytest.mark.parametrize("kind", ["troupe-annotation", "native-spec-scheduling"])
def test_quota_above_fit_binds_one_job_whole_the_other_waits_whole(kueue_cluster, ns, kind):
    """Quota 16 CPUs, nodes 8: Kueue admits two of three 4 x 2-CPU Jobs;
    troupe binds one whole, the other waits whole, and binds whole when the
    first finishes. The Jobs ask troupe for a gang by its annotation, or (1.37)
    by `spec.scheduling`."""
    c = kueue_cluster
    make = job if kind == "troupe-annotation" else native_job
    create(c, ready_node("n1", "4"), ready_node("n2", "4"))
    queues(c, ns, "16")
    create(c, *(make(ns, name, 4, "2") for name in ("a", "b", "c")))
    sizes = {"a": 4, "b": 4, "c": 4}
    wait_for(lambda: len(kueue_admitted(c, ns)) == 2, timeout=60, message="Kueue admits two Jobs")
    admitted = sorted(kueue_admitted(c, ns))
    (rest,) = set(sizes) - set(admitted)
    first = wait_for(
        lambda: next((n for n in admitted if bound_count(c, ns, n) == 4), None), timeout=60, message="one Job bound"
    )
    (second,) = set(admitted) - {first}
    wait_for(lambda: len(job_pods(c, ns, second)) == 4, timeout=30, message="the second Job's pods exist")
    holds(lambda: no_partial_job(c, ns, sizes) and bound_count(c, ns, second) == 0, 3, message="no partial Job")
    assert suspended(c, ns, rest) and job_pods(c, ns, rest) == []

    finish(c, ns, job_pods(c, ns, first))
    wait_for(lambda: bound_count(c, ns, second) == 4, timeout=60, message="the second Job bound whole")
    assert no_partial_job(c, ns, sizes)


def test_quota_below_fit_admits_one_at_a_time_and_leaves_suspended_jobs_alone(kueue_cluster, ns):
    """Quota 8 CPUs: Kueue admits one Job at a time; troupe binds each whole
    and makes nothing for a suspended Job (no PodGroup, no pod, no Event)."""
    c = kueue_cluster
    create(c, ready_node("n1", "4"), ready_node("n2", "4"))
    queues(c, ns, "8")
    create(c, job(ns, "a", 4, "2"), job(ns, "b", 4, "2"))
    first = wait_for(lambda: next(iter(kueue_admitted(c, ns)), None), timeout=60, message="Kueue admits a Job")
    wait_for(lambda: bound_count(c, ns, first) == 4, timeout=60, message="the admitted Job bound whole")
    (other,) = {"a", "b"} - {first}
    assert suspended(c, ns, other)
    groups = c.get_json("podgroups.scheduling.troupe.dev", "-n", ns, "-l", f"batch.kubernetes.io/job-name={other}")
    assert groups["items"] == [], "no PodGroup for a suspended Job"
    assert job_pods(c, ns, other) == []
    troupe_events = [e for e in events_for(c, ns, other) if e.get("reportingController") == SCHEDULER]
    assert troupe_events == [], troupe_events

    finish(c, ns, job_pods(c, ns, first))
    wait_for(lambda: not suspended(c, ns, other), timeout=60, message="Kueue admits the second Job")
    wait_for(lambda: bound_count(c, ns, other) == 4, timeout=60, message="the second Job bound whole")


def plain_pods(ns: str, group: str, size: int, cpu: str) -> list[dict[str, Any]]:
    """Kueue's plain pod group: the queue label, the group name label, the total-count annotation."""
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{group}-{i}",
                "namespace": ns,
                "labels": {QUEUE_LABEL: "lq", POD_GROUP_LABEL: group},
                "annotations": {POD_GROUP_COUNT: str(size)},
            },
            "spec": {
                "schedulerName": SCHEDULER,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {"name": "c", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}
                ],
            },
        }
        for i in range(size)
    ]


def test_plain_pod_groups_are_gated_by_kueue_and_bound_whole_by_troupe(kueue_cluster, ns):
    """Kueue's pod integration gates each group, admits two of three by
    quota (16 CPUs), lifts their gates; troupe binds one whole (room for
    one: 8 CPUs), the other waits whole."""
    c = kueue_cluster
    create(c, ready_node("n1", "4"), ready_node("n2", "4"))
    queues(c, ns, "16")
    for g in ("ga", "gb", "gc"):
        create(c, *plain_pods(ns, g, 3, "2"))

    def by_group() -> dict[str, int]:
        out = {g: 0 for g in ("ga", "gb", "gc")}
        for name, p in pods_by_name(c, ns).items():
            if p["spec"].get("nodeName"):
                out[name.rsplit("-", 1)[0]] += 1
        return out

    def gated() -> list[str]:
        return sorted(
            n
            for n, p in pods_by_name(c, ns).items()
            if ADMISSION_GATE in [g["name"] for g in p["spec"].get("schedulingGates", [])]
        )

    wait_for(lambda: sorted(by_group().values()) == [0, 0, 3], timeout=60, message="one group bound whole")
    holds(lambda: sorted(by_group().values()) == [0, 0, 3], 3, message="the others wait whole")
    assert len(gated()) == 3, "Kueue admitted two groups (quota 16), the third keeps its admission gate"


def test_a_flavors_node_labels_are_honoured(kueue_cluster, ns):
    """A ResourceFlavor with node labels: Kueue writes them into the Job's
    pod template when it admits; troupe binds only on those nodes."""
    c = kueue_cluster
    create(
        c,
        ready_node("a1", "4", {"pool": "a"}),
        ready_node("a2", "4", {"pool": "a"}),
        ready_node("b1", "8", {"pool": "b"}),
    )
    queues(c, ns, "8", resource_flavor(f"pool-a-{ns}", node_labels={"pool": "a"}))
    create(c, job(ns, "a", 4, "2"))
    wait_for(lambda: bound_count(c, ns, "a") == 4, timeout=60, message="the Job bound")
    nodes = {p["spec"]["nodeName"] for p in job_pods(c, ns, "a")}
    assert nodes <= {"a1", "a2"}, nodes
    template = c.get_json("job", "-n", ns, "a")["spec"]["template"]["spec"]
    assert template.get("nodeSelector") == {"pool": "a"}, template.get("nodeSelector")


def test_topology_aware_admission_binds_in_the_rack_kueue_chose(kueue_cluster, ns):
    """A Topology of racks and a TAS flavor; a Job that asks for one rack:
    Kueue assigns the rack and ungates with its node selector; troupe binds
    every pod in that rack and nowhere else."""
    c = kueue_cluster
    create(
        c,
        *(ready_node(f"r1-{i}", "2", {RACK: "r1", "tas": "yes"}) for i in range(2)),
        *(ready_node(f"r2-{i}", "2", {RACK: "r2", "tas": "yes"}) for i in range(3)),
    )
    create(c, topology(f"racks-{ns}", [RACK]))
    queues(c, ns, "32", resource_flavor(f"tas-{ns}", node_labels={"tas": "yes"}, topology=f"racks-{ns}"))
    create(c, job(ns, "t", 3, "2", **{REQUIRED_TOPOLOGY: RACK}))
    wait_for(lambda: bound_count(c, ns, "t") == 3, timeout=60, message="the Job bound")
    racks = {p["spec"]["nodeName"].split("-")[0] for p in job_pods(c, ns, "t")}
    assert racks == {"r2"}, racks  # only r2 holds 3 x 2 CPUs
    for p in job_pods(c, ns, "t"):
        assert p["spec"].get("nodeSelector", {}).get(RACK) == "r2", p["spec"].get("nodeSelector")


def test_kueue_preemption_evicts_the_lower_job_and_troupe_binds_the_higher_whole(kueue_cluster, ns):
    """Within one ClusterQueue (preemption withinClusterQueue: LowerPriority):
    a higher-priority Job evicts a lower one (Kueue suspends it, the Job
    controller deletes its pods); troupe does not fight it and binds the new
    Job whole once the room is free."""
    c = kueue_cluster
    create(c, ready_node("n1", "4"), ready_node("n2", "4"))
    c.kubectl("delete", "workloadpriorityclasses.kueue.x-k8s.io", "low", "high", "--ignore-not-found", check=False)
    create(c, workload_priority_class("low", 10), workload_priority_class("high", 1000))
    queues(c, ns, "8", preemption={"withinClusterQueue": "LowerPriority"})
    create(c, job(ns, "low", 4, "2", labels={PRIORITY_CLASS_LABEL: "low"}))
    wait_for(lambda: bound_count(c, ns, "low") == 4, timeout=60, message="the low Job bound")
    create(c, job(ns, "high", 4, "2", labels={PRIORITY_CLASS_LABEL: "high"}))

    def evicted_and_high_bound() -> bool:
        kubelet_deletes(c, ns)
        return suspended(c, ns, "low") and bound_count(c, ns, "high") == 4

    wait_for(evicted_and_high_bound, timeout=90, message="low evicted by Kueue, high bound whole")
    assert bound_count(c, ns, "low") == 0


def test_quota_above_fit_never_binds_a_partial_job_in_20_rounds(kueue_cluster, ns):
    """The quota-above-fit case 20 times: each round, three 4 x 2-CPU Jobs,
    Kueue admits two (quota 16), nodes hold one; no Job is ever partly bound."""
    c = kueue_cluster
    create(c, ready_node("n1", "4"), ready_node("n2", "4"))
    queues(c, ns, "16")
    partial = 0

    def settled_partial(sizes: dict[str, int]) -> bool:
        """A Job seen partly bound is counted only if it stays so for 2 s: a
        gang binds one request per pod, so a listing may fall between its
        binds; a partial Job is one left holding part of the room."""
        if no_partial_job(c, ns, sizes):
            return False
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            if no_partial_job(c, ns, sizes):
                return False
            time.sleep(0.1)
        return True

    for round_ in range(20):
        names = [f"r{round_}-{x}" for x in "abc"]
        create(c, *(job(ns, name, 4, "2") for name in names))
        sizes = dict.fromkeys(names, 4)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not any(bound_count(c, ns, n) == 4 for n in names):
            partial += settled_partial(sizes)
            time.sleep(0.1)
        assert any(bound_count(c, ns, n) == 4 for n in names), f"round {round_}: no Job bound"
        for _ in range(10):
            partial += not no_partial_job(c, ns, sizes)
            time.sleep(0.1)
        c.kubectl("delete", "jobs", "-n", ns, *names, "--wait=false")
        wait_for(lambda: kubelet_deletes(c, ns) == 0 and not pods_by_name(c, ns), timeout=60, message="round over")
    assert partial == 0


def test_the_kueue_examples_work_as_written(kueue_cluster, ns):
    """examples/kueue/queues.yaml and job.yaml, applied as a user does (in
    namespace demo): Kueue admits the Job, troupe binds its 4 pods whole."""
    c = kueue_cluster
    create(c, ready_node("n1", "4"), ready_node("n2", "4"))
    examples = ROOT / "examples" / "kueue"
    c.kubectl("create", "namespace", "demo", check=False)
    try:
        c.kubectl("apply", "-f", str(examples / "queues.yaml"), "-f", str(examples / "job.yaml"))
        wait_for(lambda: bound_count(c, "demo", "train-a") == 4, timeout=60, message="train-a bound whole")
        assert kueue_admitted(c, "demo") == {"train-a"}
    finally:
        c.kubectl("delete", "-f", str(examples / "job.yaml"), "--wait=false", check=False)
        c.kubectl("delete", "pods", "--all", "-n", "demo", "--grace-period=0", "--force", check=False)
        c.kubectl("delete", "-f", str(examples / "queues.yaml"), "--wait=false", check=False)

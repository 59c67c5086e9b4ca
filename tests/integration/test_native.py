"""troupe schedules the native Workload API: `scheduling.k8s.io` PodGroups and
pods that name them with `spec.schedulingGroup.podGroupName`, on a 1.37.2
control plane serving v1beta1/v1alpha3 (with the Job controller making native
objects), on a 1.36.3 kube-apiserver serving v1alpha2 (the version the
Kubernetes documentation was written for), and with no native API at all.

The real troupe process runs against the real kube-apiserver with crds/ and
manifests/ applied; the only difference from a user's manifest copied from the
documentation is `schedulerName: troupe-scheduler` (and the apiVersion served).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from objects import create, force_delete
from troupe_process import TroupeProcess, supervised
from wait import holds, wait_for

V1BETA1 = "scheduling.k8s.io/v1beta1"
V1ALPHA2 = "scheduling.k8s.io/v1alpha2"
SCHEDULER = "troupe-scheduler"
NATIVE_PG = "podgroups.v1beta1.scheduling.k8s.io"
# troupe's configuration here: a second profile beside the default, so that a
# group whose pods name both is one troupe places (its configuration, not a
# scheduler elsewhere, is wrong: upstream's PodGroupError on 1.38).
SECOND = "troupe-second"
TWO_PROFILES = f"""
apiVersion: scheduling.troupe.dev/v1alpha1
kind: SchedulerConfiguration
profiles:
- schedulerName: {SCHEDULER}
- schedulerName: {SECOND}
"""


# ------------------------------------------------------------------ helpers


def node(name: str, cpu: str = "2", labels: dict[str, str] | None = None) -> dict[str, Any]:
    room = {"cpu": cpu, "memory": "8Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "status": {"capacity": room, "allocatable": room},
    }


def native_podgroup(ns: str, name: str, api_version: str = V1BETA1, **spec: Any) -> dict[str, Any]:
    spec.setdefault("schedulingPolicy", {"gang": {"minCount": 4}})
    return {"apiVersion": api_version, "kind": "PodGroup", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def worker(ns: str, name: str, group: str, cpu: str = "1", priority_class: str | None = None) -> dict[str, Any]:
    """A pod as the documentation writes it: spec.schedulingGroup, troupe's schedulerName."""
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER,
        "schedulingGroup": {"podGroupName": group},
        "containers": [
            {"name": "worker", "image": "registry.k8s.io/pause:3.10", "resources": {"requests": {"cpu": cpu}}}
        ],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def bound(cluster, ns: str) -> dict[str, str]:
    pods = cluster.get_json("pods", "-n", ns)["items"]
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}


def group_condition(cluster, ns: str, name: str, type_: str, resource: str = NATIVE_PG) -> dict[str, Any] | None:
    pg = cluster.get_json(resource, "-n", ns, name)
    return next((c for c in (pg.get("status") or {}).get("conditions") or () if c["type"] == type_), None)


def wait_group(cluster, ns, name, type_, status, reason, resource=NATIVE_PG, timeout=30.0) -> dict[str, Any]:
    return wait_for(
        lambda: (
            (c := group_condition(cluster, ns, name, type_, resource))
            and (c["status"], c["reason"]) == (status, reason)
            and c
        ),
        timeout=timeout,
        message=f"PodGroup {name}: {type_}={status}/{reason}",
    )


def pod_scheduled(cluster, ns: str, name: str) -> dict[str, Any] | None:
    p = cluster.get_json("pod", "-n", ns, name)
    return next((c for c in (p.get("status") or {}).get("conditions") or () if c["type"] == "PodScheduled"), None)


@pytest.fixture
def nodes_of(request):
    """Makes Nodes in a cluster for one test, and removes every node afterwards."""
    used = []

    def make(cluster, *bodies: dict[str, Any]) -> None:
        used.append(cluster)
        cluster.kubectl("delete", "nodes", "--all", "--wait=false", check=False)
        create(cluster, *bodies)

    yield make
    for cluster in used:
        cluster.kubectl("delete", "nodes", "--all", "--wait=false", check=False)


@pytest.fixture(scope="module")
def troupe(native_cluster, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("troupe")
    yield from supervised(TroupeProcess(native_cluster.scheduler_kubeconfig, workdir, config=TWO_PROFILES))


@pytest.fixture(scope="module")
def troupe_136(native_cluster_136, tmp_path_factory):
    yield from supervised(TroupeProcess(native_cluster_136.scheduler_kubeconfig, tmp_path_factory.mktemp("troupe136")))


# ------------------------------------------------------------------- 1.37


def test_documentation_gangs_one_whole_the_other_waits_whole(native_cluster, troupe, nodes_of, native_namespace):
    """The documentation's example: two gangs of 4 workers, room for 4. One
    gang is bound whole, the other waits whole and says why, in v1beta1's
    vocabulary (PodGroupInitiallyScheduled)."""
    c, ns = native_cluster, native_namespace
    nodes_of(c, node("n1"), node("n2"))
    create(c, native_podgroup(ns, "job-a"), native_podgroup(ns, "job-b"))
    create(c, *[worker(ns, f"job-{g}-{i}", f"job-{g}") for g in "ab" for i in range(4)])

    placed = wait_for(lambda: len(b := bound(c, ns)) == 4 and b, timeout=30, message="4 workers bound")
    winner = next(iter(placed)).rsplit("-", 1)[0]
    loser = "job-b" if winner == "job-a" else "job-a"
    assert all(name.startswith(winner) for name in placed), placed
    wait_group(c, ns, winner, "PodGroupInitiallyScheduled", "True", "Scheduled")
    cond = wait_group(c, ns, loser, "PodGroupInitiallyScheduled", "False", "Unschedulable")
    assert "needs 4 pods" in cond["message"], cond
    assert group_condition(c, ns, loser, "PodGroupScheduled") is None  # not troupe's v1alpha2 vocabulary
    why = wait_for(
        lambda: (p := pod_scheduled(c, ns, f"{loser}-0")) and p["status"] == "False" and p, timeout=30, message="why"
    )
    assert why["message"].startswith(f"PodGroup {ns}/{loser} (scheduling.k8s.io): "), why

    # The winner goes: the waiting gang is bound whole.
    force_delete(c, ns, *placed)
    wait_for(lambda: len(b := bound(c, ns)) == 4 and all(n.startswith(loser) for n in b), timeout=30, message="loser")


def gang_of_two_schedulers(c, ns: str) -> dict[str, Any]:
    """A native gang of 2 whose pods name troupe's two profiles: nothing is
    bound, the group says why (its reason: the caller's), and its pods say
    SchedulerError (as upstream's, whatever the group's reason)."""
    pods = [worker(ns, "g-0", "g"), worker(ns, "g-1", "g")]
    pods[1]["spec"]["schedulerName"] = SECOND
    create(c, native_podgroup(ns, "g", schedulingPolicy={"gang": {"minCount": 2}}), *pods)
    cond = wait_for(
        lambda: (g := group_condition(c, ns, "g", "PodGroupInitiallyScheduled")) and g["status"] == "False" and g,
        timeout=30,
        message="the group's PodGroupInitiallyScheduled=False",
    )
    assert f"name different schedulerName values ({SCHEDULER}, {SECOND})" in cond["message"], cond
    why = wait_for(lambda: pod_scheduled(c, ns, "g-0"), timeout=30, message="g-0's PodScheduled")
    assert (why["status"], why["reason"]) == ("False", "SchedulerError"), why
    assert bound(c, ns) == {}
    return cond


def test_a_group_whose_pods_name_two_schedulers_says_scheduler_error_on_137(
    native_cluster, troupe, nodes_of, native_namespace
):
    """1.37 serves the same v1beta1 as 1.38 but has no PodGroupError: troupe
    learns the served version (GET /version) and writes SchedulerError."""
    nodes_of(native_cluster, node("n1", cpu="4"))
    cond = gang_of_two_schedulers(native_cluster, native_namespace)
    assert cond["reason"] == "SchedulerError", cond


def test_late_joiner_counts_bound_pods(native_cluster, troupe, nodes_of, native_namespace):
    c, ns = native_cluster, native_namespace
    nodes_of(c, node("n1", cpu="4"))
    create(c, native_podgroup(ns, "g", schedulingPolicy={"gang": {"minCount": 2}}))
    create(c, worker(ns, "g-0", "g"), worker(ns, "g-1", "g"))
    wait_for(lambda: len(bound(c, ns)) == 2, timeout=30, message="the gang bound")
    create(c, worker(ns, "g-2", "g"))  # alone, below minCount, but its bound siblings count
    wait_for(lambda: "g-2" in bound(c, ns), timeout=30, message="the late joiner bound")


def test_topology_constraint_keeps_the_gang_in_one_rack(native_cluster, troupe, nodes_of, native_namespace):
    c, ns = native_cluster, native_namespace
    rack = "topology.kubernetes.io/rack"
    nodes_of(
        c,
        node("r1-a", labels={rack: "r1"}),
        node("r1-b", cpu="1", labels={rack: "r1"}),
        node("r2-a", labels={rack: "r2"}),
        node("r2-b", labels={rack: "r2"}),
    )
    create(
        c,
        native_podgroup(
            ns, "g", schedulingPolicy={"gang": {"minCount": 4}}, schedulingConstraints={"topology": [{"key": rack}]}
        ),
    )
    create(c, *[worker(ns, f"g-{i}", "g") for i in range(4)])
    placed = wait_for(lambda: len(b := bound(c, ns)) == 4 and b, timeout=30, message="the gang bound")
    assert set(placed.values()) == {"r2-a", "r2-b"}, placed  # r1 holds only 3


def test_native_gang_is_preempted_whole(native_cluster, troupe, nodes_of, native_namespace):
    """disruptionMode {all: {}}: a higher-priority native gang takes the room
    of the whole lower one; DisruptionTarget on its PodGroup and its pods."""
    c, ns = native_cluster, native_namespace
    classes = {"native-low": 10, "native-high": 1000}
    for name, value in classes.items():
        c.kubectl("delete", "priorityclass", name, "--ignore-not-found", check=False)
        c.apply_yaml(
            json.dumps(
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                }
            )
        )
    nodes_of(c, node("n1"))
    create(
        c,
        native_podgroup(
            ns,
            "low",
            schedulingPolicy={"gang": {"minCount": 2}},
            disruptionMode={"all": {}},
            priorityClassName="native-low",
        ),
    )
    create(c, *[worker(ns, f"low-{i}", "low", priority_class="native-low") for i in range(2)])
    wait_for(lambda: len(bound(c, ns)) == 2, timeout=30, message="the low gang bound")
    create(
        c,
        native_podgroup(ns, "high", schedulingPolicy={"gang": {"minCount": 2}}, priorityClassName="native-high"),
    )
    create(c, *[worker(ns, f"high-{i}", "high", priority_class="native-high") for i in range(2)])
    target = wait_group(c, ns, "low", "DisruptionTarget", "True", "PreemptionByScheduler")
    assert "high" in target["message"]
    for i in range(2):
        p = wait_for(
            lambda i=i: (p := c.get_json("pod", "-n", ns, f"low-{i}"))["metadata"].get("deletionTimestamp") and p,
            timeout=30,
            message=f"low-{i} deleted",
        )
        kinds = {x["type"] for x in p["status"].get("conditions") or ()}
        assert "DisruptionTarget" in kinds
    force_delete(c, ns, "low-0", "low-1")  # no kubelet: finish the deletion
    wait_for(lambda: set(bound(c, ns)) == {"high-0", "high-1"}, timeout=30, message="the high gang bound")
    for name in classes:
        c.kubectl("delete", "priorityclass", name, "--ignore-not-found", check=False)


def native_composite(ns: str, name: str, min_groups: int | None = None, **spec: Any) -> dict[str, Any]:
    spec.setdefault("workloadRef", {"workloadName": "w", "templateName": "t"})
    spec["schedulingPolicy"] = {"basic": {}} if min_groups is None else {"gang": {"minGroupCount": min_groups}}
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def test_two_leader_worker_replicas_room_for_one(native_cluster, troupe, nodes_of, native_namespace):
    """The issue's case on the native API (v1alpha3 CompositePodGroups, the
    1.37 gates on): two replicas, each a root gang (minGroupCount 2) over a
    1-pod leader group and a 4-pod worker gang, room for one. One replica
    binds whole, the other nothing, and its root says why (upstream's
    scheduler binds the same but writes no status on CompositePodGroups)."""
    c, ns = native_cluster, native_namespace
    nodes_of(c, node("n1", cpu="5"))
    for r in ("a", "b"):
        create(c, native_composite(ns, f"replica-{r}", 2))
        for group, size in ((f"{r}-leader", 1), (f"{r}-workers", 4)):
            create(
                c,
                native_podgroup(
                    ns,
                    group,
                    schedulingPolicy={"gang": {"minCount": size}},
                    parentCompositePodGroupName=f"replica-{r}",
                    workloadRef={"workloadName": "w", "templateName": "t"},
                ),
            )
            create(c, *(worker(ns, f"{group}-{i}", group) for i in range(size)))
    wait_for(lambda: len(bound(c, ns)) == 5, timeout=30, message="one replica bound")
    placed = {name.split("-")[0] for name in bound(c, ns)}  # a-leader-0, a-workers-3: replica a
    assert placed in ({"a"}, {"b"}), bound(c, ns)
    waiting = "b" if placed == {"a"} else "a"
    resource = "compositepodgroups.v1alpha3.scheduling.k8s.io"
    done = wait_group(
        c, ns, f"replica-{placed.pop()}", "CompositePodGroupInitiallyScheduled", "True", "Scheduled", resource
    )
    assert done["message"], done
    cond = wait_group(
        c, ns, f"replica-{waiting}", "CompositePodGroupInitiallyScheduled", "False", "Unschedulable", resource
    )
    assert "needs 2 of 2 group(s)" in cond["message"], cond
    leader = wait_group(c, ns, f"{waiting}-leader", "PodGroupInitiallyScheduled", "False", "Unschedulable")
    assert leader["message"], leader
    assert len(bound(c, ns)) == 5  # never a part of the second replica


def four_worker_job(ns: str, name: str) -> dict[str, Any]:
    """A Job of 4 one-CPU workers for troupe (no gang asked for yet)."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "parallelism": 4,
            "completions": 4,
            "template": {
                "spec": {
                    "schedulerName": SCHEDULER,
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "worker",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ],
                }
            },
        },
    }


def test_a_job_that_asks_troupe_for_a_gang_stays_a_gang_beside_the_job_controllers_group(
    native_cluster, troupe, nodes_of, native_namespace
):
    """With WorkloadWithJob the 1.37 Job controller names a native PodGroup in
    spec.schedulingGroup on the pods of every Job: a basic one for a Job
    without spec.scheduling. Two Jobs that ask troupe for a gang by its
    annotation (4 pods each, room for 6): one runs whole, the other waits
    whole, not 4 + 2 (troupe's marker comes before spec.schedulingGroup)."""
    c, ns = native_cluster, native_namespace
    nodes_of(c, node("n1", cpu="3"), node("n2", cpu="3"))

    def job(name: str) -> dict[str, Any]:
        body = four_worker_job(ns, name)
        body["spec"]["template"]["metadata"] = {"annotations": {"scheduling.troupe.dev/job-policy": "gang"}}
        return body

    create(c, job("gang-a"), job("gang-b"))
    pods = wait_for(
        lambda: len(items := c.get_json("pods", "-n", ns)["items"]) == 8 and items, timeout=60, message="8 pods"
    )
    assert all(p["spec"].get("schedulingGroup") for p in pods), "the Job controller names a native group"
    placed = wait_for(lambda: len(b := bound(c, ns)) == 4 and b, timeout=60, message="one Job's 4 pods bound")
    assert len({name.rsplit("-", 1)[0] for name in placed}) == 1, placed
    holds(lambda: len(bound(c, ns)) == 4, 3, message="the other Job waits whole")
    # No kubelet: the Jobs go first (or they make their pods again), then their
    # pods, so that no bound pod of this test holds room in the next one.
    c.kubectl("delete", "jobs", "--all", "-n", ns, "--cascade=orphan")
    c.kubectl("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force")


def test_jobs_with_spec_scheduling_bound_whole(native_cluster, troupe, nodes_of, native_namespace):
    """The 1.37 Job controller makes each Job's native Workload, PodGroup and
    spec.schedulingGroup; two such gangs of 4, room for 6: one Job runs whole,
    the other waits whole (no 4 + 2)."""
    c, ns = native_cluster, native_namespace
    nodes_of(c, node("n1", cpu="3"), node("n2", cpu="3"))

    def job(name: str) -> dict[str, Any]:
        body = four_worker_job(ns, name)
        body["spec"]["scheduling"] = {"schedulingPolicy": {"gang": {"minCount": 4}}}
        return body

    create(c, job("train-a"), job("train-b"))
    placed = wait_for(lambda: len(b := bound(c, ns)) == 4 and b, timeout=60, message="one Job's 4 workers bound")
    jobs = {name.rsplit("-", 1)[0] for name in placed}
    assert len(jobs) == 1, placed

    def reasons() -> list[str] | None:
        groups = c.get_json(NATIVE_PG, "-n", ns)["items"]
        conditions = [
            next(
                (
                    x
                    for x in (g.get("status") or {}).get("conditions") or ()
                    if x["type"] == "PodGroupInitiallyScheduled"
                ),
                None,
            )
            for g in groups
        ]
        if len(groups) != 2 or None in conditions:
            return None
        return sorted(x["reason"] for x in conditions if x is not None)

    states = wait_for(reasons, timeout=30, message="both Jobs' PodGroups have a condition")
    assert states == ["Scheduled", "Unschedulable"]
    assert len(bound(c, ns)) == 4  # still: the other Job holds no room


def test_a_native_job_scaled_in_place_binds_its_increment_whole(native_cluster, troupe, nodes_of, native_namespace):
    """1.37's elastic Jobs: spec.scheduling's gang minCount and parallelism
    patched together; the Job controller patches its native PodGroup's
    minCount (same object, status kept) before it adds pods. Room for 4:
    scaled 2 -> 5, the 3 new workers wait together, none bound alone;
    5 -> 4, the 2 left bind together."""
    c, ns = native_cluster, native_namespace
    nodes_of(c, node("n1", cpu="2"), node("n2", cpu="2"))
    body = four_worker_job(ns, "elastic")
    body["spec"].update(parallelism=2, completions=2, completionMode="Indexed")
    body["spec"]["scheduling"] = {"schedulingPolicy": {"gang": {"minCount": 2}}}
    create(c, body)
    first = wait_for(lambda: len(b := bound(c, ns)) == 2 and b, timeout=60, message="2 workers bound")
    group = c.get_json(NATIVE_PG, "-n", ns)["items"][0]
    name, uid = group["metadata"]["name"], group["metadata"]["uid"]
    scheduled = wait_group(c, ns, name, "PodGroupInitiallyScheduled", "True", "Scheduled")

    def scale(n: int) -> None:
        patch = {
            "spec": {"parallelism": n, "completions": n, "scheduling": {"schedulingPolicy": {"gang": {"minCount": n}}}}
        }
        c.kubectl("patch", "job", "-n", ns, "elastic", "--type=merge", "-p", json.dumps(patch))

    def min_count() -> int:
        pg = c.get_json(NATIVE_PG, "-n", ns, name)
        assert pg["metadata"]["uid"] == uid, "the PodGroup was replaced"
        return int(pg["spec"]["schedulingPolicy"]["gang"]["minCount"])

    scale(5)
    wait_for(lambda: min_count() == 5, timeout=30, message="minCount 5")
    wait_for(lambda: len(c.get_json("pods", "-n", ns)["items"]) == 5, timeout=30, message="5 workers")
    new = sorted({p["metadata"]["name"] for p in c.get_json("pods", "-n", ns)["items"]} - set(first))
    wait_for(
        lambda: (cond := pod_scheduled(c, ns, new[0])) and "needs 5 pods, 4 fit" in cond.get("message", ""),
        timeout=30,
        message=f"{new[0]} says the increment does not fit",
    )
    holds(lambda: bound(c, ns) == first, seconds=5, message="no worker of the increment binds alone")

    scale(4)
    wait_for(lambda: min_count() == 4, timeout=30, message="minCount 4")
    now = wait_for(lambda: len(b := bound(c, ns)) == 4 and b, timeout=60, message="4 workers bound")
    assert {k: now[k] for k in first} == first
    kept = group_condition(c, ns, name, "PodGroupInitiallyScheduled")
    assert kept is not None and kept["lastTransitionTime"] == scheduled["lastTransitionTime"], kept


def test_native_podgroup_claim_is_shared_by_its_pods_and_reserved_for_the_group(
    native_cluster, troupe, nodes_of, native_namespace
):
    """spec.resourceClaims of a native PodGroup (DRAWorkloadResourceClaims):
    one claim, allocated once, reserved for the native PodGroup (apiGroup
    scheduling.k8s.io), its pods on the nodes its device reaches."""
    c, ns = native_cluster, native_namespace
    driver = "gpu.example.com"
    c.kubectl("delete", "resourceslices,deviceclasses", "--all", "--wait=false", check=False)
    nodes_of(c, node("fabric-0", labels={"example.com/fabric": "f1"}), node("plain", cpu="8"))
    selector = {"matchExpressions": [{"key": "example.com/fabric", "operator": "In", "values": ["f1"]}]}
    create(
        c,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": driver},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]},
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "fabric-f1"},
            "spec": {
                "driver": driver,
                "nodeSelector": {"nodeSelectorTerms": [selector]},
                "pool": {"name": "fabric-f1", "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "link-0"}],
            },
        },
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "fabric", "namespace": ns},
            "spec": {"devices": {"requests": [{"name": "link", "exactly": {"deviceClassName": driver}}]}},
        },
    )
    entry = {"name": "fabric", "resourceClaimName": "fabric"}
    create(c, native_podgroup(ns, "g", schedulingPolicy={"gang": {"minCount": 2}}, resourceClaims=[entry]))
    pods = [worker(ns, f"g-{i}", "g", cpu="500m") for i in range(2)]
    for body in pods:
        body["spec"]["resourceClaims"] = [entry]
    create(c, *pods)
    placed = wait_for(lambda: len(b := bound(c, ns)) == 2 and b, timeout=30, message="the gang bound")
    assert set(placed.values()) == {"fabric-0"}, placed
    claim = c.get_json("resourceclaim", "-n", ns, "fabric")
    assert len(claim["status"]["allocation"]["devices"]["results"]) == 1
    uid = c.get_json(NATIVE_PG, "-n", ns, "g")["metadata"]["uid"]
    assert claim["status"]["reservedFor"] == [
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g", "uid": uid}
    ]
    c.kubectl("delete", "resourceslices,deviceclasses", "--all", "--wait=false", check=False)


# ------------------------------------------------------------------- 1.36


def test_136_documentation_manifests_v1alpha2(native_cluster_136, troupe_136, nodes_of, native_namespace_136):
    """The 1.36 documentation's manifests: a Workload with a `worker` template,
    a PodGroup made from it (podGroupTemplateRef), pods with
    spec.schedulingGroup; condition PodGroupScheduled."""
    c, ns = native_cluster_136, native_namespace_136
    nodes_of(c, node("n1", cpu="4"))
    policy = {"gang": {"minCount": 4}}
    create(
        c,
        {
            "apiVersion": V1ALPHA2,
            "kind": "Workload",
            "metadata": {"name": "training-job-workload", "namespace": ns},
            "spec": {"podGroupTemplates": [{"name": "worker", "schedulingPolicy": policy}]},
        },
    )
    ref = {"workload": {"workloadName": "training-job-workload", "podGroupTemplateName": "worker"}}
    create(c, native_podgroup(ns, "training-job-workers", V1ALPHA2, schedulingPolicy=policy, podGroupTemplateRef=ref))
    create(c, *[worker(ns, f"worker-{i}", "training-job-workers") for i in range(4)])
    wait_for(lambda: len(bound(c, ns)) == 4, timeout=30, message="4 workers bound")
    wait_group(
        c, ns, "training-job-workers", "PodGroupScheduled", "True", "Scheduled", "podgroups.v1alpha2.scheduling.k8s.io"
    )


# ------------------------------------------------- no native API: as before


def test_without_the_native_api_one_line_and_troupes_own_crds(installed, tmp_path):
    proc = TroupeProcess(installed.scheduler_kubeconfig, tmp_path)
    for _ in supervised(proc):
        log = wait_for(
            lambda: "native PodGroups are not read" in (t := proc.log_text()) and t, timeout=30, message="log line"
        )
        assert log.count("native PodGroups are not read") == 1
        assert "scheduling.k8s.io PodGroups are not served" in log


def test_a_cluster_that_starts_serving_the_api_is_picked_up_without_a_restart(controlplane_binaries, tmp_path):
    """troupe starts on a cluster without the native API (one line), the
    API server is restarted serving it, and troupe, still running, schedules a
    native gang: discovery is asked again every watch.discoverySeconds."""
    import localcluster
    from conftest import install

    cluster = localcluster.LocalCluster(controller_manager=False, keep=False)
    cluster.start(timeout=90)
    try:
        install(cluster)
        proc = TroupeProcess(cluster.scheduler_kubeconfig, tmp_path, config="watch: {discoverySeconds: 1}\n")
        proc.start()
        try:
            wait_for(lambda: "native PodGroups are not read" in proc.log_text(), timeout=30, message="the line")
            cluster.workload_api = localcluster.WORKLOAD_API[localcluster.minor_of(localcluster.K8S_VERSION)]
            cluster.restart_apiserver()
            wait_for(
                lambda: "native PodGroups: reading scheduling.k8s.io/v1beta1" in proc.log_text(),
                timeout=60,
                message="the native API picked up",
            )
            create(cluster, node("n1"))
            cluster.kubectl("create", "namespace", "later")
            create(cluster, native_podgroup("later", "g", schedulingPolicy={"gang": {"minCount": 2}}))
            create(cluster, worker("later", "g-0", "g"), worker("later", "g-1", "g"))
            wait_for(lambda: len(bound(cluster, "later")) == 2, timeout=30, message="the native gang bound")
            assert proc.log_text().count("native PodGroups are not read") == 1
        finally:
            assert proc.stop() == 0, proc.log_tail()
    finally:
        cluster.stop()

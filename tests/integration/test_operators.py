"""troupe schedules the PodGroups real operators write, each built from its Go
module (`make operators`) and run as a process against the real
kube-apiserver:

- KubeRay's ray-operator v1.5.0 with `--batch-scheduler=scheduler-plugins`
  (scheduling.x-k8s.io/v1alpha1 PodGroups, pods labelled
  scheduling.x-k8s.io/pod-group, schedulerName scheduler-plugins-scheduler)
  and `--batch-scheduler=volcano` (scheduling.volcano.sh/v1beta1 PodGroups,
  pods annotated scheduling.k8s.io/group-name, schedulerName volcano);
- Kubeflow's training-operator v1.8.1 with
  `--gang-scheduler-name=troupe-scheduler` (scheduler-plugins PodGroups and
  label, schedulerName troupe-scheduler): PyTorchJobs of 1 master + 3 workers.

troupe is the real process too, with examples/config-ecosystem.yaml (a profile
under each of those scheduler names). Two RayClusters (PyTorchJobs) of a head
and 3 workers (1 CPU each) and room for one of them (2 nodes of 2 CPU): one is bound whole,
the other waits whole (never 2 + 2) and says why; when the first goes, the
second is bound whole. The PodGroup status troupe writes is checked in each
API's own vocabulary (scheduler-plugins' PodGroup controller, Volcano's
scheduler).

No kubelet: pods never run, and a RayCluster's bound pods go only when
force-deleted (the garbage collector's deletes are graceful).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from objects import create, node
from operators import (
    CLUSTER_LABEL,
    GANG_LABEL,
    JOB_NAME_LABEL,
    PYTORCHJOBS,
    RAYCLUSTERS,
    REPLICA_TYPE_LABEL,
    SCHEDULER_PLUGINS_GROUP_LABEL,
    SCHEDULER_PLUGINS_PG,
    SCHEDULER_PLUGINS_SCHEDULER,
    VOLCANO_GROUP_ANNOTATION,
    VOLCANO_PG,
    VOLCANO_SCHEDULER,
    VOLCANO_TASK_ANNOTATION,
    OperatorProcess,
    RayOperator,
    TrainingOperator,
    kuberay_build,
    pytorchjob,
    raycluster,
    training_operator_build,
)
from troupe_process import ROOT, TroupeProcess, supervised
from wait import holds, wait_for

WORKERS = 3
MEMBERS = WORKERS + 1  # the head (the master) too
TROUPE_SCHEDULER = "troupe-scheduler"


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def troupe(operator_cluster, tmp_path_factory):
    """troupe under the three names of examples/config-ecosystem.yaml, started
    after every CRD is installed (operator_cluster)."""
    config = (ROOT / "examples" / "config-ecosystem.yaml").read_text()
    yield from supervised(
        TroupeProcess(operator_cluster.scheduler_kubeconfig, tmp_path_factory.mktemp("troupe-ecosystem"), config=config)
    )


@pytest.fixture
def room_for_one(operator_cluster):
    """2 nodes of 2 CPU: room for one RayCluster of 4 one-CPU pods, not two."""
    c = operator_cluster
    c.kubectl("delete", "nodes", "--all", "--wait=false", check=False)
    create(c, node("n1", cpu="2"), node("n2", cpu="2"))
    yield
    c.kubectl("delete", "nodes", "--all", "--wait=false", check=False)


def _stop_all(started: list[OperatorProcess]) -> None:
    """Stop each (its log tail printed); each must not have died on its own meanwhile."""
    for op in started:
        alive = op.running
        op.stop()
        print(f"--- {op.log_path} (tail)\n{op.log_tail(80)}")
        assert alive, f"{op.name} exited during the test:\n{op.log_tail()}"


@pytest.fixture
def ray_operator(operator_cluster, tmp_path: Path) -> Iterator[Callable[[str, str], OperatorProcess]]:
    """``ray_operator(batch_scheduler, namespace)`` starts KubeRay's operator for
    that namespace; it is stopped after the test (its log tail printed), and
    must not have died on its own meanwhile. (Request it after `namespace_in`:
    it then stops before the namespace is emptied, instead of recreating the
    pods being deleted.)"""
    build = kuberay_build()
    started: list[OperatorProcess] = []

    def start(batch_scheduler: str, ns: str) -> OperatorProcess:
        op = RayOperator(build, operator_cluster.admin_kubeconfig, tmp_path, batch_scheduler, ns)
        started.append(op)
        return op.start()

    yield start
    _stop_all(started)


@pytest.fixture
def training_operator(operator_cluster, tmp_path: Path) -> Iterator[Callable[[str], OperatorProcess]]:
    """``training_operator(namespace)``: Kubeflow's training-operator for that
    namespace with ``--gang-scheduler-name=troupe-scheduler``, stopped like
    ``ray_operator``."""
    build = training_operator_build()
    started: list[OperatorProcess] = []

    def start(ns: str) -> OperatorProcess:
        op = TrainingOperator(build, operator_cluster, tmp_path, TROUPE_SCHEDULER, ns)
        started.append(op)
        return op.start()

    yield start
    _stop_all(started)


# ------------------------------------------------------------------- helpers


# The pods of one RayCluster (or, with label=JOB_NAME_LABEL, of one PyTorchJob).


def pods_of(c, ns: str, cluster: str, label: str = CLUSTER_LABEL) -> list[dict[str, Any]]:
    return c.get_json("pods", "-n", ns, "-l", f"{label}={cluster}")["items"]


def bound_by_cluster(c, ns: str, clusters: tuple[str, ...], label: str = CLUSTER_LABEL) -> dict[str, int]:
    items = c.get_json("pods", "-n", ns)["items"]
    return {
        rc: sum(1 for p in items if p["metadata"].get("labels", {}).get(label) == rc and p["spec"].get("nodeName"))
        for rc in clusters
    }


def wait_one_whole(
    c, ns: str, clusters: tuple[str, str], timeout: float = 30, label: str = CLUSTER_LABEL
) -> tuple[str, str]:
    """Waits until one RayCluster (job) has all MEMBERS pods bound, failing at
    once if both ever have bound pods (2 + 2); returns (winner, loser)."""
    seen: list[dict[str, int]] = []

    def check():
        counts = bound_by_cluster(c, ns, clusters, label)
        seen.append(counts)
        return (all(counts.values()) or MEMBERS in counts.values()) and counts

    counts = wait_for(check, timeout=timeout, message=f"one of {clusters}: {MEMBERS} pods bound")
    assert not all(counts.values()), f"both partly bound (not gang-scheduled): {counts}; history {seen}"
    winner = next(rc for rc, n in counts.items() if n == MEMBERS)
    return winner, next(rc for rc in clusters if rc != winner)


def pod_scheduled(pod: dict[str, Any]) -> dict[str, Any] | None:
    return next((x for x in pod.get("status", {}).get("conditions") or () if x["type"] == "PodScheduled"), None)


def wait_all_unschedulable(
    c, ns: str, cluster: str, mentions: str, timeout: float = 30, label: str = CLUSTER_LABEL
) -> list[dict[str, Any]]:
    """Every pod of ``cluster`` is PodScheduled=False/Unschedulable with a message naming ``mentions``."""

    def check():
        pods = pods_of(c, ns, cluster, label)
        conds = [pod_scheduled(p) for p in pods]
        ok = len(pods) == MEMBERS and all(
            x and x["status"] == "False" and x.get("reason") == "Unschedulable" and mentions in x.get("message", "")
            for x in conds
        )
        return ok and conds

    return wait_for(check, timeout=timeout, message=f"{cluster}'s pods Unschedulable, naming {mentions}")


def wait_operator_objects(
    c,
    ns: str,
    clusters: tuple[str, ...],
    pg_resource: str,
    pg_name: Callable[[str], str],
    label: str = CLUSTER_LABEL,
):
    """Waits until the operator made each RayCluster's (job's) PodGroup and its
    MEMBERS pods; returns (podgroups, pods)."""
    pgs = {
        rc: wait_for(
            lambda rc=rc: c.get_json(pg_resource, "-n", ns, pg_name(rc)),
            timeout=30,
            message=f"the operator made {pg_resource} {pg_name(rc)}",
        )
        for rc in clusters
    }
    pods = {
        rc: wait_for(
            lambda rc=rc: len(p := pods_of(c, ns, rc, label)) == MEMBERS and p,
            timeout=30,
            message=f"the operator made {MEMBERS} pods for {rc}",
        )
        for rc in clusters
    }
    return pgs, pods


def remove_owner(c, ns: str, name: str, resource: str = RAYCLUSTERS, label: str = CLUSTER_LABEL) -> None:
    """Delete a RayCluster (a job) and finish what a kubelet would: its pods
    (bound, so graceful deletes would leave them Terminating) are force-deleted."""
    c.kubectl("delete", resource, "-n", ns, name, "--wait=true", timeout=60)
    c.kubectl("delete", "pods", "-n", ns, "-l", f"{label}={name}", "--grace-period=0", "--force", "--wait=false")
    wait_for(lambda: not pods_of(c, ns, name, label), timeout=30, message=f"{name}'s pods gone")


def wait_scheduler_plugins_scheduling(c, ns: str, name: str) -> dict[str, Any]:
    """The status scheduler-plugins' controller computes for a PodGroup whose
    minMember pods exist, none Running (no kubelet): phase Scheduling,
    scheduleStartTime once tried, occupiedBy the pods' owner (named like the
    PodGroup by both operators here); no pod counted running."""
    pg = wait_for(
        lambda: (
            (s := (pg := c.get_json(SCHEDULER_PLUGINS_PG, "-n", ns, name)).get("status") or {}).get("phase")
            == "Scheduling"
            and s.get("scheduleStartTime")
            and s.get("occupiedBy") == f"{ns}/{name}"
            and pg
        ),
        timeout=30,
        message=f"PodGroup {name}: phase Scheduling, scheduleStartTime set, occupiedBy {ns}/{name}",
    )
    assert pg["status"].get("running", 0) == 0, pg["status"]
    return pg


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any] | None:
    return next((x for x in (obj.get("status") or {}).get("conditions") or () if x.get("type") == type_), None)


# ---------------------------------------------------------- scheduler-plugins


def test_kuberay_scheduler_plugins_one_raycluster_whole(
    operator_cluster, troupe, room_for_one, namespace_in, ray_operator
):
    """--batch-scheduler=scheduler-plugins, RayClusters labelled
    ray.io/gang-scheduling-enabled: KubeRay writes a scheduling.x-k8s.io
    PodGroup per RayCluster (minMember = workers + 1); troupe binds one
    RayCluster whole, keeps the other whole and waiting, and keeps the
    PodGroups' status as scheduler-plugins' PodGroup controller does."""
    c = operator_cluster
    ns = namespace_in(c)
    ray_operator("scheduler-plugins", ns)
    clusters = ("ray-a", "ray-b")
    create(c, *[raycluster(ns, rc, workers=WORKERS, labels={GANG_LABEL: "true"}) for rc in clusters])

    # What KubeRay v1.5.0 writes: the PodGroup is named after the RayCluster.
    pgs, pods = wait_operator_objects(c, ns, clusters, SCHEDULER_PLUGINS_PG, lambda rc: rc)
    for rc, pg in pgs.items():
        assert pg["apiVersion"] == "scheduling.x-k8s.io/v1alpha1", pg
        assert pg["spec"]["minMember"] == MEMBERS, pg
        assert pg["spec"]["minResources"] == {"cpu": str(MEMBERS), "memory": f"{MEMBERS}Gi"}, pg
        assert [o["name"] for o in pg["metadata"]["ownerReferences"]] == [rc], pg
        for p in pods[rc]:
            assert p["spec"]["schedulerName"] == SCHEDULER_PLUGINS_SCHEDULER, p["metadata"]["name"]
            assert p["metadata"]["labels"][SCHEDULER_PLUGINS_GROUP_LABEL] == rc, p["metadata"]

    winner, loser = wait_one_whole(c, ns, clusters)
    wait_all_unschedulable(c, ns, loser, mentions=f"{ns}/{loser}")
    assert bound_by_cluster(c, ns, clusters)[loser] == 0

    for rc in clusters:  # status as scheduler-plugins' controller computes it
        wait_scheduler_plugins_scheduling(c, ns, rc)

    # The winner goes: the waiting RayCluster is bound whole.
    remove_owner(c, ns, winner)
    wait_for(
        lambda: bound_by_cluster(c, ns, (loser,))[loser] == MEMBERS,
        timeout=30,
        message=f"{loser} bound whole after {winner} left",
    )


# -------------------------------------------------------------------- volcano


def test_kuberay_volcano_one_raycluster_whole(operator_cluster, troupe, room_for_one, namespace_in, ray_operator):
    """--batch-scheduler=volcano: KubeRay writes a scheduling.volcano.sh
    PodGroup `ray-<name>-pg` per RayCluster (no label needed) and annotates
    its pods; troupe binds one RayCluster whole, the other waits whole, and
    the PodGroups' status says so in Volcano's vocabulary (phase Running and
    condition Scheduled once minMember pods are bound; Unschedulable while not)."""
    c = operator_cluster
    ns = namespace_in(c)
    ray_operator("volcano", ns)
    clusters = ("ray-a", "ray-b")
    create(c, *[raycluster(ns, rc, workers=WORKERS) for rc in clusters])

    def pg_name(rc: str) -> str:
        return f"ray-{rc}-pg"

    pgs, pods = wait_operator_objects(c, ns, clusters, VOLCANO_PG, pg_name)
    for rc, pg in pgs.items():
        assert pg["apiVersion"] == "scheduling.volcano.sh/v1beta1", pg
        assert pg["spec"]["minMember"] == MEMBERS, pg
        assert pg["spec"]["minResources"] == {"cpu": str(MEMBERS), "memory": f"{MEMBERS}Gi"}, pg
        assert pg["spec"].get("queue") == "default", pg  # the CRD's default: KubeRay sets none without a label
        owner = pg["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner.get("controller")) == ("RayCluster", rc, True), pg
        for p in pods[rc]:
            meta = p["metadata"]
            assert p["spec"]["schedulerName"] == VOLCANO_SCHEDULER, meta["name"]
            assert meta["annotations"][VOLCANO_GROUP_ANNOTATION] == pg_name(rc), meta
            assert meta["annotations"][VOLCANO_TASK_ANNOTATION] in ("headgroup", "workers"), meta

    winner, loser = wait_one_whole(c, ns, clusters)
    wait_all_unschedulable(c, ns, loser, mentions=f"{ns}/{pg_name(loser)}")
    assert bound_by_cluster(c, ns, clusters)[loser] == 0

    def volcano_status(rc: str, phases: tuple[str, ...], cond_type: str) -> Callable[[], Any]:
        def check():
            pg = c.get_json(VOLCANO_PG, "-n", ns, pg_name(rc))
            cond = condition(pg, cond_type)
            return (pg.get("status") or {}).get("phase") in phases and cond and cond.get("status") == "True" and pg

        return check

    wait_for(volcano_status(winner, ("Running",), "Scheduled"), timeout=30, message=f"{winner}: Running, Scheduled")
    wait_for(
        volcano_status(loser, ("Pending", "Inqueue"), "Unschedulable"),
        timeout=30,
        message=f"{loser}: Pending/Inqueue, Unschedulable",
    )

    remove_owner(c, ns, winner)
    wait_for(
        lambda: bound_by_cluster(c, ns, (loser,))[loser] == MEMBERS,
        timeout=30,
        message=f"{loser} bound whole after {winner} left",
    )
    wait_for(volcano_status(loser, ("Running",), "Scheduled"), timeout=30, message=f"{loser}: Running, Scheduled")


# ------------------------------------------------------- RayClusters scaled


def scale_workers(c, ns: str, rc: str, replicas: int) -> None:
    """What the Ray autoscaler does: the worker group's replicas patched (max raised to allow it)."""
    ops = [
        {"op": "replace", "path": "/spec/workerGroupSpecs/0/maxReplicas", "value": max(replicas, WORKERS)},
        {"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": replicas},
    ]
    c.kubectl("patch", RAYCLUSTERS, "-n", ns, rc, "--type=json", "-p", json.dumps(ops))


def test_kuberay_volcano_scaled_up_binds_its_new_workers_whole(
    operator_cluster, troupe, room_for_one, namespace_in, ray_operator
):
    """KubeRay's Volcano backend raises the PodGroup's minMember with the
    worker group's replicas before it adds the pods: 3 -> 5 workers where one
    more pod fits waits whole (none of the 2 bound, saying why); once room
    for both appears they bind together, where the cluster runs."""
    c = operator_cluster
    ns = namespace_in(c)
    ray_operator("volcano", ns)
    create(c, raycluster(ns, "ray-a", workers=WORKERS))
    pg = "ray-ray-a-pg"
    wait_for(lambda: bound_by_cluster(c, ns, ("ray-a",))["ray-a"] == MEMBERS, timeout=60, message="ray-a bound")
    first = {p["metadata"]["name"] for p in pods_of(c, ns, "ray-a")}
    create(c, node("n3", cpu="1"))  # room for one more worker, not two

    scale_workers(c, ns, "ray-a", WORKERS + 2)
    wait_for(
        lambda: c.get_json(VOLCANO_PG, "-n", ns, pg)["spec"]["minMember"] == MEMBERS + 2,
        timeout=30,
        message="KubeRay raised minMember",
    )
    new = wait_for(
        lambda: len(p := [x for x in pods_of(c, ns, "ray-a") if x["metadata"]["name"] not in first]) == 2 and p,
        timeout=30,
        message="2 new workers",
    )
    wait_for(
        lambda: all(
            (x := pod_scheduled(c.get_json("pod", "-n", ns, p["metadata"]["name"])))
            and "needs 6 pods, 5 fit" in x.get("message", "")
            for p in new
        ),
        timeout=30,
        message="the new workers say the increment does not fit",
    )
    holds(lambda: bound_by_cluster(c, ns, ("ray-a",))["ray-a"] == MEMBERS, seconds=5, message="neither binds alone")

    create(c, node("n4", cpu="1"))
    wait_for(
        lambda: bound_by_cluster(c, ns, ("ray-a",))["ray-a"] == MEMBERS + 2, timeout=30, message="both bound together"
    )


def test_kuberay_scheduler_plugins_scaled_up_keeps_its_minimum_so_new_workers_bind_as_they_fit(
    operator_cluster, troupe, room_for_one, namespace_in, ray_operator
):
    """KubeRay v1.5.0's scheduler-plugins backend makes the PodGroup once and
    never changes minMember: workers added later are beyond the minimum,
    and troupe binds each as it fits (as scheduler-plugins would)."""
    c = operator_cluster
    ns = namespace_in(c)
    ray_operator("scheduler-plugins", ns)
    create(c, raycluster(ns, "ray-a", workers=WORKERS, labels={GANG_LABEL: "true"}))
    wait_for(lambda: bound_by_cluster(c, ns, ("ray-a",))["ray-a"] == MEMBERS, timeout=60, message="ray-a bound")
    create(c, node("n3", cpu="1"))
    scale_workers(c, ns, "ray-a", WORKERS + 2)
    wait_for(lambda: len(pods_of(c, ns, "ray-a")) == MEMBERS + 2, timeout=30, message="2 new workers")
    wait_for(lambda: bound_by_cluster(c, ns, ("ray-a",))["ray-a"] == MEMBERS + 1, timeout=30, message="one binds")
    assert c.get_json(SCHEDULER_PLUGINS_PG, "-n", ns, "ray-a")["spec"]["minMember"] == MEMBERS


# ------------------------------------------------- Kubeflow training-operator


def test_training_operator_scaled_up_binds_its_new_workers_whole(
    operator_cluster, troupe, room_for_one, namespace_in, training_operator
):
    """The training-operator v1.8.1 keeps its PodGroup's minMember at the
    job's total replicas, updated before it adds pods: Worker replicas 3 ->
    5 (what an HPA does to an elastic PyTorchJob) where one more pod fits
    waits whole; with room for both they bind together."""
    c = operator_cluster
    ns = namespace_in(c)
    training_operator(ns)
    create(c, pytorchjob(ns, "job-a", workers=WORKERS))
    count = lambda: bound_by_cluster(c, ns, ("job-a",), JOB_NAME_LABEL)["job-a"]  # noqa: E731
    wait_for(lambda: count() == MEMBERS, timeout=60, message="job-a bound")
    create(c, node("n3", cpu="1"))
    patch = {"spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": WORKERS + 2}}}}
    c.kubectl("patch", PYTORCHJOBS, "-n", ns, "job-a", "--type=merge", "-p", json.dumps(patch))
    wait_for(
        lambda: c.get_json(SCHEDULER_PLUGINS_PG, "-n", ns, "job-a")["spec"]["minMember"] == MEMBERS + 2,
        timeout=30,
        message="the operator raised minMember",
    )
    wait_for(lambda: len(pods_of(c, ns, "job-a", JOB_NAME_LABEL)) == MEMBERS + 2, timeout=30, message="2 new workers")
    holds(lambda: count() == MEMBERS, seconds=5, message="neither new worker binds alone")
    create(c, node("n4", cpu="1"))
    wait_for(lambda: count() == MEMBERS + 2, timeout=30, message="both bound together")


def test_training_operator_pytorchjobs_one_whole_the_other_waits_whole(
    operator_cluster, troupe, room_for_one, namespace_in, training_operator
):
    """--gang-scheduler-name=troupe-scheduler: the training-operator v1.8.1
    writes a scheduling.x-k8s.io PodGroup per PyTorchJob (named after the job,
    minMember = 1 master + 3 workers, minResources their requests), labels its
    pods with it and gives them schedulerName troupe-scheduler. troupe binds
    one job whole; the other waits whole and says why (minResources: the
    cluster has no room left); its PodGroup reads as scheduler-plugins'
    controller would write it; once the first job is deleted, the second is
    bound whole."""
    c = operator_cluster
    ns = namespace_in(c)
    training_operator(ns)
    jobs = ("job-a", "job-b")
    create(c, *[pytorchjob(ns, j, workers=WORKERS) for j in jobs])

    pgs, pods = wait_operator_objects(c, ns, jobs, SCHEDULER_PLUGINS_PG, lambda j: j, JOB_NAME_LABEL)
    for j, pg in pgs.items():
        assert pg["apiVersion"] == "scheduling.x-k8s.io/v1alpha1", pg
        assert pg["spec"]["minMember"] == MEMBERS, pg
        assert pg["spec"]["minResources"]["cpu"] == str(MEMBERS), pg
        owner = pg["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("PyTorchJob", j), pg
        roles = sorted(p["metadata"]["labels"][REPLICA_TYPE_LABEL] for p in pods[j])
        assert roles == ["master"] + ["worker"] * WORKERS, roles
        for p in pods[j]:
            assert p["spec"]["schedulerName"] == TROUPE_SCHEDULER, p["metadata"]["name"]
            assert p["metadata"]["labels"][SCHEDULER_PLUGINS_GROUP_LABEL] == j, p["metadata"]

    winner, loser = wait_one_whole(c, ns, jobs, label=JOB_NAME_LABEL)
    conds = wait_all_unschedulable(c, ns, loser, mentions=f"{ns}/{loser}", label=JOB_NAME_LABEL)
    assert all("minResources" in x["message"] for x in conds), conds
    assert bound_by_cluster(c, ns, jobs, JOB_NAME_LABEL)[loser] == 0

    for j in jobs:
        wait_scheduler_plugins_scheduling(c, ns, j)

    remove_owner(c, ns, winner, PYTORCHJOBS, JOB_NAME_LABEL)
    wait_for(
        lambda: bound_by_cluster(c, ns, (loser,), JOB_NAME_LABEL)[loser] == MEMBERS,
        timeout=30,
        message=f"{loser} bound whole after {winner} left",
    )

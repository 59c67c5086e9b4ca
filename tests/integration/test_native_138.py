"""Kubernetes 1.38 before it ships: a real kube-apiserver v1.38.0-beta.0
(built from its Go module with Go 1.27, `make controlplane`) serving
CompositePodGroups at scheduling.k8s.io/v1beta1 with the 1.38 gates on,
troupe beside upstream kube-scheduler v1.38.0-beta.0 on the same tree cases.

The same leader+workers replicas as test_native.py's 1.37 case, written at
v1beta1: troupe must discover that version, bind one replica whole and not
the other, and write the CompositePodGroups' status in v1beta1's words (an
invalid tree: `CompositePodGroupError`, a 1.38 reason). Upstream's scheduler
binds the same way (it writes no CompositePodGroup status). minGroupCount
may change on 1.38.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import localcluster
import pytest
from objects import create
from test_native import TWO_PROFILES, bound, gang_of_two_schedulers, native_podgroup, node, wait_group, worker
from troupe_process import TroupeProcess, supervised
from wait import holds, wait_for

from bench import e2e_procs as procs

V1BETA1 = "scheduling.k8s.io/v1beta1"
COMPOSITES = "compositepodgroups.v1beta1.scheduling.k8s.io"
UPSTREAM = "default-scheduler"


@pytest.fixture(scope="module")
def troupe(native_cluster_138, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("troupe-138")
    yield from supervised(TroupeProcess(native_cluster_138.scheduler_kubeconfig, workdir, config=TWO_PROFILES))


@pytest.fixture(scope="module")
def upstream(native_cluster_138, tmp_path_factory):
    """kube-scheduler v1.38.0-beta.0 with the gates the tree cases need (its
    GangScheduling and the CompositePodGroup unit), as the admin."""
    binary = localcluster.find_binary(localcluster.default_k8s_bin_dir(localcluster.K8S_138_VERSION), "kube-scheduler")
    workdir = Path(tmp_path_factory.mktemp("upstream-138"))
    gates = "GenericWorkload=true,TopologyAwareWorkloadScheduling=true,CompositePodGroup=true"
    proc = procs.kube_scheduler(workdir, "upstream", binary, native_cluster_138.admin_kubeconfig, 50, 100, gates)
    proc.start(120)
    yield proc
    alive = proc.alive()
    proc.stop()
    assert alive, f"kube-scheduler v{localcluster.K8S_138_VERSION} exited:\n{proc.log_tail()}"


@pytest.fixture
def nodes_138(native_cluster_138):
    def make(*bodies: dict[str, Any]) -> None:
        native_cluster_138.kubectl("delete", "nodes", "--all", "--wait=false", check=False)
        create(native_cluster_138, *bodies)

    yield make
    native_cluster_138.kubectl("delete", "nodes", "--all", "--wait=false", check=False)


def composite(ns: str, name: str, min_groups: int, parent: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "workloadRef": {"workloadName": "w", "templateName": "t"},
        "schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
    }
    if parent:
        spec["parentCompositePodGroupName"] = parent
    return {
        "apiVersion": V1BETA1,
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def two_replicas(c, ns: str, scheduler: str) -> None:
    """Two replicas, each a root gang (minGroupCount 2) over a 1-pod leader
    gang and a 4-pod worker gang (1 CPU a pod); the test's node has room for
    one replica."""
    for r in ("a", "b"):
        create(c, composite(ns, f"replica-{r}", 2))
        for group, size in ((f"{r}-leader", 1), (f"{r}-workers", 4)):
            pg = native_podgroup(
                ns,
                group,
                schedulingPolicy={"gang": {"minCount": size}},
                parentCompositePodGroupName=f"replica-{r}",
                workloadRef={"workloadName": "w", "templateName": "t"},
            )
            pods = [worker(ns, f"{group}-{i}", group) for i in range(size)]
            for p in pods:
                p["spec"]["schedulerName"] = scheduler
            create(c, pg, *pods)


def one_replica_whole(c, ns: str) -> tuple[str, str]:
    wait_for(lambda: len(bound(c, ns)) == 5, timeout=60, message="one replica bound")
    holds(lambda: len(bound(c, ns)) == 5, seconds=3, message="never a part of the second replica")
    placed = {name.split("-")[0] for name in bound(c, ns)}
    assert placed in ({"a"}, {"b"}), bound(c, ns)
    winner = placed.pop()
    return winner, "b" if winner == "a" else "a"


def test_troupe_reads_v1beta1_composites_and_binds_one_replica_whole(
    native_cluster_138, troupe, nodes_138, native_namespace_138
):
    c, ns = native_cluster_138, native_namespace_138
    nodes_138(node("n1", cpu="6"))  # one replica (5 CPU) and one more pod
    two_replicas(c, ns, "troupe-scheduler")
    winner, loser = one_replica_whole(c, ns)
    wait_group(c, ns, f"replica-{winner}", "CompositePodGroupInitiallyScheduled", "True", "Scheduled", COMPOSITES)
    cond = wait_group(
        c, ns, f"replica-{loser}", "CompositePodGroupInitiallyScheduled", "False", "Unschedulable", COMPOSITES
    )
    assert "needs 2 of 2 group(s)" in cond["message"], cond

    # minGroupCount may change on 1.38: the waiting replica asks for its leader only, and binds it.
    patch = '{"spec":{"schedulingPolicy":{"gang":{"minGroupCount":1}}}}'
    c.kubectl("patch", COMPOSITES, "-n", ns, f"replica-{loser}", "--type=merge", "-p", patch)
    wait_for(lambda: f"{loser}-leader-0" in bound(c, ns), timeout=60, message="the smaller replica's leader bound")


def test_an_invalid_tree_says_composite_pod_group_error(native_cluster_138, troupe, nodes_138, native_namespace_138):
    """A cycle (x under y, y under x): nothing of it is placed, and its
    CompositePodGroups say CompositePodGroupError, 1.38's reason."""
    c, ns = native_cluster_138, native_namespace_138
    nodes_138(node("n1", cpu="4"))
    create(c, composite(ns, "x", 1, parent="y"), composite(ns, "y", 1, parent="x"))
    pg = native_podgroup(
        ns,
        "leaf",
        schedulingPolicy={"gang": {"minCount": 1}},
        parentCompositePodGroupName="x",
        workloadRef={"workloadName": "w", "templateName": "t"},
    )
    create(c, pg, worker(ns, "leaf-0", "leaf"))
    cond = wait_group(c, ns, "x", "CompositePodGroupInitiallyScheduled", "False", "CompositePodGroupError", COMPOSITES)
    assert "cycle" in cond["message"], cond
    assert bound(c, ns) == {}


def test_a_group_whose_pods_name_two_schedulers_says_podgroup_error(
    native_cluster_138, troupe, nodes_138, native_namespace_138
):
    """Pods of one PodGroup naming two of troupe's profiles: the group is
    configured wrong (upstream's runtime validation), which 1.38 names:
    PodGroupInitiallyScheduled False, PodGroupError (1.37: SchedulerError,
    test_native.py); its pods SchedulerError, as upstream's."""
    nodes_138(node("n1", cpu="4"))
    cond = gang_of_two_schedulers(native_cluster_138, native_namespace_138)
    assert cond["reason"] == "PodGroupError", cond


def test_upstream_kube_scheduler_138_binds_the_same_replica_case_whole(
    native_cluster_138, upstream, nodes_138, native_namespace_138
):
    """Upstream kube-scheduler v1.38.0-beta.0 on the same case: one replica
    whole, the other none (it writes no CompositePodGroup status)."""
    c, ns = native_cluster_138, native_namespace_138
    nodes_138(node("n1", cpu="5"))
    two_replicas(c, ns, UPSTREAM)
    one_replica_whole(c, ns)

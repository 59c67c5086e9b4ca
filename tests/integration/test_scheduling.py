"""Gang scheduling end to end: the real scheduler process against the real
kube-apiserver, with the CRDs and manifests applied as a user would."""

from __future__ import annotations

from typing import Any

import pytest
from objects import (
    GROUP_LABEL,
    bound,
    condition,
    create,
    events_for,
    force_delete,
    pod,
    pod_condition,
    podgroup,
    pods_by_name,
    wait_condition,
    wait_pod_unschedulable,
    wait_pod_waiting,
)
from troupe_process import TroupeProcess, supervised
from wait import wait_for

# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def troupe(installed, tmp_path_factory):
    yield from supervised(TroupeProcess(installed.scheduler_kubeconfig, tmp_path_factory.mktemp("troupe")))


@pytest.fixture
def nodes(installed):
    """Creates Node objects for a test and removes them (and every node) afterwards."""
    created: list[str] = []

    def make(
        name: str,
        cpu: str = "2",
        memory: str = "8Gi",
        pods: str = "110",
        labels: dict[str, str] | None = None,
        taints: list[dict[str, str]] | None = None,
    ) -> str:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {"taints": taints} if taints else {},
            "status": {
                "capacity": {"cpu": cpu, "memory": memory, "pods": pods},
                "allocatable": {"cpu": cpu, "memory": memory, "pods": pods},
            },
        }
        create(installed, body)
        created.append(name)
        return name

    installed.kubectl("delete", "nodes", "--all", "--wait=false", check=False)
    yield make
    installed.kubectl("delete", "nodes", "--all", "--wait=false", check=False)


# --------------------------------------------------------------------- tests


def test_two_gangs_competing_for_room_for_one(installed, troupe, nodes, namespace):
    """The seed's deadlock: two gangs of 4, minCount 4, room for 4 pods. Exactly
    one gang runs whole, the other waits whole; when the first goes, the second runs."""
    c, ns = installed, namespace
    nodes("node-a", cpu="2")
    nodes("node-b", cpu="2")
    create(c, podgroup(ns, "job-a", 4), podgroup(ns, "job-b", 4))
    create(c, *[pod(ns, f"job-{g}-{i}", group=f"job-{g}") for i in range(4) for g in "ab"])

    placed = wait_for(lambda: len(b := bound(c, ns)) == 4 and b, timeout=30, message="4 pods bound")
    winners = {name.rsplit("-", 1)[0] for name in placed}
    assert len(winners) == 1, f"pods of both gangs bound: {placed}"
    winner = winners.pop()
    loser = "job-b" if winner == "job-a" else "job-a"
    wait_condition(c, ns, winner, "True", "Scheduled")
    lost = wait_condition(c, ns, loser, "False", "Unschedulable")
    assert "needs 4 pods" in lost["message"] and "Insufficient cpu" in lost["message"], lost
    assert lost["observedGeneration"] == 1
    # The loser holds nothing, and keeps holding nothing.
    assert bound(c, ns, loser) == {}
    for i in range(4):
        cond = wait_pod_unschedulable(c, ns, f"{loser}-{i}")
        assert f"PodGroup {ns}/{loser}: needs 4 pods" in cond["message"], cond
    assert any(e["reason"] == "FailedScheduling" for e in events_for(c, ns, f"{loser}-0"))
    # Events wait while pods are being bound (runtime/events.py): the winner's may come a moment later.
    wait_for(
        lambda: any(e["reason"] == "Scheduled" for e in events_for(c, ns, f"{winner}-0")),
        timeout=10,
        message="a Scheduled event on the winner's pod",
    )

    force_delete(c, ns, *[f"{winner}-{i}" for i in range(4)])
    placed = wait_for(lambda: len(b := bound(c, ns, loser)) == 4 and b, timeout=30, message="second gang bound")
    assert sorted(set(placed.values())) == ["node-a", "node-b"]
    wait_condition(c, ns, loser, "True", "Scheduled")


def test_gang_with_more_pods_than_min_count_binds_what_fits(installed, troupe, nodes, namespace):
    c, ns = installed, namespace
    nodes("node-a", cpu="2")
    nodes("node-b", cpu="2")
    create(c, podgroup(ns, "big", 3), *[pod(ns, f"big-{i}", group="big") for i in range(6)])
    placed = wait_for(lambda: len(b := bound(c, ns)) == 4 and b, timeout=30, message="4 of 6 bound")
    assert len(placed) >= 3
    wait_condition(c, ns, "big", "True", "Scheduled")
    waiting = sorted(set(pods_by_name(c, ns)) - set(placed))
    assert len(waiting) == 2
    for name in waiting:
        cond = wait_pod_unschedulable(c, ns, name)
        assert "Insufficient cpu" in cond["message"], cond
    # Room for one more: exactly one extra pod binds, counting the bound ones toward minCount.
    nodes("node-c", cpu="1")
    wait_for(lambda: len(bound(c, ns)) == 5, timeout=30, message="a fifth pod bound on the new node")


def test_gang_that_cannot_fit_binds_nothing_and_says_why(installed, troupe, nodes, namespace):
    c, ns = installed, namespace
    nodes("node-a", cpu="2")
    nodes("node-b", cpu="2")
    create(c, podgroup(ns, "huge", 3), *[pod(ns, f"huge-{i}", group="huge", cpu="3") for i in range(3)])
    cond = wait_condition(c, ns, "huge", "False", "Unschedulable")
    assert cond["message"] == "needs 3 pods, 0 fit: 0/2 nodes are available: 2 Insufficient cpu.", cond
    assert bound(c, ns) == {}
    events = wait_for(lambda: events_for(c, ns, "huge"), message="a FailedScheduling event on the PodGroup")
    assert events[0]["reason"] == "FailedScheduling" and events[0]["type"] == "Warning"


def test_basic_policy_places_each_pod_on_its_own(installed, troupe, nodes, namespace):
    c, ns = installed, namespace
    nodes("node-a", cpu="2500m")  # room for 2 web pods and the loner, not 3 web pods
    create(c, podgroup(ns, "web"), *[pod(ns, f"web-{i}", group="web") for i in range(3)])
    create(c, pod(ns, "loner", cpu="100m"))  # no group at all: scheduled as a pod
    wait_for(lambda: len(bound(c, ns, "web")) == 2, timeout=30, message="2 of 3 basic pods bound")
    wait_for(lambda: "loner" in bound(c, ns), timeout=30, message="the ungrouped pod bound")
    # A basic group is scheduled once any pod of it is; the pod that did not fit says why.
    wait_condition(c, ns, "web", "True", "Scheduled")
    waiting = next(n for n in pods_by_name(c, ns) if n.startswith("web") and n not in bound(c, ns))
    wait_pod_unschedulable(c, ns, waiting, f"PodGroup {ns}/web: 0/1 nodes are available: 1 Insufficient cpu.")


def test_taints_and_node_selector_are_respected(installed, troupe, nodes, namespace):
    c, ns = installed, namespace
    nodes("gpu-node", cpu="8", taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}])
    nodes("ssd-node", cpu="8", labels={"disk": "ssd"})
    nodes("plain-node", cpu="8")
    create(
        c,
        pod(ns, "wants-ssd", node_selector={"disk": "ssd"}),
        pod(
            ns,
            "tolerates-gpu",
            node_selector={"kubernetes.io/hostname": "gpu-node"},
            tolerations=[{"key": "gpu", "operator": "Equal", "value": "true", "effect": "NoSchedule"}],
        ),
        pod(ns, "wants-gpu-untolerated", node_selector={"kubernetes.io/hostname": "gpu-node"}),
        pod(ns, "wants-nothing-that-exists", node_selector={"disk": "nvme"}),
    )
    wait_for(lambda: len(bound(c, ns)) == 2, timeout=30, message="the two placeable pods bound")
    placed = bound(c, ns)
    assert placed == {"wants-ssd": "ssd-node", "tolerates-gpu": "gpu-node"}
    wait_pod_unschedulable(
        c,
        ns,
        "wants-gpu-untolerated",
        (
            "0/3 nodes are available: 1 node(s) had untolerated taint {gpu: true}, "
            "2 node(s) didn't match Pod's node affinity/selector."
        ),
    )
    # Filters run in upstream's order: the tainted node is counted under the taint.
    wait_pod_unschedulable(
        c,
        ns,
        "wants-nothing-that-exists",
        (
            "0/3 nodes are available: 1 node(s) had untolerated taint {gpu: true}, "
            "2 node(s) didn't match Pod's node affinity/selector."
        ),
    )


def test_capacity_used_by_another_schedulers_pods_counts(installed, troupe, nodes, namespace):
    c, ns = installed, namespace
    nodes("node-a", cpu="2")
    nodes("node-b", cpu="2")
    # Bound by "someone else": a default-scheduler pod with nodeName set takes node-a whole.
    create(c, pod(ns, "other", cpu="2", scheduler="default-scheduler", node_name="node-a"))
    create(c, podgroup(ns, "gang", 4), *[pod(ns, f"gang-{i}", group="gang") for i in range(4)])
    cond = wait_condition(c, ns, "gang", "False", "Unschedulable")
    assert "needs 4 pods, 2 fit" in cond["message"], cond
    assert bound(c, ns, "gang") == {}
    create(c, *[pod(ns, f"solo-{i}") for i in range(3)])
    wait_for(lambda: len(bound(c, ns, "solo")) == 2, timeout=30, message="2 solo pods bound")
    assert set(bound(c, ns, "solo").values()) == {"node-b"}


def test_pod_of_missing_group_waits_and_says_so(installed, troupe, nodes, namespace):
    c, ns = installed, namespace
    nodes("node-a", cpu="4")
    create(c, pod(ns, "orphan", group="not-yet"))
    wait_pod_waiting(c, ns, "orphan", f"waiting for PodGroup {ns}/not-yet to be created")
    assert pod_condition(c, ns, "orphan") is None  # as upstream: no condition, nothing to provision for
    assert bound(c, ns) == {}
    create(c, podgroup(ns, "not-yet", 1))
    wait_for(lambda: "orphan" in bound(c, ns), timeout=30, message="bound once its group exists")


def test_gang_waits_until_min_count_pods_exist(installed, troupe, nodes, namespace):
    c, ns = installed, namespace
    nodes("node-a", cpu="8")
    create(c, podgroup(ns, "slow", 3), pod(ns, "slow-0", group="slow"), pod(ns, "slow-1", group="slow"))
    for name in ("slow-0", "slow-1"):
        wait_pod_waiting(c, ns, name, f"waiting for pods of PodGroup {ns}/slow: minCount is 3")
    wait_for(
        lambda: (
            (cond := condition(c, ns, "slow"))
            and cond["message"] == (f"waiting for pods of PodGroup {ns}/slow: minCount is 3, 2 exist")
            and cond["reason"] == "Unschedulable"
        ),
        message="the PodGroup counts the pods it has",
    )
    assert bound(c, ns) == {}
    create(c, pod(ns, "slow-2", group="slow"))
    wait_for(lambda: len(bound(c, ns)) == 3, timeout=30, message="gang bound once 3 pods exist")


def test_nothing_is_written_to_pods_nodes_or_groups_but_status(installed, troupe, nodes, namespace):
    c, ns = installed, namespace
    nodes("node-a", cpu="4")
    create(c, podgroup(ns, "g", 2), pod(ns, "g-0", group="g"), pod(ns, "g-1", group="g"))
    wait_for(lambda: len(bound(c, ns)) == 2, timeout=30, message="bound")
    wait_condition(c, ns, "g", "True", "Scheduled")
    for p in pods_by_name(c, ns).values():
        assert not p["metadata"].get("finalizers"), p["metadata"]
        # Only what the gang's Bindings carried: its protection from consolidation.
        assert p["metadata"].get("annotations") == {
            "karpenter.sh/do-not-disrupt": "true",
            "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
        }, p["metadata"]
    node = c.get_json("node", "node-a")
    assert not node["metadata"].get("finalizers") and not node["metadata"].get("annotations"), node["metadata"]
    pg = c.get_json("podgroup", "-n", ns, "g")
    assert not pg["metadata"].get("finalizers") and not pg["metadata"].get("annotations"), pg["metadata"]


def test_one_process_serves_several_profiles(installed, nodes, namespace, tmp_path):
    """Two profiles = two scheduler names; each pod is placed by its profile's plugins."""
    c, ns = installed, namespace
    config = """
apiVersion: scheduling.troupe.dev/v1alpha1
kind: SchedulerConfiguration
profiles:
- schedulerName: troupe-scheduler
- schedulerName: troupe-ignore-taints
  plugins:
    filter:
      disabled: [{name: TaintToleration}]
"""
    proc = TroupeProcess(c.scheduler_kubeconfig, tmp_path, config=config, name="profiles").start()
    try:
        nodes("tainted", cpu="4", taints=[{"key": "dedicated", "value": "x", "effect": "NoSchedule"}])
        create(
            c,
            pod(ns, "default-profile"),
            pod(ns, "second-profile", scheduler="troupe-ignore-taints"),
            pod(ns, "someone-elses", scheduler="default-scheduler"),
        )
        wait_for(
            lambda: bound(c, ns) == {"second-profile": "tainted"},
            timeout=30,
            message="only the profile without TaintToleration binds",
        )
        wait_pod_unschedulable(
            c, ns, "default-profile", "0/1 nodes are available: 1 node(s) had untolerated taint {dedicated: x}."
        )
        assert pod_condition(c, ns, "someone-elses") is None  # not ours: untouched
    finally:
        assert proc.stop() == 0, proc.log_tail()


def test_gang_with_anti_affinity_and_spread_lands_in_one_cycle(installed, troupe, nodes, namespace):
    """Pods of the same gang placed earlier in the cycle count for InterPodAffinity
    and PodTopologySpread: one worker per node, and an even spread over zones."""
    c, ns = installed, namespace
    for i in range(4):
        nodes(f"n{i}", cpu="8", labels={"topology.kubernetes.io/zone": f"zone-{i % 2}"})
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {GROUP_LABEL: "ring"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {GROUP_LABEL: "ring"}},
        }
    ]
    workers = []
    for i in range(4):
        p = pod(ns, f"ring-{i}", group="ring")
        p["spec"]["affinity"] = anti
        p["spec"]["topologySpreadConstraints"] = spread
        workers.append(p)
    create(c, podgroup(ns, "ring", 4), *workers)
    placed = wait_for(lambda: len(b := bound(c, ns)) == 4 and b, timeout=30, message="ring bound")
    assert sorted(placed.values()) == ["n0", "n1", "n2", "n3"]
    # A fifth member has no node left without a ring pod: the others stay bound, it waits.
    extra = pod(ns, "ring-4", group="ring")
    extra["spec"]["affinity"] = anti
    create(c, extra)
    wait_pod_unschedulable(
        c,
        ns,
        "ring-4",
        "PodGroup " + ns + "/ring: 0/4 nodes are available: 4 node(s) didn't match pod anti-affinity rules.",
    )


def test_scheduled_events_past_the_first_ten_pods_of_a_group_are_one_event_on_the_podgroup(
    installed, troupe, nodes, namespace
):
    """As upstream's correlator aggregates similar events: the first 10 pods
    of a PodGroup get their own Scheduled Event, the rest are counted in one
    Scheduled Event on the PodGroup (runtime/events.py)."""
    c, ns = installed, namespace
    nodes("ev-node", cpu="16")
    create(c, podgroup(ns, "wide", 14), *[pod(ns, f"wide-{i}", group="wide", cpu="100m") for i in range(14)])
    wait_for(lambda: len(bound(c, ns)) == 14, timeout=30, message="14 pods bound")

    def combined():
        return [e for e in events_for(c, ns, "wide") if e["reason"] == "Scheduled"]

    (event,) = wait_for(combined, timeout=15, message="one Scheduled event on the PodGroup")
    assert event["regarding"]["kind"] == "PodGroup"
    assert event["note"].startswith("Successfully assigned 4 more pod(s) of PodGroup")
    items = c.get_json("events.v1.events.k8s.io", "-n", ns)["items"]
    on_pods = [e for e in items if e["reason"] == "Scheduled" and e["regarding"]["kind"] == "Pod"]
    assert len(on_pods) == 10


def test_a_gang_that_loses_a_member_is_no_longer_provisionable(installed, troupe, nodes, namespace):
    """Unschedulable as a whole gang, then short of minCount (a member
    deleted): held before its cycle, so the Unschedulable condition an
    autoscaler would provision for is removed; the Event says why it waits."""
    c, ns = installed, namespace
    nodes("node-a", cpu="1")
    create(c, podgroup(ns, "pair", 2), pod(ns, "pair-0", group="pair"), pod(ns, "pair-1", group="pair"))
    wait_pod_unschedulable(c, ns, "pair-0")
    force_delete(c, ns, "pair-1")
    wait_for(lambda: pod_condition(c, ns, "pair-0") is None, timeout=30, message="the Unschedulable condition removed")
    wait_pod_waiting(c, ns, "pair-0", f"waiting for pods of PodGroup {ns}/pair: minCount is 2")

"""Preemption end to end: the real scheduler process, as its ServiceAccount,
against the real kube-apiserver. Priorities come from PriorityClasses through
the API server's Priority admission, as in a cluster.

There is no kubelet: a victim deleted with its grace period stays Terminating.
`finish_terminating` stands in for the kubelet: the test calls it once it has
seen what the cluster shows while the victims terminate, and it force-deletes
every pod of the namespace that has a deletionTimestamp."""

from __future__ import annotations

import json
from typing import Any

import pytest
from objects import GROUP_LABEL, create, events_for, pod, podgroup, pods_by_name, wait_condition
from troupe_process import TroupeProcess, supervised
from wait import wait_for

from scheduler.api import constants as C

pytestmark = pytest.mark.integration

CLASSES = {"troupe-test-low": (10, "PreemptLowerPriority"), "troupe-test-high": (1000, "PreemptLowerPriority")}
CLASSES["troupe-test-high-never"] = (1000, "Never")
CLASSES["troupe-test-mid"] = (500, "PreemptLowerPriority")


@pytest.fixture(scope="module")
def troupe(installed, tmp_path_factory):
    for name, (value, policy) in CLASSES.items():
        body = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "preemptionPolicy": policy,
        }
        installed.kubectl("apply", "-f", "-", input=json.dumps(body))
    yield from supervised(TroupeProcess(installed.scheduler_kubeconfig, tmp_path_factory.mktemp("troupe")))


def member(ns: str, name: str, cls: str, group: str | None = None, cpu: str = "1", **kw: Any) -> dict[str, Any]:
    body = pod(ns, name, group=group, cpu=cpu, **kw)
    body["spec"]["priorityClassName"] = cls
    body["spec"]["terminationGracePeriodSeconds"] = 30  # stays Terminating until finish_terminating
    return body


def gang(ns: str, name: str, count: int, cls: str, cpu: str, nodes: list[str] | None = None) -> list[dict[str, Any]]:
    """A PodGroup (minCount = count) and its pods; with `nodes`, already running there."""
    pods = [
        member(ns, f"{name}-{i}", cls, group=name, cpu=cpu, node_name=nodes[i] if nodes else None) for i in range(count)
    ]
    return [podgroup(ns, name, count), *pods]


def finish_terminating(cluster, ns: str) -> list[str]:
    """What kubelets would do once the grace period is over: the terminating pods go."""
    names = [n for n, p in pods_by_name(cluster, ns).items() if p["metadata"].get("deletionTimestamp")]
    if names:
        cluster.kubectl("delete", "pods", "-n", ns, *names, "--grace-period=0", "--force", "--wait=false")
    return names


def disruption_target(obj: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == C.DISRUPTION_TARGET), None)


def terminating(cluster, ns: str, prefix: str) -> dict[str, dict[str, Any]]:
    return {
        n: p
        for n, p in pods_by_name(cluster, ns).items()
        if n.startswith(prefix) and p["metadata"].get("deletionTimestamp")
    }


def bound_names(cluster, ns: str, prefix: str) -> list[str]:
    return sorted(n for n, p in pods_by_name(cluster, ns).items() if n.startswith(prefix) and p["spec"].get("nodeName"))


def test_a_high_priority_gang_evicts_a_whole_low_gang_then_binds_whole(installed, troupe, nodes, namespace):
    ns = namespace
    names = [nodes(f"pre-{i}", cpu="4") for i in range(2)]
    # The low gang runs: 4 pods of 2 CPU fill both nodes.
    create(installed, *gang(ns, "low", 4, "troupe-test-low", "2", nodes=[names[0], names[0], names[1], names[1]]))
    create(installed, *gang(ns, "high", 4, "troupe-test-high", "2"))

    # While the victims terminate: every low pod is marked and deleted, never part of the gang.
    victims = wait_for(
        lambda: len(t := terminating(installed, ns, "low-")) == 4 and t, timeout=30, message="4 low pods terminating"
    )
    for name, body in victims.items():
        cond = disruption_target(body)
        assert cond is not None, name
        assert (cond["status"], cond["reason"]) == ("True", C.REASON_PREEMPTION_BY_SCHEDULER)
        assert cond["message"] == f"troupe-scheduler: preempting to accommodate higher priority PodGroup {ns}/high"
    low = installed.get_json("podgroup", "-n", ns, "low")
    cond = disruption_target(low)
    assert cond is not None and (cond["status"], cond["reason"]) == ("True", C.REASON_PREEMPTION_BY_SCHEDULER)
    assert cond["message"] == f"preempted by PodGroup {ns}/high, which has a higher priority"
    wait_for(lambda: any(e["reason"] == C.EVENT_PREEMPTED for e in events_for(installed, ns, "low")), timeout=15)
    waiting = wait_condition(installed, ns, "high", "False", "Unschedulable")
    assert "waiting for 4 victim(s) to terminate" in waiting["message"], waiting
    nominated = wait_for(
        lambda: all(
            pods_by_name(installed, ns)[f"high-{i}"].get("status", {}).get("nominatedNodeName") for i in range(4)
        ),
        timeout=15,
        message="high pods nominated",
    )
    assert nominated
    assert bound_names(installed, ns, "high-") == []  # nothing binds before the victims are gone

    assert len(finish_terminating(installed, ns)) == 4
    wait_condition(installed, ns, "high", "True", C.REASON_SCHEDULED, timeout=60)
    assert bound_names(installed, ns, "high-") == [f"high-{i}" for i in range(4)]


def test_a_victim_gang_above_its_minimum_shrinks_instead_of_dying(installed, troupe, nodes, namespace):
    """A low gang of minCount 2 runs 4 pods (it grew); its owner marks the
    first two costly to delete. A high gang of 2 takes the 2 pods above the
    minimum, the cheap ones, and the low gang keeps running, not disrupted."""
    ns = namespace
    names = [nodes(f"shrink-{i}", cpu="2") for i in range(4)]
    low = gang(ns, "low", 4, "troupe-test-low", "2", nodes=names)
    low[0]["spec"]["schedulingPolicy"] = {"gang": {"minCount": 2}}
    for body in low[1:3]:  # low-0, low-1
        body["metadata"]["annotations"] = {"controller.kubernetes.io/pod-deletion-cost": "100"}
    create(installed, *low)
    create(installed, *gang(ns, "high", 2, "troupe-test-high", "2"))

    victims = wait_for(
        lambda: len(t := terminating(installed, ns, "low-")) == 2 and t, timeout=30, message="2 low pods terminating"
    )
    assert sorted(victims) == ["low-2", "low-3"], sorted(victims)
    waiting = wait_condition(installed, ns, "high", "False", "Unschedulable")
    assert f"preempting 2 lower-priority pod(s) (2 above the minCount of PodGroup {ns}/low)" in waiting["message"]
    assert disruption_target(installed.get_json("podgroup", "-n", ns, "low")) is None  # not disrupted: it shrank

    assert sorted(finish_terminating(installed, ns)) == ["low-2", "low-3"]
    wait_condition(installed, ns, "high", "True", C.REASON_SCHEDULED, timeout=60)
    assert bound_names(installed, ns, "high-") == ["high-0", "high-1"]
    assert bound_names(installed, ns, "low-") == ["low-0", "low-1"]  # still running, at its minimum


def test_an_equal_priority_gang_does_not_preempt(installed, troupe, nodes, namespace):
    ns = namespace
    nodes("eq-0", cpu="2")
    create(installed, *gang(ns, "low", 2, "troupe-test-low", "1", nodes=["eq-0", "eq-0"]))
    create(installed, *gang(ns, "same", 2, "troupe-test-low", "1"))
    cond = wait_condition(installed, ns, "same", "False", "Unschedulable")
    assert "preempting" not in cond["message"]
    assert terminating(installed, ns, "low-") == {}
    assert disruption_target(installed.get_json("podgroup", "-n", ns, "low")) is None


def test_preemption_policy_never_does_not_preempt(installed, troupe, nodes, namespace):
    ns = namespace
    nodes("never-0", cpu="1")
    create(installed, member(ns, "low-0", "troupe-test-low", node_name="never-0"))
    create(installed, member(ns, "polite", "troupe-test-high-never"))

    def told() -> dict[str, Any] | None:
        p = pods_by_name(installed, ns)["polite"]
        cond = next((c for c in p.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"), None)
        return cond if cond and "preemptionPolicy is Never" in cond.get("message", "") else None

    assert wait_for(told, timeout=30, message="polite told it may not preempt")
    assert terminating(installed, ns, "low-") == {}


def test_a_pdb_is_honoured_where_another_choice_exists(installed, troupe, nodes, namespace):
    ns = namespace
    nodes("pdb-0", cpu="1")
    nodes("pdb-1", cpu="1")
    # Without the budget the guarded pod is the cheaper victim (lower priority).
    guarded = member(ns, "low-guarded", "troupe-test-low", node_name="pdb-0")
    guarded["metadata"]["labels"]["app"] = "db"
    create(installed, guarded, member(ns, "low-free", "troupe-test-mid", node_name="pdb-1"))
    # No disruption controller runs here, so the budget's status never says any
    # disruption is allowed: evicting the guarded pod would violate it.
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "db", "namespace": ns},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}},
    }
    create(installed, pdb)
    # The PDB and the pods come through different watches: the preemptor is created once troupe has the PDB.
    wait_for(
        lambda: f"PodDisruptionBudget {ns}/db: 0 disruption(s) allowed" in troupe.log_path.read_text(),
        timeout=15,
        message="troupe saw the PDB",
    )
    create(installed, member(ns, "high", "troupe-test-high"))
    victims = wait_for(lambda: terminating(installed, ns, "low-"), timeout=30, message="a victim terminating")
    assert list(victims) == ["low-free"]
    finish_terminating(installed, ns)
    wait_for(lambda: bound_names(installed, ns, "high") == ["high"], timeout=60, message="high bound")
    assert pods_by_name(installed, ns)["high"]["spec"]["nodeName"] == "pdb-1"


def test_a_lone_high_priority_pod_preempts_one_low_priority_pod(installed, troupe, nodes, namespace):
    ns = namespace
    nodes("lone-0", cpu="2")
    create(
        installed,
        member(ns, "low-0", "troupe-test-low", node_name="lone-0"),
        member(ns, "low-1", "troupe-test-low", node_name="lone-0"),
    )
    create(installed, member(ns, "high", "troupe-test-high"))
    victims = wait_for(lambda: terminating(installed, ns, "low-"), timeout=30, message="a victim terminating")
    assert len(victims) == 1
    (body,) = victims.values()
    cond = disruption_target(body)
    assert cond is not None and cond["message"] == "troupe-scheduler: preempting to accommodate a higher priority pod"
    wait_for(
        lambda: pods_by_name(installed, ns)["high"].get("status", {}).get("nominatedNodeName") == "lone-0",
        timeout=15,
        message="high nominated to lone-0",
    )
    finish_terminating(installed, ns)
    wait_for(lambda: bound_names(installed, ns, "high") == ["high"], timeout=60, message="high bound")
    assert len(bound_names(installed, ns, "low-")) == 1  # the other low pod still runs
    assert GROUP_LABEL  # the label the gang tests use

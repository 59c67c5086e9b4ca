"""Correctness across group sources on the real API server (issue 34), with
scheduler-plugins' and Volcano's PodGroup CRDs (crds/compat/) and the real
troupe process:

- nothing is evicted for a group that eviction cannot make bind
  (scheduler-plugins `minResources` beyond what the cluster can ever free);
- a Volcano PodGroup's `priorityClassName` is its pods' priority: the room
  the gang preempted for is held against a lower lone pod, which is not
  evicted in turn (one victim, not two);
- no room is reserved for a group that could never bind (a Volcano task that
  fits no node; `minResources` beyond the cluster).

The deleted-group reservation case is in test_reservation.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from objects import create, node, pod, pod_condition, pods_by_name
from troupe_process import TroupeProcess, supervised
from wait import wait_for

from scheduler.api import constants as C

pytestmark = pytest.mark.integration

SP_API = "scheduling.x-k8s.io/v1alpha1"
VOLCANO_API = "scheduling.volcano.sh/v1beta1"
CLASSES = {"correct-low": 10, "correct-500": 500, "correct-600": 600, "correct-high": 1000}
# Reservations come quickly, so that a group that could never bind would get one within the test.
CONFIG = """
profiles:
- schedulerName: troupe-scheduler
  pluginConfig:
  - name: Reservation
    args: {starvationSeconds: 1}
queue: {podMaxBackoffSeconds: 1}
"""


@pytest.fixture(scope="module")
def troupe(compat_cluster, tmp_path_factory) -> Iterator[TroupeProcess]:
    for name, value in CLASSES.items():
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}}
        compat_cluster.kubectl("apply", "-f", "-", input=json.dumps({**body, "value": value}))
    workdir = tmp_path_factory.mktemp("troupe-correctness")
    yield from supervised(TroupeProcess(compat_cluster.scheduler_kubeconfig, workdir, config=CONFIG))


@pytest.fixture
def ns(compat_cluster, namespace_in) -> str:
    return namespace_in(compat_cluster)


@pytest.fixture
def one_node(compat_cluster) -> Iterator[str]:
    """One node, n1, of 4 CPU."""
    c = compat_cluster
    c.kubectl("delete", "nodes", "--all", "--wait=false", check=False)
    create(c, node("n1", cpu="4"))
    yield "n1"
    c.kubectl("delete", "nodes", "--all", "--wait=false", check=False)


def _pod(ns: str, name: str, cpu: str, cls: str = "", node_name: str | None = None, **meta: Any) -> dict[str, Any]:
    body = pod(ns, name, cpu=cpu, node_name=node_name)
    body["metadata"].update(meta)
    if cls:
        body["spec"]["priorityClassName"] = cls
    body["spec"]["terminationGracePeriodSeconds"] = 30  # a victim stays Terminating until a test ends it
    return body


def _group(api_version: str, ns: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "PodGroup", "metadata": {"name": name, "namespace": ns}, "spec": spec}


def _sp_pod(ns: str, name: str, group: str, cpu: str, cls: str = "") -> dict[str, Any]:
    return _pod(ns, name, cpu, cls, labels={"scheduling.x-k8s.io/pod-group": group})


def _vc_pod(ns: str, name: str, group: str, cpu: str, task: str = "", cls: str = "") -> dict[str, Any]:
    annotations = {"scheduling.k8s.io/group-name": group}
    if task:
        annotations["volcano.sh/task-spec"] = task
    return _pod(ns, name, cpu, cls, annotations=annotations)


def _disrupted(p: dict[str, Any]) -> bool:
    """Marked for eviction by a scheduler: deletion requested or DisruptionTarget."""
    conditions = (p.get("status") or {}).get("conditions") or []
    return bool(p["metadata"].get("deletionTimestamp")) or any(c["type"] == C.DISRUPTION_TARGET for c in conditions)


def _wait_message(c, ns: str, name: str, *parts: str) -> str:
    def check() -> str | None:
        cond = pod_condition(c, ns, name)
        text = (cond or {}).get("message") or ""
        return text if all(p in text for p in parts) else None

    return wait_for(check, timeout=30, message=f"pod {name} says {parts}")


def _still_for(seconds: float, check: Any) -> None:
    """`check` holds the whole time (what must never happen, watched for a while)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        check()
        time.sleep(0.25)


def test_no_eviction_for_a_group_whose_min_resources_no_eviction_can_meet(compat_cluster, troupe, ns, one_node):
    c = compat_cluster
    create(c, _pod(ns, "busy", "4", "correct-low", node_name=one_node))
    create(
        c,
        _group(SP_API, ns, "big", minMember=2, minResources={"cpu": "8"}),
        _sp_pod(ns, "big-0", "big", "1", "correct-high"),
        _sp_pod(ns, "big-1", "big", "1", "correct-high"),
    )
    message = _wait_message(c, ns, "big-0", "preemption: DefaultPreemption: minResources: even with every")
    assert "it needs cpu 8 (free 4)" in message

    def nothing_evicted() -> None:
        pods = pods_by_name(c, ns)
        assert not _disrupted(pods["busy"]), pods["busy"]
        assert not any(pods[n]["spec"].get("nodeName") for n in ("big-0", "big-1"))

    _still_for(3, nothing_evicted)  # retried (backoff 1 s) and still no victim


def test_a_volcano_groups_priority_holds_its_room_against_a_lower_lone_pod(compat_cluster, troupe, ns, one_node):
    c = compat_cluster
    create(c, _pod(ns, "busy", "4", "correct-600", node_name=one_node))
    create(
        c,
        _group(VOLCANO_API, ns, "gang", minMember=2, priorityClassName="correct-high"),
        _vc_pod(ns, "gang-0", "gang", "2"),
        _vc_pod(ns, "gang-1", "gang", "2"),
        _pod(ns, "lone", "2", "correct-500"),
    )
    # The gang preempts the 600 pod; the lone 500 pod cannot (and waits too).
    wait_for(lambda: pods_by_name(c, ns)["busy"]["metadata"].get("deletionTimestamp"), timeout=30, message="a victim")
    _wait_message(c, ns, "lone", "Insufficient cpu")
    time.sleep(2)  # both units past their backoff (1 s): the room that frees next is tried by both at once
    c.kubectl("delete", "pods", "-n", ns, "busy", "--grace-period=0", "--force", "--wait=false")

    def gang_bound() -> bool:
        pods = pods_by_name(c, ns)
        # Playing the kubelet: a pod marked for deletion goes (the lone pod too, were it a victim).
        gone = [n for n, p in pods.items() if p["metadata"].get("deletionTimestamp")]
        if gone:
            c.kubectl("delete", "pods", "-n", ns, *gone, "--grace-period=0", "--force", "--wait=false")
        return all(pods.get(n, {}).get("spec", {}).get("nodeName") == one_node for n in ("gang-0", "gang-1"))

    wait_for(gang_bound, timeout=60, message="the Volcano gang bound on n1")
    pods = pods_by_name(c, ns)
    assert "busy" not in pods  # the one victim
    assert "lone" in pods and not _disrupted(pods["lone"]) and not pods["lone"]["spec"].get("nodeName")
    events = c.get_json("events.v1.events.k8s.io", "-n", ns)["items"]
    preempted = {e["regarding"]["name"] for e in events if e.get("reason") == "Preempted"}
    assert preempted <= {"busy"}, preempted


@pytest.mark.parametrize(
    ("objects", "first", "why"),
    [
        (
            lambda ns: [
                _group(VOLCANO_API, ns, "v", minMember=2, minTaskMember={"head": 1, "worker": 1}),
                _vc_pod(ns, "v-head", "v", "5", task="head"),
                _vc_pod(ns, "v-w0", "v", "1", task="worker"),
                _vc_pod(ns, "v-w1", "v", "1", task="worker"),
            ],
            "v-w0",
            "GangScheduling: minTaskMember: task head: needs 1, 0 fit",
        ),
        (
            lambda ns: [_group(SP_API, ns, "s", minMember=1, minResources={"cpu": "8"}), _sp_pod(ns, "s-0", "s", "2")],
            "s-0",
            "minResources: the cluster's free room cannot hold the group",
        ),
    ],
    ids=["volcano-task-fits-no-node", "min-resources-beyond-the-cluster"],
)
def test_no_reservation_for_a_group_that_could_never_bind(
    compat_cluster, troupe, ns, one_node, objects: Any, first: str, why: str
):
    c = compat_cluster
    create(c, _pod(ns, "busy", "2", node_name=one_node))
    create(c, *objects(ns))
    _wait_message(
        c, ns, first, "no room can be reserved: the group could not bind even with every running pod gone", why
    )

    def nothing_reserved() -> None:
        pods = pods_by_name(c, ns)
        nominated = {n: p["status"].get("nominatedNodeName") for n, p in pods.items() if p.get("status")}
        assert not any(nominated.values()), nominated
        assert "reserved node" not in ((pod_condition(c, ns, first) or {}).get("message") or "")

    _still_for(3, nothing_reserved)  # past starvationSeconds, tried again: still nothing held

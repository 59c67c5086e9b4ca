"""Gangs that grow and shrink (issue 46), on every source troupe reads: the
minimum changed on the group object (troupe's and the native `minCount`,
scheduler-plugins' and Volcano's `minMember`) while pods run. The pods added
for a higher minimum bind together or not at all; a lower minimum lets
waiting pods bind as they fit; nothing running is touched; the group stays
scheduled."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api.records import GroupKey
from scheduler.core.scheduler import Scheduler

from .test_preemption import pod as lone_pod
from .test_runtime_scheduler import drain, node, sched  # noqa: F401 (fixture)

NS = "ns"


def _group(source: str, name: str, minimum: int) -> dict[str, Any]:
    meta = {"name": name, "namespace": NS, "uid": f"uid-pg-{name}"}
    if source == "troupe":
        spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": minimum}}}
        return {"apiVersion": "scheduling.troupe.dev/v1alpha2", "kind": "PodGroup", "metadata": meta, "spec": spec}
    if source == "native":
        spec = {"schedulingPolicy": {"gang": {"minCount": minimum}}}
        return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": meta, "spec": spec}
    api = {"plugins": "scheduling.x-k8s.io/v1alpha1", "volcano": "scheduling.volcano.sh/v1beta1"}[source]
    return {"apiVersion": api, "kind": "PodGroup", "metadata": meta, "spec": {"minMember": minimum}}


def _pod(source: str, name: str, group: str, node_name: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}"}
    spec: dict[str, Any] = {
        "schedulerName": "troupe-scheduler",
        "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
    }
    if source == "troupe":
        meta["labels"] = {"scheduling.troupe.dev/pod-group": group}
    elif source == "native":
        spec["schedulingGroup"] = {"podGroupName": group}
    elif source == "plugins":
        meta["labels"] = {"scheduling.x-k8s.io/pod-group": group}
    else:
        meta["annotations"] = {"scheduling.k8s.io/group-name": group}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


SOURCES = ["troupe", "native", "plugins", "volcano"]


def _running_gang(s: Scheduler, source: str) -> None:
    """A gang of minimum 2 with 2 pods running on node a (2 CPU, full); node b has 1 CPU."""
    s.on_node(node("a", cpu="2"))
    s.on_node(node("b", cpu="1"))
    s.on_podgroup(_group(source, "g", 2))
    for i in range(2):
        s.on_pod(_pod(source, f"g-{i}", "g", node_name="a"))


@pytest.mark.parametrize("source", SOURCES)
def test_an_increment_binds_whole_or_not_at_all_on_every_source(sched: Any, clock: Any, source: str) -> None:
    s, rec = sched
    _running_gang(s, source)
    s.on_podgroup(_group(source, "g", 4))  # grown: the minimum first, then the pods
    for i in (2, 3):
        s.on_pod(_pod(source, f"g-{i}", "g"))
    drain(s)
    assert rec.binds == []  # 1 CPU free: one of the two would fit, so neither binds
    assert "needs 4 pods, 3 fit" in rec.pods["g-2"]
    s.on_node(node("c", cpu="1"))
    clock.now += 30
    drain(s)
    assert sorted(p for p, _ in rec.binds) == ["g-2", "g-3"] and {n for _, n in rec.binds} == {"b", "c"}


@pytest.mark.parametrize("source", SOURCES)
def test_a_lower_minimum_lets_waiting_pods_bind_as_they_fit(sched: Any, clock: Any, source: str) -> None:
    s, rec = sched
    _running_gang(s, source)
    s.on_podgroup(_group(source, "g", 4))
    for i in (2, 3):
        s.on_pod(_pod(source, f"g-{i}", "g"))
    drain(s)
    assert rec.binds == []
    s.on_podgroup(_group(source, "g", 2))  # shrunk back: the two new pods are extras now
    clock.now += 30
    drain(s)
    assert len(rec.binds) == 1 and rec.binds[0][1] == "b"  # the one that fits binds alone


# ---------------------------------------------- an increment that does not fit

RACK = "example.com/rack"


def _rack_node(name: str, rack: str, cpu: str = "2") -> dict[str, Any]:
    body = node(name, cpu=cpu)
    body["metadata"]["labels"] = {RACK: rack}
    return body


def _racked_gang(s: Scheduler, minimum: int, priority: int) -> None:
    """Racks r1 and r2 of two 2-CPU nodes; the gang `g` (topology: rack) runs 2 pods on r1-0."""
    for n, r in (("r1-0", "r1"), ("r1-1", "r1"), ("r2-0", "r2"), ("r2-1", "r2")):
        s.on_node(_rack_node(n, r))
    body = _group("troupe", "g", minimum)
    body["spec"]["schedulingConstraints"] = {"topology": [{"key": RACK}]}
    body["spec"]["priority"] = priority
    s.on_podgroup(body)
    for i in range(2):
        s.on_pod(_pod("troupe", f"g-{i}", "g", node_name="r1-0"))


def test_an_increment_preempts_for_itself_inside_its_rack_only(sched: Any, clock: Any) -> None:
    """r1-1 runs two low-priority pods, r2 has room: the increment of 2 may not
    leave r1, so it evicts those two (never its own gang's pods, nothing in r2)."""
    s, rec = sched
    _racked_gang(s, 2, priority=100)
    for i in range(2):
        s.on_pod(lone_pod(f"low-{i}", node_name="r1-1"))
    s.on_pod(lone_pod("low-r2", node_name="r2-0"))
    body = _group("troupe", "g", 4)
    body["spec"]["schedulingConstraints"] = {"topology": [{"key": RACK}]}
    body["spec"]["priority"] = 100
    s.on_podgroup(body)
    for i in (2, 3):
        s.on_pod(_pod("troupe", f"g-{i}", "g"))
    drain(s)
    assert sorted(rec.preempted) == ["low-0", "low-1"]
    assert rec.nominated == {"g-2": "r1-1", "g-3": "r1-1"} and rec.binds == []


def test_an_increment_that_starves_gets_room_reserved_in_its_rack(clock: Any) -> None:
    """Equal priority in the way (no preemption): after starvationSeconds the
    increment gets r1-1 held for it, and a pod that comes later stays off it."""
    from .test_reservation import STARVE, make, running

    s, rec = make(clock)
    _racked_gang(s, 2, priority=0)
    for i in range(2):
        s.on_pod(running(f"busy-{i}", "r1-1"))
    body = _group("troupe", "g", 4)
    body["spec"]["schedulingConstraints"] = {"topology": [{"key": RACK}]}
    s.on_podgroup(body)
    for i in (2, 3):
        s.on_pod(_pod("troupe", f"g-{i}", "g"))
    drain(s)
    assert s.nominated == {}
    clock.now += STARVE + 1
    s.queue.activate(next(u.key for u in s.queue.units() if u.key.group_key is not None))
    drain(s)
    assert {pod.name: n for n, pod in s.nominated.values()} == {"g-2": "r1-1", "g-3": "r1-1"}
    assert "reserved node(s) r1-1 for 2 pod(s)" in rec.pods["g-2"]


# ------------------------------------------------- a Job's resize, held then let go


def test_a_resize_hint_holds_new_pods_until_the_new_minimum_lands_or_is_withdrawn(sched: Any, clock: Any) -> None:
    """What the Job integration tells the scheduler when a Job is scaled:
    the gang's new pods wait for the raised minCount (not one by one under
    the old one); scaled back before it lands, they wait no longer."""
    s, rec = sched
    _running_gang(s, "troupe")
    s.on_node(node("c", cpu="1"))  # room for both new pods
    s.on_group_resizing(GroupKey(NS, "g"), 4)
    for i in (2, 3):
        s.on_pod(_pod("troupe", f"g-{i}", "g"))
    drain(s)
    assert rec.binds == [] and s.cache.resizing
    s.on_podgroup(_group("troupe", "g", 4))  # the patch lands
    assert not s.cache.resizing
    drain(s)
    assert sorted(p for p, _ in rec.binds) == ["g-2", "g-3"]


def test_a_withdrawn_resize_lets_the_pods_go(sched: Any, clock: Any) -> None:
    s, rec = sched
    _running_gang(s, "troupe")
    s.on_group_resizing(GroupKey(NS, "g"), 4)
    s.on_pod(_pod("troupe", "g-2", "g"))
    drain(s)
    assert rec.binds == []
    s.on_group_resizing(GroupKey(NS, "g"), 2)  # scaled back before the patch: not a rise any more
    assert not s.cache.resizing
    drain(s)
    assert [p for p, _ in rec.binds] == ["g-2"]


# --------------------------------------------------------- a tree that grows


def _composite(min_groups: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.troupe.dev/v1alpha2",
        "kind": "CompositePodGroup",
        "metadata": {"name": "r", "namespace": NS, "uid": "uid-cpg-r"},
        "spec": {
            "workloadRef": {"workloadName": "w", "templateName": "t"},
            "schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
        },
    }


def _child(name: str) -> dict[str, Any]:
    body = _group("troupe", name, 2)
    body["spec"]["parentCompositePodGroupName"] = "r"
    return body


def test_a_tree_grown_by_a_child_binds_the_child_whole_or_waits(sched: Any, clock: Any) -> None:
    """minGroupCount raised 1 -> 2 with a new child gang of 2 beside the running
    one: the child binds whole (never 1 of 2) once there is room for it."""
    s, rec = sched
    s.on_node(node("a", cpu="2"))
    s.on_node(node("b", cpu="1"))
    s.on_composite(_composite(1))
    s.on_podgroup(_child("x"))
    for i in range(2):
        s.on_pod(_pod("troupe", f"x-{i}", "x", node_name="a"))
    s.on_composite(_composite(2))
    s.on_podgroup(_child("y"))
    for i in range(2):
        s.on_pod(_pod("troupe", f"y-{i}", "y"))
    drain(s)
    assert rec.binds == []  # room for one of y's two pods only
    s.on_node(node("c", cpu="1"))
    clock.now += 30
    drain(s)
    assert sorted(p for p, _ in rec.binds) == ["y-0", "y-1"]

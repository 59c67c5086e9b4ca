"""Correctness across group sources (issue 34): nothing evicted for nothing,
a PodGroup's priority is its pods' everywhere, no room held for a unit that
is gone, gated or could never bind.

Each scenario is the smallest cluster that showed the fault, driven through
`troupe simulate` (the same core as the scheduler) or the Scheduler itself."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler.api.jobs import JOB_POLICY_ANNOTATION, parse_job

from .test_preemption import NS, gang, pod
from .test_reservation import busy_cluster, delete, held_nodes, make, running, small, starve, three_starving_gangs
from .test_runtime_scheduler import drain, node
from .test_simulate import run_json

SP = "scheduling.x-k8s.io/v1alpha1"
VC = "scheduling.volcano.sh/v1beta1"
NATIVE = "scheduling.k8s.io/v1beta1"


def _node(name: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"}},
    }


def _class(name: str, value: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value}


def _pod(name: str, cpu: str, *, node_name: str = "", klass: str = "", **meta: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if node_name:
        spec["nodeName"] = node_name
    else:
        spec["schedulerName"] = "troupe-scheduler"
    if klass:
        spec["priorityClassName"] = klass
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS, **meta}}
    body["spec"] = spec
    if node_name:
        body["status"] = {"phase": "Running"}
    return body


def _group(api_version: str, name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "PodGroup", "metadata": {"name": name, "namespace": NS}, "spec": spec}


def _sp_pod(name: str, grp: str, cpu: str, **kw: Any) -> dict[str, Any]:
    return _pod(name, cpu, labels={"scheduling.x-k8s.io/pod-group": grp}, **kw)


def _vc_pod(name: str, grp: str, cpu: str, task: str = "", **kw: Any) -> dict[str, Any]:
    annotations = {"scheduling.k8s.io/group-name": grp}
    if task:
        annotations["volcano.sh/task-spec"] = task
    return _pod(name, cpu, annotations=annotations, **kw)


def _by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in doc["pods"]}


def _group_of(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(g for g in doc["podGroups"] if g["name"] == name)


# ------------------------------------------------ 1. nothing evicted for nothing


def test_no_victim_for_a_group_whose_min_resources_no_eviction_can_meet(capsys: Any, tmp_path: Path) -> None:
    # One 4-CPU node filled by a low-priority pod; a high-priority gang whose
    # minResources (8 CPU) the cluster can never free.
    docs = [
        _class("high", 1000),
        _class("low", 10),
        _node("n1", "4"),
        _pod("running", "4", node_name="n1", klass="low"),
        _group(SP, "g", minMember=2, minResources={"cpu": "8"}),
        _sp_pod("g-0", "g", "1", klass="high"),
        _sp_pod("g-1", "g", "1", klass="high"),
    ]
    doc = run_json(capsys, tmp_path, docs)
    pods = _by_name(doc)
    assert pods["running"]["node"] == "n1" and pods["running"]["preemptedBy"] is None  # not preempted
    assert _group_of(doc, "g")["victims"] == []
    message = _group_of(doc, "g")["message"]
    assert "preemption: DefaultPreemption: minResources: even with every lower-priority pod removed" in message
    assert "it needs cpu 8 (free 4)" in message


def test_no_victim_when_the_gang_would_still_miss_a_task_minimum(capsys: Any, tmp_path: Path) -> None:
    # Volcano minTaskMember: the head (5 CPU) fits no node, so evicting the
    # low-priority pod would let only the workers fit, and the gang not bind.
    docs = [
        _class("high", 1000),
        _node("n1", "4"),
        _pod("running", "4", node_name="n1"),
        _group(VC, "v", minMember=2, minTaskMember={"head": 1, "worker": 1}, priorityClassName="high"),
        _vc_pod("v-head", "v", "5", task="head"),
        _vc_pod("v-w0", "v", "1", task="worker"),
        _vc_pod("v-w1", "v", "1", task="worker"),
    ]
    doc = run_json(capsys, tmp_path, docs)
    assert _by_name(doc)["running"]["preemptedBy"] is None and _group_of(doc, "v")["victims"] == []
    message = _group_of(doc, "v")["message"]
    assert "the gang could not bind even with every lower-priority pod removed" in message
    assert "minTaskMember: task head: needs 1, 0 fit" in message


def test_eviction_that_meets_min_resources_still_happens(capsys: Any, tmp_path: Path) -> None:
    # The same group where evicting does free enough: preemption is not switched off.
    docs = [
        _class("high", 1000),
        _class("low", 10),
        _node("n1", "4"),
        _pod("running", "4", node_name="n1", klass="low"),
        _group(SP, "g", minMember=2, minResources={"cpu": "2"}),
        _sp_pod("g-0", "g", "1", klass="high"),
        _sp_pod("g-1", "g", "1", klass="high"),
    ]
    doc = run_json(capsys, tmp_path, docs)
    pods = _by_name(doc)
    assert pods["running"]["preemptedBy"] == "PodGroup ns/g (scheduling.x-k8s.io)"
    assert pods["g-0"]["node"] == pods["g-1"]["node"] == "n1"


# --------------------------------------- 2. the group's priority is its pods'


def test_the_groups_priority_holds_its_nominated_room_against_a_lower_pod(capsys: Any, tmp_path: Path) -> None:
    # Volcano group of priority 1000 (its pods name none); a 600 pod fills the
    # node; a lone 500 pod waits. One victim: the 500 pod must not take the
    # room the gang was nominated to (and be preempted in turn).
    docs = [
        _class("high", 1000),
        _class("p600", 600),
        _class("p500", 500),
        _node("n1", "4"),
        _pod("running", "4", node_name="n1", klass="p600"),
        _group(VC, "g", minMember=2, priorityClassName="high"),
        _vc_pod("g-0", "g", "2"),
        _vc_pod("g-1", "g", "2"),
        _pod("lone", "2", klass="p500"),
    ]
    doc = run_json(capsys, tmp_path, docs)
    pods = _by_name(doc)
    assert pods["g-0"]["node"] == pods["g-1"]["node"] == "n1"
    assert pods["lone"]["node"] is None and pods["lone"]["preemptedBy"] is None
    assert _group_of(doc, "g")["victims"] == [f"{NS}/running"]  # one victim, not two


def test_the_queue_orders_by_the_groups_priority(clock: Any) -> None:
    # Room for one of them: the lone 500 pod, first in the queue by its own
    # priority before, must wait for the 1000 group whose pods say 0.
    sched, rec = make(clock)
    sched.on_node(node("n1", cpu="4"))
    sched.on_pod(pod("lone", cpu="4", priority=500))
    sched.on_podgroup(gang("g", 2, priority=1000))
    for i in range(2):
        sched.on_pod(pod(f"g-{i}", cpu="2", group="g"))
    drain(sched)
    assert sorted(rec.binds) == [("g-0", "n1"), ("g-1", "n1")]
    assert rec.preempted == {}


def test_a_pod_of_a_high_priority_group_is_no_victim_of_a_lower_pod(clock: Any) -> None:
    # A basic group taken pod by pod (disruptionMode Pod): its pods' own
    # priority (0) is below the preemptor's, the group's (1000) is not.
    sched, rec = make(clock)
    sched.on_node(node("n1", cpu="4"))
    body = gang("g", 1, priority=1000, mode="Pod")
    body["spec"]["schedulingPolicy"] = {"basic": {}}
    sched.on_podgroup(body)
    sched.on_pod(pod("g-0", cpu="4", group="g", node_name="n1"))
    sched.on_pod(pod("mid", cpu="4", priority=500))
    drain(sched)
    assert rec.preempted == {} and rec.binds == []


def test_a_groups_priority_follows_the_group_and_its_class(clock: Any) -> None:
    sched, _ = make(clock)
    sched.on_node(node("n1", cpu="1"))
    sched.on_priority_class({"metadata": {"name": "high"}, "value": 1000})
    body = gang("g", 2)
    body["spec"]["priorityClassName"] = "high"
    sched.on_podgroup(body)
    for i in range(2):
        sched.on_pod(pod(f"g-{i}", cpu="1", group="g", priority=7))

    def priorities() -> set[int]:
        return {p.priority for p in sched.cache.pods.values()}

    assert priorities() == {1000}
    sched.on_priority_class({"metadata": {"name": "high"}, "value": 2000})
    assert priorities() == {2000}
    assert {u.priority for u in sched.queue.units()} == {2000}
    sched.on_podgroup_deleted(body)
    assert priorities() == {7}  # their own again


# ------------------------------------------------- 3. room held for nobody


def test_deleting_the_podgroup_of_a_starving_gang_frees_its_room_at_once(clock: Any) -> None:
    sched, rec = make(clock)
    busy_cluster(sched)
    drain(sched)
    starve(sched, clock)
    assert held_nodes(sched)
    sched.on_pod(small("next"))
    drain(sched)
    assert rec.binds == []  # the reserved room is held

    sched.on_podgroup_deleted(gang("big", 2))  # its pods are still there
    assert sched.nominated == {} and sched.reserved == {}
    assert rec.nominated == {"big-0": "", "big-1": ""}  # status.nominatedNodeName cleared
    clock.now += 20  # past the small pod's backoff
    drain(sched)
    assert [name for name, _ in rec.binds] == ["next"]


def test_deleting_one_member_of_a_starving_gang_frees_its_room_at_once(clock: Any) -> None:
    sched, rec = make(clock)
    busy_cluster(sched)
    drain(sched)
    starve(sched, clock)
    delete(sched, "big-1")  # the gang is below minCount: gated
    assert sched.nominated == {} and rec.nominated["big-0"] == ""
    sched.on_pod(small("next"))
    drain(sched)
    assert [name for name, _ in rec.binds] == ["next"]


def test_a_dead_reservation_does_not_count_toward_the_reserved_share(clock: Any) -> None:
    sched, _ = three_starving_gangs(clock)
    holders = {name.split("-")[0] for name in held_nodes(sched)}
    assert len(holders) == 2
    (left_out,) = {"g1", "g2", "g3"} - holders
    sched.on_podgroup_deleted(gang(sorted(holders)[0], 1))
    clock.now += 20  # past its backoff
    drain(sched)
    assert f"{left_out}-0" in held_nodes(sched)


# ------------------------------- 4. no reservation for a group that cannot bind


@pytest.mark.parametrize(
    ("docs", "why"),
    [
        (
            [
                _group(VC, "v", minMember=2, minTaskMember={"head": 1, "worker": 1}),
                _vc_pod("v-head", "v", "4", task="head"),
                _vc_pod("v-w0", "v", "1", task="worker"),
                _vc_pod("v-w1", "v", "1", task="worker"),
            ],
            "the group could not bind even with every running pod gone: GangScheduling: minTaskMember: task head",
        ),
        (
            [_group(SP, "s", minMember=1, minResources={"cpu": "8"}), _sp_pod("s-0", "s", "2")],
            "the group could not bind even with every running pod gone: minResources",
        ),
    ],
    ids=["volcano-task-too-big", "min-resources-over-the-cluster"],
)
def test_no_reservation_for_a_group_that_could_never_bind(
    capsys: Any, tmp_path: Path, docs: list[dict[str, Any]], why: str
) -> None:
    cluster = [_node("n1", "3"), _pod("running", "2", node_name="n1")]
    doc = run_json(capsys, tmp_path, cluster + docs, "--waited", "120")
    (group,) = doc["podGroups"]
    assert "reserved node" not in group["message"]
    assert f"Reservation: no room can be reserved: {why}" in group["message"]


# ----------------------------------------------- the same priority cases, every source

# (group priority, pods' priority) -> the priority every pod of the group has
# and whether it preempts a running pod of priority 600 that fills the node.
CASES = {
    "group only": (1000, None, 1000),
    "pods only": (None, 1000, 1000),
    "both": (1000, 1000, 1000),
    "mismatch, group higher": (1000, 100, 1000),
    "mismatch, group lower": (100, 1000, 100),
}
# Sources whose group objects carry no priority: the pods' own counts.
NO_GROUP_PRIORITY = {"scheduler-plugins", "kueue"}


def _source_objects(source: str, group_priority: int | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The source's group objects (none for Kueue; a Job's Workload and
    PodGroup as troupe makes them) and two 2-CPU pods of a gang of 2."""
    pods = []
    if source in ("troupe", "native"):
        spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": 2}}}
        if group_priority is not None:
            spec["priority"] = group_priority
        if source == "troupe":
            api = "scheduling.troupe.dev/v1alpha2"
            pods = [pod(f"g-{i}", cpu="2", group="g") for i in range(2)]
        else:
            api = NATIVE
            pods = [pod(f"g-{i}", cpu="2") for i in range(2)]
            for p in pods:
                p["spec"]["schedulingGroup"] = {"podGroupName": "g"}
        return [{"apiVersion": api, "metadata": {"name": "g", "namespace": NS, "uid": "ug"}, "spec": spec}], pods
    if source == "volcano":
        spec = {"minMember": 2}
        if group_priority is not None:
            spec["priorityClassName"] = f"p{group_priority}"
        pods = [pod(f"g-{i}", cpu="2") for i in range(2)]
        for p in pods:
            p["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": "g"}
        return [{"apiVersion": VC, "metadata": {"name": "g", "namespace": NS, "uid": "ug"}, "spec": spec}], pods
    if source == "scheduler-plugins":
        pods = [pod(f"g-{i}", cpu="2") for i in range(2)]
        for p in pods:
            p["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "g"}
        return [
            {"apiVersion": SP, "metadata": {"name": "g", "namespace": NS, "uid": "ug"}, "spec": {"minMember": 2}}
        ], pods
    if source == "kueue":
        pods = [pod(f"g-{i}", cpu="2") for i in range(2)]
        for p in pods:
            p["metadata"]["labels"] = {"kueue.x-k8s.io/pod-group-name": "g"}
            p["metadata"]["annotations"] = {"kueue.x-k8s.io/pod-group-total-count": "2"}
        return [], pods
    assert source == "job"
    template_spec: dict[str, Any] = {"containers": [{"name": "c"}], "schedulerName": "troupe-scheduler"}
    template = {"metadata": {"annotations": {JOB_POLICY_ANNOTATION: "gang"}}, "spec": template_spec}
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": NS, "uid": "uj"},
        "spec": {"parallelism": 2, "completions": 2, "template": template},
    }
    intent = parse_job(job)
    assert intent is not None
    body = intent.podgroup()
    if group_priority is not None:  # as a Workload template the Job names would give it
        body["spec"]["priority"] = group_priority
    body["metadata"]["uid"] = "ug"
    pods = [pod(f"g-{i}", cpu="2") for i in range(2)]
    for p in pods:  # the Job controller's pods: the template's annotation, the Job as controller
        p["metadata"]["ownerReferences"] = [intent.owner_reference()]
        p["metadata"]["annotations"] = {JOB_POLICY_ANNOTATION: "gang"}
    return [intent.workload(), body], pods


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("source", ["troupe", "native", "job", "scheduler-plugins", "volcano", "kueue"])
def test_priority_cases_for_every_source(clock: Any, source: str, case: str) -> None:
    group_priority, pod_priority, expected = CASES[case]
    if source in NO_GROUP_PRIORITY and group_priority is not None:
        expected = pod_priority or 0  # the object has no priority field: the pods' own counts
        group_priority = None
    sched, rec = make(clock)
    for value in (100, 1000):
        sched.on_priority_class({"metadata": {"name": f"p{value}"}, "value": value})
    sched.on_node(node("n1", cpu="4"))
    sched.on_pod(pod("running", cpu="4", priority=600, node_name="n1"))
    objects, pods = _source_objects(source, group_priority)
    for obj in objects:
        (sched.on_workload if obj.get("kind") == "Workload" else sched.on_podgroup)(obj)
    for p in pods:
        p["spec"]["priority"] = pod_priority or 0
        sched.on_pod(p)
    drain(sched)
    assert all(sched.cache.pods[f"uid-g-{i}"].group is not None for i in range(2))
    assert {sched.cache.pods[f"uid-g-{i}"].priority for i in range(2)} == {expected}
    assert list(rec.preempted) == (["running"] if expected > 600 else [])


def test_a_reservation_whose_room_a_higher_unit_took_moves_at_once(clock: Any) -> None:
    # a, b, c each run a pod with no end; the low gang reserves a and b. A
    # higher pod then takes a's free room: no cluster event follows, and the
    # low gang must not stay nominated to room it can no longer have.
    sched, rec = make(clock)
    for n in "abc":
        sched.on_node(node(n, cpu="4"))
    sched.on_pod(running("a0", "a"))
    sched.on_pod(running("b0", "b"))
    sched.on_pod(running("c0", "c", cpu="2"))
    sched.on_podgroup(gang("big", 2))
    for i in range(2):
        sched.on_pod(pod(f"big-{i}", cpu="4", group="big"))
    drain(sched)
    starve(sched, clock)
    assert set(held_nodes(sched).values()) == {"a", "b"}
    sched.on_pod(pod("vip", cpu="3", priority=1000))
    drain(sched)
    (taken,) = [n for name, n in rec.binds if name == "vip"]
    clock.now += 1  # the gang's backoff after its last attempt
    drain(sched)
    now_held = set(held_nodes(sched).values())
    assert taken not in now_held and len(now_held) == 2, (taken, now_held)


def _echo(sched: Any, name: str, node_name: str, group: str = "big") -> None:
    """The watch shows the pod with status.nominatedNodeName as the API has it."""
    body = pod(name, cpu="4", group=group)
    body["status"] = {"nominatedNodeName": node_name}
    sched.on_pod(body)


def test_a_new_leader_clears_what_it_let_go_while_it_could_not_write(clock: Any) -> None:
    # A replica that lets room go while it does not lead (its writes are
    # refused) must clear the nominations in the API once it leads.
    sched, rec = make(clock)
    busy_cluster(sched)
    drain(sched)
    starve(sched, clock)
    for name, node_name in held_nodes(sched).items():
        _echo(sched, name, node_name)
    sched.on_podgroup_deleted(gang("big", 2))
    assert sched.nominated == {}
    rec.nominated.clear()  # as on a standby: the clearing writes were refused
    sched.sweep_nominations()
    assert rec.nominated == {"big-0": "", "big-1": ""}


def test_a_new_leader_holds_the_nominations_as_the_api_last_had_them(clock: Any) -> None:
    sched, rec = make(clock, start=False)
    sched.on_node(node("a", cpu="4"))
    sched.on_node(node("b", cpu="4"))
    sched.on_podgroup(gang("big", 2))
    _echo(sched, "big-0", "a")
    _echo(sched, "big-1", "a")
    sched.start_scheduling()
    assert held_nodes(sched) == {"big-0": "a", "big-1": "a"}
    _echo(sched, "big-0", "b")  # the leader moved one,
    _echo(sched, "big-1", "")  # and let the other go
    sched.sweep_nominations()
    assert held_nodes(sched) == {"big-0": "b"}
    assert rec.nominated == {}  # nothing to clear: the API says so already

"""The live scheduler's event handling and decisions, with the API calls recorded
instead of sent (the binder and status writer are the only I/O of `Scheduler`)."""

from __future__ import annotations

from typing import Any

import pytest

from scheduler.api import constants as C
from scheduler.api.config import SchedulerConfiguration
from scheduler.core.scheduler import Scheduler
from scheduler.plugins import in_tree_registry

LABEL = "scheduling.troupe.dev/pod-group"


class Recorder:
    def __init__(self) -> None:
        self.binds: list[tuple[str, str]] = []
        self.groups: list[tuple[str, str, str, str]] = []
        self.pods: dict[str, str] = {}
        self.events: list[tuple[str, str, str]] = []
        self.nominated: dict[str, str] = {}
        self.at_least: list[int] = []
        self.preempted: dict[str, str] = {}
        self.disrupted: dict[str, str] = {}
        self.annotations: list[dict[str, str]] = []  # each decision's Binding annotations

    # binder
    def bind(self, fwk, assignments, results, at_least=0, annotations=None) -> None:
        self.annotations.append(dict(annotations or {}))
        self.binds.extend((a.pod.name, a.node) for a in assignments)
        self.at_least.append(at_least)

    # writer
    pod_writes = 0

    def group_condition(self, group, status, reason, message) -> None:
        self.groups.append((group.metadata.name, status, reason, message))

    def group_members(self, group) -> None:
        pass

    def pod_unschedulable(self, pod, message, still_waiting=None, reason="Unschedulable") -> None:
        self.pod_writes += 1
        if still_waiting is None or still_waiting():
            self.pods[pod.name] = message

    def pod_waiting(self, pod, message, still_waiting=None) -> None:
        self.pod_unschedulable(pod, message, still_waiting, "(no condition)")

    def pod_event(self, pod, type_, reason, note, action) -> None:
        self.events.append((pod.name, reason, note))

    def group_event(self, group, type_, reason, note, action) -> None:
        self.events.append((group.metadata.name, reason, note))

    def preempt_pod(self, victim, message: str) -> None:
        self.preempted[victim.name] = message

    def group_disrupted(self, group, message: str) -> None:
        self.disrupted[group.metadata.name] = message

    def nominate(self, pod, node: str) -> None:
        self.nominated[pod.name] = node

    def forget_pod(self, uid: str) -> None:
        pass

    def composite_condition(self, composite, status, reason, message) -> None:
        self.groups.append((composite.metadata.name, status, reason, message))

    def composite_event(self, composite, type_, reason, note, action) -> None:
        self.events.append((composite.metadata.name, reason, note))

    def composite_disrupted(self, composite, message: str) -> None:
        self.disrupted[composite.metadata.name] = message


def node(name: str, cpu: str = "2", pods: str = "110") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "status": {"allocatable": {"cpu": cpu, "memory": "8Gi", "pods": pods}},
    }


def pod(
    name: str,
    group: str | None = None,
    cpu: str = "1",
    scheduler: str = "troupe-scheduler",
    node_name: str | None = None,
    ns: str = "ns",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "labels": {LABEL: group} if group else {}},
        "spec": spec,
    }


def podgroup(name: str, min_count: int | None = None, ns: str = "ns", policy: Any = None) -> dict[str, Any]:
    if policy is None:
        policy = {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-pg-{name}", "generation": 1},
        "spec": {"schedulingPolicy": policy},
    }


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sched(clock) -> tuple[Scheduler, Recorder]:
    rec = Recorder()
    s = Scheduler(SchedulerConfiguration(), in_tree_registry(), binder=rec, writer=rec, clock=clock, report_delay=0)
    s.start_scheduling()
    return s, rec


def drain(s: Scheduler) -> int:
    cycles = 0
    while (popped := s.queue.pop_nowait()) is not None:
        s.schedule_unit(popped)
        cycles += 1
    return cycles


def bind_confirmed(s: Scheduler, body: dict[str, Any], node_name: str) -> None:
    """What the watch brings after a successful binding."""
    body = {**body, "spec": {**body["spec"], "nodeName": node_name}}
    s.on_pod(body)


def test_two_gangs_one_binds_whole_and_the_other_not_at_all(sched):
    s, rec = sched
    s.on_node(node("a"))
    s.on_node(node("b"))
    s.on_podgroup(podgroup("x", 4))
    s.on_podgroup(podgroup("y", 4))
    for i in range(4):
        s.on_pod(pod(f"x-{i}", "x"))
        s.on_pod(pod(f"y-{i}", "y"))
    drain(s)
    groups = {name.split("-")[0] for name, _ in rec.binds}
    assert len(rec.binds) == 4 and len(groups) == 1
    loser = ({"x", "y"} - groups).pop()
    assert (
        loser,
        "False",
        "Unschedulable",
        "needs 4 pods, 0 fit: 0/2 nodes are available: 2 Insufficient cpu.",
    ) in rec.groups
    assert all(rec.pods[f"{loser}-{i}"].startswith(f"PodGroup ns/{loser}: needs 4 pods") for i in range(4))


def test_gang_waits_for_its_podgroup_and_min_count(sched):
    s, rec = sched
    s.on_node(node("a", cpu="8"))
    s.on_pod(pod("p-0", "g"))
    assert drain(s) == 0
    assert rec.pods["p-0"] == "waiting for PodGroup ns/g to be created"
    s.on_podgroup(podgroup("g", 2))
    assert drain(s) == 0
    assert rec.pods["p-0"] == "waiting for pods of PodGroup ns/g: minCount is 2"
    assert rec.groups[-1] == (
        "g",
        "False",
        "Unschedulable",
        "waiting for pods of PodGroup ns/g: minCount is 2, 1 exist",
    )
    s.on_pod(pod("p-1", "g"))
    drain(s)
    assert sorted(n for n, _ in rec.binds) == ["p-0", "p-1"]


def test_podgroup_deleted_under_waiting_pods_makes_them_wait_again(sched):
    s, rec = sched
    s.on_podgroup(podgroup("g", 2))
    s.on_pod(pod("p-0", "g"))
    s.on_pod(pod("p-1", "g"))
    s.on_podgroup_deleted(podgroup("g", 2))
    assert drain(s) == 0
    assert rec.pods["p-0"] == "waiting for PodGroup ns/g to be created"
    assert rec.binds == []


def test_invalid_podgroup_is_a_scheduler_error_not_a_crash(sched):
    s, rec = sched
    s.on_node(node("a"))
    # Both policies set: the CRD schema refuses this, but an old CRD might not.
    s.on_podgroup(podgroup("bad", policy={"basic": {}, "gang": {"minCount": 1}}))
    s.on_pod(pod("p", "bad"))
    drain(s)
    assert rec.binds == []
    name, status, reason, message = rec.groups[-1] if rec.groups else ("", "", "", "")
    assert rec.pods["p"].startswith("PodGroup ns/bad: PodGroup ns/bad is invalid: spec.schedulingPolicy")
    assert "exactly one of basic or gang" in rec.pods["p"]
    # Still queued (with backoff), not forgotten.
    assert "uid-p" in s.queue


def test_group_with_different_scheduler_names_is_refused(sched):
    s, rec = sched
    s.on_node(node("a", cpu="8"))
    s.on_podgroup(podgroup("g", 2))
    s.on_pod(pod("p-0", "g"))
    s.on_pod(pod("p-1", "g", scheduler="other-scheduler"))
    s.on_pod(pod("p-2", "g"))
    drain(s)
    assert rec.binds == []
    assert "schedulerName" in rec.groups[-1][3] and rec.groups[-1][2] == "SchedulerError"


def test_bound_pods_count_toward_min_count_and_capacity(sched, clock):
    s, rec = sched
    s.on_node(node("a", cpu="2"))
    s.on_podgroup(podgroup("g", 3))
    # Two pods of the group are already bound (e.g. before a restart); one is new.
    s.on_pod(pod("p-0", "g", node_name="a"))
    s.on_pod(pod("p-1", "g", node_name="a"))
    s.on_pod(pod("p-2", "g"))
    drain(s)
    assert rec.binds == []  # node a is full: 2 CPUs used by the bound pods
    assert "needs 3 pods, 2 fit" in rec.pods["p-2"]
    s.on_node(node("b", cpu="2"))
    drain(s)
    assert rec.binds == []  # the new node moved the group to backoff (1 s after one attempt)
    clock.now += 1.0
    drain(s)
    assert rec.binds == [("p-2", "b")]


def test_bind_failure_returns_the_pod_to_the_queue_and_frees_its_room(sched):
    s, rec = sched
    s.on_node(node("a", cpu="1"))
    body = pod("p")
    s.on_pod(body)
    drain(s)
    assert rec.binds == [("p", "a")]
    assert s.cache.placed_node("uid-p") == "a"
    s.on_bind_failed(s.cache.pods["uid-p"], "a", "Binding rejected: 500")
    assert s.cache.placed_node("uid-p") == ""
    assert "uid-p" in s.queue


def test_assumed_capacity_is_used_until_the_watch_confirms(sched):
    s, rec = sched
    s.on_node(node("a", cpu="1"))
    s.on_pod(pod("p"))
    s.on_pod(pod("q"))
    drain(s)
    assert len(rec.binds) == 1  # the second pod sees the first one's assumed CPU
    first = rec.binds[0][0]
    bind_confirmed(s, pod(first), "a")
    assert s.cache.assumed == {}
    assert s.cache.placed_node(f"uid-{first}") == "a"


def test_pods_of_other_schedulers_are_not_queued_but_count(sched):
    s, rec = sched
    s.on_node(node("a", cpu="2"))
    s.on_pod(pod("theirs", scheduler="default-scheduler"))
    assert "uid-theirs" not in s.queue
    s.on_pod(pod("theirs-bound", scheduler="default-scheduler", cpu="2", node_name="a"))
    s.on_pod(pod("mine"))
    drain(s)
    assert rec.binds == []
    assert rec.pods["mine"] == "0/1 nodes are available: 1 Insufficient cpu."


def test_malformed_pod_is_ignored_without_crashing(sched):
    s, rec = sched
    bad = pod("bad")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    s.on_pod(bad)
    assert "uid-bad" not in s.cache.pods


def test_a_filling_gang_writes_each_pod_condition_once(sched):
    """The pods' message does not carry the count, so N arrivals cost N writes, not N^2."""
    s, rec = sched
    s.on_node(node("a", cpu="1000", pods="1000"))
    s.on_podgroup(podgroup("g", 300))
    for i in range(299):
        s.on_pod(pod(f"p-{i}", "g"))
    assert rec.pod_writes == 299
    assert rec.groups[-1][3] == "waiting for pods of PodGroup ns/g: minCount is 300, 299 exist"
    s.on_pod(pod("p-299", "g"))
    drain(s)
    assert len(rec.binds) == 300


def test_a_pod_being_bound_is_not_queued_again_by_other_updates(sched):
    """Between the decision and the watch confirming the binding, updates of the
    pod (e.g. our own condition patch landing) must not put it back in the
    queue: it would be tried, and possibly bound, a second time."""
    s, rec = sched
    s.on_node(node("a", cpu="4"))
    s.on_podgroup(podgroup("g", 2))
    bodies = [pod("p-0", "g"), pod("p-1", "g")]
    for b in bodies:
        s.on_pod(b)
    drain(s)
    assert sorted(rec.binds) == [("p-0", "a"), ("p-1", "a")]
    for b in bodies:  # status-only updates arrive, still without nodeName
        s.on_pod({**b, "status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}})
    assert drain(s) == 0 and len(rec.binds) == 2
    assert "uid-p-0" not in s.queue
    # A failed bind puts it back, exactly once.
    s.on_bind_failed(s.cache.pods["uid-p-0"], "a", "Binding rejected: 500")
    assert "uid-p-0" in s.queue


def test_podgroup_fields_troupe_honours_are_not_reported_as_ignored(sched, caplog):
    s, rec = sched
    body = podgroup("g", 2)
    body["spec"]["schedulingConstraints"] = {"topology": [{"key": "topology.kubernetes.io/zone"}]}
    body["spec"]["resourceClaims"] = [
        {"name": "gpus", "resourceClaimName": "shared-gpus"},
        {"name": "fabric", "resourceClaimTemplateName": "fabric-template"},
    ]
    with caplog.at_level("WARNING", logger="scheduler.core.eventhandlers"):
        s.on_podgroup(body)
    # schedulingConstraints (placement) and both kinds of claims (DynamicResources) are honoured.
    assert [e for e in rec.events if e[1] == "IgnoredField"] == []
    assert caplog.records == []


def test_the_binder_is_told_how_many_of_a_gang_must_pass_prebind(sched):
    s, rec = sched
    s.on_node(node("a", cpu="16"))
    s.on_podgroup(podgroup("g", 3))
    for i in range(4):
        s.on_pod(pod(f"g-{i}", "g"))
    s.on_podgroup(podgroup("b"))
    s.on_pod(pod("b-0", "b"))
    s.on_pod(pod("lone"))
    drain(s)
    assert sorted(rec.at_least) == [0, 1, 3]  # the lone pod, the basic group, the gang (minCount 3)


def test_a_group_found_bound_at_start_gets_its_scheduled_condition(sched):
    """Status writes wait for binds: a process stopped in between leaves a
    bound group without PodGroupScheduled=True; the next one writes it."""
    s, rec = sched
    s.on_node(node("a", cpu="4"))
    s.on_podgroup(podgroup("done", 2))
    s.on_podgroup(podgroup("half", 3))
    s.on_pod(pod("d-0", "done", node_name="a"))
    s.on_pod(pod("d-1", "done", node_name="a"))
    s.on_pod(pod("h-0", "half", node_name="a"))
    s.on_pod(pod("h-1", "half"))
    rec.groups.clear()  # the filling report of "half"
    s.sweep_group_status()
    assert rec.groups == [("done", "True", "Scheduled", "2 pod(s) placed")]


def test_gang_pods_are_bound_protected_from_consolidation_lone_and_basic_pods_not(clock):
    """Each Binding of a gang's pod carries Karpenter's and cluster-autoscaler's
    annotations (the API server merges them into the pod); a lone pod's, a
    basic group's and a profile's with protectRunning off carry none."""
    for protect in (True, False):
        rec = Recorder()
        config = SchedulerConfiguration.model_validate({"profiles": [{"autoscaling": {"protectRunning": protect}}]})
        s = Scheduler(config, in_tree_registry(), binder=rec, writer=rec, clock=clock, report_delay=0)
        s.start_scheduling()
        s.on_node(node("a", cpu="16"))
        s.on_podgroup(podgroup("g", 2))
        for i in range(2):
            s.on_pod(pod(f"g-{i}", "g"))
        s.on_podgroup(podgroup("b"))
        s.on_pod(pod("b-0", "b"))
        s.on_pod(pod("lone"))
        drain(s)
        assert len(rec.binds) == 4
        gang = dict(C.PROTECT_RUNNING) if protect else {}
        assert sorted(rec.annotations, key=len) == [{}, {}, gang]
    assert gang == {} and C.PROTECT_RUNNING == {
        "karpenter.sh/do-not-disrupt": "true",
        "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
    }

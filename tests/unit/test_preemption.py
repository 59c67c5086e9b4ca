"""DefaultPreemption in the scheduler's own cycle: who is evicted, what the
cluster is told, and what happens once the victims are gone."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scheduler.api.config import SchedulerConfiguration
from scheduler.api.parse import parse_pod
from scheduler.core.scheduler import Scheduler
from scheduler.framework.events import NODE_ADD
from scheduler.plugins import in_tree_registry
from scheduler.plugins.defaultpreemption import DefaultPreemption
from scheduler.plugins.defaultpreemption.search import remove_all_then_reprieve, search_group
from scheduler.plugins.defaultpreemption.victims import victim_units

from .test_runtime_scheduler import Recorder, drain, node, podgroup

NS = "ns"


def pod(
    name: str,
    cpu: str = "1",
    group: str | None = None,
    priority: int = 0,
    node_name: str | None = None,
    never: bool = False,
    start: str = "",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "troupe-scheduler",
        "priority": priority,
        "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}],
    }
    if node_name:
        spec["nodeName"] = node_name
    if never:
        spec["preemptionPolicy"] = "Never"
    labels = {"scheduling.troupe.dev/pod-group": group} if group else {}
    status = {"startTime": start} if start else {}
    return {
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": labels},
        "spec": spec,
        "status": status,
    }


def gang(name: str, min_count: int, priority: int | None = None, mode: str | None = None) -> dict[str, Any]:
    body = podgroup(name, min_count)
    if priority is not None:
        body["spec"]["priority"] = priority
    if mode is not None:
        body["spec"]["disruptionMode"] = mode
    return body


@pytest.fixture
def s(clock: Any) -> tuple[Scheduler, Recorder]:
    rec = Recorder()
    sched = Scheduler(SchedulerConfiguration(), in_tree_registry(), binder=rec, writer=rec, clock=clock, report_delay=0)
    sched.start_scheduling()
    return sched, rec


def plugin(sched: Scheduler) -> DefaultPreemption:
    p = sched.frameworks["troupe-scheduler"].plugins["DefaultPreemption"]
    assert isinstance(p, DefaultPreemption)
    return p


def delete(sched: Scheduler, name: str) -> None:
    sched.on_pod_deleted({"metadata": {"namespace": NS, "name": name, "uid": f"uid-{name}"}})


# ------------------------------------------------------------------ lone pods


def test_a_lone_high_priority_pod_preempts_one_lower_priority_pod(s: Any) -> None:
    sched, rec = s
    sched.on_node(node("a", cpu="2"))
    sched.on_pod(pod("low-0", node_name="a"))
    sched.on_pod(pod("low-1", node_name="a", start="2026-01-01T00:00:05Z"))
    sched.on_pod(pod("high", priority=100))
    drain(sched)
    assert len(rec.preempted) == 1
    assert set(rec.preempted.values()) == {"troupe-scheduler: preempting to accommodate a higher priority pod"}
    assert rec.nominated == {"high": "a"}
    assert "preemption: preempting 1 lower-priority pod(s) on node a" in rec.pods["high"]
    assert "waiting for 1 victim(s) to terminate" in rec.pods["high"]
    assert sched.nominated["uid-high"][0] == "a"


def test_equal_priority_is_never_preempted(s: Any) -> None:
    sched, rec = s
    sched.on_node(node("a", cpu="1"))
    sched.on_pod(pod("same", node_name="a", priority=5))
    sched.on_pod(pod("new", priority=5))
    drain(sched)
    assert rec.preempted == {} and rec.nominated == {}


def test_preemption_policy_never_does_not_preempt(s: Any) -> None:
    sched, rec = s
    sched.on_node(node("a", cpu="1"))
    sched.on_pod(pod("low", node_name="a"))
    sched.on_pod(pod("high", priority=100, never=True))
    drain(sched)
    assert rec.preempted == {}
    assert "preemption: DefaultPreemption: not eligible: preemptionPolicy is Never" in rec.pods["high"]


def test_a_victim_gang_is_taken_whole_unless_its_disruption_mode_is_pod(s: Any) -> None:
    sched, rec = s
    for n in "abc":
        sched.on_node(node(n, cpu="2"))
    sched.on_podgroup(gang("low", 3))
    for i, n in enumerate("abc"):
        sched.on_pod(pod(f"low-{i}", cpu="2", group="low", node_name=n))
    sched.on_pod(pod("high", cpu="2", priority=100))
    drain(sched)
    assert sorted(rec.preempted) == ["low-0", "low-1", "low-2"]
    assert rec.disrupted == {"low": "preempted by pod ns/high, which has a higher priority"}


def test_a_gang_with_disruption_mode_pod_gives_up_one_pod(s: Any) -> None:
    sched, rec = s
    for n in "abc":
        sched.on_node(node(n, cpu="2"))
    sched.on_podgroup(gang("low", 3, mode="Pod"))
    for i, n in enumerate("abc"):
        sched.on_pod(pod(f"low-{i}", cpu="2", group="low", node_name=n))
    sched.on_pod(pod("high", cpu="2", priority=100))
    drain(sched)
    assert len(rec.preempted) == 1 and rec.disrupted == {}


# ------------------------------------------------------ shrink before kill


def _gang_above_its_minimum(sched: Scheduler, costs: dict[int, int] | None = None) -> None:
    """A gang of minCount 2 running 4 pods (low-0 oldest ... low-3 newest), one per 2-cpu node."""
    for n in "abcd":
        sched.on_node(node(n, cpu="2"))
    sched.on_podgroup(gang("low", 2, priority=1))
    for i, n in enumerate("abcd"):
        body = pod(f"low-{i}", cpu="2", group="low", node_name=n, priority=1, start=f"2026-01-01T00:00:0{i}Z")
        if costs and i in costs:
            body["metadata"]["annotations"] = {"controller.kubernetes.io/pod-deletion-cost": str(costs[i])}
        sched.on_pod(body)


def _high_gang(sched: Scheduler, size: int) -> None:
    """A pending gang of `size` 2-CPU pods at priority 100, its minCount its size."""
    sched.on_podgroup(gang("high", size, priority=100))
    for i in range(size):
        sched.on_pod(pod(f"high-{i}", cpu="2", group="high", priority=100))


def test_a_victim_gang_above_its_minimum_loses_its_newest_pods_first_and_keeps_running(s: Any) -> None:
    sched, rec = s
    _gang_above_its_minimum(sched)
    _high_gang(sched, 2)
    drain(sched)
    assert sorted(rec.preempted) == ["low-2", "low-3"]  # above its minCount of 2, the newest
    assert rec.disrupted == {}  # the gang is not disrupted: it keeps its minimum
    message = rec.groups[-1][3]
    assert "preempting 2 lower-priority pod(s) (2 above the minCount of PodGroup ns/low)" in message


def test_a_lone_pod_takes_one_pod_above_the_minimum_not_the_gang(s: Any) -> None:
    sched, rec = s
    _gang_above_its_minimum(sched)
    sched.on_pod(pod("high", cpu="2", priority=100))
    drain(sched)
    assert list(rec.preempted) == ["low-3"] and rec.nominated == {"high": "d"} and rec.disrupted == {}


def test_pod_deletion_cost_chooses_which_pods_are_above_the_minimum(s: Any) -> None:
    sched, rec = s
    _gang_above_its_minimum(sched, costs={3: 100, 2: 50})  # the newest two cost most: the oldest go
    _high_gang(sched, 2)
    drain(sched)
    assert sorted(rec.preempted) == ["low-0", "low-1"] and rec.disrupted == {}


def test_when_the_pods_above_the_minimum_are_not_enough_the_gang_goes_whole(s: Any) -> None:
    sched, rec = s
    _gang_above_its_minimum(sched)
    _high_gang(sched, 3)
    drain(sched)
    assert sorted(rec.preempted) == ["low-0", "low-1", "low-2", "low-3"]  # never left below minCount
    assert rec.disrupted == {"low": "preempted by PodGroup ns/high, which has a higher priority"}


def test_disruption_mode_podgroup_keeps_the_group_together(s: Any) -> None:
    sched, rec = s
    for n in "abcd":
        sched.on_node(node(n, cpu="2"))
    sched.on_podgroup(gang("low", 2, priority=1, mode="PodGroup"))
    for i, n in enumerate("abcd"):
        sched.on_pod(pod(f"low-{i}", cpu="2", group="low", node_name=n, priority=1))
    sched.on_pod(pod("high", cpu="2", priority=100))
    drain(sched)
    assert len(rec.preempted) == 4 and rec.disrupted == {"low": "preempted by pod ns/high, which has a higher priority"}


def test_the_node_whose_victims_have_the_lowest_priority_is_chosen(s: Any) -> None:
    sched, rec = s
    sched.on_node(node("a", cpu="1"))
    sched.on_node(node("b", cpu="1"))
    sched.on_pod(pod("mid", node_name="a", priority=50))
    sched.on_pod(pod("low", node_name="b", priority=10))
    sched.on_pod(pod("high", priority=100))
    drain(sched)
    assert list(rec.preempted) == ["low"] and rec.nominated == {"high": "b"}


# ------------------------------------------------------------------- gangs


def _full_cluster_with_a_low_gang(sched: Scheduler) -> None:
    for n in "abcd":
        sched.on_node(node(n, cpu="2"))
    sched.on_podgroup(gang("low", 4, priority=1))
    for i, n in enumerate("abcd"):
        sched.on_pod(pod(f"low-{i}", cpu="2", group="low", node_name=n, priority=1))


def test_a_high_priority_gang_evicts_a_whole_low_gang_then_binds_whole(s: Any, clock: Any) -> None:
    sched, rec = s
    _full_cluster_with_a_low_gang(sched)
    sched.on_podgroup(gang("high", 2, priority=100))
    for i in range(2):
        sched.on_pod(pod(f"high-{i}", cpu="2", group="high", priority=100))
    plugin(sched).clock = lambda: clock.now
    drain(sched)
    assert sorted(rec.preempted) == ["low-0", "low-1", "low-2", "low-3"]  # never part of the gang
    assert rec.disrupted == {"low": "preempted by PodGroup ns/high, which has a higher priority"}
    assert set(rec.preempted.values()) == {
        "troupe-scheduler: preempting to accommodate higher priority PodGroup ns/high"
    }
    status, reason, message = rec.groups[-1][1:]
    assert (status, reason) == ("False", "Unschedulable")
    assert "preemption: preempting 4 lower-priority pod(s) (whole PodGroup ns/low)" in message
    assert "waiting for 4 victim(s) to terminate" in message
    assert sorted(rec.nominated) == ["high-0", "high-1"] and rec.binds == []
    # A retry before the victims are gone (a cluster event) waits; it evicts nobody else.
    clock.now += 1
    assert sched.queue.move_for_event(NODE_ADD) == 1
    clock.now += 20
    drain(sched)
    assert len(rec.preempted) == 4 and rec.binds == []
    for i in range(4):
        delete(sched, f"low-{i}")
    clock.now += 100
    drain(sched)
    assert sorted(b[0] for b in rec.binds) == ["high-0", "high-1"]
    assert sched.nominated == {}


def test_an_equal_priority_gang_does_not_preempt(s: Any) -> None:
    sched, rec = s
    _full_cluster_with_a_low_gang(sched)
    sched.on_podgroup(gang("same", 2, priority=1))
    for i in range(2):
        sched.on_pod(pod(f"same-{i}", cpu="2", group="same", priority=1))
    drain(sched)
    assert rec.preempted == {} and rec.nominated == {}


def test_nominated_room_is_held_from_lower_priority_pods(s: Any, clock: Any) -> None:
    sched, rec = s
    sched.on_node(node("a", cpu="2"))
    sched.on_pod(pod("low", cpu="2", node_name="a"))
    sched.on_pod(pod("high", cpu="2", priority=100))
    drain(sched)
    assert list(rec.preempted) == ["low"] and rec.nominated == {"high": "a"}
    delete(sched, "low")  # the victim is gone; "high" waits out its backoff
    sched.on_pod(pod("sneaky", cpu="2", priority=50))
    drain(sched)
    assert "sneaky" not in [b[0] for b in rec.binds]  # the room is high's
    clock.now += 100
    drain(sched)
    assert [b[0] for b in rec.binds] == ["high"]


def test_victims_that_never_terminate_do_not_wedge_the_preemptor(s: Any, clock: Any) -> None:
    sched, rec = s
    sched.on_node(node("a", cpu="1"))
    sched.on_node(node("b", cpu="1"))
    sched.on_pod(pod("stuck", node_name="a"))
    sched.on_pod(pod("other", node_name="b", start="2026-01-01T00:00:00Z"))
    sched.on_pod(pod("high", priority=100))
    plugin(sched).clock = lambda: clock.now
    drain(sched)
    first = list(rec.preempted)
    assert len(first) == 1
    stuck = first[0]
    # The victim gets a deletionTimestamp and stays (a finalizer); its room never comes back.
    body = pod(stuck, node_name="a" if stuck == "stuck" else "b")
    body["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    sched.on_pod(body)
    clock.now += 30
    assert sched.queue.move_for_event(NODE_ADD) == 1  # retried before the victim is gone
    clock.now += 20
    drain(sched)
    assert list(rec.preempted) == first  # still waiting: no second victim yet
    clock.now += 1000  # past victimWaitSeconds and the unschedulable flush
    drain(sched)
    assert len(rec.preempted) == 2 and stuck in rec.preempted


# ------------------------------------------------------- better than reprieve


def test_the_search_takes_fewer_victims_than_remove_all_then_reprieve(s: Any) -> None:
    """Gang of 2 x 4 cpu. Nodes a, b hold one 4-cpu pod each (started early: reprieved
    first); node c holds four 1-cpu pods. Reprieving a's pod first leaves b and c to
    clear: 5 victims. Freeing a and b costs 2."""
    sched, rec = s
    for n in "abc":
        sched.on_node(node(n, cpu="4"))
    sched.on_pod(pod("big-a", cpu="4", node_name="a", start="2026-01-01T00:00:00Z"))
    sched.on_pod(pod("big-b", cpu="4", node_name="b", start="2026-01-01T00:00:01Z"))
    for i in range(4):
        sched.on_pod(pod(f"small-{i}", cpu="1", node_name="c", start=f"2026-01-01T00:01:0{i}Z"))
    preemptors = [parse_pod(pod(f"g-{i}", cpu="4", group="g", priority=100)) for i in range(2)]
    fwk = sched.frameworks["troupe-scheduler"]
    place = fwk.handle.place
    assert place is not None
    snapshot = sched.cache.snapshot()
    units = victim_units(sched.cache, snapshot, 100)
    before = snapshot.req.copy()
    baseline = remove_all_then_reprieve(snapshot, place, preemptors, 2, units)
    ranked = search_group(snapshot, place, preemptors, 2, units, exact_units=0)  # the large-cluster path
    exact = search_group(snapshot, place, preemptors, 2, units)  # 6 units: every subset
    assert np.array_equal(snapshot.req, before)  # every trial restored the snapshot
    assert baseline is not None and ranked is not None and exact is not None
    assert sorted(p.name for p in baseline.pods) == ["big-b", "small-0", "small-1", "small-2", "small-3"]
    assert sorted(p.name for p in ranked.pods) == ["big-a", "big-b"]
    assert sorted(p.name for p in exact.pods) == ["big-a", "big-b"]


def pdb(name: str, match: dict[str, str], allowed: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-pdb-{name}"},
        "spec": {"selector": {"matchLabels": match}},
        "status": {"disruptionsAllowed": allowed},
    }


def test_a_pdb_is_honoured_where_another_choice_exists(s: Any) -> None:
    sched, rec = s
    sched.on_node(node("a", cpu="1"))
    sched.on_node(node("b", cpu="1"))
    guarded = pod("guarded", node_name="a", priority=1)
    guarded["metadata"]["labels"]["app"] = "db"
    sched.on_pod(guarded)
    sched.on_pod(pod("free", node_name="b", priority=5))  # higher priority, but no budget
    sched.on_pdb(pdb("db", {"app": "db"}, 0))
    sched.on_pod(pod("high", priority=100))
    drain(sched)
    assert list(rec.preempted) == ["free"] and rec.nominated == {"high": "b"}


def test_a_pdb_gives_way_when_nothing_else_makes_room(s: Any) -> None:
    sched, rec = s
    sched.on_node(node("a", cpu="1"))
    guarded = pod("guarded", node_name="a", priority=1)
    guarded["metadata"]["labels"]["app"] = "db"
    sched.on_pod(guarded)
    sched.on_pdb(pdb("db", {"app": "db"}, 0))
    sched.on_pod(pod("high", priority=100))
    drain(sched)
    assert list(rec.preempted) == ["guarded"]  # as upstream: violations are avoided, not forbidden


def test_preemption_metrics_have_upstream_names(s: Any) -> None:
    from prometheus_client import REGISTRY

    def sample(name: str) -> float:
        return REGISTRY.get_sample_value(name) or 0.0

    attempts, victims = sample("scheduler_preemption_attempts_total"), sample("scheduler_preemption_victims_sum")
    sched, rec = s
    sched.on_node(node("a", cpu="2"))
    sched.on_pod(pod("low-0", node_name="a"))
    sched.on_pod(pod("low-1", node_name="a"))
    sched.on_pod(pod("high", cpu="2", priority=100))
    drain(sched)
    assert sample("scheduler_preemption_attempts_total") == attempts + 1
    assert sample("scheduler_preemption_victims_sum") == victims + 2


def test_preemption_honours_topology_spread_counting_victims_as_gone(s: Any) -> None:
    # Zone z1 (node a) runs one low-priority app=x pod; z2 (node b) is full of
    # a pod that may not be preempted. The app=x preemptor (maxSkew 1 over
    # zones) fits only on a with the victim gone: counted as still there,
    # z1 would hold 2 to z2's 0 and a would be refused.
    sched, rec = s
    for name, zone in (("a", "z1"), ("b", "z2")):
        body = node(name, cpu="1")
        body["metadata"]["labels"] = {"topology.kubernetes.io/zone": zone, "kubernetes.io/hostname": name}
        sched.on_node(body)
    victim = pod("victim", priority=0, node_name="a")
    victim["metadata"]["labels"]["app"] = "x"
    sched.on_pod(victim)
    sched.on_pod(pod("keeper", priority=100, node_name="b"))
    high = pod("high", priority=10)
    high["metadata"]["labels"]["app"] = "x"
    high["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "x"}},
        }
    ]
    sched.on_pod(high)
    drain(sched)
    assert list(rec.preempted) == ["victim"] and rec.nominated == {"high": "a"}

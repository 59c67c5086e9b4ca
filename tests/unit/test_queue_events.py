"""Cluster events move only the unschedulable units they can help (upstream's
EventsToRegister / queueing hints), at the queue and through the Scheduler."""

from __future__ import annotations

import pytest

from scheduler.api.records import GroupKey
from scheduler.framework import events as E
from scheduler.queue.scheduling_queue import State, group_unit, pod_unit

from .builders import make_node, make_pod
from .test_queue import G, new_queue
from .test_runtime_scheduler import drain, node, pod, podgroup, sched  # noqa: F401 (sched: fixture)

FIT_EVENTS = frozenset({E.NODE_ADD, E.NODE_ALLOCATABLE, E.ASSIGNED_POD_DELETE})


def unschedulable_unit(q, clock, name: str = "p", wake_on=FIT_EVENTS):
    q.add(make_pod(name, labels={"scheduling.troupe.dev/pod-group": "g"}))
    popped = q.pop_nowait()
    q.done(popped.key, [], unschedulable=True, wake_on=wake_on)
    assert q.unit(popped.key).state == State.UNSCHEDULABLE
    clock.advance(60)  # past its backoff
    return popped.key


# ------------------------------------------------------------------ queue


def test_an_event_its_plugins_did_not_register_leaves_the_unit_waiting(clock):
    q, _ = new_queue(clock)
    key = unschedulable_unit(q, clock)
    assert q.move_for_event(E.NODE_LABEL) == 0
    assert q.move_for_event(E.ASSIGNED_POD_ADD) == 0
    assert q.unit(key).state == State.UNSCHEDULABLE
    assert q.pop_nowait() is None


@pytest.mark.parametrize("event", sorted(FIT_EVENTS))
def test_a_registered_event_moves_the_unit(clock, event):
    q, _ = new_queue(clock)
    key = unschedulable_unit(q, clock)
    assert q.move_for_event(event) == 1
    assert q.pop_nowait().key == key


def test_unknown_rejecting_plugins_mean_any_event_helps(clock):
    q, _ = new_queue(clock)
    key = unschedulable_unit(q, clock, wake_on=None)
    assert q.move_for_event(E.NODE_LABEL) == 1
    assert q.pop_nowait().key == key


def test_no_registered_event_waits_for_the_flush(clock):
    q, _ = new_queue(clock, max_unschedulable=300.0)
    key = unschedulable_unit(q, clock, wake_on=frozenset())
    for event in sorted(E.ALL):
        assert q.move_for_event(event) == 0
    clock.advance(300)
    assert q.pop_nowait().key == key


def test_a_unit_is_moved_once_even_if_several_of_its_events_fire(clock):
    q, _ = new_queue(clock)
    key = unschedulable_unit(q, clock)
    assert q.move_for_event(E.NODE_ADD) == 1
    assert q.pop_nowait().key == key
    q.done(key, [], unschedulable=True, wake_on=FIT_EVENTS)
    clock.advance(60)
    # The stale index entry of the first stay (under NODE_ALLOCATABLE) is not a second move.
    assert q.move_for_event(E.NODE_ALLOCATABLE) == 1
    assert q.move_for_event(E.ASSIGNED_POD_DELETE) == 0


@pytest.mark.parametrize(
    "event, after",
    [
        (E.ASSIGNED_POD_DELETE, State.BACKOFF),  # could help: retried
        (E.NODE_LABEL, State.UNSCHEDULABLE),  # unrelated: it waits
    ],
)
def test_an_event_during_the_attempt_counts_only_if_it_could_help(clock, event, after):
    q, _ = new_queue(clock)
    q.add(make_pod("p", labels={"scheduling.troupe.dev/pod-group": "g"}))
    popped = q.pop_nowait()
    q.move_for_event(event)  # while in flight
    q.done(popped.key, [], unschedulable=True, wake_on=FIT_EVENTS)
    assert q.unit(G).state == after


def test_a_deleted_unit_leaves_no_index_entries(clock):
    q, _ = new_queue(clock)
    unschedulable_unit(q, clock)
    q.delete(make_pod("p").uid)
    assert q.unit(G) is None
    assert all(G not in waiting for waiting in q._waiting_for.values())
    assert G not in q._unschedulable


# --------------------------------------------------------- event detection


def test_node_update_events():
    base = make_node("n", cpu="4", labels={"zone": "a"})
    assert E.node_update_events(base, base) == []
    assert E.node_update_events(base, make_node("n", cpu="8", labels={"zone": "a"})) == [E.NODE_ALLOCATABLE]
    assert E.node_update_events(base, make_node("n", cpu="2", labels={"zone": "a"})) == []  # shrank
    assert E.node_update_events(base, make_node("n", cpu="4", labels={"zone": "b"})) == [E.NODE_LABEL]
    assert E.node_update_events(base, make_node("n", cpu="4", labels={"zone": "a"}, unschedulable=True)) == [
        E.NODE_TAINT
    ]


def test_pod_update_events():
    pending = make_pod("p", cpu="1")
    bound = make_pod("p", cpu="1", node_name="n")
    assert E.pod_update_events(None, pending) == []
    assert E.pod_update_events(None, bound) == [E.ASSIGNED_POD_ADD]
    assert E.pod_update_events(pending, bound) == [E.ASSIGNED_POD_ADD]
    assert E.pod_update_events(bound, make_pod("p", cpu="1", node_name="n", phase="Succeeded")) == [
        E.ASSIGNED_POD_DELETE
    ]
    assert E.pod_update_events(bound, make_pod("p", cpu="1", node_name="n", labels={"a": "b"})) == [
        E.ASSIGNED_POD_LABEL
    ]
    assert E.pod_update_events(bound, make_pod("p", cpu="500m", node_name="n")) == [E.ASSIGNED_POD_SCALE_DOWN]
    assert E.pod_update_events(bound, bound) == []


# ------------------------------------------------------- through Scheduler


def selector_pod(name: str, zone: str) -> dict:
    body = pod(name)
    body["spec"]["nodeSelector"] = {"zone": zone}
    return body


def test_a_pod_rejected_by_node_affinity_is_not_retried_when_room_frees(sched, clock):
    s, rec = sched
    s.on_node(node("a", cpu="4"))
    s.on_pod(pod("running", node_name="a"))
    s.on_pod(selector_pod("picky", "b"))
    drain(s)
    key = pod_unit("uid-picky")
    assert s.queue.unit(key).state == State.UNSCHEDULABLE
    assert s.queue.unit(key).wake_on == frozenset({E.NODE_ADD, E.NODE_LABEL})
    clock.now += 60
    s.on_pod_deleted(pod("running", node_name="a"))
    assert s.queue.unit(key).state == State.UNSCHEDULABLE  # freed room cannot help it
    body = node("a", cpu="4")
    body["metadata"]["labels"] = {"zone": "b"}
    s.on_node(body)  # now it matches
    assert s.queue.unit(key).state == State.ACTIVE
    drain(s)
    assert rec.binds == [("picky", "a")]


def test_a_gang_short_of_cpu_is_retried_when_room_frees_not_on_label_changes(sched, clock):
    s, rec = sched
    s.on_node(node("a", cpu="2"))
    s.on_pod(pod("running", cpu="2", node_name="a"))
    s.on_podgroup(podgroup("g", 2))
    s.on_pod(pod("g-0", "g"))
    s.on_pod(pod("g-1", "g"))
    drain(s)
    key = group_unit(GroupKey("ns", "g"))
    unit = s.queue.unit(key)
    assert unit.state == State.UNSCHEDULABLE
    assert E.ASSIGNED_POD_DELETE in unit.wake_on and E.NODE_LABEL not in unit.wake_on
    clock.now += 60
    labelled = node("a", cpu="2")
    labelled["metadata"]["labels"] = {"team": "x"}
    s.on_node(labelled)
    assert s.queue.unit(key).state == State.UNSCHEDULABLE
    s.on_pod({**pod("running", cpu="2", node_name="a"), "status": {"phase": "Succeeded"}})
    assert s.queue.unit(key).state == State.ACTIVE
    drain(s)
    assert sorted(n for n, _ in rec.binds) == ["g-0", "g-1"]


def test_a_failed_bind_frees_room_for_units_waiting_on_it(sched, clock):
    s, rec = sched
    s.on_node(node("a", cpu="1"))
    s.on_pod(pod("first"))
    drain(s)
    s.on_pod(pod("second"))
    drain(s)
    assert rec.binds == [("first", "a")]
    clock.now += 60
    first = s.cache.pods["uid-first"]
    s.on_bind_failed(first, "a", "Binding rejected: 500")
    assert s.queue.unit(pod_unit("uid-second")).state == State.ACTIVE


def test_moves_are_counted_per_event(sched, clock):
    from prometheus_client import REGISTRY

    def moved(event: str) -> float:
        return REGISTRY.get_sample_value("troupe_queue_moved_units_total", {"event": event}) or 0.0

    s, _ = sched
    s.on_node(node("a", cpu="1"))
    s.on_pod(pod("big", cpu="2"))
    drain(s)
    before_add, before_label = moved(E.NODE_ADD), moved(E.NODE_LABEL)
    clock.now += 60
    labelled = node("a", cpu="1")
    labelled["metadata"]["labels"] = {"x": "y"}
    s.on_node(labelled)
    s.on_node(node("b", cpu="4"))
    assert moved(E.NODE_LABEL) == before_label
    assert moved(E.NODE_ADD) == before_add + 1

"""SchedulingQueue with an injected fake clock (no sleeps)."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.api.records import GroupKey
from scheduler.framework.events import NODE_ADD
from scheduler.queue.scheduling_queue import SchedulingQueue, State, group_unit, pod_unit, unit_of

from .builders import make_pod
from .conftest import FakeClock


class Gate:
    """Gate callable: units listed in `closed` wait with a message."""

    def __init__(self) -> None:
        self.closed: dict[tuple, str] = {}
        self.calls: list[tuple] = []

    def __call__(self, key, pods):
        self.calls.append((key, tuple(sorted(p.uid for p in pods))))
        return self.closed.get(key)


def new_queue(clock: FakeClock, gate: Gate | None = None, **kw) -> tuple[SchedulingQueue, Gate]:
    gate = gate or Gate()
    kw.setdefault("initial_backoff", 1.0)
    kw.setdefault("max_backoff", 10.0)
    kw.setdefault("max_unschedulable", 300.0)
    return SchedulingQueue(gate, clock=clock, **kw), gate


def names(popped) -> list[str]:
    return sorted(p.name for p in popped.pods)


def drain(q: SchedulingQueue) -> list:
    out = []
    while (p := q.pop_nowait()) is not None:
        out.append(p)
    return out


G = group_unit(GroupKey("default", "g"))


# ------------------------------------------------------------------ order


def test_priority_then_first_seen(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("low-early", priority=0))
    clock.advance(1)
    q.add(make_pod("high", priority=10))
    clock.advance(1)
    q.add(make_pod("low-late", priority=0))
    clock.advance(1)
    q.add(make_pod("mid", priority=5))
    order = [names(p)[0] for p in drain(q)]
    assert order == ["high", "mid", "low-early", "low-late"]


def test_group_pods_form_one_unit_with_max_priority_and_min_first_seen(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("solo", priority=5))
    clock.advance(1)
    q.add(make_pod("a", group="g", priority=0))
    clock.advance(1)
    q.add(make_pod("b", group="g", priority=7))
    unit = q.unit(G)
    assert unit.priority == 7 and unit.first_seen == 1001.0
    popped = q.pop_nowait()
    assert popped.key == G and names(popped) == ["a", "b"]
    assert popped.first_seen == {"uid-default-a": 1001.0, "uid-default-b": 1002.0}
    assert popped.attempts == 1
    assert names(q.pop_nowait()) == ["solo"]
    assert q.pop_nowait() is None


def test_unit_keys():
    assert unit_of(make_pod("p")) == pod_unit("uid-default-p")
    assert unit_of(make_pod("p", group="g", namespace="ns")) == group_unit(GroupKey("ns", "g"))


def test_add_is_idempotent(clock):
    q, _ = new_queue(clock)
    pod = make_pod("p")
    q.add(pod)
    clock.advance(5)
    q.add(pod)
    assert len(q) == 1
    popped = q.pop_nowait()
    assert popped.first_seen == {pod.uid: 1000.0}
    assert q.pop_nowait() is None


def test_priority_update_reorders_active_units(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("a", priority=1))
    clock.advance(1)
    q.add(make_pod("b", priority=0))
    q.add(make_pod("b", priority=9))
    assert [names(p)[0] for p in drain(q)] == ["b", "a"]


def test_counts_and_len(clock):
    q, gate = new_queue(clock)
    gate.closed[G] = "wait"
    q.add(make_pod("a", group="g"))
    q.add(make_pod("b", group="g"))
    q.add(make_pod("c"))
    assert len(q) == 3 and "uid-default-a" in q and "nope" not in q
    assert q.counts() == {"gated": 2, "active": 1, "backoff": 0, "unschedulable": 0, "in-flight": 0}
    q.pop_nowait()
    assert q.counts()["in-flight"] == 1 and q.counts()["active"] == 0


# ----------------------------------------------------------------- gating


def test_gated_unit_waits_until_activated(clock):
    q, gate = new_queue(clock)
    gate.closed[G] = "waiting for PodGroup default/g to be created"
    q.add(make_pod("a", group="g"))
    assert q.unit(G).state == State.GATED
    assert q.pop_nowait() is None
    del gate.closed[G]
    assert q.pop_nowait() is None  # nothing re-runs the gate by itself
    q.activate(G)
    assert q.unit(G).state == State.ACTIVE
    assert names(q.pop_nowait()) == ["a"]


def test_new_pods_re_run_the_gate(clock):
    q, gate = new_queue(clock)
    gate.closed[G] = "minCount is 2, 1 exist"
    q.add(make_pod("a", group="g"))
    del gate.closed[G]
    q.add(make_pod("b", group="g"))
    assert gate.calls[-1] == (G, ("uid-default-a", "uid-default-b"))
    assert names(q.pop_nowait()) == ["a", "b"]


def test_deleting_a_pod_of_a_gated_unit_re_runs_the_gate(clock):
    q, gate = new_queue(clock)
    gate.closed[G] = "blocked by b"
    q.add(make_pod("a", group="g"))
    q.add(make_pod("b", group="g"))
    del gate.closed[G]
    q.delete("uid-default-b")
    assert names(q.pop_nowait()) == ["a"]


@pytest.mark.parametrize("state", ["active", "backoff", "unschedulable"])
def test_regate(clock, state):
    q, gate = new_queue(clock)
    q.add(make_pod("a", group="g"))
    if state != "active":
        q.pop_nowait()
        q.done(G, [], unschedulable=True, error=state == "backoff")
    gate.closed[G] = "PodGroup deleted"
    q.regate(G)
    assert q.unit(G).state == State.GATED
    clock.advance(1000)
    assert q.pop_nowait() is None
    q.move_for_event(NODE_ADD)
    assert q.pop_nowait() is None
    del gate.closed[G]
    q.activate(G)
    assert names(q.pop_nowait()) == ["a"]


def test_regate_with_open_gate_changes_nothing(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("a", group="g"))
    q.regate(G)
    assert q.unit(G).state == State.ACTIVE
    assert names(q.pop_nowait()) == ["a"]


def test_regate_while_in_flight_applies_after_the_attempt(clock):
    q, gate = new_queue(clock)
    q.add(make_pod("a", group="g"))
    q.pop_nowait()
    gate.closed[G] = "gone"
    q.regate(G)
    q.done(G, [], unschedulable=True)
    assert q.unit(G).state == State.GATED


def test_activate_unknown_unit_is_harmless(clock):
    q, _ = new_queue(clock)
    q.activate(G)
    q.regate(G)
    q.done(G, [], unschedulable=True)
    assert len(q) == 0


# ---------------------------------------------------------------- backoff


def test_backoff_doubles_from_initial_to_max(clock):
    q, _ = new_queue(clock, initial_backoff=1.0, max_backoff=10.0)
    q.add(make_pod("p"))
    key = pod_unit("uid-default-p")
    waits = []
    for attempt in range(1, 8):
        popped = q.pop_nowait()
        assert popped is not None and popped.attempts == attempt
        q.done(key, [], unschedulable=True, error=True)
        assert q.unit(key).state == State.BACKOFF
        start = clock.now
        # not before the backoff ends ...
        deadline = q.unit(key).backoff_until
        waits.append(deadline - start)
        clock.now = deadline - 0.01
        assert q.pop_nowait() is None
        clock.now = deadline
    assert waits == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    assert q.pop_nowait() is not None


def test_backoff_configurable(clock):
    q, _ = new_queue(clock, initial_backoff=0.5, max_backoff=1.5)
    assert [q._backoff_duration(a) for a in range(1, 5)] == [0.5, 1.0, 1.5, 1.5]


def test_activate_during_backoff_keeps_waiting(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("a", group="g"))
    q.pop_nowait()
    q.done(G, [], unschedulable=True, error=True)
    q.activate(G)
    q.move_for_event(NODE_ADD)
    assert q.pop_nowait() is None
    clock.advance(1)
    assert names(q.pop_nowait()) == ["a"]


def test_backoff_of_a_recreated_unit_is_its_own(clock):
    """A group's unit is deleted (its only pod went away while backing off) and
    created again by a new pod of the same group: the new unit's backoff must
    not end when the *old* unit's backoff entry expires."""
    q, _ = new_queue(clock, initial_backoff=1.0)
    q.add(make_pod("a", group="g"))
    q.pop_nowait()
    q.done(G, [], unschedulable=True, error=True)  # old unit backs off until 1001.0
    q.delete("uid-default-a")
    assert q.unit(G) is None
    clock.advance(0.5)
    q.add(make_pod("b", group="g"))
    assert names(q.pop_nowait()) == ["b"]
    q.done(G, [], unschedulable=True, error=True)  # new unit backs off until 1001.5
    assert q.unit(G).backoff_until == 1001.5
    clock.now = 1001.0
    assert q.pop_nowait() is None
    clock.now = 1001.5
    assert names(q.pop_nowait()) == ["b"]


# ----------------------------------------------------- unschedulable pool


def test_unschedulable_waits_for_an_event(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("a", group="g"))
    q.pop_nowait()
    q.done(G, [], unschedulable=True)
    assert q.unit(G).state == State.UNSCHEDULABLE
    clock.advance(60)
    assert q.pop_nowait() is None  # backoff is long over, but nothing changed
    assert q.move_for_event(NODE_ADD) == 1
    assert q.unit(G).state == State.ACTIVE
    assert names(q.pop_nowait()) == ["a"]


def test_an_event_respects_backoff(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("a", group="g"))
    q.pop_nowait()
    q.done(G, [], unschedulable=True)
    clock.advance(0.5)
    q.move_for_event(NODE_ADD)
    assert q.unit(G).state == State.BACKOFF
    assert q.pop_nowait() is None
    clock.advance(0.5)
    assert names(q.pop_nowait()) == ["a"]


def test_an_event_counts_only_unschedulable_units(clock):
    q, gate = new_queue(clock)
    gate.closed[group_unit(GroupKey("default", "gated"))] = "w"
    q.add(make_pod("x", group="gated"))
    q.add(make_pod("y", group="active"))
    for name in ("u1", "u2"):
        q.add(make_pod(name, group=name))
    popped = drain(q)
    for p in popped:
        if p.key != group_unit(GroupKey("default", "active")):
            q.done(p.key, [], unschedulable=True)
    q.add(make_pod("z", group="active2"))
    assert q.move_for_event(NODE_ADD) == 2


def test_periodic_flush_after_max_unschedulable(clock):
    q, _ = new_queue(clock, max_unschedulable=300.0)
    q.add(make_pod("a", group="g"))
    q.pop_nowait()
    q.done(G, [], unschedulable=True)
    clock.advance(299.9)
    assert q.pop_nowait() is None
    assert q._next_deadline() == pytest.approx(1300.0)
    clock.advance(0.1)
    popped = q.pop_nowait()
    assert popped is not None and names(popped) == ["a"] and popped.attempts == 2


def test_retry_within_brings_an_unschedulable_unit_back_without_any_event(clock):
    # A PostFilter that will answer otherwise later (Reservation, once the
    # group has starved) asks for a retry by then; backoff still applies.
    q, _ = new_queue(clock, max_unschedulable=300.0)
    q.add(make_pod("a", group="g"))
    q.pop_nowait()
    q.done(G, [], unschedulable=True, retry_within=5.0)
    clock.advance(4.9)
    assert q.pop_nowait() is None
    clock.advance(0.1)
    popped = q.pop_nowait()
    assert popped is not None and names(popped) == ["a"]
    q.done(G, [], unschedulable=True)  # no hint this time: the periodic flush only
    clock.advance(299.0)
    assert q.pop_nowait() is None


def test_new_pod_wakes_an_unschedulable_unit(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("a", group="g"))
    q.pop_nowait()
    q.done(G, [], unschedulable=True)
    clock.advance(2)
    q.add(make_pod("b", group="g"))
    assert names(q.pop_nowait()) == ["a", "b"]


# -------------------------------------------------------------- in flight


def test_pods_arriving_in_flight_join_the_next_attempt(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("a", group="g"))
    first = q.pop_nowait()
    assert names(first) == ["a"]
    clock.advance(3)
    q.add(make_pod("b", group="g"))
    assert q.unit(G).state == State.IN_FLIGHT
    assert q.pop_nowait() is None  # one attempt at a time
    q.done(G, [], unschedulable=True)
    # Something changed while in flight: not parked, retried after its backoff.
    assert q.unit(G).state == State.BACKOFF
    clock.advance(1)
    second = q.pop_nowait()
    assert names(second) == ["a", "b"]
    assert second.first_seen == {"uid-default-a": 1000.0, "uid-default-b": 1003.0}
    assert second.attempts == 2


def test_pods_arriving_in_flight_after_success_are_tried_at_once(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("a", group="g"))
    q.pop_nowait()
    q.add(make_pod("b", group="g"))
    q.done(G, ["uid-default-a"], unschedulable=False)
    assert "uid-default-a" not in q and len(q) == 1
    popped = q.pop_nowait()
    assert names(popped) == ["b"]


def test_event_while_in_flight_is_remembered(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("a", group="g"))
    q.pop_nowait()
    q.move_for_event(NODE_ADD)
    q.done(G, [], unschedulable=True)
    assert q.unit(G).state == State.BACKOFF


def test_activate_while_in_flight_marks_dirty(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("a", group="g"))
    q.pop_nowait()
    q.activate(G)
    q.done(G, [], unschedulable=True)
    assert q.unit(G).state == State.BACKOFF


def test_done_with_all_pods_placed_removes_the_unit(clock):
    q, _ = new_queue(clock)
    for n in "abc":
        q.add(make_pod(n, group="g"))
    popped = q.pop_nowait()
    q.done(G, [p.uid for p in popped.pods], unschedulable=False)
    assert q.unit(G) is None and len(q) == 0


def test_done_with_some_placed_parks_the_rest(clock):
    q, _ = new_queue(clock)
    for n in "abc":
        q.add(make_pod(n, group="g"))
    q.pop_nowait()
    q.done(G, ["uid-default-a", "uid-default-b"], unschedulable=True)
    assert len(q) == 1 and "uid-default-c" in q
    assert q.unit(G).state == State.UNSCHEDULABLE
    q.move_for_event(NODE_ADD)
    clock.advance(1)
    assert names(q.pop_nowait()) == ["c"]


def test_success_with_leftovers_waits_for_an_event(clock):
    # A gang met minCount; its extra pods that did not fit wait for capacity.
    q, _ = new_queue(clock)
    for n in "abc":
        q.add(make_pod(n, group="g"))
    q.pop_nowait()
    q.done(G, ["uid-default-a", "uid-default-b"], unschedulable=False)
    assert q.unit(G).state == State.UNSCHEDULABLE
    assert q.pop_nowait() is None


def test_delete_while_in_flight(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("a", group="g"))
    q.add(make_pod("b", group="g"))
    q.pop_nowait()
    q.delete("uid-default-a")
    assert "uid-default-a" not in q
    q.done(G, [], unschedulable=True)
    q.move_for_event(NODE_ADD)
    clock.advance(1)
    assert names(q.pop_nowait()) == ["b"]


def test_delete_all_pods_while_in_flight_then_done(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("a", group="g"))
    q.pop_nowait()
    q.delete("uid-default-a")
    assert q.unit(G) is not None  # kept until the attempt ends
    q.done(G, ["uid-default-a"], unschedulable=False)
    assert q.unit(G) is None and len(q) == 0


def test_delete_then_re_add_while_in_flight(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("a", group="g"))
    q.pop_nowait()
    q.delete("uid-default-a")
    q.add(make_pod("c", group="g"))
    q.done(G, [], unschedulable=True)
    clock.advance(1)
    assert names(q.pop_nowait()) == ["c"]


def test_group_label_change_moves_the_pod(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("a", group="g"))
    q.add(make_pod("a", group="h"))
    assert q.unit(G) is None
    popped = q.pop_nowait()
    assert popped.key == group_unit(GroupKey("default", "h")) and names(popped) == ["a"]


def test_delete_unknown_pod_is_harmless(clock):
    q, _ = new_queue(clock)
    q.delete("nope")
    assert len(q) == 0


# ---------------------------------------------------------------- requeue


def test_requeue_after_failed_bind_backs_off(clock):
    q, _ = new_queue(clock)
    pod = make_pod("a", group="g")
    q.add(pod)
    q.pop_nowait()
    q.done(G, [pod.uid], unschedulable=False)
    assert len(q) == 0
    q.requeue(pod)
    assert pod.uid in q
    assert q.unit(G).state == State.BACKOFF
    assert q.pop_nowait() is None
    clock.advance(1)
    assert names(q.pop_nowait()) == ["a"]


def test_requeue_without_backoff(clock):
    q, _ = new_queue(clock)
    pod = make_pod("a")
    q.requeue(pod, backoff=False)
    assert names(q.pop_nowait()) == ["a"]


# ----------------------------------------------------------------- asyncio


async def test_pop_waits_for_an_add(clock):
    q, _ = new_queue(clock)
    task = asyncio.create_task(q.pop())
    await asyncio.sleep(0)  # let the task block on the queue (not a timing sleep)
    assert not task.done()
    q.add(make_pod("a"))
    popped = await asyncio.wait_for(task, 5)
    assert names(popped) == ["a"]


async def test_pop_returns_at_once_when_active(clock):
    q, _ = new_queue(clock)
    q.add(make_pod("a"))
    popped = await asyncio.wait_for(q.pop(), 5)
    assert names(popped) == ["a"]


# ------------------------------------------------------- nothing is lost

POD_IDS = list(range(6))
GROUPS = [None, "g", "h"]


def _check_invariants(q: SchedulingQueue, expected: set[str], in_flight: dict):
    # every pod we expect is in exactly one unit, and no other pod is there
    seen: dict[str, tuple] = {}
    for unit in q.units():
        for uid in unit.pods:
            assert uid not in seen, f"{uid} in two units"
            seen[uid] = unit.key
    assert set(seen) == expected
    assert set(q._unit_of_pod) == expected
    for uid, key in seen.items():
        assert q._unit_of_pod[uid] == key
    # every unit is somewhere it will come out of
    active = {(k, v) for *_, k, v in q._active}
    backoff = {(k, v) for _, _, k, v in q._backoff}
    for unit in q.units():
        if unit.state == State.ACTIVE:
            assert (unit.key, unit.heap_version) in active
        elif unit.state == State.BACKOFF:
            assert (unit.key, unit.heap_version) in backoff
        elif unit.state == State.IN_FLIGHT:
            assert unit.key in in_flight
        elif unit.state == State.UNSCHEDULABLE:
            pass  # periodic flush or an event
        elif unit.state == State.GATED:
            pass  # until the gate is run again (activate, regate)
        assert unit.pods or unit.state == State.IN_FLIGHT


@st.composite
def queue_ops(draw):
    op = st.one_of(
        st.tuples(st.just("add"), st.sampled_from(POD_IDS), st.sampled_from(GROUPS), st.integers(0, 2)),
        st.tuples(st.just("delete"), st.sampled_from(POD_IDS)),
        st.tuples(st.just("pop")),
        st.tuples(st.just("done"), st.integers(0, 63), st.booleans(), st.booleans()),
        st.tuples(st.just("move")),
        st.tuples(st.just("tick"), st.sampled_from([0.0, 0.5, 1.0, 3.0, 11.0, 400.0])),
        st.tuples(st.just("close"), st.sampled_from(["g", "h"])),
        st.tuples(st.just("open"), st.sampled_from(["g", "h"])),
        st.tuples(st.just("requeue"), st.sampled_from(POD_IDS)),
    )
    return draw(st.lists(op, max_size=60))


@settings(max_examples=500, deadline=None)
@given(queue_ops())
def test_nothing_is_ever_lost(operations):
    clock = FakeClock()
    q, gate = new_queue(clock, max_unschedulable=300.0)
    pods: dict[str, object] = {}  # uid -> PodInfo currently pending (added, not deleted, not placed)
    placed: dict[str, object] = {}  # uid -> PodInfo bound (may come back through requeue)
    in_flight: dict = {}  # unit key -> uids handed out
    for op in operations:
        kind = op[0]
        if kind == "add":
            _, i, group, prio = op
            pod = make_pod(f"p{i}", group=group, priority=prio)
            q.add(pod)
            pods[pod.uid] = pod
            placed.pop(pod.uid, None)
        elif kind == "delete":
            uid = f"uid-default-p{op[1]}"
            q.delete(uid)
            pods.pop(uid, None)
            placed.pop(uid, None)
        elif kind == "pop":
            popped = q.pop_nowait()
            if popped is not None:
                assert popped.key not in in_flight
                assert {p.uid for p in popped.pods} <= set(pods)
                assert popped.pods, "an empty unit was handed out"
                in_flight[popped.key] = [p.uid for p in popped.pods]
        elif kind == "done" and in_flight:
            _, mask, unschedulable, error = op
            key = sorted(in_flight)[0]
            uids = in_flight.pop(key)
            chosen = [u for j, u in enumerate(uids) if mask >> j & 1 and u in pods] if not error else []
            q.done(key, chosen, unschedulable=unschedulable, error=error)
            for u in chosen:
                placed[u] = pods.pop(u)
        elif kind == "move":
            q.move_for_event(NODE_ADD)
        elif kind == "tick":
            clock.advance(op[1])
        elif kind == "close":
            key = group_unit(GroupKey("default", op[1]))
            gate.closed[key] = "closed"
            q.regate(key)
        elif kind == "open":
            key = group_unit(GroupKey("default", op[1]))
            gate.closed.pop(key, None)
            q.activate(key)
        elif kind == "requeue":
            uid = f"uid-default-p{op[1]}"
            if uid in placed:
                pod = placed.pop(uid)
                q.requeue(pod)
                pods[uid] = pod
        _check_invariants(q, set(pods), in_flight)

    # Liveness: with gates open and time passing, every pending pod comes out.
    for key in list(in_flight):
        q.done(key, [], unschedulable=True)
    in_flight.clear()
    gate.closed.clear()
    for unit in list(q.units()):
        q.activate(unit.key)
    clock.advance(1000)
    out: set[str] = set()
    for _ in range(50):
        popped = q.pop_nowait()
        if popped is None:
            break
        uids = [p.uid for p in popped.pods]
        out |= set(uids)
        q.done(popped.key, uids, unschedulable=False)
    assert out == set(pods)
    assert len(q) == 0


# ------------------------------------------------------------- pod updates


def test_spec_update_of_an_unschedulable_pod_retries_it(clock):
    """Upstream PriorityQueue.Update moves a pod out of the unschedulable pool when
    the update changes what scheduling reads (isPodUpdated: anything beyond
    status / resourceVersion / managed fields), e.g. a toleration added."""
    q, _ = new_queue(clock)
    q.add(make_pod("a", "1"))
    key = pod_unit("uid-default-a")
    q.pop_nowait()
    q.done(key, [], unschedulable=True)
    clock.advance(2)
    q.add(make_pod("a", "1", tolerations=[{"key": "gpu", "operator": "Exists"}], resource_version="2"))
    assert q.unit(key).state != State.UNSCHEDULABLE
    assert names(q.pop_nowait()) == ["a"]


def test_status_only_update_of_an_unschedulable_pod_keeps_it_parked(clock):
    # troupe's own PodScheduled=False write comes back as an update: no retry loop.
    q, _ = new_queue(clock)
    q.add(make_pod("a", "1"))
    key = pod_unit("uid-default-a")
    q.pop_nowait()
    q.done(key, [], unschedulable=True)
    clock.advance(2)
    q.add(make_pod("a", "1", resource_version="7"))
    assert q.unit(key).state == State.UNSCHEDULABLE
    assert q.pop_nowait() is None

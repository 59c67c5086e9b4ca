"""Reservation (PostFilter) in the scheduler's own cycle: a unit that starves
gets room held until running pods finish; small pods stay off it unless
they end before it frees (backfill) or fit beside it; reservations are kept,
chosen again, given up and rebuilt as the cluster changes."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import REGISTRY

from scheduler.api.config import SchedulerConfiguration
from scheduler.core.scheduler import Scheduler
from scheduler.plugins import in_tree_registry
from scheduler.plugins.reservation import Reservation

from .test_preemption import NS, gang, pod
from .test_runtime_scheduler import Recorder, drain, node

WALL = 2_000_000_000.0  # the fake wall clock: 2033-05-18T03:33:20Z
STARVE = 60.0


def config(**args: Any) -> SchedulerConfiguration:
    if not args:
        return SchedulerConfiguration()
    return SchedulerConfiguration.model_validate(
        {"profiles": [{"schedulerName": "troupe-scheduler", "pluginConfig": [{"name": "Reservation", "args": args}]}]}
    )


def make(clock: Any, start: bool = True, **args: Any) -> tuple[Scheduler, Recorder]:
    """A scheduler; `start=False`: still listing (call `start_scheduling()` when the listing is in)."""
    rec = Recorder()
    sched = Scheduler(config(**args), in_tree_registry(), binder=rec, writer=rec, clock=clock, report_delay=0)
    sched.wall = lambda: WALL + clock.now
    reservation(sched).wall = sched.wall
    if start:
        sched.start_scheduling()
    return sched, rec


def reservation(sched: Scheduler) -> Reservation:
    p = sched.frameworks["troupe-scheduler"].plugins["Reservation"]
    assert isinstance(p, Reservation)
    return p


@pytest.fixture
def s(clock: Any) -> tuple[Scheduler, Recorder]:
    return make(clock)


def running(name: str, node_name: str, cpu: str = "1", deadline: int | None = None, started: float = 0.0) -> dict:
    """A pod running on `node_name`; with a deadline, started `started` seconds after the clock's start."""
    body = pod(name, cpu=cpu, node_name=node_name, priority=0)
    body["status"] = {"phase": "Running"}
    if deadline is not None:
        body["spec"]["activeDeadlineSeconds"] = deadline
        from datetime import UTC, datetime

        body["status"]["startTime"] = datetime.fromtimestamp(WALL + 1000 + started, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return body


def small(name: str, deadline: int | None = None, priority: int = 0) -> dict:
    body = pod(name, cpu="1", priority=priority)
    if deadline is not None:
        body["spec"]["activeDeadlineSeconds"] = deadline
    return body


def delete(sched: Scheduler, name: str) -> None:
    sched.on_pod_deleted({"metadata": {"namespace": NS, "name": name, "uid": f"uid-{name}"}})


def busy_cluster(sched: Scheduler, **kw: Any) -> None:
    """Two 4-CPU nodes, each running three 1-CPU pods; a gang of two 4-CPU pods."""
    sched.on_node(node("a", cpu="4"))
    sched.on_node(node("b", cpu="4"))
    for n in "ab":
        for i in range(3):
            sched.on_pod(running(f"{n}{i}", n, **kw))
    sched.on_podgroup(gang("big", 2))
    for i in range(2):
        sched.on_pod(pod(f"big-{i}", cpu="4", group="big"))


def starve(sched: Scheduler, clock: Any, seconds: float = STARVE + 1) -> None:
    clock.now += seconds
    sched.queue.activate(next(u.key for u in sched.queue.units() if u.key.group_key is not None))
    drain(sched)


def held_nodes(sched: Scheduler) -> dict[str, str]:
    return {pod.name: node for node, pod in sched.nominated.values()}


# --------------------------------------------------------------- reserving


def test_a_starving_gang_gets_room_and_small_pods_stay_off_it(s: Any, clock: Any) -> None:
    sched, rec = s
    busy_cluster(sched)
    drain(sched)
    assert held_nodes(sched) == {}  # not starving yet: waiting is normal
    assert "reserved" not in rec.pods["big-0"]

    starve(sched, clock)
    assert held_nodes(sched) == {"big-0": "a", "big-1": "b"} or held_nodes(sched) == {"big-0": "b", "big-1": "a"}
    assert REGISTRY.get_sample_value("troupe_reserved_pods") == 2  # read when scraped
    assert REGISTRY.get_sample_value("troupe_reserved_room", {"resource": "cpu"}) == 8
    assert "reserved node(s) a, b for 2 pod(s); waiting for 6 running pod(s) to finish" in rec.pods["big-0"]
    assert [e for e in rec.events if e[1] == "Reserved"] == [
        ("big", "Reserved", "reserved node(s) a, b for 2 pod(s); waiting for 6 running pod(s) to finish")
    ]

    # A pod finishes; the next small pod of the stream does not take its room.
    delete(sched, "a0")
    sched.on_pod(small("next"))
    drain(sched)
    assert ("next", "a") not in rec.binds and ("next", "b") not in rec.binds
    assert not any(name.startswith("big") for name, _ in rec.binds)

    for name in ("a1", "a2", "b0", "b1", "b2"):
        delete(sched, name)
    clock.now += 20  # past the gang's backoff
    drain(sched)
    assert sorted(rec.binds) == [("big-0", "a"), ("big-1", "b")] or sorted(rec.binds) == [
        ("big-0", "b"),
        ("big-1", "a"),
    ]
    assert sched.nominated == {} and sched.reserved == {}
    assert REGISTRY.get_sample_value("troupe_reserved_pods") == 0  # no cycle needed to say so
    assert REGISTRY.get_sample_value("troupe_reservation_oldest_age_seconds") == 0


def test_a_gang_is_tried_again_when_it_has_starved_even_if_nothing_changes(s: Any, clock: Any) -> None:
    # Running pods that never end send no event: the queue must still bring
    # the gang back once it has waited starvationSeconds, not after the
    # five-minute flush.
    sched, rec = s
    busy_cluster(sched)
    drain(sched)
    assert held_nodes(sched) == {}
    clock.now += STARVE + 10  # past starvationSeconds and the gang's backoff, no event
    drain(sched)
    assert sorted(held_nodes(sched)) == ["big-0", "big-1"]
    assert "reserved node(s) a, b for 2 pod(s)" in rec.pods["big-0"]


def test_starvation_seconds_zero_turns_reservations_off(clock: Any) -> None:
    sched, rec = make(clock, starvationSeconds=0)
    busy_cluster(sched)
    drain(sched)
    starve(sched, clock, 10_000)
    assert held_nodes(sched) == {}
    delete(sched, "a0")
    sched.on_pod(small("next"))
    drain(sched)
    assert ("next", "a") in rec.binds  # the stream takes the room, as before


def test_the_fewest_pods_in_the_way_and_those_ending_first_are_chosen(s: Any, clock: Any) -> None:
    """Four nodes: a gang of one 4-CPU pod goes where it waits the least."""
    sched, rec = s
    for n in "abcd":
        sched.on_node(node(n, cpu="4"))
    for i in range(3):
        sched.on_pod(running(f"a{i}", "a"))  # 3 pods that may never end
    sched.on_pod(running("b0", "b"))
    sched.on_pod(running("b1", "b"))  # 2 that may never end
    sched.on_pod(running("c0", "c", cpu="2", deadline=600))
    sched.on_pod(running("c1", "c", cpu="2", deadline=900))  # 2 that end within 900 s
    sched.on_pod(running("d0", "d", cpu="4", deadline=300))  # 1 that ends within 300 s
    sched.on_podgroup(gang("one", 1))
    sched.on_pod(pod("one-0", cpu="4", group="one"))
    drain(sched)
    starve(sched, clock)
    assert held_nodes(sched) == {"one-0": "d"}
    assert "waiting for 1 running pod(s) to finish (all by their activeDeadlineSeconds, in 239s)" in rec.pods["one-0"]
    assert sched.reserved["uid-one-0"][0] == WALL + 1000 + 300


def test_only_the_pods_in_the_way_are_waited_for(s: Any, clock: Any) -> None:
    """A 3-CPU pod on a 4-CPU node with two 1-CPU pods: one of them is enough."""
    sched, rec = s
    sched.on_node(node("a", cpu="4"))
    sched.on_pod(running("short", "a", deadline=100))
    sched.on_pod(running("long", "a"))
    sched.on_pod(running("filler", "a", cpu="1"))
    sched.on_podgroup(gang("g", 1))
    sched.on_pod(pod("g-0", cpu="3", group="g"))
    drain(sched)
    starve(sched, clock)
    assert "waiting for 2 running pod(s) to finish" in rec.pods["g-0"], rec.pods["g-0"]
    # Two of the three must go for 3 CPU; the one kept is one with no end.


def test_a_gang_part_of_which_fits_now_reserves_that_room_too(s: Any, clock: Any) -> None:
    """One node is empty, the other busy: the gang's cycle places one pod and
    fails; PostFilter must see that pod's room as free (it places it again)."""
    sched, rec = s
    sched.on_node(node("a", cpu="4"))
    sched.on_node(node("b", cpu="4"))
    sched.on_pod(running("b0", "b"))
    sched.on_pod(running("b1", "b"))
    sched.on_podgroup(gang("big", 2))
    for i in range(2):
        sched.on_pod(pod(f"big-{i}", cpu="4", group="big"))
    drain(sched)
    assert "needs 2 pods, 1 fit" in rec.pods["big-0"]
    starve(sched, clock)
    assert set(held_nodes(sched).values()) == {"a", "b"}, rec.pods["big-0"]
    assert "waiting for 2 running pod(s) to finish" in rec.pods["big-0"]


# ---------------------------------------------------------------- backfill


def test_backfill_beside_the_reserved_room(s: Any, clock: Any) -> None:
    sched, rec = s
    busy_cluster(sched)
    sched.on_node(node("c", cpu="2"))
    sched.on_pod(running("c0", "c"))
    sched.on_pod(running("c1", "c"))
    drain(sched)
    starve(sched, clock)
    assert set(held_nodes(sched).values()) == {"a", "b"}
    delete(sched, "c0")
    sched.on_pod(small("beside"))
    drain(sched)
    assert ("beside", "c") in rec.binds


def test_backfill_onto_reserved_room_only_what_ends_before_it_frees(clock: Any) -> None:
    sched, rec = make(clock)
    busy_cluster(sched, deadline=1000)  # everything in the way ends 1000 s after the clock's start
    drain(sched)
    starve(sched, clock)  # now = 1061: the room frees in ~939 s
    assert set(held_nodes(sched).values()) == {"a", "b"}
    delete(sched, "a0")
    sched.on_pod(small("too-long", deadline=2000))
    sched.on_pod(small("no-deadline"))
    drain(sched)
    assert not any(n in ("too-long", "no-deadline") for n, _ in rec.binds)
    sched.on_pod(small("quick", deadline=60))
    drain(sched)
    assert ("quick", "a") in rec.binds


# ------------------------------------------------------------ not rotting


def test_a_higher_priority_gang_takes_reserved_room_and_the_reservation_moves(s: Any, clock: Any) -> None:
    sched, rec = s
    busy_cluster(sched, deadline=8000)
    sched.on_node(node("c", cpu="4"))
    sched.on_node(node("d", cpu="4"))
    for n in "cd":
        for i in range(4):
            sched.on_pod(running(f"{n}{i}", n, deadline=5000))  # these end first: c, d reserved
    drain(sched)
    starve(sched, clock)
    first = set(held_nodes(sched).values())
    assert len(first) == 2
    # The pods on the reserved nodes finish; a higher-priority gang arrives first.
    for n in sorted(first):
        for i in range(4):
            delete(sched, f"{n}{i}")
    sched.on_podgroup(gang("vip", 2, priority=1000))
    for i in range(2):
        sched.on_pod(pod(f"vip-{i}", cpu="4", group="vip", priority=1000))
    drain(sched)  # vip first (priority)
    assert {n for name, n in rec.binds if name.startswith("vip")} == first
    clock.now += 20  # big, woken by the deletions, past its backoff
    drain(sched)
    second = set(held_nodes(sched).values())
    assert second and not (second & first), (first, second)


def test_a_reservation_that_waits_too_long_is_chosen_again_elsewhere(clock: Any) -> None:
    sched, rec = make(clock, maxReservationSeconds=300)
    sched.on_node(node("a", cpu="4"))
    sched.on_node(node("b", cpu="4"))
    sched.on_pod(running("a0", "a"))
    sched.on_pod(running("b0", "b", cpu="2"))
    sched.on_podgroup(gang("g", 1))
    sched.on_pod(pod("g-0", cpu="4", group="g"))
    drain(sched)
    starve(sched, clock)
    assert held_nodes(sched) == {"g-0": "a"}  # one pod in the way on a, one on b: a by row
    starve(sched, clock, 301)
    assert held_nodes(sched) == {"g-0": "b"}
    assert sum(1 for e in rec.events if e[1] == "Reserved") == 2


def test_a_deleted_group_frees_its_reservation_at_once(s: Any, clock: Any) -> None:
    sched, rec = s
    busy_cluster(sched)
    drain(sched)
    starve(sched, clock)
    assert sched.nominated
    delete(sched, "big-0")
    delete(sched, "big-1")
    assert sched.nominated == {} and sched.reserved == {}
    delete(sched, "a0")
    sched.on_pod(small("next"))
    drain(sched)
    assert ("next", "a") in rec.binds


def test_room_that_can_never_hold_the_gang_is_not_reserved(s: Any, clock: Any) -> None:
    sched, rec = s
    busy_cluster(sched)
    sched.on_podgroup(gang("huge", 3))
    for i in range(3):
        sched.on_pod(pod(f"huge-{i}", cpu="4", group="huge"))
    drain(sched)
    clock.now += STARVE + 1
    for u in list(sched.queue.units()):
        sched.queue.activate(u.key)
    drain(sched)
    assert (
        "Reservation: no room can be reserved: 3 pod(s) do not fit even with every running pod gone"
        in rec.pods["huge-0"]
    )


def three_starving_gangs(clock: Any) -> tuple[Scheduler, Recorder]:
    """Four 4-CPU nodes, each running a 1-CPU pod; gangs g1, g2, g3 of one
    4-CPU pod each, starved, with maxReservedShare 0.5."""
    sched, rec = make(clock, maxReservedShare=0.5)
    for n in "abcd":
        sched.on_node(node(n, cpu="4"))
        sched.on_pod(running(f"{n}0", n))
    for g in ("g1", "g2", "g3"):
        sched.on_podgroup(gang(g, 1))
        sched.on_pod(pod(f"{g}-0", cpu="4", group=g))
    drain(sched)
    clock.now += STARVE + 1
    for u in list(sched.queue.units()):
        sched.queue.activate(u.key)
    drain(sched)
    return sched, rec


def test_later_reservations_stop_at_the_reserved_share(clock: Any) -> None:
    sched, rec = three_starving_gangs(clock)
    # 16 CPU: the first two reservations hold 8 (50 %); the third would pass it.
    assert len(held_nodes(sched)) == 2
    waiting = [rec.pods[f"{g}-0"] for g in ("g1", "g2", "g3")]
    assert sum("would pass maxReservedShare (50%)" in w for w in waiting) == 1


# ------------------------------------------------------------ a new leader


def test_a_new_leader_holds_the_nominated_room_and_keeps_the_reservation(clock: Any) -> None:
    sched, rec = make(clock)
    busy_cluster(sched)
    drain(sched)
    starve(sched, clock)
    nominated = held_nodes(sched)

    # A new process: the same cluster listed, the pods with their status.nominatedNodeName.
    new, rec2 = make(clock, start=False)
    new.on_node(node("a", cpu="4"))
    new.on_node(node("b", cpu="4"))
    for n in "ab":
        for i in range(3):
            new.on_pod(running(f"{n}{i}", n))
    new.on_podgroup(gang("big", 2))
    for name, node_name in nominated.items():
        body = pod(name, cpu="4", group="big")
        body["status"] = {"nominatedNodeName": node_name}
        new.on_pod(body)
    new.start_scheduling()  # the listing is in
    assert held_nodes(new) == nominated  # held before any cycle
    delete(new, "a0")
    new.on_pod(small("next"))
    drain(new)
    assert ("next", "a") not in rec2.binds
    assert held_nodes(new) == nominated  # kept, not waited for again
    assert "reserved node(s) a, b" in rec2.pods["big-0"]


# ---------------------------------------------------------------- simulate

STARVING = """
apiVersion: v1
kind: Node
metadata: {name: n1}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata: {name: n2}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata: {name: small-1}
spec: {nodeName: n1, activeDeadlineSeconds: 120, containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
status: {phase: Running, startTime: "2026-12-05T18:40:00Z"}
---
apiVersion: v1
kind: Pod
metadata: {name: small-2}
spec: {nodeName: n2, containers: [{name: c, resources: {requests: {cpu: "1"}}}]}
status: {phase: Running}
---
apiVersion: scheduling.troupe.dev/v1alpha2
kind: PodGroup
metadata: {name: big}
spec: {schedulingPolicy: {gang: {minCount: 2}}}
---
apiVersion: v1
kind: Pod
metadata: {name: big-0, labels: {scheduling.troupe.dev/pod-group: big}}
spec: {schedulerName: troupe-scheduler, containers: [{name: c, resources: {requests: {cpu: "4"}}}]}
---
apiVersion: v1
kind: Pod
metadata: {name: big-1, labels: {scheduling.troupe.dev/pod-group: big}}
spec: {schedulerName: troupe-scheduler, containers: [{name: c, resources: {requests: {cpu: "4"}}}]}
"""


def test_simulate_shows_the_reservation_once_the_group_has_waited(tmp_path: Any, capsys: Any) -> None:
    from scheduler.cli import main

    f = tmp_path / "starving.yaml"
    f.write_text(STARVING)
    assert main(["simulate", str(f)]) == 0
    assert "reserved" not in capsys.readouterr().out  # no time has passed
    assert main(["simulate", str(f), "--waited", "59"]) == 0
    assert "reserved" not in capsys.readouterr().out  # starvationSeconds is 60
    assert main(["simulate", str(f), "--waited", "120"]) == 0
    out = capsys.readouterr().out
    assert "reserved node(s) n1, n2 for 2 pod(s); waiting for 2 running pod(s) to finish" in out


# ----------------------------------------------------------------- property

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("finish"), st.integers(0, 50)),
        st.tuples(st.just("small"), st.integers(1, 2), st.sampled_from([None, 30, 3000])),
        st.tuples(st.just("gang"), st.integers(1, 3), st.integers(1, 4), st.integers(0, 1)),
        st.tuples(st.just("wait"), st.sampled_from([5, 35, 70])),
    ),
    min_size=5,
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cpus=st.lists(st.integers(2, 4), min_size=2, max_size=4), ops=OPS)
# Found by this test: a pod allowed to backfill another's reserved room (it ends
# first) but unable to bind now reserved that same room on top of it.
@example(
    cpus=[2, 2, 2, 2],
    ops=[("finish", 0), ("finish", 0), ("small", 1, None), ("small", 1, 3000), ("small", 2, None), ("small", 2, 30)]
    + [("wait", 35)],
)
def test_reservations_never_overcommit_a_node_nor_bind_a_gang_below_min_count(clock: Any, cpus, ops) -> None:
    """Random streams of small pods, gangs, finishing pods and time: after
    every step no node holds more than its allocatable (bound pods, and
    reserved room of one priority beside each other), and every gang that
    has bound pods has at least minCount of them bound."""
    sched, rec = make(clock, starvationSeconds=30)
    for i, cpu in enumerate(cpus):
        sched.on_node(node(f"n{i}", cpu=str(cpu)))
        for j in range(cpu - 1):  # busy from the start
            sched.on_pod(running(f"r{i}-{j}", f"n{i}"))
    alloc = {f"n{i}": cpu * 1000 for i, cpu in enumerate(cpus)}
    gangs: dict[str, int] = {}
    for count, op in enumerate(ops):
        if op[0] == "finish":
            placed = sorted(uid for uid in sched.cache.pods if sched.cache.placed_node(uid))
            if placed:
                p = sched.cache.pods[placed[op[1] % len(placed)]]
                delete(sched, p.name)
        elif op[0] == "small":
            body = pod(f"s{count}", cpu=str(op[1]))
            if op[2] is not None:
                body["spec"]["activeDeadlineSeconds"] = op[2]
            sched.on_pod(body)
        elif op[0] == "gang":
            _, size, cpu, prio = op
            name = f"g{count}"
            gangs[name] = size
            sched.on_podgroup(gang(name, size))
            for i in range(size):
                sched.on_pod(pod(f"{name}-{i}", cpu=str(cpu), group=name, priority=100 * prio))
        else:
            clock.now += op[1]
        drain(sched)

        used = dict.fromkeys(alloc, 0)
        for uid, p in sched.cache.pods.items():
            where = sched.cache.placed_node(uid)
            if where:
                used[where] += p.requests.get("cpu", 0)
        assert all(used[n] <= alloc[n] for n in alloc), (used, alloc)
        held: dict[tuple[str, int], int] = {}
        for uid, (where, p) in sched.nominated.items():
            if uid in sched.reserved:
                held[(where, p.priority)] = held.get((where, p.priority), 0) + p.requests.get("cpu", 0)
        assert all(v <= alloc[n] for (n, _), v in held.items()), (held, alloc)
        for name, size in gangs.items():
            bound = sum(1 for n, _ in rec.binds if n.startswith(f"{name}-"))
            assert bound == 0 or bound >= size, (name, bound, size)


# ------------------------------------------------------ trees of groups


def composite(name: str, min_groups: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.troupe.dev/v1alpha2",
        "kind": "CompositePodGroup",
        "metadata": {"name": name, "namespace": NS, "uid": f"uid-cpg-{name}", "generation": 1},
        "spec": {"schedulingPolicy": {"gang": {"minGroupCount": min_groups}}},
    }


def replica(sched: Scheduler, name: str, workers: int) -> None:
    """A leader+workers replica: root `name` (both groups needed), a 1-pod
    leader group and a gang of `workers` workers, every pod 4 CPUs."""
    sched.on_composite(composite(name, 2))
    for child, size in ((f"{name}-leader", 1), (f"{name}-workers", workers)):
        body = gang(child, size)
        body["spec"]["parentCompositePodGroupName"] = name
        sched.on_podgroup(body)
        for i in range(size):
            sched.on_pod(pod(f"{child}-{i}", cpu="4", group=child))


def test_a_starving_tree_gets_room_for_the_whole_tree(s: Any, clock: Any) -> None:
    sched, rec = s
    for n in "abc":
        sched.on_node(node(n, cpu="4"))
        sched.on_pod(running(f"{n}0", n))
    replica(sched, "rep", 2)
    drain(sched)
    assert held_nodes(sched) == {}  # not starving yet

    clock.now += STARVE + 1
    for u in list(sched.queue.units()):
        sched.queue.activate(u.key)
    drain(sched)
    assert sorted(held_nodes(sched)) == ["rep-leader-0", "rep-workers-0", "rep-workers-1"]
    assert sorted(held_nodes(sched).values()) == ["a", "b", "c"]
    note = "reserved node(s) a, b, c for 3 pod(s); waiting for 3 running pod(s) to finish"
    assert [e for e in rec.events if e[1] == "Reserved"] == [("rep", "Reserved", note)]  # on the root
    assert note in rec.pods["rep-workers-1"]
    root = [g for g in rec.groups if g[0] == "rep"][-1]
    assert root[1:3] == ("False", "Unschedulable") and note in root[3]

    # A pod ends; a small pod of the stream does not take its room.
    delete(sched, "a0")
    sched.on_pod(small("next"))
    drain(sched)
    assert ("next", "a") not in rec.binds and not rec.binds

    delete(sched, "b0")
    delete(sched, "c0")
    clock.now += 20
    drain(sched)
    assert sorted(n for n, _ in rec.binds) == ["rep-leader-0", "rep-workers-0", "rep-workers-1"]
    assert rec.at_least == [3]  # a tree's pods pass PreBind together or none binds
    assert sched.nominated == {} and sched.reserved == {}


def test_room_that_can_never_hold_the_tree_is_not_reserved(s: Any, clock: Any) -> None:
    sched, rec = s
    for n in "abc":
        sched.on_node(node(n, cpu="4"))
        sched.on_pod(running(f"{n}0", n))
    replica(sched, "rep", 3)  # 4 pods of 4 CPUs, 3 nodes
    drain(sched)
    clock.now += STARVE + 1
    for u in list(sched.queue.units()):
        sched.queue.activate(u.key)
    drain(sched)
    assert held_nodes(sched) == {}
    # As a gang's: the count its root needs, no more (the tree's own reason is before "preemption:").
    why = "Reservation: no room can be reserved: 4 pod(s) do not fit even with every running pod gone"
    assert why in rec.pods["rep-leader-0"]
    assert why in [g for g in rec.groups if g[0] == "rep"][-1][3]

"""The placement algorithm: topology constraints (TopologyPlacementGenerator),
placement scores, ranked levels, pinning to placed pods, the search for gangs
a fixed order cannot place, and preemption that respects the constraint."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from scheduler.core import group_search
from scheduler.core.schedule_podgroup import GroupDecision, schedule_group
from scheduler.framework.interface import CycleState, GroupContext
from scheduler.plugins.noderesources import NodeResourcesFit

from .builders import make_cache, make_framework, make_group, make_node, make_pod

ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"


def nodes_in(zone: str, count: int, cpu: str = "1", rack: str | None = None, prefix: str | None = None) -> list[Any]:
    labels = {ZONE: zone, **({RACK: rack} if rack else {})}
    name = prefix or zone
    return [make_node(f"{name}-{i}", cpu, labels=labels) for i in range(count)]


def gang(n: int, cpu: str = "1", name: str = "g", **kw: Any) -> list[Any]:
    return [make_pod(f"{name}-{i}", cpu, group=name, **kw) for i in range(n)]


def run(
    nodes: list[Any],
    pods: list[Any],
    group: Any,
    existing: tuple[Any, ...] = (),
    profile: dict[str, Any] | None = None,
    placed_nodes: tuple[str, ...] = (),
) -> GroupDecision:
    cache = make_cache(nodes, existing)
    fwk = make_framework(cache, profile)
    return schedule_group(fwk, cache.snapshot(), group.key, group, pods, len(placed_nodes), placed_nodes)


def zones_of(decision: GroupDecision, nodes: list[Any]) -> set[str]:
    label = {n.name: n.labels.get(ZONE) for n in nodes}
    return {label[a.node] for a in decision.assignments}


# ------------------------------------------------------------- one domain


def test_a_zone_constrained_gang_lands_in_one_zone_the_tightest_that_fits() -> None:
    nodes = nodes_in("zone-a", 4, "2") + nodes_in("zone-b", 2, "2")
    d = run(nodes, gang(4), make_group("g", 4, topology=[ZONE]))
    # Both zones hold 4 cpu-pods; packing prefers zone-b (less room left after).
    assert d.scheduled and zones_of(d, nodes) == {"zone-b"}
    assert d.message == f"4 pod(s) placed in {ZONE}=zone-b" and d.placement == f"{ZONE}=zone-b"


def test_without_the_constraint_the_same_gang_spreads_over_both_zones() -> None:
    nodes = nodes_in("zone-a", 4, "2") + nodes_in("zone-b", 2, "2")
    d = run(nodes, gang(6), make_group("g", 6))
    assert d.scheduled and zones_of(d, nodes) == {"zone-a", "zone-b"} and d.placement == ""


def test_least_allocated_placement_scoring_spreads_groups_to_the_roomiest_domain() -> None:
    nodes = nodes_in("zone-a", 4, "2") + nodes_in("zone-b", 2, "2")
    profile = {
        "pluginConfig": [{"name": "NodeResourcesFit", "args": {"placementScoringStrategy": {"type": "LeastAllocated"}}}]
    }
    d = run(nodes, gang(4), make_group("g", 4, topology=[ZONE]), profile=profile)
    assert d.scheduled and zones_of(d, nodes) == {"zone-a"}


def test_a_gang_that_fits_only_across_zones_waits_and_says_why() -> None:
    nodes = nodes_in("zone-a", 5) + nodes_in("zone-b", 3)
    d = run(nodes, gang(8), make_group("g", 8, topology=[ZONE]))
    assert not d.scheduled and d.assignments == []
    assert d.message == (
        f"no {ZONE} domain fits 8 pods: zone-a at most 5 fit (cpu: 8 needed, 5 free), "
        "zone-b at most 3 fit (cpu: 8 needed, 3 free)"
    )
    assert all(why == d.message for _, why in d.unplaced)


def test_a_domain_tried_and_too_fragmented_says_how_many_fit() -> None:
    # zone-a: 3 nodes x 3 cpu: 9 free holds 4 x 2 cpu by the sum, but one pod per node fits: 3.
    nodes = nodes_in("zone-a", 3, "3") + nodes_in("zone-b", 1, "1")
    d = run(nodes, gang(4, "2"), make_group("g", 4, topology=[ZONE]))
    assert not d.scheduled
    assert d.message.startswith(f"no {ZONE} domain fits 4 pods: zone-a 3 fit, zone-b at most 0 fit"), d.message


def test_nodes_without_the_label_are_in_no_domain() -> None:
    nodes = nodes_in("zone-a", 1) + [make_node("bare", "8")]
    d = run(nodes, gang(2), make_group("g", 2, topology=[ZONE]))
    assert not d.scheduled and "zone-a at most 1 fit" in d.message


def test_many_domains_are_counted_not_all_named() -> None:
    nodes = [n for z in range(8) for n in nodes_in(f"zone-{z}", 1)]
    d = run(nodes, gang(2), make_group("g", 2, topology=[ZONE]))
    assert not d.scheduled and d.message.endswith(" and 3 more") and d.message.count("at most 1 fit") == 5


def test_a_basic_group_goes_where_most_of_its_pods_fit() -> None:
    nodes = nodes_in("zone-a", 2) + nodes_in("zone-b", 3)
    d = run(nodes, gang(4), make_group("g", None, topology=[ZONE]))
    assert d.scheduled and len(d.assignments) == 3 and zones_of(d, nodes) == {"zone-b"}


# ------------------------------------------------------------- levels


def _racks_in_zones() -> list[Any]:
    # zone-a: rack r1 (2 x 2 cpu), rack r2 (2 x 2 cpu); zone-b: rack r3 (3 x 2 cpu)
    return (
        nodes_in("zone-a", 2, "2", rack="r1", prefix="r1")
        + nodes_in("zone-a", 2, "2", rack="r2", prefix="r2")
        + nodes_in("zone-b", 3, "2", rack="r3", prefix="r3")
    )


def test_levels_prefer_one_rack_then_fall_back_to_one_zone() -> None:
    nodes = _racks_in_zones()
    group = make_group("g", 4, topology=[RACK, ZONE])
    # 4 x 2 cpu fits no rack (r3 has 6 cpu), but zone-a (8 cpu): placed there, over two racks.
    d = run(nodes, gang(4, "2"), group)
    assert d.scheduled and zones_of(d, nodes) == {"zone-a"} and d.placement == f"{ZONE}=zone-a"
    assert d.message == f"4 pod(s) placed in {ZONE}=zone-a (no {RACK} domain fits)"
    # 2 x 2 cpu fits a rack: the tightest rack (r1 or r2, 4 cpu) wins, never a zone.
    d = run(nodes, gang(2, "2"), make_group("g", 2, topology=[RACK, ZONE]))
    assert d.scheduled and d.placement in (f"{RACK}=r1", f"{RACK}=r2")
    assert len({a.node[:2] for a in d.assignments}) == 1


def test_levels_fail_with_one_clause_per_level() -> None:
    nodes = _racks_in_zones()
    d = run(nodes, gang(5, "2"), make_group("g", 5, topology=[RACK, ZONE]))
    assert not d.scheduled
    rack_clause, zone_clause = d.message.split("; ")
    assert rack_clause.startswith(f"no {RACK} domain fits 5 pods: ")
    assert zone_clause.startswith(f"no {ZONE} domain fits 5 pods: zone-a at most 4 fit")


# ------------------------------------------------------------- pinned


def test_a_refilled_gang_stays_in_the_domain_of_its_placed_pods() -> None:
    nodes = nodes_in("zone-a", 4, "2") + nodes_in("zone-b", 2, "2")
    group = make_group("g", 3, topology=[ZONE])
    # One pod already runs in zone-a: the other two go there, though zone-b packs tighter.
    d = run(nodes, gang(2), group, placed_nodes=("zone-a-0",))
    assert d.scheduled and zones_of(d, nodes) == {"zone-a"}


def test_placed_pods_in_two_domains_refuse_the_level() -> None:
    nodes = nodes_in("zone-a", 2, "2") + nodes_in("zone-b", 2, "2")
    d = run(nodes, gang(1), make_group("g", 3, topology=[ZONE]), placed_nodes=("zone-a-0", "zone-b-0"))
    assert not d.scheduled
    assert d.message == f"no {ZONE} domain: the group's 2 placed pod(s) are not all in one domain"


# ------------------------------------------------------------- the profile


def test_the_default_algorithm_refuses_topology_it_cannot_honour() -> None:
    nodes = nodes_in("zone-a", 4)
    d = run(
        nodes, gang(2), make_group("g", 2, topology=[ZONE]), profile={"podGroupScheduling": {"algorithm": "Default"}}
    )
    assert not d.scheduled and d.unresolvable
    assert "uses the Default algorithm" in d.message and "podGroupScheduling.algorithm: Placement" in d.message
    # Without constraints it schedules as always.
    d = run(nodes, gang(2), make_group("g", 2), profile={"podGroupScheduling": {"algorithm": "Default"}})
    assert d.scheduled


def test_a_profile_without_a_topology_generator_refuses_topology() -> None:
    profile = {"plugins": {"placementGenerate": {"disabled": [{"name": "TopologyPlacementGenerator"}]}}}
    d = run(nodes_in("zone-a", 4), gang(2), make_group("g", 2, topology=[ZONE]), profile=profile)
    assert not d.scheduled and d.unresolvable and "enable TopologyPlacementGenerator" in d.message


# ------------------------------------------------------------- bounds


def test_bounded_trials_pick_what_scoring_every_domain_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Domains of different sizes and usage; packing's bound is exact, so one trial decides.
    nodes = nodes_in("zone-a", 3, "4") + nodes_in("zone-b", 2, "4") + nodes_in("zone-c", 4, "2")
    existing = (make_pod("busy", "3", node_name="zone-a-0"),)
    tried: list[int] = []
    original = group_search.place_group

    def counting(*args: Any, **kw: Any) -> Any:
        tried.append(1)
        return original(*args, **kw)

    import scheduler.core.placement as placement_module

    monkeypatch.setattr(placement_module, "place_group", counting)
    bounded = run(nodes, gang(3, "2"), make_group("g", 3, topology=[ZONE]), existing)
    assert len(tried) == 1
    monkeypatch.setattr(NodeResourcesFit, "placement_score_bounds", lambda *a, **k: None)
    tried.clear()
    every = run(nodes, gang(3, "2"), make_group("g", 3, topology=[ZONE]), existing)
    assert len(tried) == 3 and every.placement == bounded.placement == f"{ZONE}=zone-b"


def test_the_free_room_kept_per_domain_follows_every_change() -> None:
    """The generator keeps each domain's free room row by row across cycles;
    it must equal the sum recomputed from scratch after binds, trial assumes,
    restores and a node's new allocatable."""
    nodes = nodes_in("zone-a", 3, "4") + nodes_in("zone-b", 2, "4") + [make_node("loose", "4")]
    waiting = [make_pod(f"p{i}", "1") for i in range(3)]
    cache = make_cache(nodes, waiting)
    fwk = make_framework(cache)
    group = make_group("g", 2, topology=[ZONE])
    pods = gang(2)

    def check(snapshot: Any) -> None:
        ctx = GroupContext(group.key, pods, 2, True, 0, group=group)
        placements, status = fwk.run_placement_generate(CycleState(), ctx, snapshot)
        assert status.ok and {p.name for p in placements} == {"zone-a", "zone-b"}
        for p in placements:
            rows = np.flatnonzero(p.nodes)
            scratch = np.maximum(snapshot.alloc[rows] - snapshot.req[rows], 0).sum(axis=0)
            assert p.free_room is not None and (p.free_room == scratch).all(), (p.name, p.free_room, scratch)

    check(cache.snapshot())
    cache.assume(waiting[0].uid, "zone-a-0")
    cache.assume(waiting[1].uid, "zone-b-1")
    check(cache.snapshot())
    snapshot = cache.snapshot()
    mark = snapshot.mark()
    vec, _ = snapshot.request_vector(pods[0])
    snapshot.assume(snapshot.row["zone-a-2"], vec * 3, (0, 0))
    check(snapshot)
    snapshot.restore(mark)
    check(snapshot)
    cache.upsert_node(make_node("zone-b-0", "8", labels={ZONE: "zone-b"}))
    cache.assume(waiting[2].uid, "loose")
    check(cache.snapshot())


# ------------------------------------------------------------- the search


def _small_first_mixed_gang(small: int) -> list[Any]:
    return [make_pod(f"s{i}", "2", group="h") for i in range(small)] + [make_pod("big", "6", group="h")]


def test_a_mixed_gang_the_fixed_order_cannot_place_is_found_by_the_search() -> None:
    nodes = [make_node("n1", "8"), make_node("n2", "8")]
    pods = _small_first_mixed_gang(4)  # the small pods spread 2+2 first; then no node has 6 free
    off = run(nodes, pods, make_group("h", 5), profile={"podGroupScheduling": {"searchSteps": 0}})
    assert not off.scheduled
    d = run(nodes, pods, make_group("h", 5))
    assert d.scheduled and len(d.assignments) == 5 and "(search: largest first)" in d.message
    per_node: dict[str, int] = {}
    for a in d.assignments:
        per_node[a.node] = per_node.get(a.node, 0) + a.pod.requests["cpu"]
    assert max(per_node.values()) <= 8000


def test_the_issues_mixed_gang_is_placed() -> None:
    nodes = [make_node("n1", "8"), make_node("n2", "8")]
    d = run(nodes, _small_first_mixed_gang(3), make_group("h", 4))
    assert d.scheduled and len(d.assignments) == 4


def test_a_homogeneous_gang_never_searches(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: Any) -> None:
        raise AssertionError("searched a homogeneous gang")

    monkeypatch.setattr(group_search.GroupSearch, "run", boom)
    d = run([make_node("n1", "2")], gang(3), make_group("g", 3))
    assert not d.scheduled


def test_a_gang_with_affinity_to_itself_is_placed_in_the_zone_that_holds_it() -> None:
    # zone-a: one 6-cpu node (the first pod's best node), room for 3; zone-b: four 2-cpu nodes, room for 4.
    nodes = [make_node("a-big", "6", labels={ZONE: "zone-a"})] + nodes_in("zone-b", 4, "2")
    affinity = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "ring"}}, "topologyKey": ZONE}
            ]
        }
    }
    pods = [make_pod(f"r{i}", "2", group="r", labels={"app": "ring"}, affinity=affinity) for i in range(4)]
    off = run(nodes, pods, make_group("r", 4), profile={"podGroupScheduling": {"searchSteps": 0}})
    assert not off.scheduled
    d = run(nodes, pods, make_group("r", 4))
    assert d.scheduled and zones_of(d, nodes) == {"zone-b"}
    assert d.message.endswith(f"(search: in {ZONE}=zone-b)")


def test_the_search_respects_its_budget() -> None:
    nodes = [make_node("n1", "8"), make_node("n2", "8")]
    d = run(nodes, _small_first_mixed_gang(4), make_group("h", 5), profile={"podGroupScheduling": {"searchSteps": 3}})
    assert not d.scheduled  # 5 steps for the first other order alone


def test_backtracking_finds_what_no_order_does() -> None:
    # 4,4,5,5 cpu on nodes of 10 and 8. Fixed order: 4 -> n10, 4 -> n8, 5 -> n10, then 5 fits
    # nowhere. Largest first (5,5,4,4): 5 -> n10, 5 -> n8, 4 -> n10, 4 fits nowhere; most
    # constrained first is the same order. Only 5+5 | 4+4 works: the backtracking finds it.
    nodes = [make_node("n10", "10"), make_node("n8", "8")]
    pods = [make_pod(f"p{i}", c, group="b") for i, c in enumerate(["4", "4", "5", "5"])]
    assert not run(nodes, pods, make_group("b", 4), profile={"podGroupScheduling": {"searchSteps": 0}}).scheduled
    d = run(nodes, pods, make_group("b", 4))
    assert d.scheduled and d.message == "4 pod(s) placed (search: backtracking)"
    assert sorted((a.node, a.pod.name) for a in d.assignments) == [
        ("n10", "p2"),
        ("n10", "p3"),
        ("n8", "p0"),
        ("n8", "p1"),
    ]


def test_group_context_need() -> None:
    pods = gang(3)
    assert GroupContext(("ns", "g"), pods, 3, True, 1).need == 2
    assert GroupContext(("ns", "g"), pods, 1, False, 0).need == 1
    assert CycleState() == {}


# ------------------------------------------------------------- preemption


def test_preemption_makes_room_inside_one_domain(clock: Any) -> None:
    from scheduler.api.config import SchedulerConfiguration
    from scheduler.core.scheduler import Scheduler
    from scheduler.plugins import in_tree_registry

    from .test_preemption import gang as gang_body
    from .test_preemption import pod as pod_body
    from .test_runtime_scheduler import Recorder, drain

    rec = Recorder()
    sched = Scheduler(SchedulerConfiguration(), in_tree_registry(), binder=rec, writer=rec, clock=clock, report_delay=0)
    sched.start_scheduling()
    zone = {"a1": "zone-a", "a2": "zone-a", "b1": "zone-b", "b2": "zone-b", "b3": "zone-b"}
    for name, z in zone.items():
        sched.on_node(
            {
                "metadata": {"name": name, "uid": f"uid-{name}", "labels": {ZONE: z}},
                "status": {"allocatable": {"cpu": "2", "memory": "8Gi", "pods": "110"}},
            }
        )
    # The cheapest victims (priority 1) are on a1 and b1, in different zones.
    for name in zone:
        sched.on_pod(pod_body(f"low-{name}", cpu="2", node_name=name, priority=1 if name in ("a1", "b1") else 5))
    body = gang_body("high", 2, priority=100)
    body["spec"]["schedulingConstraints"] = {"topology": [{"key": ZONE}]}
    sched.on_podgroup(body)
    for i in range(2):
        sched.on_pod(pod_body(f"high-{i}", cpu="2", group="high", priority=100))
    drain(sched)
    assert len(rec.nominated) == 2
    assert len({zone[n] for n in rec.nominated.values()}) == 1, rec.nominated
    assert sorted(rec.preempted) == sorted(f"low-{n}" for n in rec.nominated.values())

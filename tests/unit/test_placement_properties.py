"""Property tests of the group cycle against an exhaustive reference: on small
random clusters and groups (alike or mixed pods, node selectors, an optional
zone constraint, minCount up to the group's size), whenever some assignment
satisfies every constraint, troupe finds one (the search's budget is far
above these sizes); whatever troupe binds satisfies every constraint and
reaches minCount."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scheduler.core.placement import choose_placement
from scheduler.core.schedule_podgroup import schedule_group
from scheduler.framework.interface import CycleState, GroupContext, PlacementAssignments

from .builders import make_cache, make_framework, make_group, make_node, make_pod

ZONE = "topology.kubernetes.io/zone"


@dataclass(frozen=True)
class Case:
    node_cpu: tuple[int, ...]  # allocatable cpu per node
    used_cpu: tuple[int, ...]  # cpu already used per node (a running pod)
    zones: tuple[str | None, ...]  # zone label per node
    ssd: tuple[bool, ...]  # disk=ssd label per node
    pod_cpu: tuple[int, ...]  # request per pod, in the fixed order
    pod_ssd: tuple[bool, ...]  # pod selects disk=ssd
    min_count: int
    topology: bool


@st.composite
def cases(draw: Any) -> Case:
    n = draw(st.integers(2, 5))
    node_cpu = tuple(draw(st.lists(st.integers(1, 6), min_size=n, max_size=n)))
    used = tuple(draw(st.integers(0, c)) if draw(st.booleans()) else 0 for c in node_cpu)
    zones = tuple(draw(st.lists(st.sampled_from(["zone-a", "zone-b", None]), min_size=n, max_size=n)))
    ssd = tuple(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    k = draw(st.integers(2, 4))
    if draw(st.booleans()):  # alike pods
        cpu = draw(st.integers(1, 4))
        pod_cpu, pod_ssd = (cpu,) * k, (draw(st.booleans()),) * k
    else:
        pod_cpu = tuple(draw(st.lists(st.integers(1, 4), min_size=k, max_size=k)))
        pod_ssd = tuple(draw(st.lists(st.booleans(), min_size=k, max_size=k)))
    return Case(node_cpu, used, zones, ssd, pod_cpu, pod_ssd, draw(st.integers(1, k)), draw(st.booleans()))


def build(case: Case) -> tuple[Any, Any, list[Any], list[Any]]:
    nodes = []
    existing = []
    for i, cpu in enumerate(case.node_cpu):
        labels = {}
        if case.zones[i]:
            labels[ZONE] = case.zones[i]
        if case.ssd[i]:
            labels["disk"] = "ssd"
        nodes.append(make_node(f"n{i}", str(cpu), labels=labels))
        if case.used_cpu[i]:
            existing.append(make_pod(f"used-{i}", str(case.used_cpu[i]), node_name=f"n{i}", scheduler_name="other"))
    pods = [
        make_pod(f"p{j}", str(c), group="g", node_selector={"disk": "ssd"} if s else None)
        for j, (c, s) in enumerate(zip(case.pod_cpu, case.pod_ssd))
    ]
    group = make_group("g", case.min_count, topology=[ZONE] if case.topology else [])
    return group, make_cache(nodes, existing), nodes, pods


def satisfies(case: Case, assignment: dict[int, int]) -> bool:
    """pod index -> node index for the placed pods: every constraint holds."""
    if len(assignment) < case.min_count:
        return False
    used = list(case.used_cpu)
    for j, i in assignment.items():
        if case.pod_ssd[j] and not case.ssd[i]:
            return False
        used[i] += case.pod_cpu[j]
        if used[i] > case.node_cpu[i]:
            return False
    if case.topology:
        zones = {case.zones[i] for i in assignment.values()}
        if None in zones or len(zones) != 1:
            return False
    return True


def reference_fits(case: Case) -> bool:
    """Every assignment of each pod to a node or to nothing."""
    options = [None, *range(len(case.node_cpu))]
    for choice in itertools.product(options, repeat=len(case.pod_cpu)):
        assignment = {j: i for j, i in enumerate(choice) if i is not None}
        if satisfies(case, assignment):
            return True
    return False


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_troupe_places_a_group_whenever_the_reference_can_and_only_validly(case: Case) -> None:
    group, cache, nodes, pods = build(case)
    fwk = make_framework(cache)
    decision = schedule_group(fwk, cache.snapshot(), group.key, group, pods)
    expected = reference_fits(case)
    alike = len(set(zip(case.pod_cpu, case.pod_ssd))) == 1
    event(f"reference fits: {expected}; alike: {alike}; topology: {case.topology}")
    if expected:
        fixed = make_framework(cache, {"podGroupScheduling": {"searchSteps": 0}})
        if not schedule_group(fixed, cache.snapshot(), group.key, group, pods).scheduled:
            event("the fixed order alone fails (the search is needed)")
            assert not alike  # alike pods never need it
    if decision.scheduled:
        index = {p.name: j for j, p in enumerate(pods)}
        placed = {index[a.pod.name]: int(a.node[1:]) for a in decision.assignments}
        assert satisfies(case, placed), (decision.message, placed)
    assert decision.scheduled == expected, decision.message


@st.composite
def packed(draw: Any) -> tuple[list[int], list[int], list[int], list[int]]:
    """Nodes whose capacity is split exactly into the pods' requests (so a
    placement of every pod exists), the pods shuffled; and a second zone of
    random nodes. Returns (zone-b node cpus, zone-a node cpus, pod cpus, order)."""
    fitted: list[int] = []
    pods: list[int] = []
    for _ in range(draw(st.integers(2, 3))):
        parts = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
        fitted.append(sum(parts))
        pods.extend(parts)
    pods = pods[:6] if len(pods) > 6 else pods
    other = draw(st.lists(st.integers(1, 8), min_size=1, max_size=3))
    order = draw(st.permutations(range(len(pods))))
    return fitted, other, pods, list(order)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(packed(), st.booleans())
def test_a_tightly_packable_gang_is_always_placed(case: Any, topology: bool) -> None:
    fitted, other, pod_cpu, order = case
    nodes = [make_node(f"b{i}", str(c), labels={ZONE: "zone-b"}) for i, c in enumerate(fitted)]
    nodes += [make_node(f"a{i}", str(c), labels={ZONE: "zone-a"}) for i, c in enumerate(other)]
    pods = [make_pod(f"p{j}", str(pod_cpu[j]), group="g") for j in order]
    group = make_group("g", len(pods), topology=[ZONE] if topology else [])
    cache = make_cache(nodes)
    decision = schedule_group(make_framework(cache), cache.snapshot(), group.key, group, pods)
    fixed = make_framework(cache, {"podGroupScheduling": {"searchSteps": 0}})
    if not schedule_group(fixed, cache.snapshot(), group.key, group, pods).scheduled:
        event("the fixed order alone fails (the search is needed)")
    assert decision.scheduled, decision.message
    used: dict[str, int] = {}
    for a in decision.assignments:
        used[a.node] = used.get(a.node, 0) + a.pod.requests["cpu"]
    capacity = {n.name: n.allocatable["cpu"] for n in nodes}
    assert all(used[n] <= capacity[n] for n in used)
    if topology:
        assert len({n[0] for n in used}) == 1


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(1, 8), st.integers(0, 8)), min_size=3, max_size=8),  # per node: cpu, used
    st.lists(st.integers(0, 3), min_size=8, max_size=8),  # zone of each node
    st.lists(st.integers(1, 3), min_size=1, max_size=4),  # pod cpus
    st.integers(0, 4),  # a gang's minCount (capped at the pods; 0: a basic group)
    st.sampled_from(["MostAllocated", "LeastAllocated"]),
    st.booleans(),  # PodGroupPodsCount enabled
)
def test_bounded_trials_choose_as_well_as_scoring_every_domain(
    shape: list[tuple[int, int]],
    zone_of: list[int],
    pod_cpu: list[int],
    min_count: int,
    strategy: str,
    pods_count: bool,
) -> None:
    nodes, existing = [], []
    for i, (cpu, used) in enumerate(shape):
        nodes.append(make_node(f"n{i}", str(cpu), labels={ZONE: f"zone-{zone_of[i]}"}))
        if min(used, cpu):
            existing.append(make_pod(f"used-{i}", str(min(used, cpu)), node_name=f"n{i}", scheduler_name="other"))
    pods = [make_pod(f"p{j}", str(c), group="g") for j, c in enumerate(pod_cpu)]
    group = make_group("g", min(min_count, len(pods)) or None, topology=[ZONE])
    profile: dict[str, Any] = {
        "pluginConfig": [{"name": "NodeResourcesFit", "args": {"placementScoringStrategy": {"type": strategy}}}]
    }
    if not pods_count:
        profile["plugins"] = {"placementScore": {"disabled": [{"name": "PodGroupPodsCount"}]}}
    cache = make_cache(nodes, existing)
    chosen = []
    for bounded in (True, False):
        fwk = make_framework(cache, profile)
        if not bounded:
            fwk.placement_score_bounds = lambda *args: None  # type: ignore[method-assign]
        snapshot = cache.snapshot()
        ctx = GroupContext(group.key, pods, group.min_count, group.is_gang, 0, group=group)
        state = CycleState()
        placements, _ = fwk.run_placement_generate(state, ctx, snapshot)
        result = choose_placement(fwk, snapshot, ctx, placements, state)
        if result.trial is None or result.placement is None:
            chosen.append(None)
            continue
        proposal = PlacementAssignments(
            result.placement, [(a.pod, r) for a, r in zip(result.trial.assignments, result.trial.rows)]
        )
        scores, _ = fwk.run_placement_scores(state, ctx, cache.snapshot(), [proposal])
        chosen.append(int(scores[0]))
    event(f"feasible: {chosen[0] is not None}")
    assert chosen[0] == chosen[1]  # the same best score (ties may pick another domain)

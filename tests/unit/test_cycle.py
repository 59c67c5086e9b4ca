"""The PodGroup cycle (`scheduler.core.schedule_podgroup.schedule_group`): examples and
hypothesis properties — never below minCount, deterministic, a homogeneous
group is placed whenever a brute-force search finds a placement, and the
vectorized filter path agrees with a plain per-node reference."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scheduler.api.constants import REASON_SCHEDULED, REASON_UNSCHEDULABLE
from scheduler.api.parse import parse_node, parse_pod
from scheduler.api.records import GroupKey
from scheduler.api.resources import CPU, PODS
from scheduler.core.schedule_one import schedule_pod
from scheduler.core.schedule_podgroup import error_decision, order_pods, schedule_group
from scheduler.framework.interface import CycleState

from .builders import (
    make_cache,
    make_framework,
    make_group,
    make_node,
    make_pod,
    node_body,
    pod_body,
    required_affinity,
    taint,
)

G = GroupKey("default", "g")


def cycle(nodes, pods, group=None, existing=(), placed_before=0, profile=None):
    cache = make_cache(nodes, existing)
    fwk = make_framework(cache, profile)
    snap = cache.snapshot()
    key = group.key if group is not None else None
    decision = schedule_group(fwk, snap, key, group, pods, placed_before)
    return decision, snap, cache


def gang_pods(n: int, cpu: str = "1", memory: str = "1Gi", group: str = "g", **kw):
    return [make_pod(f"w{i}", cpu, memory, group=group, **kw) for i in range(n)]


def where(decision) -> dict[str, str]:
    return {p.pod.name: p.node for p in decision.assignments}


# ---------------------------------------------------------------- examples


def test_gang_fits_whole():
    nodes = [make_node("a", "2"), make_node("b", "2")]
    d, snap, cache = cycle(nodes, gang_pods(4), make_group("g", 4))
    assert d.scheduled and d.outcome == REASON_SCHEDULED
    assert d.message == "4 pod(s) placed"
    assert sorted(where(d).values()) == ["a", "a", "b", "b"]
    assert d.unplaced == [] and d.min_count == 4 and d.group_key == G
    # placements were assumed into the snapshot, not the cache
    col = snap.column[CPU]
    assert snap.req[snap.row["a"], col] == 2000 and snap.req[snap.row["b"], col] == 2000
    assert cache.table.req[:, col].sum() == 0


def test_gang_below_min_count_places_nothing():
    nodes = [make_node("a", "2")]
    pods = gang_pods(3)
    d, _, _ = cycle(nodes, pods, make_group("g", 3))
    assert d.outcome == REASON_UNSCHEDULABLE and not d.scheduled
    assert d.assignments == []
    assert d.message == "needs 3 pods, 2 fit: 0/1 nodes are available: 1 Insufficient cpu."
    assert [p.name for p, _ in d.unplaced] == ["w0", "w1", "w2"]
    assert all(why == d.message for _, why in d.unplaced)
    assert not d.unresolvable


def test_gang_rejected_for_unresolvable_reasons():
    nodes = [make_node("a", "8", taints=[taint("gpu", "true")])]
    d, _, _ = cycle(nodes, gang_pods(2), make_group("g", 2))
    assert d.assignments == [] and d.unresolvable
    assert d.message == "needs 2 pods, 0 fit: 0/1 nodes are available: 1 node(s) had untolerated taint {gpu: true}."


def test_gang_with_more_pods_than_min_count_binds_as_many_as_fit():
    nodes = [make_node("a", "2"), make_node("b", "2")]
    d, _, _ = cycle(nodes, gang_pods(6), make_group("g", 3))
    assert d.scheduled
    assert len(d.assignments) == 4
    assert d.message == "4 pod(s) placed; 2 more wait: 0/2 nodes are available: 2 Insufficient cpu."
    assert sorted(p.name for p, _ in d.unplaced) == ["w4", "w5"]
    assert all(why == "0/2 nodes are available: 2 Insufficient cpu." for _, why in d.unplaced)


def test_placed_before_counts_toward_min_count():
    nodes = [make_node("a", "1")]
    pods = gang_pods(3)
    d, _, _ = cycle(nodes, pods, make_group("g", 3), placed_before=2)
    assert d.scheduled and len(d.assignments) == 1 and d.placed_before == 2
    assert d.message == "3 pod(s) placed; 2 more wait: 0/1 nodes are available: 1 Insufficient cpu."
    d, _, _ = cycle(nodes, pods, make_group("g", 3), placed_before=1)
    assert not d.scheduled and d.assignments == []
    assert d.message.startswith("needs 3 pods, 2 fit")


def test_gang_already_complete_with_nothing_fitting_is_scheduled():
    nodes = [make_node("a", "1")]
    existing = [make_pod("x", "1", node_name="a")]
    d, _, _ = cycle(nodes, gang_pods(1), make_group("g", 2), existing, placed_before=2)
    assert d.scheduled and d.assignments == []


def test_gang_out_of_reach_stops_early():
    nodes = [make_node("a", "8")]
    d, snap, _ = cycle(nodes, gang_pods(2), make_group("g", 3))
    assert d.assignments == [] and d.outcome == REASON_UNSCHEDULABLE
    assert d.message == "needs 3 pods, 0 fit"
    assert all(why == "needs 3 pods, 0 fit" for _, why in d.unplaced)
    assert snap.req.sum() == 0


def test_basic_group_binds_whatever_fits():
    # A basic group is scheduled once any of its pods is; the rest wait on their own.
    nodes = [make_node("a", "2")]
    d, _, _ = cycle(nodes, gang_pods(3), make_group("g"))
    assert [p.pod.name for p in d.assignments] == ["w0", "w1"]
    assert d.outcome == REASON_SCHEDULED
    assert d.message == "2 pod(s) placed; 1 more wait: 0/1 nodes are available: 1 Insufficient cpu."
    assert [(p.name, why) for p, why in d.unplaced] == [("w2", "0/1 nodes are available: 1 Insufficient cpu.")]


def test_basic_group_nothing_fits():
    d, _, _ = cycle([make_node("a", "1")], gang_pods(2, "2"), make_group("g"))
    assert d.outcome == REASON_UNSCHEDULABLE and d.assignments == []
    assert d.message == "2 of 2 pod(s) could not be placed: 0/1 nodes are available: 1 Insufficient cpu."


def test_basic_group_all_fit():
    d, _, _ = cycle([make_node("a")], gang_pods(2, "100m"), make_group("g"))
    assert d.scheduled and d.message == "2 pod(s) placed"


def test_single_pod_without_group():
    d, _, _ = cycle([make_node("a")], [make_pod("solo", "1")])
    assert d.scheduled and d.group_key is None and where(d) == {"solo": "a"}
    d, _, _ = cycle([make_node("a", "1")], [make_pod("big", "2")])
    assert d.outcome == REASON_UNSCHEDULABLE
    assert d.message == "1 of 1 pod(s) could not be placed: 0/1 nodes are available: 1 Insufficient cpu."


def test_pods_spread_by_least_allocated():
    nodes = [make_node(n, "4", "8Gi") for n in ("a", "b", "c")]
    d, _, _ = cycle(nodes, gang_pods(3, "1", "1Gi"), make_group("g", 3))
    assert sorted(where(d).values()) == ["a", "b", "c"]


def test_later_pods_see_earlier_placements():
    # one 3-cpu node and one 1-cpu node, pods of 2 and 1 cpu: the 2 must go to the
    # big node and the 1 cannot follow it there if that leaves no room.
    nodes = [make_node("big", "3"), make_node("small", "1")]
    pods = [make_pod("p2", "2", group="g"), make_pod("p1a", "1", group="g"), make_pod("p1b", "1", group="g")]
    d, _, _ = cycle(nodes, pods, make_group("g", 3))
    assert d.scheduled
    assert where(d)["p2"] == "big"
    placed = list(where(d).values())
    assert placed.count("big") == 2 and placed.count("small") == 1


def test_pod_slots_are_assumed():
    nodes = [make_node("a", "8", "8Gi", 2)]
    d, _, _ = cycle(nodes, gang_pods(3, "100m"), make_group("g"))
    assert len(d.assignments) == 2
    assert d.unplaced[0][1] == "0/1 nodes are available: 1 Too many pods."


def test_order_pods():
    a = make_pod("a", priority=1)
    b = make_pod("b", priority=5)
    c = make_pod("c", priority=1)
    d = make_pod("d", priority=1, namespace="aaa")
    seen = {a.uid: 3.0, b.uid: 9.0, c.uid: 1.0, d.uid: 3.0}
    assert [p.name for p in order_pods([a, b, c, d], seen)] == ["b", "c", "d", "a"]


def test_error_decision():
    pods = gang_pods(2)
    d = error_decision(G, pods, "PodGroup default/g is invalid: x")
    assert d.outcome == "SchedulerError" and not d.scheduled
    assert d.assignments == [] and [why for _, why in d.unplaced] == ["PodGroup default/g is invalid: x"] * 2


# --------------------------------------------------------------- properties

node_spec = st.fixed_dictionaries(
    {
        "cpu": st.integers(0, 6),
        "mem": st.integers(0, 6),
        "pods": st.integers(0, 4),
        "used_cpu": st.integers(0, 3),
        "used_mem": st.integers(0, 3),
        "used_pods": st.integers(0, 2),
    }
)


def build_nodes(specs: list[dict]) -> tuple[list, list]:
    nodes, existing = [], []
    for i, s in enumerate(specs):
        nodes.append(make_node(f"n{i}", str(s["cpu"]), f"{s['mem']}Gi", s["pods"]))
        # a bound pod per used slot, carrying the used cpu/memory on the first
        for j in range(s["used_pods"]):
            cpu = str(s["used_cpu"]) if j == 0 else "0"
            mem = f"{s['used_mem']}Gi" if j == 0 else "0"
            existing.append(make_pod(f"used-{i}-{j}", cpu, mem, node_name=f"n{i}", phase="Running"))
    return nodes, existing


def free_slots(spec: dict, cpu: int, mem: int) -> int:
    """How many (cpu, mem) pods a node can still take: counted by trying, one by one."""
    # pods of the node as built by build_nodes
    used_cpu = spec["used_cpu"] if spec["used_pods"] else 0
    used_mem = spec["used_mem"] if spec["used_pods"] else 0
    used_pods = spec["used_pods"]
    n = 0
    while True:
        c, m, p = used_cpu + (n + 1) * cpu, used_mem + (n + 1) * mem, used_pods + n + 1
        if p > spec["pods"] or (cpu and c > spec["cpu"]) or (mem and m > spec["mem"]):
            return n
        n += 1
        if n > 64:
            return n


def brute_force_best(specs: list[dict], cpu: int, mem: int, k: int) -> int:
    """Exhaustive search: the most of k identical pods any assignment to nodes fits."""
    best = 0

    def fits(spec: dict, count: int) -> bool:
        if count == 0:
            return True
        used_cpu = spec["used_cpu"] if spec["used_pods"] else 0
        used_mem = spec["used_mem"] if spec["used_pods"] else 0
        if spec["used_pods"] + count > spec["pods"]:
            return False
        if cpu and used_cpu + count * cpu > spec["cpu"]:
            return False
        return not (mem and used_mem + count * mem > spec["mem"])

    def dfs(i: int, left: int, total: int) -> None:
        nonlocal best
        best = max(best, total)
        if i == len(specs) or left == 0 or best == k:
            return
        for count in range(left, -1, -1):
            if fits(specs[i], count):
                dfs(i + 1, left - count, total + count)

    dfs(0, k, 0)
    return best


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(node_spec, min_size=0, max_size=5),
    cpu=st.integers(0, 3),
    mem=st.integers(0, 3),
    k=st.integers(1, 6),
    min_count=st.integers(1, 7),
    placed_before=st.integers(0, 2),
    gang=st.booleans(),
)
def test_homogeneous_group_placed_whenever_a_placement_exists(specs, cpu, mem, k, min_count, placed_before, gang):
    nodes, existing = build_nodes(specs)
    pods = [make_pod(f"w{i}", str(cpu), f"{mem}Gi", group="g") for i in range(k)]
    group = make_group("g", min_count) if gang else make_group("g")
    d, _, _ = cycle(nodes, pods, group, existing, placed_before)
    best = brute_force_best(specs, cpu, mem, k)
    assert best == min(k, sum(free_slots(s, cpu, mem) for s in specs))  # the search is sound
    placed = len(d.assignments)
    event(f"gang={gang} scheduled={d.scheduled} placed={'some' if placed else 'none'}")
    if gang:
        need = max(min_count - placed_before, 0)
        if best >= need:
            assert d.scheduled, (best, need, d.message)
            assert placed == best  # as many as fit, not just minCount
        else:
            assert placed == 0 and not d.scheduled
    else:
        assert placed == best  # a basic group binds whatever fits
        assert d.scheduled == (placed_before + best >= 1)
    # every placement is on a node that really had room
    per_node: dict[str, int] = {}
    for p in d.assignments:
        per_node[p.node] = per_node.get(p.node, 0) + 1
    for name, count in per_node.items():
        assert count <= free_slots(specs[int(name[1:])], cpu, mem)


# heterogeneous groups, for the invariants that hold for any group

pod_spec = st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 2))  # cpu, mem Gi, priority


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    specs=st.lists(node_spec, min_size=0, max_size=5),
    pod_specs=st.lists(pod_spec, min_size=1, max_size=6),
    min_count=st.integers(1, 7),
    placed_before=st.integers(0, 3),
)
def test_never_below_min_count_and_deterministic(specs, pod_specs, min_count, placed_before):
    def run_once():
        nodes, existing = build_nodes(specs)
        pods = [make_pod(f"w{i}", str(c), f"{m}Gi", group="g", priority=pr) for i, (c, m, pr) in enumerate(pod_specs)]
        ordered = order_pods(pods, {p.uid: float(i) for i, p in enumerate(pods)})
        return cycle(nodes, ordered, make_group("g", min_count), existing, placed_before)[0]

    d1, d2 = run_once(), run_once()
    placed = len(d1.assignments)
    assert placed == 0 or placed_before + placed >= min_count
    assert d1.scheduled == (placed_before + placed >= min_count)
    assert len({p.pod.uid for p in d1.assignments}) == placed
    assert {p.uid for p, _ in d1.unplaced}.isdisjoint(p.pod.uid for p in d1.assignments)
    assert len(d1.unplaced) + placed == len(pod_specs)
    # deterministic: the same input gives the same decision
    assert [(p.pod.uid, p.node) for p in d1.assignments] == [(p.pod.uid, p.node) for p in d2.assignments]
    assert (d1.outcome, d1.message, d1.unresolvable) == (d2.outcome, d2.message, d2.unresolvable)
    assert [(p.uid, w) for p, w in d1.unplaced] == [(p.uid, w) for p, w in d2.unplaced]


@settings(max_examples=60, deadline=None)
@given(specs=st.lists(node_spec, min_size=1, max_size=5), pod_specs=st.lists(pod_spec, min_size=1, max_size=6))
def test_placements_respect_capacity(specs, pod_specs):
    nodes, existing = build_nodes(specs)
    pods = [make_pod(f"w{i}", str(c), f"{m}Gi", group="g") for i, (c, m, _) in enumerate(pod_specs)]
    d, snap, _ = cycle(nodes, pods, make_group("g"), existing)
    # recount from scratch: existing + placed must fit every node
    for i, s in enumerate(specs):
        mine = [p.pod for p in d.assignments if p.node == f"n{i}"]
        used_cpu = (s["used_cpu"] if s["used_pods"] else 0) * 1000 + sum(p.requests.get("cpu", 0) for p in mine)
        used_mem = (s["used_mem"] if s["used_pods"] else 0) * 2**30 + sum(p.requests.get("memory", 0) for p in mine)
        count = s["used_pods"] + len(mine)
        if mine:
            assert count <= s["pods"]
            assert all(p.requests.get("cpu", 0) == 0 for p in mine) or used_cpu <= s["cpu"] * 1000
            assert all(p.requests.get("memory", 0) == 0 for p in mine) or used_mem <= s["mem"] * 2**30
        row = snap.row[f"n{i}"]
        assert snap.req[row, snap.column[PODS]] == count


# ------------------------------------------- vectorized filter vs reference

KEYS = ["zone", "disk", "gpu"]
VALUES = ["a", "b", "1", "3"]
EFFECTS = ["NoSchedule", "NoExecute", "PreferNoSchedule"]
taint_st = st.fixed_dictionaries(
    {"key": st.sampled_from(KEYS), "value": st.sampled_from(["", *VALUES]), "effect": st.sampled_from(EFFECTS)}
)
tol_st = st.builds(
    lambda key, op, value, effect: {
        k: v for k, v in {"key": key, "operator": op, "value": value, "effect": effect}.items() if v
    },
    st.sampled_from(["", *KEYS]),
    st.sampled_from(["", "Equal", "Exists"]),
    st.sampled_from(["", *VALUES]),
    st.sampled_from(["", *EFFECTS]),
)
req_st = st.one_of(
    st.builds(
        lambda k, op, vs: {"key": k, "operator": op, "values": vs},
        st.sampled_from(KEYS),
        st.sampled_from(["In", "NotIn"]),
        st.lists(st.sampled_from(VALUES), min_size=1, max_size=2),
    ),
    st.builds(
        lambda k, op: {"key": k, "operator": op}, st.sampled_from(KEYS), st.sampled_from(["Exists", "DoesNotExist"])
    ),
    st.builds(
        lambda k, op, v: {"key": k, "operator": op, "values": [v]},
        st.sampled_from(KEYS),
        st.sampled_from(["Gt", "Lt"]),
        st.sampled_from(["0", "1", "2", "5"]),
    ),
)
name_req_st = st.builds(
    lambda op, v: {"key": "metadata.name", "operator": op, "values": [v]},
    st.sampled_from(["In", "NotIn"]),
    st.sampled_from(["n0", "n1", "n2"]),
)
term_st = st.fixed_dictionaries(
    {}, optional={"matchExpressions": st.lists(req_st, max_size=2), "matchFields": st.lists(name_req_st, max_size=1)}
)

rnode_st = st.fixed_dictionaries(
    {
        "labels": st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3),
        "taints": st.one_of(st.just([]), st.lists(taint_st, max_size=2)),
        "cpu": st.integers(0, 4),
        "pods": st.sampled_from([0, 1, 2, 3, 3, 3]),
        "gpu": st.integers(0, 2),
        "used": st.integers(0, 3),
        "unschedulable": st.sampled_from([False, False, False, True]),
    }
)
rpod_st = st.fixed_dictionaries(
    {
        "cpu": st.integers(0, 2),
        "gpu": st.sampled_from([0, 0, 1]),
        "other": st.sampled_from([0, 0, 0, 1]),
        "tolerations": st.lists(tol_st, max_size=2),
        "node_selector": st.one_of(
            st.just({}), st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=1)
        ),
        "terms": st.one_of(st.none(), st.none(), st.lists(term_st, max_size=2)),
    }
)


def ref_tolerates(tol: dict, t: dict) -> bool:
    if tol.get("effect") and tol["effect"] != t["effect"]:
        return False
    if tol.get("key") and tol["key"] != t["key"]:
        return False
    op = tol.get("operator", "Equal")
    if op == "Exists":
        return True
    return tol.get("value", "") == t["value"]


def ref_req(r: dict, labels: dict) -> bool:
    k, op, vs = r["key"], r["operator"], r.get("values", [])
    if op == "In":
        return k in labels and labels[k] in vs
    if op == "NotIn":
        return k not in labels or labels[k] not in vs
    if op == "Exists":
        return k in labels
    if op == "DoesNotExist":
        return k not in labels
    if k not in labels:
        return False
    try:
        have = int(labels[k])
    except ValueError:
        return False
    return have > int(vs[0]) if op == "Gt" else have < int(vs[0])


def ref_term(term: dict, labels: dict, name: str) -> bool:
    exprs, flds = term.get("matchExpressions") or [], term.get("matchFields") or []
    if not exprs and not flds:
        return False
    return all(ref_req(r, labels) for r in exprs) and all(ref_req(r, {"metadata.name": name}) for r in flds)


def ref_filter(node: dict, name: str, pod: dict) -> list[str]:
    """The reasons of the first filter (upstream default order) that rejects the node."""
    if node["unschedulable"] and not any(
        ref_tolerates(t, {"key": "node.kubernetes.io/unschedulable", "value": "", "effect": "NoSchedule"})
        for t in pod["tolerations"]
    ):
        return ["node(s) were unschedulable"]
    for t in node["taints"]:
        if t["effect"] in ("NoSchedule", "NoExecute") and not any(ref_tolerates(tol, t) for tol in pod["tolerations"]):
            return [f"node(s) had untolerated taint {{{t['key']}: {t['value']}}}"]
    if any(node["labels"].get(k) != v for k, v in pod["node_selector"].items()):
        return ["node(s) didn't match Pod's node affinity/selector"]
    if pod["terms"] is not None and not any(ref_term(t, node["labels"], name) for t in pod["terms"]):
        return ["node(s) didn't match Pod's node affinity/selector"]
    reasons = []
    used_pods = 1 if node["used"] else 0
    if pod["cpu"] and node["used"] + pod["cpu"] > node["cpu"]:
        reasons.append("Insufficient cpu")
    if used_pods + 1 > node["pods"]:
        reasons.append("Too many pods")
    if pod["gpu"] and pod["gpu"] > node["gpu"]:
        reasons.append("Insufficient nvidia.com/gpu")
    if pod["other"]:
        reasons.append("Insufficient example.com/other")  # no node offers it
    return reasons


def build_rnode(i: int, n: dict):
    return parse_node(
        node_body(
            f"n{i}",
            str(n["cpu"]),
            "8Gi",
            n["pods"],
            labels=n["labels"],
            taints=n["taints"],
            unschedulable=n["unschedulable"],
            extra={"nvidia.com/gpu": n["gpu"]},
        )
    )


def build_rpod(name: str, p: dict):
    requests: dict[str, Any] = {}
    if p["gpu"]:
        requests["nvidia.com/gpu"] = str(p["gpu"])
    if p["other"]:
        requests["example.com/other"] = "1"
    affinity = None
    if p["terms"] is not None:
        affinity = required_affinity(*p["terms"])
    return parse_pod(
        pod_body(
            name,
            str(p["cpu"]),
            requests=requests,
            tolerations=p["tolerations"],
            node_selector=p["node_selector"],
            affinity=affinity,
        )
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    nodes=st.lists(rnode_st, min_size=1, max_size=5),
    pods=st.lists(rpod_st, min_size=1, max_size=4),
    repeat=st.booleans(),
)
def test_vectorized_filters_agree_with_reference(nodes, pods, repeat):
    infos = [build_rnode(i, n) for i, n in enumerate(nodes)]
    existing = [make_pod(f"used{i}", str(n["used"]), node_name=f"n{i}") for i, n in enumerate(nodes) if n["used"]]
    cache = make_cache(infos, existing)
    fwk = make_framework(cache)  # one framework for every pod: exercises the shared static results
    snap = cache.snapshot()
    # with `repeat`, each pod is asked twice (the second answer comes from the static cache)
    for j, p in enumerate(pods * (2 if repeat else 1)):
        pod = build_rpod(f"p{j}", p)
        feasible, _ = fwk.run_filters(CycleState(), pod, snap)
        expected = {f"n{i}": ref_filter(n, f"n{i}", p) for i, n in enumerate(nodes)}
        got = {snap.names[r] for r in np.flatnonzero(feasible)}
        event(f"feasible nodes: {min(len(got), 2)}")
        assert got == {name for name, reasons in expected.items() if not reasons}, (p, expected)
        result = schedule_pod(fwk, pod, snap)
        if got:
            assert result.row is not None and snap.names[result.row] in got
        else:
            counts: dict[str, int] = {}
            for reasons in expected.values():
                for r in reasons:
                    counts[r] = counts.get(r, 0) + 1
            assert result.diagnosis.reasons == counts
            assert result.diagnosis.num_nodes == len(nodes)
            parts = sorted(f"{c} {r}" for r, c in counts.items())
            assert result.diagnosis.message == f"0/{len(nodes)} nodes are available: {', '.join(parts)}."


@settings(max_examples=40, deadline=None)
@given(
    nodes=st.lists(rnode_st, min_size=1, max_size=4),
    pod=rpod_st,
    new_labels=st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3),
)
def test_static_results_are_refreshed_when_nodes_change(nodes, pod, new_labels):
    infos = [build_rnode(i, n) for i, n in enumerate(nodes)]
    cache = make_cache(infos)
    fwk = make_framework(cache)
    info = build_rpod("p", pod)
    fwk.run_filters(CycleState(), info, cache.snapshot())
    nodes[0] = {**nodes[0], "labels": new_labels}
    cache.upsert_node(build_rnode(0, nodes[0]))
    snap = cache.snapshot()
    feasible, _ = fwk.run_filters(CycleState(), info, snap)
    nodes_used = [{**n, "used": 0} for n in nodes]
    expected = {f"n{i}" for i, n in enumerate(nodes_used) if not ref_filter(n, f"n{i}", pod)}
    assert {snap.names[r] for r in np.flatnonzero(feasible)} == expected

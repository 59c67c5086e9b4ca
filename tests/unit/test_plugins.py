"""The in-tree plugins through `Framework` / `schedule_pod` on small ClusterCache
snapshots. Cases and messages follow upstream kube-scheduler v1.37 table tests
(noderesources/fit_test.go, least_allocated_test.go, tainttoleration,
nodeaffinity, nodeunschedulable, nodename) and FitError.Error()."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from scheduler.api.records import NodeInfo, PodInfo
from scheduler.core.schedule_one import schedule_pod
from scheduler.framework.diagnosis import Diagnosis
from scheduler.framework.framework import ProfileError
from scheduler.framework.interface import Code, CycleState, GroupContext

from .builders import (
    container,
    make_cache,
    make_framework,
    make_group,
    make_node,
    make_pod,
    preferred_affinity,
    profile_with_args,
    required_affinity,
    requirement,
    taint,
    toleration,
)

EXT_A = "example.com/aaa"
EXT_B = "example.com/bbb"
K8S_IO_A = "kubernetes.io/something"
K8S_IO_B = "subdomain.kubernetes.io/something"
HUGE_A = "hugepages-2Mi"

INSUFFICIENT_CPU = "Insufficient cpu"
INSUFFICIENT_MEMORY = "Insufficient memory"
TOO_MANY_PODS = "Too many pods"
AFFINITY = "node(s) didn't match Pod's node affinity/selector"
UNSCHEDULABLE = "node(s) were unschedulable"
NODE_NAME = "node(s) didn't match the requested node name"


def run(
    nodes: Sequence[NodeInfo], pod: PodInfo, existing: Sequence[PodInfo] = (), profile: Mapping[str, Any] | None = None
):
    cache = make_cache(nodes, existing)
    fwk = make_framework(cache, profile)
    snap = cache.snapshot()
    result = schedule_pod(fwk, pod, snap)
    return result, snap, fwk


def placed(nodes, pod, existing=(), profile=None) -> str | None:
    result, snap, _ = run(nodes, pod, existing, profile)
    return None if result.row is None else snap.names[result.row]


def diagnosis(nodes, pod, existing=(), profile=None) -> Diagnosis:
    result, _, _ = run(nodes, pod, existing, profile)
    assert result.row is None, "the pod was expected not to fit"
    assert result.diagnosis is not None
    return result.diagnosis


def bound(name: str, node: str, cpu=None, memory=None, **kw) -> PodInfo:
    return make_pod(name, cpu, memory, node_name=node, phase="Running", **kw)


# ======================================================= NodeResourcesFit filter


def fit_node(**extra) -> NodeInfo:
    # upstream makeAllocatableResources(10, 20, 32, 5, 20, 5)
    alloc = {EXT_A: 5, "ephemeral-storage": 20, HUGE_A: 5}
    alloc.update(extra)
    return make_node("n", "10m", 20, 32, extra=alloc)


def used(cpu_m: int, mem: int, **scalars) -> PodInfo:
    req = {"cpu": f"{cpu_m}m", "memory": str(mem)}
    req.update({k: str(v) for k, v in scalars.items()})
    return make_pod("used", node_name="n", phase="Running", requests=req)


def res_pod(*containers_req: Mapping[str, Any], init: Sequence[Mapping[str, Any]] = (), **kw) -> PodInfo:
    return make_pod(
        "p",
        containers=[container(f"c{i}", r) for i, r in enumerate(containers_req)],
        init_containers=[container(f"i{i}", r) for i, r in enumerate(init)],
        **kw,
    )


def cpu_mem(cpu_m: int, mem: int, **scalars) -> dict[str, str]:
    d = {"cpu": f"{cpu_m}m", "memory": str(mem)}
    d.update({k: str(v) for k, v in scalars.items()})
    return d


def fit_reasons(pod: PodInfo, usage: PodInfo | None, args: Mapping[str, Any] | None = None) -> list[str]:
    profile = profile_with_args("NodeResourcesFit", args) if args else None
    result, _, _ = run([fit_node()], pod, [usage] if usage else [], profile)
    if result.row is not None:
        return []
    return sorted(result.diagnosis.reasons)


FIT_CASES = [
    ("no resources requested always fits", make_pod("p", containers=[]), used(10, 20), None, []),
    ("too many resources fails", res_pod(cpu_mem(1, 1)), used(10, 20), None, [INSUFFICIENT_CPU, INSUFFICIENT_MEMORY]),
    (
        "too many resources fails due to init container cpu",
        res_pod(cpu_mem(1, 1), init=[cpu_mem(3, 1)]),
        used(8, 19),
        None,
        [INSUFFICIENT_CPU],
    ),
    (
        "too many resources fails due to highest init container cpu",
        res_pod(cpu_mem(1, 1), init=[cpu_mem(3, 1), cpu_mem(2, 1)]),
        used(8, 19),
        None,
        [INSUFFICIENT_CPU],
    ),
    (
        "too many resources fails due to init container memory",
        res_pod(cpu_mem(1, 1), init=[cpu_mem(1, 3)]),
        used(9, 19),
        None,
        [INSUFFICIENT_MEMORY],
    ),
    (
        "too many resources fails due to highest init container memory",
        res_pod(cpu_mem(1, 1), init=[cpu_mem(1, 3), cpu_mem(1, 2)]),
        used(9, 19),
        None,
        [INSUFFICIENT_MEMORY],
    ),
    (
        "init container fits because it's the max, not sum",
        res_pod(cpu_mem(1, 1), init=[cpu_mem(1, 1)]),
        used(9, 19),
        None,
        [],
    ),
    (
        "multiple init containers fit because it's the max",
        res_pod(cpu_mem(1, 1), init=[cpu_mem(1, 1), cpu_mem(1, 1)]),
        used(9, 19),
        None,
        [],
    ),
    ("both resources fit", res_pod(cpu_mem(1, 1)), used(5, 5), None, []),
    ("one resource memory fits", res_pod(cpu_mem(2, 1)), used(9, 5), None, [INSUFFICIENT_CPU]),
    ("one resource cpu fits", res_pod(cpu_mem(1, 2)), used(5, 19), None, [INSUFFICIENT_MEMORY]),
    ("equal edge case", res_pod(cpu_mem(5, 1)), used(5, 19), None, []),
    ("equal edge case for init container", res_pod(cpu_mem(4, 1), init=[cpu_mem(5, 1)]), used(5, 19), None, []),
    ("extended resource fits", res_pod({EXT_A: "1"}), used(0, 0), None, []),
    ("extended resource fits for init container", res_pod({}, init=[{EXT_A: "1"}]), used(0, 0), None, []),
    (
        "extended resource capacity enforced",
        res_pod(cpu_mem(0, 0, **{EXT_A: 10})),
        used(0, 0),
        None,
        [f"Insufficient {EXT_A}"],
    ),
    (
        "extended resource capacity enforced for init container",
        res_pod({}, init=[cpu_mem(0, 0, **{EXT_A: 10})]),
        used(0, 0),
        None,
        [f"Insufficient {EXT_A}"],
    ),
    (
        "extended resource allocatable enforced",
        res_pod({EXT_A: "1"}),
        used(0, 0, **{EXT_A: 5}),
        None,
        [f"Insufficient {EXT_A}"],
    ),
    (
        "extended resource allocatable enforced for multiple containers",
        res_pod({EXT_A: "3"}, {EXT_A: "3"}),
        used(0, 0, **{EXT_A: 2}),
        None,
        [f"Insufficient {EXT_A}"],
    ),
    (
        "extended resource allocatable admits multiple init containers",
        res_pod({}, init=[{EXT_A: "3"}, {EXT_A: "2"}]),
        used(0, 0, **{EXT_A: 2}),
        None,
        [],
    ),
    (
        "extended resource allocatable enforced for multiple init containers",
        res_pod({}, init=[{EXT_A: "6"}, {EXT_A: "3"}]),
        used(0, 0, **{EXT_A: 2}),
        None,
        [f"Insufficient {EXT_A}"],
    ),
    (
        "extended resource allocatable enforced for unknown resource",
        res_pod({EXT_B: "1"}),
        used(0, 0),
        None,
        [f"Insufficient {EXT_B}"],
    ),
    (
        "extended resource allocatable enforced for unknown resource for init container",
        res_pod({}, init=[{EXT_B: "1"}]),
        used(0, 0),
        None,
        [f"Insufficient {EXT_B}"],
    ),
    (
        "kubernetes.io resource capacity enforced",
        res_pod({K8S_IO_A: "10"}),
        used(0, 0),
        None,
        [f"Insufficient {K8S_IO_A}"],
    ),
    (
        "kubernetes.io resource capacity enforced for init container",
        res_pod({}, init=[{K8S_IO_B: "10"}]),
        used(0, 0),
        None,
        [f"Insufficient {K8S_IO_B}"],
    ),
    ("hugepages resource capacity enforced", res_pod({HUGE_A: "10"}), used(0, 0), None, [f"Insufficient {HUGE_A}"]),
    (
        "hugepages resource capacity enforced for init container",
        res_pod({}, init=[{HUGE_A: "10"}]),
        used(0, 0),
        None,
        [f"Insufficient {HUGE_A}"],
    ),
    (
        "hugepages resource allocatable enforced for multiple containers",
        res_pod({HUGE_A: "3"}, {HUGE_A: "3"}),
        used(0, 0, **{HUGE_A: 2}),
        None,
        [f"Insufficient {HUGE_A}"],
    ),
    (
        "skip checking ignored extended resource",
        res_pod(cpu_mem(1, 1, **{EXT_B: 1})),
        used(0, 0),
        {"ignoredResources": [EXT_B]},
        [],
    ),
    (
        "resources + pod overhead fits",
        res_pod(cpu_mem(1, 1), overhead={"cpu": "3m", "memory": "13"}),
        used(5, 5),
        None,
        [],
    ),
    (
        "requests + overhead does not fit for memory",
        res_pod(cpu_mem(1, 1), overhead={"cpu": "1m", "memory": "15"}),
        used(5, 5),
        None,
        [INSUFFICIENT_MEMORY],
    ),
    (
        "skip checking ignored extended resource via resource groups",
        res_pod(cpu_mem(1, 1, **{EXT_B: 1, K8S_IO_A: 1})),
        used(0, 0),
        {"ignoredResourceGroups": ["example.com"]},
        [f"Insufficient {K8S_IO_A}"],
    ),
    (
        "skip checking extended resource request with quantity zero",
        res_pod(cpu_mem(1, 1, **{EXT_A: 0})),
        used(0, 0, **{EXT_A: 6}),
        None,
        [],
    ),
    (
        "both pod-level and container-level resources fit",
        res_pod(cpu_mem(1, 1), pod_resources={"cpu": "1m", "memory": "2"}),
        used(5, 5),
        None,
        [],
    ),
    (
        "pod-level cpu resource not fit",
        res_pod(cpu_mem(1, 1), pod_resources={"cpu": "7m", "memory": "2"}),
        used(5, 5),
        None,
        [INSUFFICIENT_CPU],
    ),
    (
        "pod-level memory resource not fit",
        res_pod(cpu_mem(1, 1), pod_resources={"cpu": "3m", "memory": "2"}),
        used(5, 19),
        None,
        [INSUFFICIENT_MEMORY],
    ),
    (
        "pod-level hugepages resource fit",
        make_pod("p", pod_resources={"cpu": "3m", "memory": "2", HUGE_A: "5"}),
        None,
        None,
        [],
    ),
    (
        "one pod-level cpu resource fits and all init and non-init containers resources fit",
        res_pod(cpu_mem(1, 1), init=[cpu_mem(1, 1)], pod_resources={"cpu": "3m", "memory": "2"}),
        used(5, 19),
        None,
        [INSUFFICIENT_MEMORY],
    ),
]


@pytest.mark.parametrize("name, pod, usage, args, want", FIT_CASES, ids=[c[0] for c in FIT_CASES])
def test_fit_filter(name, pod, usage, args, want):
    assert fit_reasons(pod, usage, args) == want


def test_fit_pod_level_hugepages_not_fit():
    """fit_test "pod-level hugepages resource not fit": pod-level hugepages-2Mi 10,
    no container asks for hugepages, the node has 5 -> Insufficient hugepages-2Mi."""
    pod = make_pod("p", pod_resources={"cpu": "3m", "memory": "2", HUGE_A: "10"})
    assert fit_reasons(pod, None) == [f"Insufficient {HUGE_A}"]


def test_fit_ignored_resources_apply_only_to_extended_resources():
    """Upstream fitsRequest skips ignoredResources / ignoredResourceGroups only for
    extended resources (v1helper.IsExtendedResourceName): hugepages-* and
    *kubernetes.io/* are native and always checked."""
    pod = res_pod({HUGE_A: "10"})
    assert fit_reasons(pod, None, {"ignoredResources": [HUGE_A]}) == [f"Insufficient {HUGE_A}"]
    pod = res_pod({K8S_IO_A: "1"})
    assert fit_reasons(pod, None, {"ignoredResourceGroups": ["kubernetes.io"]}) == [f"Insufficient {K8S_IO_A}"]


def test_fit_too_many_pods():
    nodes = [make_node("n", "4", "8Gi", 2)]
    existing = [bound("a", "n"), bound("b", "n")]
    diag = diagnosis(nodes, make_pod("p", "1"), existing)
    assert diag.reasons == {TOO_MANY_PODS: 1}
    assert diag.message == "0/1 nodes are available: 1 Too many pods."


def test_fit_node_without_pods_allocatable_takes_no_pods():
    diag = diagnosis([make_node("n", "4", "8Gi", None)], make_pod("p"))
    assert diag.reasons == {TOO_MANY_PODS: 1}


def test_fit_terminal_pods_do_not_count():
    nodes = [make_node("n", "1", "1Gi", 1)]
    existing = [make_pod("done", "1", "1Gi", node_name="n", phase="Succeeded")]
    assert placed(nodes, make_pod("p", "1", "1Gi"), existing) == "n"


def test_fit_counts_other_schedulers_pods():
    nodes = [make_node("n", "2", "4Gi")]
    existing = [bound("other", "n", "1500m", scheduler_name="default-scheduler")]
    assert diagnosis(nodes, make_pod("p", "1"), existing).reasons == {INSUFFICIENT_CPU: 1}


def test_fit_unknown_scoring_strategy_is_a_profile_error():
    with pytest.raises(ProfileError) as exc:
        make_framework(profile=profile_with_args("NodeResourcesFit", {"scoringStrategy": {"type": "Bogus"}}))
    assert str(exc.value).startswith(
        "profile troupe-scheduler: pluginConfig[0].args.scoringStrategy.type: unsupported value 'Bogus'; allowed: "
    )


# ============================================== NodeResourcesFit LeastAllocated
# least_allocated_test.go; cpu "4000" is 4000 cores (4e6 millicores) as there.


def la_scores(pod: PodInfo, nodes: Sequence[NodeInfo], existing: Sequence[PodInfo] = (), args=None) -> dict[str, int]:
    cache = make_cache(nodes, existing)
    fwk = make_framework(cache, profile_with_args("NodeResourcesFit", args) if args else None)
    snap = cache.snapshot()
    plugin = fwk.plugins["NodeResourcesFit"]
    rows = np.flatnonzero(snap.valid)
    raw = plugin.normalize(plugin.score(CycleState(), pod, snap, rows))
    return {snap.names[r]: int(s) for r, s in zip(rows, raw)}


def cap(name: str, cpu: str, memory: str) -> NodeInfo:
    return make_node(name, cpu, memory, 110)


def multi(*reqs: tuple[str, str], **kw) -> PodInfo:
    return make_pod(
        kw.pop("name", "p"),
        containers=[container(f"c{i}", {"cpu": c, "memory": m}) for i, (c, m) in enumerate(reqs)],
        **kw,
    )


def test_least_allocated_nothing_scheduled_nothing_requested():
    pod = make_pod("p", containers=[])
    assert la_scores(pod, [cap("node1", "4000", "10000"), cap("node2", "4000", "10000")]) == {
        "node1": 100,
        "node2": 100,
    }


def test_least_allocated_differently_sized_nodes():
    pod = multi(("1000", "2000"), ("2000", "3000"))
    assert la_scores(pod, [cap("node1", "4000", "10000"), cap("node2", "6000", "10000")]) == {"node1": 37, "node2": 50}


def test_least_allocated_no_resources_requested_pods_scheduled():
    pod = make_pod("p", containers=[])
    existing = [
        make_pod(f"e{i}", containers=[], node_name=n, phase="Running")
        for i, n in enumerate(["node1", "node1", "node2", "node2"])
    ]
    assert la_scores(pod, [cap("node1", "4000", "10000"), cap("node2", "4000", "10000")], existing) == {
        "node1": 100,
        "node2": 100,
    }


def test_least_allocated_existing_explicit_zero_memory_counts_zero():
    pod = make_pod("p", containers=[])
    existing = [
        multi(("3000", "0"), name="e1", node_name="node1", phase="Running"),
        multi(("3000", "0"), name="e2", node_name="node1", phase="Running"),
        multi(("3000", "0"), name="e3", node_name="node2", phase="Running"),
        multi(("3000", "5000"), name="e4", node_name="node2", phase="Running"),
    ]
    assert la_scores(pod, [cap("node1", "10000", "20000"), cap("node2", "10000", "20000")], existing) == {
        "node1": 70,
        "node2": 57,
    }


def test_least_allocated_requests_and_existing():
    pod = multi(("1000", "2000"), ("2000", "3000"))
    existing = [
        multi(("3000", "0"), name="e1", node_name="node1", phase="Running"),
        multi(("3000", "5000"), name="e2", node_name="node2", phase="Running"),
    ]
    assert la_scores(pod, [cap("node1", "10000", "20000"), cap("node2", "10000", "20000")], existing) == {
        "node1": 57,
        "node2": 45,
    }
    assert la_scores(pod, [cap("node1", "10000", "20000"), cap("node2", "10000", "50000")], existing) == {
        "node1": 57,
        "node2": 60,
    }


def test_least_allocated_requested_above_capacity_scores_zero():
    pod = multi(("6000", "20000"))
    assert la_scores(pod, [cap("node1", "4000", "10000")]) == {"node1": 0}


def test_least_allocated_uses_nonzero_defaults():
    # A requestless pod counts 100m / 200Mi: on a 1 cpu / 1000Mi node that is 90 and 80 -> 85.
    pod = make_pod("p")
    assert la_scores(pod, [make_node("n", "1", "1000Mi")]) == {"n": 85}


def test_least_allocated_custom_resources_and_weights():
    pod = make_pod("p", "1", "1Gi", requests={EXT_A: "1"})
    nodes = [make_node("n", "4", "4Gi", extra={EXT_A: "4"})]
    # cpu 75 (w1), memory 75 (w1), example.com/aaa 75 (w3) -> 75
    args = {
        "scoringStrategy": {
            "type": "LeastAllocated",
            "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": EXT_A, "weight": 3}],
        }
    }
    assert la_scores(pod, nodes, args=args) == {"n": 75}
    # cpu only, with weight
    args = {"scoringStrategy": {"resources": [{"name": "cpu", "weight": 2}]}}
    assert la_scores(make_pod("q", "3"), nodes, args=args) == {"n": 25}


def test_least_allocated_skips_extended_resource_the_pod_does_not_request():
    nodes = [make_node("n", "4", "4Gi", extra={EXT_A: "4"})]
    args = {"scoringStrategy": {"resources": [{"name": "cpu", "weight": 1}, {"name": EXT_A, "weight": 1}]}}
    # only cpu counts: (4000-1000)/4000 -> 75
    assert la_scores(make_pod("p", "1", "1Gi"), nodes, args=args) == {"n": 75}


def test_least_allocated_picks_the_emptier_node():
    nodes = [make_node("a", "4", "8Gi"), make_node("b", "4", "8Gi"), make_node("c", "4", "8Gi")]
    existing = [bound("x", "a", "2", "2Gi"), bound("y", "b", "1", "1Gi"), bound("z", "c", "3", "1Gi")]
    assert placed(nodes, make_pod("p", "500m", "512Mi"), existing) == "b"


def test_ties_go_to_the_lowest_row():
    nodes = [make_node(n) for n in ("n3", "n1", "n2")]
    assert placed(nodes, make_pod("p", "1", "1Gi")) == "n3"


# ======================================================== TaintToleration filter


TAINT_FILTER_CASES = [
    (
        "no tolerations, NoSchedule taint",
        [],
        [taint("dedicated", "user1")],
        "node(s) had untolerated taint {dedicated: user1}",
    ),
    (
        "tolerated dedicated user1",
        [toleration("dedicated", "user1", "NoSchedule")],
        [taint("dedicated", "user1")],
        None,
    ),
    (
        "dedicated user2 does not tolerate user1",
        [toleration("dedicated", "user2", "NoSchedule", "Equal")],
        [taint("dedicated", "user1")],
        "node(s) had untolerated taint {dedicated: user1}",
    ),
    (
        "Exists tolerates any value",
        [toleration("foo", effect="NoSchedule", operator="Exists")],
        [taint("foo", "bar")],
        None,
    ),
    (
        "all taints tolerated",
        [
            toleration("dedicated", "user2", "NoSchedule", "Equal"),
            toleration("foo", effect="NoSchedule", operator="Exists"),
        ],
        [taint("dedicated", "user2"), taint("foo", "bar")],
        None,
    ),
    (
        "effect mismatch",
        [toleration("foo", "bar", "PreferNoSchedule", "Equal")],
        [taint("foo", "bar")],
        "node(s) had untolerated taint {foo: bar}",
    ),
    ("empty effect tolerates NoSchedule", [toleration("foo", "bar", "", "Equal")], [taint("foo", "bar")], None),
    (
        "PreferNoSchedule does not filter",
        [toleration("dedicated", "user2", "NoSchedule", "Equal")],
        [taint("dedicated", "user1", "PreferNoSchedule")],
        None,
    ),
    ("no toleration, PreferNoSchedule", [], [taint("dedicated", "user1", "PreferNoSchedule")], None),
    ("NoExecute filters", [], [taint("evict", "now", "NoExecute")], "node(s) had untolerated taint {evict: now}"),
    (
        "Gt toleration without the alpha gate",
        [toleration("sla", "950", "NoSchedule", "Gt")],
        [taint("sla", "999")],
        "node(s) had untolerated taint {sla: 999}",
    ),
    (
        "first untolerated taint is named",
        [toleration("a", operator="Exists")],
        [taint("a", "1"), taint("b", "2"), taint("c", "3")],
        "node(s) had untolerated taint {b: 2}",
    ),
]


@pytest.mark.parametrize("name, tols, taints, want", TAINT_FILTER_CASES, ids=[c[0] for c in TAINT_FILTER_CASES])
def test_taint_toleration_filter(name, tols, taints, want):
    node = make_node("nodeA", taints=taints)
    pod = make_pod("pod1", "100m", tolerations=tols)
    result, _, _ = run([node], pod)
    if want is None:
        assert result.row == 0
    else:
        assert result.row is None
        assert result.diagnosis.reasons == {want: 1}
        assert result.diagnosis.unresolvable


# ========================================================= TaintToleration score


def tt_scores(pod: PodInfo, nodes: Sequence[NodeInfo]) -> dict[str, int]:
    cache = make_cache(nodes)
    fwk = make_framework(cache)
    snap = cache.snapshot()
    plugin = fwk.plugins["TaintToleration"]
    rows = np.flatnonzero(snap.valid)
    out = plugin.normalize(plugin.score(CycleState(), pod, snap, rows))
    return {snap.names[r]: int(s) for r, s in zip(rows, out)}


def pns(key: str, value: str) -> dict[str, str]:
    return taint(key, value, "PreferNoSchedule")


def test_taint_score_tolerated_beats_intolerable():
    pod = make_pod("pod1", tolerations=[toleration("foo", "bar", "PreferNoSchedule", "Equal")])
    nodes = [make_node("nodeA", taints=[pns("foo", "bar")]), make_node("nodeB", taints=[pns("foo", "blah")])]
    assert tt_scores(pod, nodes) == {"nodeA": 100, "nodeB": 0}


def test_taint_score_count_of_tolerated_taints_does_not_matter():
    pod = make_pod(
        "pod1",
        tolerations=[
            toleration("cpu-type", "arm64", "PreferNoSchedule", "Equal"),
            toleration("disk-type", "ssd", "PreferNoSchedule", "Equal"),
        ],
    )
    nodes = [
        make_node("nodeA"),
        make_node("nodeB", taints=[pns("cpu-type", "arm64")]),
        make_node("nodeC", taints=[pns("cpu-type", "arm64"), pns("disk-type", "ssd")]),
    ]
    assert tt_scores(pod, nodes) == {"nodeA": 100, "nodeB": 100, "nodeC": 100}


def test_taint_score_more_intolerable_taints_lower_score():
    pod = make_pod("pod1", tolerations=[toleration("foo", "bar", "PreferNoSchedule", "Equal")])
    nodes = [
        make_node("nodeA"),
        make_node("nodeB", taints=[pns("cpu-type", "arm64")]),
        make_node("nodeC", taints=[pns("cpu-type", "arm64"), pns("disk-type", "ssd")]),
    ]
    assert tt_scores(pod, nodes) == {"nodeA": 100, "nodeB": 50, "nodeC": 0}


def test_taint_score_only_prefer_no_schedule_counts():
    pod = make_pod(
        "pod1",
        tolerations=[
            toleration("cpu-type", "arm64", "NoSchedule", "Equal"),
            toleration("disk-type", "ssd", "NoSchedule", "Equal"),
        ],
    )
    nodes = [
        make_node("nodeA"),
        make_node("nodeB", taints=[taint("cpu-type", "arm64", "NoSchedule")]),
        make_node("nodeC", taints=[pns("cpu-type", "arm64"), pns("disk-type", "ssd")]),
    ]
    assert tt_scores(pod, nodes) == {"nodeA": 100, "nodeB": 100, "nodeC": 0}


def test_taint_score_default_lands_on_untainted():
    pod = make_pod("pod1", "100m")
    nodes = [make_node("nodeB", taints=[pns("cpu-type", "arm64")]), make_node("nodeA")]
    assert tt_scores(pod, nodes) == {"nodeB": 0, "nodeA": 100}
    assert placed(nodes, pod) == "nodeA"


def test_taint_score_empty_effect_toleration_counts_for_prefer():
    pod = make_pod("pod1", tolerations=[toleration("spot", operator="Exists")])
    nodes = [make_node("a", taints=[pns("spot", "1")]), make_node("b", taints=[pns("other", "1")])]
    assert tt_scores(pod, nodes) == {"a": 100, "b": 0}


# ========================================================= NodeAffinity filter


def na(pod: PodInfo, labels: Mapping[str, str] | None = None, node_name: str = "node1", args=None) -> str | None:
    """None if the pod fits the node, else its one reason."""
    node = make_node(node_name, labels=labels or {})
    result, _, _ = run([node], pod, profile=profile_with_args("NodeAffinity", args) if args else None)
    if result.row is not None:
        return None
    (reason,) = result.diagnosis.reasons
    return reason


def aff_pod(*terms, **kw) -> PodInfo:
    return make_pod("p", "100m", affinity=required_affinity(*terms), **kw)


def expr(*reqs) -> dict:
    return {"matchExpressions": list(reqs)}


def fields(*reqs) -> dict:
    return {"matchFields": list(reqs)}


NODE_AFFINITY_CASES = [
    ("missing labels", make_pod("p", node_selector={"foo": "bar"}), {}, AFFINITY),
    ("same labels", make_pod("p", node_selector={"foo": "bar"}), {"foo": "bar"}, None),
    ("node labels are superset", make_pod("p", node_selector={"foo": "bar"}), {"foo": "bar", "baz": "blah"}, None),
    ("node labels are subset", make_pod("p", node_selector={"foo": "bar", "baz": "blah"}), {"foo": "bar"}, AFFINITY),
    ("In matches", aff_pod(expr(requirement("foo", "In", "bar", "value2"))), {"foo": "bar"}, None),
    ("Gt matches", aff_pod(expr(requirement("kernel-version", "Gt", "0204"))), {"kernel-version": "0206"}, None),
    ("NotIn matches", aff_pod(expr(requirement("mem-type", "NotIn", "DDR", "DDR2"))), {"mem-type": "DDR3"}, None),
    ("Exists matches", aff_pod(expr(requirement("GPU", "Exists"))), {"GPU": "NVIDIA-GRID-K1"}, None),
    (
        "affinity does not match labels",
        aff_pod(expr(requirement("foo", "In", "value1", "value2"))),
        {"foo": "bar"},
        AFFINITY,
    ),
    ("empty matchExpressions matches no objects", aff_pod(expr()), {"foo": "bar"}, AFFINITY),
    ("no affinity schedules anywhere", make_pod("p"), {"foo": "bar"}, None),
    ("affinity without required node selector", make_pod("p", affinity={"nodeAffinity": {}}), {"foo": "bar"}, None),
    (
        "multiple matchExpressions ANDed match",
        aff_pod(expr(requirement("GPU", "Exists"), requirement("GPU", "NotIn", "AMD", "INTER"))),
        {"GPU": "NVIDIA-GRID-K1"},
        None,
    ),
    (
        "multiple matchExpressions ANDed do not match",
        aff_pod(expr(requirement("GPU", "Exists"), requirement("GPU", "In", "AMD", "INTER"))),
        {"GPU": "NVIDIA-GRID-K1"},
        AFFINITY,
    ),
    (
        "terms ORed",
        aff_pod(expr(requirement("foo", "In", "bar", "value2")), expr(requirement("diffkey", "In", "wrong", "value2"))),
        {"foo": "bar"},
        None,
    ),
    (
        "affinity and nodeSelector both match",
        aff_pod(expr(requirement("foo", "Exists")), node_selector={"foo": "bar"}),
        {"foo": "bar"},
        None,
    ),
    (
        "affinity matches but nodeSelector does not",
        aff_pod(expr(requirement("foo", "Exists")), node_selector={"foo": "bar"}),
        {"foo": "barrrrrr"},
        AFFINITY,
    ),
    (
        "invalid Gt value matches nothing",
        aff_pod(expr(requirement("foo", "Gt", "invalid value: ___@#$%^"))),
        {"foo": "bar"},
        AFFINITY,
    ),
    ("matchFields In matches", aff_pod(fields(requirement("metadata.name", "In", "node1"))), {}, None),
    ("matchFields In does not match", aff_pod(fields(requirement("metadata.name", "In", "node2"))), {}, AFFINITY),
    (
        "two terms: matchFields does not match, matchExpressions matches",
        aff_pod(fields(requirement("metadata.name", "In", "node2")), expr(requirement("zone", "In", "foo"))),
        {"zone": "foo"},
        None,
    ),
    (
        "one term: matchFields does not match, matchExpressions matches",
        aff_pod({**fields(requirement("metadata.name", "In", "node2")), **expr(requirement("zone", "In", "foo"))}),
        {"zone": "foo"},
        AFFINITY,
    ),
    (
        "one term: both match",
        aff_pod({**fields(requirement("metadata.name", "In", "node1")), **expr(requirement("zone", "In", "foo"))}),
        {"zone": "foo"},
        None,
    ),
    (
        "two terms: neither matches",
        aff_pod(fields(requirement("metadata.name", "In", "node2")), expr(requirement("zone", "In", "bar"))),
        {"zone": "foo"},
        AFFINITY,
    ),
    (
        "two terms of node.Name affinity",
        aff_pod(
            fields(requirement("metadata.name", "In", "node1")), fields(requirement("metadata.name", "In", "node2"))
        ),
        {},
        None,
    ),
    (
        "required with no terms matches nothing",
        make_pod(
            "p",
            affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
        ),
        {},
        AFFINITY,
    ),
]


@pytest.mark.parametrize("name, pod, labels, want", NODE_AFFINITY_CASES, ids=[c[0] for c in NODE_AFFINITY_CASES])
def test_node_affinity_filter(name, pod, labels, want):
    assert na(pod, labels) == want


ADDED_REQUIRED_NODE2 = {
    "addedAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [fields(requirement("metadata.name", "In", "node2"))]
        }
    }
}


def test_added_affinity_and_pod_affinity_both_match():
    assert na(aff_pod(expr(requirement("zone", "In", "foo"))), {"zone": "foo"}, "node2", ADDED_REQUIRED_NODE2) is None


def test_added_affinity_matches_but_not_pod_affinity():
    assert (
        na(aff_pod(expr(requirement("zone", "In", "bar"))), {"zone": "foo"}, "node2", ADDED_REQUIRED_NODE2) == AFFINITY
    )


def test_added_affinity_not_matched_is_reported_as_enforced():
    """node_affinity_test "Doesn't match added affinity": errReasonEnforced."""
    args = {
        "addedAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [expr(requirement("zone", "In", "bar"))]
            }
        }
    }
    assert na(make_pod("p"), {"zone": "foo"}, "node2", args) == "node(s) didn't match scheduler-enforced node affinity"


# ========================================================== NodeAffinity score


def naff_scores(pod: PodInfo, nodes: Sequence[NodeInfo], args=None) -> dict[str, int]:
    cache = make_cache(nodes)
    fwk = make_framework(cache, profile_with_args("NodeAffinity", args) if args else None)
    snap = cache.snapshot()
    plugin = fwk.plugins["NodeAffinity"]
    rows = np.flatnonzero(snap.valid)
    out = plugin.normalize(plugin.score(CycleState(), pod, snap, rows))
    return {snap.names[r]: int(s) for r, s in zip(rows, out)}


LABEL1 = {"foo": "bar"}
LABEL2 = {"key": "value"}
LABEL3 = {"az": "az1"}
LABEL4 = {"abc": "az11", "def": "az22"}
LABEL5 = {"foo": "bar", "key": "value", "az": "az1"}
AFFINITY1 = preferred_affinity((2, expr(requirement("foo", "In", "bar"))))
AFFINITY2 = preferred_affinity(
    (2, expr(requirement("foo", "In", "bar"))),
    (4, expr(requirement("key", "In", "value"))),
    (5, expr(requirement("foo", "In", "bar"), requirement("key", "In", "value"), requirement("az", "In", "az1"))),
)


def test_node_affinity_score_nil_affinity():
    nodes = [make_node("node1", labels=LABEL1), make_node("node2", labels=LABEL2), make_node("node3", labels=LABEL3)]
    assert naff_scores(make_pod("p"), nodes) == {"node1": 0, "node2": 0, "node3": 0}


def test_node_affinity_score_no_node_matches():
    nodes = [make_node("node1", labels=LABEL4), make_node("node2", labels=LABEL2), make_node("node3", labels=LABEL3)]
    assert naff_scores(make_pod("p", affinity=AFFINITY1), nodes) == {"node1": 0, "node2": 0, "node3": 0}


def test_node_affinity_score_only_node1_matches():
    nodes = [make_node("node1", labels=LABEL1), make_node("node2", labels=LABEL2), make_node("node3", labels=LABEL3)]
    assert naff_scores(make_pod("p", affinity=AFFINITY1), nodes) == {"node1": 100, "node2": 0, "node3": 0}


def test_node_affinity_score_different_priorities():
    nodes = [make_node("node1", labels=LABEL1), make_node("node5", labels=LABEL5), make_node("node2", labels=LABEL2)]
    assert naff_scores(make_pod("p", affinity=AFFINITY2), nodes) == {"node1": 18, "node5": 100, "node2": 36}


def test_node_affinity_score_added_affinity():
    nodes = [make_node("node1", labels=LABEL1), make_node("node2", labels=LABEL2)]
    args = {"addedAffinity": AFFINITY1["nodeAffinity"]}
    assert naff_scores(make_pod("p"), nodes, args) == {"node1": 100, "node2": 0}


def test_node_affinity_score_added_affinity_and_pod_affinity():
    nodes = [make_node("node1", labels=LABEL1), make_node("node2", labels=LABEL2), make_node("node3", labels=LABEL5)]
    args = {"addedAffinity": preferred_affinity((3, expr(requirement("key", "In", "value"))))["nodeAffinity"]}
    assert naff_scores(make_pod("p", affinity=AFFINITY1), nodes, args) == {"node1": 40, "node2": 60, "node3": 100}


def test_node_affinity_score_ignores_zero_weight_and_empty_terms():
    pod = make_pod("p", affinity=preferred_affinity((0, expr(requirement("foo", "Exists"))), (7, {})))
    nodes = [make_node("node1", labels=LABEL1), make_node("node2")]
    assert naff_scores(pod, nodes) == {"node1": 0, "node2": 0}


def test_preferred_affinity_steers_placement():
    nodes = [make_node("node1", labels=LABEL2), make_node("node2", labels=LABEL1)]
    assert placed(nodes, make_pod("p", "100m", affinity=AFFINITY1)) == "node2"


# ====================================================== NodeUnschedulable / NodeName


def test_unschedulable_node_rejected():
    diag = diagnosis([make_node("n", unschedulable=True)], make_pod("p"))
    assert diag.reasons == {UNSCHEDULABLE: 1}
    assert diag.message == "0/1 nodes are available: 1 node(s) were unschedulable."
    assert diag.unresolvable


def test_normal_node_accepted():
    assert placed([make_node("n")], make_pod("p")) == "n"


@pytest.mark.parametrize(
    "tol, ok",
    [
        (toleration("node.kubernetes.io/unschedulable", effect="NoSchedule"), True),
        (toleration("node.kubernetes.io/unschedulable", operator="Exists"), True),
        (toleration(operator="Exists"), True),
        (toleration("node.kubernetes.io/unschedulable", effect="NoExecute", operator="Exists"), False),
        (toleration("node.kubernetes.io/unschedulable", "true", "NoSchedule"), False),
    ],
)
def test_unschedulable_toleration(tol, ok):
    result, _, _ = run([make_node("n", unschedulable=True)], make_pod("p", tolerations=[tol]))
    assert (result.row == 0) is ok


def test_node_name_filter():
    nodes = [make_node("n1"), make_node("n2"), make_node("n3")]
    pod = make_pod("p", node_name="n2")
    assert placed(nodes, pod) == "n2"
    diag = diagnosis(nodes, make_pod("q", node_name="elsewhere"))
    assert diag.reasons == {NODE_NAME: 3}
    assert diag.message == "0/3 nodes are available: 3 node(s) didn't match the requested node name."


# ============================================================ FitError message


def test_fit_error_format_from_design():
    # The design's example message, in upstream's order (sort.Strings on "count reason").
    nodes = [make_node(f"small{i}", "1", "8Gi") for i in range(3)] + [
        make_node(f"gpu{i}", "8", "8Gi", taints=[taint("gpu", "true")]) for i in range(2)
    ]
    diag = diagnosis(nodes, make_pod("p", "2"))
    assert diag.message == "0/5 nodes are available: 2 node(s) had untolerated taint {gpu: true}, 3 Insufficient cpu."
    assert diag.num_nodes == 5
    assert not diag.unresolvable  # preemption could free cpu on the small nodes


def test_fit_error_sorts_count_reason_strings_as_strings():
    # sort.Strings on "count reason": "10 node(s)..." sorts before "2 Insufficient cpu".
    nodes = [make_node(f"s{i}", "1") for i in range(2)] + [
        make_node(f"t{i}", "8", taints=[taint("gpu", "true")]) for i in range(10)
    ]
    diag = diagnosis(nodes, make_pod("p", "2"))
    assert diag.message == "0/12 nodes are available: 10 node(s) had untolerated taint {gpu: true}, 2 Insufficient cpu."


def test_fit_error_counts_every_reason_of_a_node():
    diag = diagnosis([make_node("n", "1", "1Gi")], make_pod("p", "2", "2Gi"))
    assert diag.reasons == {INSUFFICIENT_CPU: 1, INSUFFICIENT_MEMORY: 1}
    assert diag.message == "0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient memory."


def test_fit_error_distinct_taints_are_distinct_reasons():
    nodes = [
        make_node("a", taints=[taint("x", "1")]),
        make_node("b", taints=[taint("y", "2")]),
        make_node("c", taints=[taint("x", "1")]),
    ]
    diag = diagnosis(nodes, make_pod("p"))
    assert (
        diag.message
        == "0/3 nodes are available: 1 node(s) had untolerated taint {y: 2}, 2 node(s) had untolerated taint {x: 1}."
    )


def test_fit_error_counts_only_existing_nodes():
    # A pod bound to a node the cache has not seen creates a row that is not a node.
    nodes = [make_node("n", "1")]
    existing = [bound("ghost-pod", "ghost", "1")]
    diag = diagnosis(nodes, make_pod("p", "2"), existing)
    assert diag.num_nodes == 1
    assert diag.message == "0/1 nodes are available: 1 Insufficient cpu."


def test_no_nodes_at_all():
    """Upstream returns ErrNoNodesAvailable ("no nodes available to schedule pods")
    when the snapshot has no nodes, not a FitError."""
    diag = diagnosis([], make_pod("p"))
    assert diag.num_nodes == 0
    assert diag.message == "no nodes available to schedule pods"


# ================================================================ filter order


def test_node_rejected_by_earlier_filter_is_not_counted_by_later_ones():
    nodes = [
        # unschedulable AND tainted AND too small: counted once, as unschedulable
        make_node("a", "100m", unschedulable=True, taints=[taint("gpu", "true")]),
        # tainted AND wrong labels AND too small: counted as the taint
        make_node("b", "100m", taints=[taint("gpu", "true")]),
        # wrong labels AND too small: counted as affinity
        make_node("c", "100m", labels={"zone": "b"}),
        # right labels, too small: insufficient cpu
        make_node("d", "100m", labels={"zone": "a"}),
    ]
    diag = diagnosis(nodes, make_pod("p", "1", node_selector={"zone": "a"}))
    assert diag.reasons == {
        UNSCHEDULABLE: 1,
        "node(s) had untolerated taint {gpu: true}": 1,
        AFFINITY: 1,
        INSUFFICIENT_CPU: 1,
    }
    assert sum(diag.reasons.values()) == diag.num_nodes == 4
    assert not diag.unresolvable


def test_all_rejections_unresolvable():
    nodes = [
        make_node("a", unschedulable=True),
        make_node("b", taints=[taint("k", "v")]),
        make_node("c", labels={"zone": "b"}),
    ]
    diag = diagnosis(nodes, make_pod("p", node_selector={"zone": "a"}))
    assert diag.unresolvable
    assert diag.message == (
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, "
        "1 node(s) had untolerated taint {k: v}, 1 node(s) were unschedulable."
    )


def test_disabling_a_filter_plugin():
    nodes = [make_node("t", taints=[taint("gpu", "true")])]
    pod = make_pod("p")
    assert placed(nodes, pod) is None
    assert placed(nodes, pod, profile={"plugins": {"filter": {"disabled": [{"name": "TaintToleration"}]}}}) == "t"


def test_score_weights_from_profile():
    # node a: preferred by affinity; node b: emptier. With NodeResourcesFit weighted
    # 100 the emptier node wins, with the defaults the affinity wins.
    nodes = [make_node("a", "4", "8Gi", labels={"foo": "bar"}), make_node("b", "4", "8Gi")]
    existing = [bound("x", "a", "3", "6Gi")]
    pod = make_pod("p", "100m", "100Mi", affinity=AFFINITY1)
    assert placed(nodes, pod, existing) == "a"
    prof = {"plugins": {"score": {"enabled": [{"name": "NodeResourcesFit", "weight": 100}]}}}
    assert placed(nodes, pod, existing, prof) == "b"


def test_unknown_plugin_is_a_profile_error():
    with pytest.raises(ProfileError) as exc:
        make_framework(profile={"plugins": {"filter": {"enabled": [{"name": "NoSuchPlugin"}]}}})
    assert "unknown plugin 'NoSuchPlugin'" in str(exc.value)
    with pytest.raises(ProfileError) as exc:
        make_framework(profile={"plugins": {"score": {"enabled": [{"name": "NodeName"}]}}})
    assert "does not implement score" in str(exc.value)


def test_disable_all_filters():
    nodes = [make_node("a", "1", unschedulable=True, taints=[taint("k", "v")])]
    prof = {"plugins": {"filter": {"disabled": [{"name": "*"}]}}}
    assert placed(nodes, make_pod("p", "8"), profile=prof) == "a"


def test_static_filter_results_follow_node_changes():
    cache = make_cache([make_node("n", labels={"zone": "b"})])
    fwk = make_framework(cache)
    pod = make_pod("p", node_selector={"zone": "a"})
    assert schedule_pod(fwk, pod, cache.snapshot()).row is None
    cache.upsert_node(make_node("n", labels={"zone": "a"}))
    assert schedule_pod(fwk, pod, cache.snapshot()).row == 0
    cache.upsert_node(make_node("n", labels={"zone": "a"}, taints=[taint("k", "v")]))
    assert schedule_pod(fwk, pod, cache.snapshot()).row is None


def test_static_filter_results_follow_node_replacement():
    cache = make_cache([make_node("a"), make_node("b", taints=[taint("k", "v")])])
    fwk = make_framework(cache)
    pod = make_pod("p", "100m")
    snap = cache.snapshot()
    assert snap.names[schedule_pod(fwk, pod, snap).row] == "a"
    cache.remove_node("a")
    cache.upsert_node(make_node("c"))  # reuses a's row
    snap = cache.snapshot()
    assert snap.names[schedule_pod(fwk, pod, snap).row] == "c"


# ============================================================ SchedulingGates


def test_scheduling_gates_pre_enqueue():
    fwk = make_framework()
    status = fwk.run_pre_enqueue(make_pod("p", gates=("example.com/a", "example.com/b")))
    assert not status.ok
    assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.plugin == "SchedulingGates"
    assert status.message == "waiting for scheduling gates: [example.com/a example.com/b]"
    assert fwk.run_pre_enqueue(make_pod("q")).ok


# ============================================================= GangScheduling


def test_gang_pre_enqueue_waits_for_podgroup():
    cache = make_cache()
    fwk = make_framework(cache)
    status = fwk.run_pre_enqueue(make_pod("p", group="g", namespace="ns"))
    assert not status.ok and status.plugin == "GangScheduling"
    assert status.message == "waiting for PodGroup ns/g to be created"


def test_gang_pre_enqueue_waits_for_min_count():
    group = make_group("g", 3)
    pods = [make_pod(f"p{i}", group="g") for i in range(2)]
    cache = make_cache(pods=pods, groups=[group])
    fwk = make_framework(cache)
    status = fwk.run_pre_enqueue(pods[0])
    assert not status.ok
    assert status.message == "waiting for pods of PodGroup default/g: minCount is 3, 2 exist"
    third = make_pod("p2", group="g")
    cache.upsert_pod(third)
    assert fwk.run_pre_enqueue(pods[0]).ok


def test_gang_pre_enqueue_ignores_terminal_and_deleting_members():
    group = make_group("g", 2)
    pods = [make_pod("a", group="g"), make_pod("b", group="g", phase="Failed"), make_pod("c", group="g", deleting=True)]
    cache = make_cache(pods=pods, groups=[group])
    status = make_framework(cache).run_pre_enqueue(pods[0])
    assert not status.ok and "minCount is 2, 1 exist" in status.message


def test_gang_pre_enqueue_basic_group_and_no_group():
    cache = make_cache(pods=[make_pod("a", group="b")], groups=[make_group("b")])
    fwk = make_framework(cache)
    assert fwk.run_pre_enqueue(make_pod("a", group="b")).ok
    assert fwk.run_pre_enqueue(make_pod("solo")).ok


def test_gang_pre_enqueue_other_namespace_group_does_not_count():
    cache = make_cache(pods=[make_pod("a", group="g", namespace="x")], groups=[make_group("g", 1, namespace="y")])
    assert not make_framework(cache).run_pre_enqueue(make_pod("a", group="g", namespace="x")).ok


@pytest.mark.parametrize(
    "is_gang, min_count, before, now, ok",
    [
        (True, 3, 0, 3, True),
        (True, 3, 0, 2, False),
        (True, 3, 2, 1, True),
        (True, 3, 3, 0, True),
        (True, 1, 0, 0, False),
        (False, 1, 0, 0, True),
        (False, 1, 0, 5, True),
    ],
)
def test_gang_permit(is_gang, min_count, before, now, ok):
    fwk = make_framework()
    ctx = GroupContext(("ns", "g"), [], min_count, is_gang, before, now)
    status = fwk.run_permit(ctx)
    assert status.ok is ok
    if not ok:
        assert status.plugin == "GangScheduling"
        assert status.message == f"needs {min_count} pods, {before + now} fit"

"""NodeResourcesBalancedAllocation. Cases and exact scores follow upstream v1.37
noderesources/balanced_allocation_test.go (the non-DRA cases) and
TestValidateNodeResourcesBalancedAllocationArgs. As there, nodes are
makeNode(name, milliCPU, memory bytes, extended)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from scheduler.api.config import Profile
from scheduler.api.records import NodeInfo, PodInfo
from scheduler.core.schedule_one import schedule_pod
from scheduler.framework.framework import Framework, ProfileError
from scheduler.framework.interface import CycleState, Handle
from scheduler.plugins import in_tree_registry
from scheduler.plugins.noderesources.balanced_allocation import NodeResourcesBalancedAllocation, balanced_resource_score

from .builders import container, make_cache, make_node, make_pod

NAME = "NodeResourcesBalancedAllocation"
GPU = "nvidia.com/gpu"
WITH_GPU = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}, {"name": GPU, "weight": 1}]


def framework(cache, args: Mapping[str, Any] | None = None, only: bool = True) -> Framework:
    registry = in_tree_registry()
    if registry.get(NAME) is None:
        registry.register(NodeResourcesBalancedAllocation)
    score: dict[str, Any] = {"enabled": [{"name": NAME, "weight": 1}]}
    if only:
        score["disabled"] = [{"name": "*"}]
    raw: dict[str, Any] = {"plugins": {"score": score}}
    if args is not None:
        raw["pluginConfig"] = [{"name": NAME, "args": dict(args)}]
    return Framework(Profile.model_validate(raw), registry, Handle(cache))


def scores(pod: PodInfo, nodes: Sequence[NodeInfo], existing: Sequence[PodInfo] = (), resources=None) -> list[int]:
    cache = make_cache(nodes, existing)
    fwk = framework(cache, {"resources": resources} if resources is not None else None)
    snap = cache.snapshot()
    plugin = fwk.plugins[NAME]
    rows = np.array([snap.row[n.name] for n in nodes])
    return [int(s) for s in plugin.normalize(plugin.score(CycleState(), pod, snap, rows))]


def mk_node(name: str, milli_cpu: int, memory: int, extended: Mapping[str, int] | None = None) -> NodeInfo:
    return make_node(
        name, f"{milli_cpu}m", memory, None, extra={k: str(v) for k, v in (extended or {}).items()} or None
    )


def req_pod(*reqs: Mapping[str, str], name: str = "p", node: str = "") -> PodInfo:
    kw: dict[str, Any] = {"node_name": node, "phase": "Running"} if node else {}
    return make_pod(name, containers=[container(f"c{i}", dict(r)) for i, r in enumerate(reqs)], **kw)


def cpu_only(cpu: str) -> dict[str, str]:
    return {"cpu": cpu}


def cm(cpu: str, memory: str) -> dict[str, str]:
    return {"cpu": cpu, "memory": memory}


def cmg(cpu: str, memory: str, gpu: str) -> dict[str, str]:
    return {"cpu": cpu, "memory": memory, GPU: gpu}


POD = req_pod(cm("1000m", "2000"), cm("2000m", "3000"))
EXISTING = [
    req_pod(cpu_only("1000m"), cpu_only("2000m"), name="e1", node="node1"),
    req_pod(cm("1000m", "2000"), cm("2000m", "3000"), name="e2", node="node2"),
]


def test_best_effort_pod_is_not_scored():
    # Upstream PreScore returns Skip: no node gets anything from this plugin.
    nodes = [mk_node("node1", 4000, 10000), mk_node("node2", 4000, 10000)]
    assert scores(make_pod("p", containers=[]), nodes) == [0, 0]
    assert scores(make_pod("p", containers=[container("c")]), nodes) == [0, 0]  # non-zero defaults do not count


def test_nothing_scheduled_resources_requested_differently_sized_nodes():
    # node1: 0% -> 75% cpu, 0% -> 50% memory: 100 -> 87 -> 68; node2: 100 -> 100 -> 75.
    assert scores(POD, [mk_node("node1", 4000, 10000), mk_node("node2", 6000, 10000)]) == [68, 75]


def test_resources_requested_pods_scheduled_with_resources():
    nodes = [mk_node("node1", 10000, 20000), mk_node("node2", 10000, 20000)]
    assert scores(POD, nodes, EXISTING) == [73, 74]


def test_resources_requested_pods_scheduled_differently_sized_nodes():
    nodes = [mk_node("node1", 10000, 20000), mk_node("node2", 10000, 50000)]
    assert scores(POD, nodes, EXISTING) == [73, 70]


def test_nodes_reach_min_and_max_score():
    pod = req_pod({"memory": "2000"}, {"memory": "3000"})
    nodes = [mk_node("node1", 3000, 5000), mk_node("node2", 3000, 5000)]
    existing = [req_pod(cpu_only("1000m"), cpu_only("2000m"), name="e1", node="node1")]
    assert scores(pod, nodes, existing) == [100, 50]


def test_requested_resources_at_node_capacity():
    pod = req_pod(cpu_only("1000m"), cpu_only("2000m"))
    nodes = [mk_node("node1", 6000, 10000), mk_node("node2", 6000, 10000)]
    assert scores(pod, nodes, EXISTING) == [62, 62]


def test_scalar_resource_counts_when_the_pod_requests_it():
    pod = req_pod(cmg("0", "0", "1"))
    nodes = [mk_node("node1", 3500, 40000, {GPU: 8}), mk_node("node2", 3500, 40000, {GPU: 8})]
    existing = [
        req_pod(cm("1000m", "2000"), cmg("2000m", "3000", "3"), name="e1", node="node1"),
        req_pod(cm("1000m", "2000"), cm("2000m", "3000"), name="e2", node="node2"),
    ]
    assert scores(pod, nodes, existing, WITH_GPU) == [75, 76]


def test_scalar_resource_left_out_when_the_pod_does_not_request_it():
    nodes = [mk_node("node1", 3500, 40000, {GPU: 8}), mk_node("node2", 3500, 40000)]
    assert scores(POD, nodes, resources=WITH_GPU) == [56, 56]


def test_uses_requested_not_non_zero_requests():
    # Ten requestless pods on node1 add nothing (upstream useRequested=true),
    # so both nodes score alike; the pod's own requestless container adds nothing either.
    pod = make_pod("p", containers=[container("a", {"cpu": "1"}), container("b")])
    nodes = [mk_node("node1", 4000, 4 * 2**30), mk_node("node2", 4000, 4 * 2**30)]
    existing = [make_pod(f"e{i}", containers=[container("c")], node_name="node1", phase="Running") for i in range(10)]
    # cpu 0 -> 25%, memory 0 -> 0%: 100 -> 87 -> 50 + (50 - 13) / 2 = 68.
    assert scores(pod, nodes, existing) == [68, 68]


def test_go_float_semantics_for_three_resources():
    # Sum and std in upstream's order; a value just under an integer truncates.
    req = np.array([[1, 1, 2], [0, 0, 0], [3, 0, 5]], dtype=np.int64)
    alloc = np.array([[3, 3, 3], [1, 1, 1], [3, 0, 10]], dtype=np.int64)
    # Row 0: fractions 1/3, 1/3, 2/3: std = sqrt(2/81) = 0.157 -> 84.
    # Row 2: two present (1.0 and 0.5): std 0.25 -> 75.
    assert list(balanced_resource_score(req, alloc)) == [84, 100, 75]


def test_steers_placement_through_the_framework():
    # a is cpu-heavy (75% cpu, 12.5% memory), b memory-heavy (12.5% cpu, 75% memory).
    nodes = [make_node("a", "4", "8Gi"), make_node("b", "4", "8Gi")]
    existing = [
        make_pod("x", "3", "1Gi", node_name="a", phase="Running"),
        make_pod("y", "500m", "6Gi", node_name="b", phase="Running"),
    ]
    cache = make_cache(nodes, existing)
    fwk = framework(cache)
    snap = cache.snapshot()
    rows = np.array([0, 1])
    mem_pod, cpu_pod = make_pod("mem", "100m", "2Gi"), make_pod("cpu", "1", "0")
    assert list(fwk.run_scores(CycleState(), mem_pod, snap, rows)) == [81, 69]
    assert list(fwk.run_scores(CycleState(), cpu_pod, snap, rows)) == [69, 81]
    assert snap.names[schedule_pod(fwk, mem_pod, snap).row] == "a"
    assert snap.names[schedule_pod(fwk, cpu_pod, snap).row] == "b"


def test_default_weight_one_next_to_the_default_scores():
    # Enabled on top of the default profile with upstream's default weight 1.
    nodes = [make_node("a", "4", "8Gi")]
    cache = make_cache(nodes)
    fwk = framework(cache, only=False)
    assert (NAME, 1) in [(ws.plugin.name, ws.weight) for ws in fwk.scores]


# ================================================================ validation


def args_error(resources: Any) -> str:
    with pytest.raises(ProfileError) as exc:
        framework(make_cache(), {"resources": resources})
    return str(exc.value)


def test_valid_args():
    cache = make_cache()
    plugin = framework(cache, {"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]}).plugins[
        NAME
    ]
    assert [(r.name, r.weight) for r in plugin.resources] == [("cpu", 1), ("memory", 1)]
    plugin = framework(cache, {}).plugins[NAME]  # defaults
    assert [(r.name, r.weight) for r in plugin.resources] == [("cpu", 1), ("memory", 1)]
    plugin = framework(cache, {"resources": [{"name": "cpu"}, {"name": GPU, "weight": 0}]}).plugins[
        NAME
    ]  # v1 defaulting
    assert [(r.name, r.weight) for r in plugin.resources] == [("cpu", 1), (GPU, 1)]


def test_weight_other_than_one_is_invalid():
    msg = args_error([{"name": "cpu", "weight": 2}, {"name": "memory", "weight": 1}])
    assert msg == "profile troupe-scheduler: pluginConfig[0].args.resources[0].weight: invalid value 2: must be 1"


def test_repeated_resources_are_invalid():
    msg = args_error([{"name": "cpu", "weight": 1}, {"name": "cpu", "weight": 1}])
    assert msg == "profile troupe-scheduler: pluginConfig[0].args.resources[1].name: duplicate value 'cpu'"


def test_every_problem_is_a_line():
    msg = args_error([{"name": "cpu", "weight": 3}, {"name": "cpu"}, {"weight": 1}])
    assert msg.splitlines() == [
        "profile troupe-scheduler: pluginConfig[0].args.resources[2].name: Field required",
    ]  # an item that is not a ResourceSpec stops the list's own checks
    msg = args_error([{"name": "cpu", "weight": 3}, {"name": "cpu"}])
    assert msg.splitlines() == [
        "profile troupe-scheduler: pluginConfig[0].args.resources[0].weight: invalid value 3: must be 1",
        "profile troupe-scheduler: pluginConfig[0].args.resources[1].name: duplicate value 'cpu'",
    ]


def test_unknown_field_is_invalid():
    with pytest.raises(ProfileError) as exc:
        framework(make_cache(), {"resource": []})
    assert str(exc.value) == (
        "profile troupe-scheduler: pluginConfig[0].args.resource: unknown field (did you mean resources?); allowed: resources"
    )

"""The baseline: a plain per-node Python scheduler, no numpy, no caching.

It implements what troupe's default profile does for the benchmark's pods,
the straightforward way: for every pod, run the filters on every node
(NodeUnschedulable, NodeName, TaintToleration, NodeAffinity, NodePorts,
NodeResourcesFit, in upstream's order), score every feasible node
(TaintToleration x3, NodeAffinity x2, NodeResourcesFit LeastAllocated x1,
NodeResourcesBalancedAllocation x1 on cpu and memory, each normalized as
upstream) and take the best, ties to the first node. A group is placed pod by
pod, each placement assumed for the next, and dropped whole if a gang does
not reach minCount. `FILTERS` / `SCORES` name that profile; bench/core.py
warns when troupe's default profile has moved on.

It scores *all* feasible nodes (no percentageOfNodesToScore), so it does the
same work as troupe with `percentageOfNodesToScore: 100`, and then picks the
same nodes: bench/core.py checks that.

Cost: O(nodes) Python work per pod, i.e. O(pods x nodes) for a shape.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from scheduler.api.parse import parse_node, parse_pod
from scheduler.api.records import HostPort, NodeInfo, PodInfo, Taint
from scheduler.api.resources import CPU, MEMORY, PODS

MAX_NODE_SCORE = 100
WEIGHT_TAINT, WEIGHT_AFFINITY, WEIGHT_FIT, WEIGHT_BALANCED = 3, 2, 1, 1
FILTERS = ("NodeUnschedulable", "NodeName", "TaintToleration", "NodeAffinity", "NodePorts", "NodeResourcesFit")
SCORES = (
    ("TaintToleration", WEIGHT_TAINT),
    ("NodeAffinity", WEIGHT_AFFINITY),
    ("NodeResourcesFit", WEIGHT_FIT),
    ("NodeResourcesBalancedAllocation", WEIGHT_BALANCED),
)
_UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")


@dataclass(slots=True)
class RefNode:
    info: NodeInfo
    requested: dict[str, int] = field(default_factory=dict)
    pod_count: int = 0
    nonzero_cpu: int = 0
    nonzero_memory: int = 0
    host_ports: list[tuple[str, str, int]] = field(default_factory=list)  # (ip, protocol, port) in use


def _port(hp: HostPort) -> tuple[str, str, int]:
    return (hp.ip or "0.0.0.0", hp.protocol or "TCP", hp.port)


def _ports_conflict(want: tuple[str, str, int], used: tuple[str, str, int]) -> bool:
    if want[1] != used[1] or want[2] != used[2]:
        return False
    return want[0] == "0.0.0.0" or used[0] in (want[0], "0.0.0.0")


def _balance(fractions: list[float]) -> int:
    """(1 - std) * 100 of the fractions, truncated (upstream balancedResourceScore)."""
    if len(fractions) == 2:
        std = abs((fractions[0] - fractions[1]) / 2)
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    else:
        std = 0.0
    return int((1 - std) * float(MAX_NODE_SCORE))


class ReferenceScheduler:
    def __init__(self, nodes: list[NodeInfo]) -> None:
        self.nodes = [RefNode(n) for n in nodes]

    # ----------------------------------------------------------------- filters

    def fits(self, pod: PodInfo, node: RefNode) -> bool:
        info = node.info
        # NodeUnschedulable
        if info.unschedulable and not any(t.tolerates(_UNSCHEDULABLE_TAINT) for t in pod.tolerations):
            return False
        # NodeName
        if pod.node_name and pod.node_name != info.name:
            return False
        # TaintToleration
        for taint in info.taints:
            if taint.effect in ("NoSchedule", "NoExecute") and not any(t.tolerates(taint) for t in pod.tolerations):
                return False
        # NodeAffinity
        for k, v in pod.node_selector.items():
            if info.labels.get(k) != v:
                return False
        if pod.required_affinity is not None and not any(
            t.matches(info.labels, info.name) for t in pod.required_affinity
        ):
            return False
        # NodePorts
        for hp in pod.host_ports:
            want = _port(hp)
            if any(_ports_conflict(want, used) for used in node.host_ports):
                return False
        # NodeResourcesFit
        if node.pod_count + 1 > info.allocatable.get(PODS, 0):
            return False
        for resource, amount in pod.requests.items():
            if node.requested.get(resource, 0) + amount > info.allocatable.get(resource, 0):
                return False
        return True

    # ------------------------------------------------------------------ scores

    def taint_count(self, pod: PodInfo, node: RefNode) -> int:
        tols = [t for t in pod.tolerations if t.effect in ("", "PreferNoSchedule")]
        return sum(
            1
            for taint in node.info.taints
            if taint.effect == "PreferNoSchedule" and not any(t.tolerates(taint) for t in tols)
        )

    def affinity_weight(self, pod: PodInfo, node: RefNode) -> int:
        return sum(
            p.weight for p in pod.preferred_affinity if p.weight and p.term.matches(node.info.labels, node.info.name)
        )

    def least_allocated(self, pod: PodInfo, node: RefNode) -> int:
        total = weights = 0
        for resource, requested in (
            (CPU, node.nonzero_cpu + pod.nonzero_cpu),
            (MEMORY, node.nonzero_memory + pod.nonzero_memory),
        ):
            alloc = node.info.allocatable.get(resource, 0)
            if alloc <= 0:
                continue
            total += 0 if requested > alloc else (alloc - requested) * MAX_NODE_SCORE // alloc
            weights += 1
        return total // weights if weights else 0

    def balanced_allocation(self, pod: PodInfo, node: RefNode) -> int:
        # Upstream useRequested: the real requests, not the non-zero ones.
        if not pod.requests.get(CPU) and not pod.requests.get(MEMORY):
            return 0  # best effort: PreScore skips the plugin
        with_pod, without_pod = [], []
        for resource in (CPU, MEMORY):
            alloc = node.info.allocatable.get(resource, 0)
            if alloc <= 0:
                continue
            used = node.requested.get(resource, 0)
            with_pod.append(min((used + pod.requests.get(resource, 0)) / alloc, 1.0))
            without_pod.append(min(used / alloc, 1.0))
        change = MAX_NODE_SCORE // 2 + _balance(with_pod) - _balance(without_pod)
        return MAX_NODE_SCORE // 2 + int(change / 2)  # Go's integer division truncates toward zero

    def schedule_pod(self, pod: PodInfo) -> RefNode | None:
        feasible = [node for node in self.nodes if self.fits(pod, node)]
        if not feasible:
            return None
        taints = [self.taint_count(pod, n) for n in feasible]
        affinity = [self.affinity_weight(pod, n) for n in feasible]
        fit = [self.least_allocated(pod, n) for n in feasible]
        balanced = [self.balanced_allocation(pod, n) for n in feasible]
        top_taint, top_affinity = max(taints), max(affinity)
        best, best_score = None, -1
        for i, node in enumerate(feasible):
            taint_score = MAX_NODE_SCORE if top_taint == 0 else MAX_NODE_SCORE - taints[i] * MAX_NODE_SCORE // top_taint
            affinity_score = 0 if top_affinity == 0 else affinity[i] * MAX_NODE_SCORE // top_affinity
            score = (
                WEIGHT_TAINT * taint_score
                + WEIGHT_AFFINITY * affinity_score
                + WEIGHT_FIT * fit[i]
                + WEIGHT_BALANCED * balanced[i]
            )
            if score > best_score:  # strictly greater: ties go to the first node
                best, best_score = node, score
        return best

    # ------------------------------------------------------------- accounting

    def assume(self, pod: PodInfo, node: RefNode, sign: int = 1) -> None:
        for resource, amount in pod.requests.items():
            node.requested[resource] = node.requested.get(resource, 0) + sign * amount
        node.pod_count += sign
        node.nonzero_cpu += sign * pod.nonzero_cpu
        node.nonzero_memory += sign * pod.nonzero_memory
        for hp in pod.host_ports:
            if sign > 0:
                node.host_ports.append(_port(hp))
            else:
                node.host_ports.remove(_port(hp))

    def schedule_group(self, pods: list[PodInfo], min_count: int) -> list[tuple[PodInfo, RefNode]]:
        placed = []
        for pod in pods:
            node = self.schedule_pod(pod)
            if node is not None:
                self.assume(pod, node)
                placed.append((pod, node))
        if len(placed) < min_count:
            for pod, node in placed:
                self.assume(pod, node, -1)
            return []
        return placed


def run(
    nodes: list[NodeInfo],
    units: Iterator[tuple[list[dict[str, Any]], int]],
    budget_s: float,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Places `units` (pod bodies, minCount) in order, timing only the decisions
    (parsing is outside the clock, as it is outside troupe's decision loop).

    Stops once `budget_s` of decision time is spent, even half-way through a
    gang: the caller extrapolates per pod. Returns the timings and the nodes
    picked, in order ("" for a pod not placed)."""
    ref = ReferenceScheduler(nodes)
    decide = 0.0
    placements: list[str] = []
    complete = True
    unit_times: dict[int, list[float]] = {}  # size -> seconds, of the units decided whole
    for bodies, min_count in units:
        pods = [parse_pod(b) for b in bodies]
        placed: list[tuple[PodInfo, RefNode]] = []
        first = len(placements)
        unit_s = 0.0
        for pod in pods:
            t = clock()
            node = ref.schedule_pod(pod)
            if node is not None:
                ref.assume(pod, node)
                placed.append((pod, node))
            unit_s += clock() - t
            placements.append(node.info.name if node is not None else "")
            if decide + unit_s > budget_s:
                complete = False
                break
        decide += unit_s
        if not complete:
            break
        if len(placed) < min_count:  # Permit: a gang binds whole or not at all
            for pod, node in placed:
                ref.assume(pod, node, -1)
            placements[first:] = [""] * len(pods)
        unit_times.setdefault(len(pods), []).append(unit_s)
    return {
        "decide_s": decide,
        "pods": len(placements),
        "complete": complete,
        "largest_unit_measured": _largest(unit_times),
        "placements": placements,
    }


def _largest(unit_times: dict[int, list[float]]) -> dict[str, Any]:
    """Median and max decision time of the largest units decided whole."""
    if not unit_times:
        return {"size": 0, "count": 0, "seconds": 0.0, "max_seconds": 0.0}
    size = max(unit_times)
    times = sorted(unit_times[size])
    return {"size": size, "count": len(times), "seconds": statistics.median(times), "max_seconds": times[-1]}


def parse_nodes(bodies: Iterable[dict[str, Any]]) -> list[NodeInfo]:
    return [parse_node(b) for b in bodies]

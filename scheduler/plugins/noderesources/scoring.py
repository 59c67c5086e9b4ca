"""NodeResourcesFit's scoring strategies (upstream noderesources:
least_allocated.go, most_allocated.go, requested_to_capacity_ratio.go,
helper/shape_score.go), each over (nodes x resources) matrices."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ...api.records import PodInfo
from ...cluster.snapshot import Snapshot
from ...framework.interface import CycleState
from .args import MAX_CUSTOM_PRIORITY_SCORE, MAX_UTILIZATION
from .resource_allocation import MAX_NODE_SCORE, cpu_memory_rows, go_div

Scorer = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def _weighted_mean(scores: np.ndarray, use: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: sum(score * weight) and sum(weight) over the entries in `use`."""
    w = np.where(use, weights[None, :], 0)
    return (scores * w).sum(axis=1), w.sum(axis=1)


def least_allocated_scorer(weights: np.ndarray) -> Scorer:
    """least_allocated.go: mean over resources of (capacity-requested)*100/capacity."""

    def score(requested: np.ndarray, allocated: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        has = allocatable > 0
        cap = np.where(has, allocatable, 1)
        s = np.where(requested > allocatable, 0, (allocatable - requested) * MAX_NODE_SCORE // cap)
        total, wsum = _weighted_mean(s, has, weights)
        return np.where(wsum > 0, total // np.maximum(wsum, 1), 0)

    return score


def most_allocated_scorer(weights: np.ndarray) -> Scorer:
    """most_allocated.go: mean over resources of min(requested, capacity)*100/capacity."""

    def score(requested: np.ndarray, allocated: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        has = allocatable > 0
        cap = np.where(has, allocatable, 1)
        s = np.minimum(requested, allocatable) * MAX_NODE_SCORE // cap
        total, wsum = _weighted_mean(s, has, weights)
        return np.where(wsum > 0, total // np.maximum(wsum, 1), 0)

    return score


def broken_linear(shape: Sequence[tuple[int, int]], p: int) -> int:
    """Upstream helper.BuildBrokenLinearFunction, Go integer arithmetic included."""
    for i, (u, s) in enumerate(shape):
        if p <= u:
            if i == 0:
                return shape[0][1]
            u0, s0 = shape[i - 1]
            return s0 + int(go_div((s - s0) * (p - u0), u - u0))
    return shape[-1][1]


def requested_to_capacity_ratio_scorer(weights: np.ndarray, shape: Sequence[tuple[int, int]]) -> Scorer:
    """requested_to_capacity_ratio.go: the shape (scores 0..10, scaled to 0..100)
    applied to each resource's utilization; resources scoring 0 are left out of
    the weighted mean, which is rounded (math.Round)."""
    scaled = [(u, s * (MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE)) for u, s in shape]
    # Utilization is an integer in 0..100 (over capacity counts as 100): a table.
    table = np.array([broken_linear(scaled, p) for p in range(MAX_UTILIZATION + 1)], dtype=np.int64)

    def score(requested: np.ndarray, allocated: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
        has = allocatable > 0
        cap = np.where(has, allocatable, 1)
        util = np.where(requested > allocatable, MAX_UTILIZATION, requested * MAX_UTILIZATION // cap)
        s = table[np.clip(util, 0, MAX_UTILIZATION)]
        total, wsum = _weighted_mean(s, has & (s > 0), weights)
        # math.Round of a non-negative ratio: half rounds up.
        return np.where(wsum > 0, (2 * total + wsum) // np.maximum(2 * wsum, 1), 0)

    return score


def least_allocated_cpu_memory(
    pod: PodInfo,
    snapshot: Snapshot,
    rows: np.ndarray,
    weights: np.ndarray,
    state: CycleState | None = None,
) -> np.ndarray | None:
    """LeastAllocated over exactly cpu and memory (the default): the same
    numbers as the general path in a few array operations. None when a row
    lacks cpu or memory allocatable (the general path handles that)."""
    alloc, _, nonzero, complete = cpu_memory_rows(state if state is not None else CycleState(), snapshot, rows)
    if not complete:
        return None
    requested = nonzero + np.array([pod.nonzero_cpu, pod.nonzero_memory], dtype=np.int64)
    per = np.where(requested > alloc, 0, (alloc - requested) * MAX_NODE_SCORE // alloc)
    out: np.ndarray = (per * weights).sum(axis=1) // int(weights.sum())
    return out

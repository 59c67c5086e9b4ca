"""NodeResourcesFit: does the pod's request fit the node's free allocatable; LeastAllocated score.

Upstream semantics (pkg/scheduler/framework/plugins/noderesources): a
resource the pod requests nothing of is not checked; "Too many pods" when the
node's pod slots are used up; extended resources a node does not offer are
insufficient there; `ignoredResources` / `ignoredResourceGroups` skip
extended resources managed elsewhere. Scoring uses the non-zero requests
(containers asking nothing count 100m / 200Mi), as upstream.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..api.objects import CPU, EPHEMERAL_STORAGE, MEMORY, PODS, PodInfo
from ..cluster.snapshot import Snapshot
from ..framework.interface import CycleState, FilterPlugin, FilterResult, Handle, ScorePlugin

MAX_NODE_SCORE = 100
_NATIVE = {CPU, MEMORY, EPHEMERAL_STORAGE, PODS}


class NodeResourcesFit(FilterPlugin, ScorePlugin):
    name = "NodeResourcesFit"

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        super().__init__(args, handle)
        self.ignored = set(args.get("ignoredResources") or ())
        self.ignored_groups = set(args.get("ignoredResourceGroups") or ())
        strategy = args.get("scoringStrategy") or {}
        if strategy.get("type", "LeastAllocated") != "LeastAllocated":
            raise ValueError("NodeResourcesFit: only scoringStrategy.type LeastAllocated is supported in this version")
        self.score_resources = [
            (str(r["name"]), int(r.get("weight", 1)))
            for r in strategy.get("resources") or [{"name": CPU, "weight": 1}, {"name": MEMORY, "weight": 1}]
        ]

    def _checked(self, resource: str) -> bool:
        # Upstream skips ignored resources only if they are extended resources
        # (v1helper.IsExtendedResourceName): not *kubernetes.io/*, not unprefixed.
        if "/" not in resource or "kubernetes.io/" in resource or resource.startswith("requests."):
            return True
        return resource not in self.ignored and resource.split("/", 1)[0] not in self.ignored_groups

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> FilterResult:
        vec, unknown = snapshot.request_vector(pod)
        n = len(snapshot)
        feasible = np.ones(n, dtype=bool)
        reasons: list[tuple[str, np.ndarray]] = []
        for col in np.flatnonzero(vec):
            resource = snapshot.resources[col]
            if not self._checked(resource):
                continue
            short = snapshot.req[:, col] + vec[col] > snapshot.alloc[:, col]
            if short.any():
                feasible &= ~short
                reasons.append(("Too many pods" if resource == PODS else f"Insufficient {resource}", short))
        for resource in unknown:
            if self._checked(resource):
                feasible[:] = False
                reasons.append((f"Insufficient {resource}", np.ones(n, dtype=bool)))
        return FilterResult(feasible, reasons)

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        total = np.zeros(len(rows), dtype=np.int64)
        weights = np.zeros(len(rows), dtype=np.int64)
        for resource, weight in self.score_resources:
            col = snapshot.column.get(resource)
            if col is None:
                continue
            alloc = snapshot.alloc[rows, col]
            if resource == CPU:
                requested = snapshot.nonzero[rows, 0] + pod.nonzero_cpu
            elif resource == MEMORY:
                requested = snapshot.nonzero[rows, 1] + pod.nonzero_memory
            else:
                amount = pod.requests.get(resource, 0)
                if amount == 0 and resource not in _NATIVE:
                    continue
                requested = snapshot.req[rows, col] + amount
            has = alloc > 0
            safe = np.where(has, alloc, 1)
            s = np.where(requested > alloc, 0, (alloc - requested) * MAX_NODE_SCORE // safe)
            total += np.where(has, s * weight, 0)
            weights += np.where(has, weight, 0)
        return np.where(weights > 0, total // np.maximum(weights, 1), 0)

"""NodeResourcesFit: does the pod's request fit the node's free allocatable; scores
by `scoringStrategy` (LeastAllocated, MostAllocated, RequestedToCapacityRatio).

Upstream semantics (pkg/scheduler/framework/plugins/noderesources: fit.go,
resource_allocation.go, least_allocated.go, most_allocated.go,
requested_to_capacity_ratio.go, helper/shape_score.go):

- Filter: a resource the pod requests nothing of is not checked; "Too many
  pods" when the node's pod slots are used up; extended resources a node does
  not offer are insufficient there; `ignoredResources` /
  `ignoredResourceGroups` skip extended resources managed elsewhere.
- Score: cpu and memory use the non-zero requests (containers asking nothing
  count 100m / 200Mi) of the node and the pod; ephemeral-storage and scalar
  resources (extended, hugepages, prefixed native, attachable volumes) use the
  real requests; a scalar resource the pod requests none of is left out, and
  so is any resource a node has no allocatable of (upstream leaves "pods" and
  unknown unprefixed names out the same way).
- Args (args.py: `ignoredResources`, `ignoredResourceGroups`,
  `scoringStrategy{type, resources[{name, weight}],
  requestedToCapacityRatio{shape[{utilization, score}]}}`) are defaulted as
  the v1 config API does (no strategy: LeastAllocated; no resources: cpu and
  memory; weight missing or 0: 1) and validated as upstream's
  ValidateNodeResourcesFitArgs.

Differs from upstream: a `scoringStrategy` without `type` means LeastAllocated
(upstream's v1 API rejects the empty type); no DRA-backed extended resources;
the placement score (placement_score.py) is troupe's reading of upstream's
"tightest fit" and takes `placementScoringStrategy`.

The resource-allocation helpers (resource_allocation.py) are shared with
NodeResourcesBalancedAllocation.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from ...api.records import PodInfo
from ...api.resources import CPU, MEMORY, PODS
from ...cluster.snapshot import Snapshot
from ...framework import events as E
from ...framework.interface import (
    CycleState,
    FilterPlugin,
    FilterResult,
    GroupContext,
    Handle,
    Placement,
    PlacementAssignments,
    PlacementScorePlugin,
    ScorePlugin,
    Status,
)
from .args import LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO, NodeResourcesFitArgs, ResourceSpec
from .placement_score import PlacementScorer
from .resource_allocation import MAX_NODE_SCORE, requests_sign, resource_allocation
from .scoring import (
    least_allocated_cpu_memory,
    least_allocated_scorer,
    most_allocated_scorer,
    requested_to_capacity_ratio_scorer,
)


class NodeResourcesFit(FilterPlugin, ScorePlugin, PlacementScorePlugin):
    name = "NodeResourcesFit"
    events = frozenset({E.NODE_ADD, E.NODE_ALLOCATABLE, E.ASSIGNED_POD_DELETE, E.ASSIGNED_POD_SCALE_DOWN})
    row_local = True  # a node's fit and score depend on its own usage only

    Args = NodeResourcesFitArgs

    def __init__(self, args: NodeResourcesFitArgs, handle: Handle) -> None:
        super().__init__(args, handle)
        self.ignored = set(args.ignored_resources)
        self.ignored_groups = set(args.ignored_resource_groups)
        self._checked_names: dict[str, bool] = {}  # resource name -> _checked (the args never change)
        strategy = args.scoring_strategy
        self.strategy = strategy.type
        specs = strategy.resources
        self.resources: list[ResourceSpec] = specs
        self.score_resources = [(s.name, s.weight) for s in specs]
        weights = np.array([s.weight for s in specs], dtype=np.int64)
        self._weights = weights
        self._weight_list: list[int] = weights.tolist()
        # The default configuration gets a shorter path with the same results.
        self._cpu_memory_least_allocated = self.strategy == LEAST_ALLOCATED and [s.name for s in specs] == [CPU, MEMORY]
        if self.strategy == MOST_ALLOCATED:
            self._scorer = most_allocated_scorer(weights)
        elif self.strategy == REQUESTED_TO_CAPACITY_RATIO:
            self._scorer = requested_to_capacity_ratio_scorer(weights, strategy.shape)
        else:
            self._scorer = least_allocated_scorer(weights)
        self._placement = PlacementScorer(args.placement_scoring_strategy.type, specs)

    def sign_pod(self, pod: PodInfo) -> Hashable:
        """The fit and the score read the pod's requests only (and the
        non-zero defaults the score puts in for containers asking nothing)."""
        return requests_sign(pod)

    def _checked(self, resource: str) -> bool:
        known = self._checked_names.get(resource)
        if known is None:
            # Upstream skips ignored resources only if they are extended resources
            # (v1helper.IsExtendedResourceName): not *kubernetes.io/*, not unprefixed.
            known = (
                "/" not in resource
                or "kubernetes.io/" in resource
                or resource.startswith("requests.")
                or (resource not in self.ignored and resource.split("/", 1)[0] not in self.ignored_groups)
            )
            self._checked_names[resource] = known
        return known

    def _checked_columns(self, vec: np.ndarray, snapshot: Snapshot) -> list[int]:
        """The columns the pod requests and this plugin checks."""
        return [c for c in np.flatnonzero(vec).tolist() if self._checked(snapshot.resources[c])]

    def filter(self, state: CycleState, pod: PodInfo, snapshot: Snapshot) -> FilterResult:
        # One (nodes x requested resources) comparison, numpy only; the
        # per-reason masks are column views, only built when a node is short.
        vec, unknown = snapshot.request_vector(pod)
        n = len(snapshot)
        cols = self._checked_columns(vec, snapshot)
        short = snapshot.req[:, cols] + vec[cols] > snapshot.alloc[:, cols]
        bad = short.any(axis=1)
        reasons: list[tuple[str, np.ndarray]] = []
        if bad.any():
            for j, col in enumerate(cols):
                resource = snapshot.resources[col]
                reasons.append(("Too many pods" if resource == PODS else f"Insufficient {resource}", short[:, j]))
        feasible = ~bad
        for resource in unknown:
            if self._checked(resource):
                feasible[:] = False
                reasons.append((f"Insufficient {resource}", np.ones(n, dtype=bool)))
        return FilterResult(feasible, reasons)

    def filter_rows(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        vec, unknown = snapshot.request_vector(pod)
        if any(self._checked(r) for r in unknown):
            return np.zeros(len(rows), dtype=bool)
        cols = self._checked_columns(vec, snapshot)
        fits: np.ndarray = ~(snapshot.req[rows][:, cols] + vec[cols] > snapshot.alloc[rows][:, cols]).any(axis=1)
        return fits

    def filter_row(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, row: int) -> bool:
        # filter_rows on one row, in plain integers, read from the pod's requests
        # as request_vector reads them (one pod slot, whatever the pod says).
        used: list[int] = snapshot.req[row].tolist()
        have: list[int] = snapshot.alloc[row].tolist()
        column = snapshot.column
        for name, amount in pod.requests.items():
            col = column.get(name)
            if col is None:  # no node offers it
                if self._checked(name):
                    return False
            elif name != PODS and amount and self._checked(name) and used[col] + amount > have[col]:
                return False
        slots = column[PODS]
        return used[slots] + 1 <= have[slots]

    def score_row(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, row: int) -> int:
        # least_allocated_cpu_memory on one row, in plain integers (the default configuration).
        have = snapshot.alloc[row, :2].tolist()
        if not self._cpu_memory_least_allocated or have[0] <= 0 or have[1] <= 0:
            return super().score_row(state, pod, snapshot, row)
        used = snapshot.nonzero[row].tolist()
        total = 0
        for j, (want, weight) in enumerate(zip((pod.nonzero_cpu, pod.nonzero_memory), self._weight_list)):
            requested = used[j] + want
            total += (0 if requested > have[j] else (have[j] - requested) * MAX_NODE_SCORE // have[j]) * weight
        return total // sum(self._weight_list)

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        # O(len(rows) * configured resources), numpy only.
        if self._cpu_memory_least_allocated:
            fast = least_allocated_cpu_memory(pod, snapshot, rows, self._weights, state)
            if fast is not None:
                return fast
        _, requested, allocated, allocatable = resource_allocation(
            pod, snapshot, rows, self.resources, use_requested=False
        )
        return self._scorer(requested, allocated, allocatable)

    # --------------------------------------------------------- PlacementScore

    def score_placement(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, proposal: PlacementAssignments
    ) -> tuple[int, Status]:
        return self._placement.score(snapshot, proposal), Status.success()

    def placement_score_bounds(
        self, state: CycleState, group: GroupContext, snapshot: Snapshot, placements: Sequence[Placement]
    ) -> np.ndarray:
        return self._placement.bounds(snapshot, group, placements)

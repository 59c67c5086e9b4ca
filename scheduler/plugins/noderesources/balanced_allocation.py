"""NodeResourcesBalancedAllocation: favour nodes whose resource fractions stay
close to each other (upstream noderesources/balanced_allocation.go, v1.37).

Per node, the fractions requested/allocatable (capped at 1) of the configured
resources (default cpu and memory) give balance = (1 - std) * 100, computed
with the incoming pod and without it; the score rewards the change:
50 + (50 + with - without) / 2, so ~75 for no change, towards 100 when the pod
improves the balance and towards 50 when it worsens it. As upstream
(`useRequested: true`) the real requests are used, not the non-zero ones; a
scalar resource the pod asks none of is left out, as is any resource the node
has no allocatable of. A pod that requests none of the configured resources
(best effort) is not scored (upstream's PreScore Skip): every node gets 0.

Args `resources: [{name, weight}]` (args.py), validated as upstream's
ValidateNodeResourcesBalancedAllocationArgs (no duplicates, weight must be 1
after the v1 defaulting of 0/missing to 1). Differs from upstream: no
DRA-backed extended resources.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from ...api.records import PodInfo
from ...api.resources import CPU, MEMORY
from ...cluster.snapshot import Snapshot
from ...framework.interface import CycleState, Handle, ScorePlugin
from .args import NodeResourcesBalancedAllocationArgs
from .resource_allocation import MAX_NODE_SCORE, cpu_memory_rows, go_div, requests_sign, resource_allocation


def balanced_resource_score(requested: np.ndarray, allocatable: np.ndarray) -> np.ndarray:
    """Upstream balancedResourceScore per row of (n, k) matrices, in float64
    with upstream's order of operations so results match to the bit."""
    n, k = requested.shape
    has = allocatable > 0
    count = has.sum(axis=1)
    frac = np.where(has, requested / np.where(has, allocatable, 1), 0.0)
    frac = np.minimum(frac, 1.0)
    # Sum column by column (upstream's order), skipped entries add an exact 0.
    total = np.zeros(n)
    for j in range(k):
        total = total + frac[:, j]
    std = np.zeros(n)
    two = count == 2
    if two.any():
        # Exactly |f0 - f1| / 2 for the two present fractions.
        hi = np.where(has, frac, -np.inf).max(axis=1)
        lo = np.where(has, frac, np.inf).min(axis=1)
        std = np.where(two, np.abs((hi - lo) / 2), std)
    many = count > 2
    if many.any():
        mean = total / np.maximum(count, 1)
        sq = np.zeros(n)
        for j in range(k):
            d = frac[:, j] - mean
            sq = sq + np.where(has[:, j], d * d, 0.0)
        std = np.where(many, np.sqrt(sq / np.maximum(count, 1)), std)
    # int64() in Go truncates toward zero; the value is never negative here.
    return ((1 - std) * float(MAX_NODE_SCORE)).astype(np.int64)


class NodeResourcesBalancedAllocation(ScorePlugin):
    name = "NodeResourcesBalancedAllocation"
    row_local = True  # a node's score depends on its own usage only

    Args = NodeResourcesBalancedAllocationArgs

    def __init__(self, args: NodeResourcesBalancedAllocationArgs, handle: Handle) -> None:
        super().__init__(args, handle)
        self.resources = args.resources
        self._cpu_memory = [spec.name for spec in self.resources] == [CPU, MEMORY]

    def sign_pod(self, pod: PodInfo) -> Hashable:
        return requests_sign(pod)  # the score reads the pod's requests only

    @staticmethod
    def _score_cpu_memory(pod: PodInfo, snapshot: Snapshot, rows: np.ndarray, state: CycleState) -> np.ndarray | None:
        """The default resources (cpu, memory) in a few array operations, with
        upstream's float order of operations (std of two = |f0 - f1| / 2).
        None when a row lacks cpu or memory allocatable (general path)."""
        cpu, memory = pod.requests.get(CPU, 0), pod.requests.get(MEMORY, 0)
        if not cpu and not memory:
            return np.zeros(len(rows), dtype=np.int64)
        pod_req = np.array([cpu, memory], dtype=np.int64)
        alloc, used, _, complete = cpu_memory_rows(state, snapshot, rows)
        if not complete:
            return None
        with_f = np.minimum((used + pod_req) / alloc, 1.0)
        without_f = np.minimum(used / alloc, 1.0)
        with_pod = ((1 - np.abs((with_f[:, 0] - with_f[:, 1]) / 2)) * float(MAX_NODE_SCORE)).astype(np.int64)
        without_pod = ((1 - np.abs((without_f[:, 0] - without_f[:, 1]) / 2)) * float(MAX_NODE_SCORE)).astype(np.int64)
        half = MAX_NODE_SCORE // 2
        # Go's integer division truncates toward zero, as float -> int64 does.
        out: np.ndarray = half + ((half + with_pod - without_pod) / 2).astype(np.int64)
        return out

    def score_row(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, row: int) -> int:
        """_score_cpu_memory on one row, in plain floats with numpy's order of
        operations (each integer made a float before it is divided)."""
        have = snapshot.alloc[row, :2].tolist()
        if not self._cpu_memory or have[0] <= 0 or have[1] <= 0:
            return super().score_row(state, pod, snapshot, row)
        want = (pod.requests.get(CPU, 0), pod.requests.get(MEMORY, 0))
        if not want[0] and not want[1]:
            return 0
        used = snapshot.req[row, :2].tolist()
        with_f = [min(float(used[j] + want[j]) / float(have[j]), 1.0) for j in (0, 1)]
        without_f = [min(float(used[j]) / float(have[j]), 1.0) for j in (0, 1)]
        with_pod = int((1 - abs((with_f[0] - with_f[1]) / 2)) * float(MAX_NODE_SCORE))
        without_pod = int((1 - abs((without_f[0] - without_f[1]) / 2)) * float(MAX_NODE_SCORE))
        half = MAX_NODE_SCORE // 2
        return half + int((half + with_pod - without_pod) / 2)

    def score(self, state: CycleState, pod: PodInfo, snapshot: Snapshot, rows: np.ndarray) -> np.ndarray:
        # O(len(rows) * configured resources), numpy only.
        if self._cpu_memory:
            fast = self._score_cpu_memory(pod, snapshot, rows, state)
            if fast is not None:
                return fast
        pod_req, requested, allocated, allocatable = resource_allocation(
            pod, snapshot, rows, self.resources, use_requested=True
        )
        if not pod_req.any():
            return np.zeros(len(rows), dtype=np.int64)
        with_pod = balanced_resource_score(requested, allocatable)
        without_pod = balanced_resource_score(allocated, allocatable)
        half = MAX_NODE_SCORE // 2
        return half + go_div(half + with_pod - without_pod, 2)
